"""The state ``amp.init`` sets for the process, and ``amp.disable`` for a thread.

:data:`STATE` holds the active policy and the blocks whose graphs were rewritten; :data:`LOCAL` the thread's
``disable`` depth and, during a top-level ``Block`` call, the parameter casts made so far. The hooks of
:mod:`.imperative` and :mod:`.graphs` read them; :mod:`.switch` (``init`` / ``reset``) writes them.
"""
import contextlib
import threading
import weakref
from typing import Iterator, Optional

import mxnet as mx

from ..core.policy import DISABLED_ATTR, Policy

__all__ = ["STATE", "LOCAL", "current_policy", "target_dtype", "training_dtype", "is_enabled", "active_policy",
           "disable"]


class AutocastState:
    """Process-wide AMP state: the policy, and the blocks whose cached graph was rewritten under it."""

    def __init__(self):
        self.policy: Optional[Policy] = None
        self.float32_by_choice = False  # amp.init("auto") chose no low precision on this machine
        self.rewritten = weakref.WeakSet()  # blocks whose cached graph was rewritten


STATE = AutocastState()
LOCAL = threading.local()  # .disabled (int depth), .param_casts (dict or None)


def current_policy() -> Optional[Policy]:
    """Return the active :class:`~mxnet.amp.Policy`, or None when ``amp.init`` was not called."""
    return STATE.policy


def target_dtype() -> Optional[str]:
    """Return the dtype name given to ``amp.init`` ('float16' or 'bfloat16'), or None when AMP is off."""
    return None if STATE.policy is None else STATE.policy.target_dtype


def training_dtype() -> Optional[str]:
    """The dtype trainers scale losses for: :func:`target_dtype`, ``'float32'`` where ``amp.init("auto")`` chose
    no low precision (a static scale of 1 that still skips non-finite steps), None without ``amp.init``."""
    return target_dtype() or ("float32" if STATE.float32_by_choice else None)


def is_enabled() -> bool:
    """Whether AMP applies to code running now in this thread (False before ``init`` or inside ``disable``)."""
    return STATE.policy is not None and not getattr(LOCAL, "disabled", 0)


def active_policy() -> Optional[Policy]:
    """The policy that applies to code running now in this thread, or None."""
    return STATE.policy if is_enabled() else None


@contextlib.contextmanager
def disable() -> Iterator[None]:
    """Run the enclosed code as if AMP were off (this thread only; nestable).

    Imperative calls are not cast, and graph nodes created inside (e.g. a hybridized block's first call) run
    in the types that arrive. A graph built before entering keeps its casts.

    Example
    -------
    >>> with amp.disable():
    ...     reference = net(x)      # float32, as without amp.init
    """
    LOCAL.disabled = getattr(LOCAL, "disabled", 0) + 1
    try:
        with mx.AttrScope(**{DISABLED_ATTR: "1"}):
            yield
    finally:
        LOCAL.disabled -= 1
