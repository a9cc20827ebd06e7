"""Which class of x86 CPU this is, for low precision: the flags that matter, read from ``/proc/cpuinfo``.

The classes, as plain data (:data:`CLASSES`), from the weakest up:

========  =============================  =======================================================================
class     flags                          bfloat16 there
========  =============================  =======================================================================
``a``     no AVX-512 (F, BW, VL, DQ)     emulated: float32 kernels on bf16-rounded values
``b``     AVX-512, no ``avx512_bf16``    oneDNN runs bf16 by converting to float32 in registers (Skylake-SP,
                                         Cascade Lake, Ice Lake)
``c``     ``avx512_bf16``, no AMX        bf16 dot products in hardware (Cooper Lake, Zen 4/5)
``d``     ``amx_bf16``                   AMX tiles: where the library's oneDNN 3 kernels are fastest (Sapphire
                                         Rapids and later)
========  =============================  =======================================================================

``MXNET_AMP_CPUINFO`` names a file read instead of ``/proc/cpuinfo``: a stand-in for another class in tests and
child processes. It changes what the policy believes, not what the CPU runs; never use it to claim a class above
the real CPU's for anything but tests of the policy itself.
"""
from collections import namedtuple
import functools
import os

__all__ = ["CpuClass", "CLASSES", "AVX512_CORE", "CPUINFO_ENV", "read_flags", "flags", "classify", "cpu_class",
           "model_name"]

#: The AVX-512 subsets oneDNN's ``avx512_core`` needs: MXNet's oneDNN runs bfloat16 only with all four.
AVX512_CORE = frozenset(("avx512f", "avx512bw", "avx512vl", "avx512dq"))

#: Environment variable naming a cpuinfo file to read instead of ``/proc/cpuinfo``.
CPUINFO_ENV = "MXNET_AMP_CPUINFO"

CpuClass = namedtuple("CpuClass", "name title requires bf16")
CpuClass.__doc__ = """One CPU class: its letter, a title, the flags it needs (beyond the class below) and what
bfloat16 does there."""

#: The classes from the weakest up; a CPU belongs to the last one whose ``requires`` it has.
CLASSES = (
    CpuClass("a", "no AVX-512", frozenset(), "emulated (float32 kernels on bf16-rounded values)"),
    CpuClass("b", "AVX-512 without bf16 arithmetic", AVX512_CORE,
             "converted to float32 in registers by oneDNN (no faster than float32)"),
    CpuClass("c", "AVX512-BF16", AVX512_CORE | {"avx512_bf16"}, "bf16 dot products in hardware"),
    CpuClass("d", "AMX-BF16", AVX512_CORE | {"avx512_bf16", "amx_bf16"}, "AMX tiles"),
)


def _cpuinfo_path():
    return os.environ.get(CPUINFO_ENV) or "/proc/cpuinfo"


@functools.lru_cache(maxsize=None)
def _read(path):
    """``(flags, model name)`` of the first processor in a cpuinfo file; empty when it cannot be read."""
    found, model = None, ""
    try:
        with open(path) as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "flags" and found is None:
                    found = frozenset(value.split())
                elif key == "model name" and not model:
                    model = value.strip()
                if found is not None and model:
                    break
    except OSError:
        pass
    return found or frozenset(), model


def read_flags(path):
    """The CPU flags of the first processor listed in the cpuinfo file ``path`` (empty if unreadable)."""
    return _read(path)[0]


def flags():
    """This machine's CPU flags (from ``MXNET_AMP_CPUINFO`` when set, else ``/proc/cpuinfo``)."""
    return read_flags(_cpuinfo_path())


def model_name():
    """This machine's CPU model name, or ``"unknown CPU"``."""
    return _read(_cpuinfo_path())[1] or "unknown CPU"


def classify(cpu_flags):
    """The :class:`CpuClass` of a CPU with the given flags (an iterable of flag names)."""
    cpu_flags = frozenset(cpu_flags)
    return [c for c in CLASSES if c.requires <= cpu_flags][-1]


def cpu_class():
    """This machine's :class:`CpuClass`."""
    return classify(flags())
