"""MXNet's operator registry, read (never changed): operator handles, names and aliases.

The one place that calls ``NNGetOpHandle``. It loads no library of this project, so the probe's child
processes use it too.
"""
import ctypes
from typing import Iterable, Tuple

import mxnet as mx

__all__ = ["op_handle", "registered_ops", "group_by_operator"]


def op_handle(name: str) -> int:
    """Return the handle (an address) of the registered operator ``name``; aliases share one.

    Raises
    ------
    mxnet.base.MXNetError
        ``name`` is not registered.
    """
    handle = ctypes.c_void_p()
    mx.base.check_call(mx.base._LIB.NNGetOpHandle(mx.base.c_str(name), ctypes.byref(handle)))
    return handle.value


def registered_ops() -> Tuple[str, ...]:
    """Every operator name MXNet has registered now (read again on each call), sorted."""
    return tuple(sorted(mx.operator.get_all_registered_operators()))


def group_by_operator(names: Iterable[str]) -> Tuple[Tuple[str, ...], ...]:
    """``names`` grouped by the operator they name (names sharing one handle); each group and the groups
    sorted."""
    groups = {}
    for name in sorted(names):
        groups.setdefault(op_handle(name), []).append(name)
    return tuple(sorted(tuple(group) for group in groups.values()))
