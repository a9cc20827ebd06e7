"""Giving the heap's free pages back to the system once a training step is done (glibc's ``malloc_trim``).

On CPUs without bfloat16 products (classes (a) and (b)), oneDNN 3's float32 matrix products pack their operands
into buffers that each OpenMP thread allocates with ``malloc`` and frees on every call (1.3 MB in ResNet-18's last
stage). glibc raises its mmap and trim thresholds to the largest block freed so far (MXNet frees 9 MB weights
while a model is built), so those buffers come from the threads' arenas, and an arena keeps up to twice that
threshold of free memory resident: ResNet-18's peak at batch 32 grew by 17 MB over five steps on class (a), and
``malloc_trim(0)`` after each step held it at the first step's. MXNet's own float32 kernels keep their scratch, so
float32 training does not grow this way.

The trim costs 0.2–0.4 ms (two arenas of 20–110 MB): nothing beside a ResNet's step, but a third of a tiny
model's (1 ms). :func:`trim_between_steps` therefore paces it to at most :data:`COST_SHARE` of the time: a step
trims when the time since the last trim reaches 100 times what that trim took, which is every step of any model
whose buffers matter. ``MXNET_AMP_TRIM_HEAP=0`` turns it off; it is a no-op where the C library has no
``malloc_trim`` (musl, macOS).
"""
import ctypes
import ctypes.util
import functools
import os
import time
from typing import Callable, Optional

__all__ = ["TRIM_ENV", "COST_SHARE", "trim_free_heap", "trim_between_steps"]

#: Set to ``0`` to keep the heap as glibc leaves it.
TRIM_ENV = "MXNET_AMP_TRIM_HEAP"
#: The largest share of the time between two trims that :func:`trim_between_steps` spends trimming.
COST_SHARE = 0.01
_PACE = {"end": float("-inf"), "cost": 0.0}  # when the last paced trim ended, and what it took (seconds)


@functools.lru_cache(maxsize=None)
def _malloc_trim() -> Optional[Callable[[int], int]]:
    if os.environ.get(TRIM_ENV) == "0":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def trim_free_heap() -> bool:
    """Return the free memory of every malloc arena to the system (``malloc_trim(0)``).

    Returns
    -------
    bool
        Whether any memory was returned; False where trimming is off or unavailable.
    """
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False


def trim_between_steps(clock: Callable[[], float] = time.perf_counter) -> bool:
    """:func:`trim_free_heap` after a training step, unless the last trim was too recent to pay for another:
    less than its own duration divided by :data:`COST_SHARE` ago.

    Parameters
    ----------
    clock : callable
        Seconds, monotonic (tests pass a fake one).

    Returns
    -------
    bool
        Whether memory was returned; False where the trim was skipped, off or unavailable.
    """
    now = clock()
    if now - _PACE["end"] < _PACE["cost"] / COST_SHARE:
        return False
    returned = trim_free_heap()
    _PACE["end"] = clock()
    _PACE["cost"] = _PACE["end"] - now
    return returned
