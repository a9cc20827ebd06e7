"""How the policy reaches imperative code: ``mx.nd``, ``mx.np``, ``mx.npx`` calls and non-hybridized blocks.

The front-end functions of operators that need a cast (everything but the dtype-neutral ones) are replaced by
thin wrappers (:func:`patch_frontends`, recorded in :data:`~mxnet.amp.base.patches.PATCHES`) that cast their
array arguments and call the original, or hand them to a library kernel. Inside one top-level ``Block`` call
(:func:`block_call`), a parameter cast to a dtype is reused, not cast again.
"""
import functools
import inspect
import itertools
import sys
import types
from typing import Callable

import mxnet as mx
import numpy as np

from .. import lists
from ..base.dtypes import BFLOAT16, FLOAT_RANK, dtype_name, mx_dtype
from ..base.patches import PATCHES
from ..core.policy import EMULATED, FLOAT32, FOLLOW, FP32, LP16, NEUTRAL, WIDEST, Policy
from ..base.registry import op_handle, registered_ops
from .context import LOCAL, STATE, active_policy

__all__ = ["GROUP", "patch_frontends", "block_call"]

#: The group of :data:`~mxnet.amp.base.patches.PATCHES` that ``amp.init`` records.
GROUP = "amp.init"

_FAMILIES = ("mxnet.ndarray", "mxnet.numpy", "mxnet.numpy_extension")
_HANDWRITTEN_NUMPY = ("mxnet.ndarray.numpy", "mxnet.ndarray.numpy_extension")
_AMP_CAST = mx.nd.amp_cast
_AMP_ROUND = mx.nd.amp_round  # from the C++ library, loaded by mxnet.amp.core.library


def _op_handles():
    """Map each operator handle value to one of its registered names."""
    out = {}
    for name in registered_ops():
        out.setdefault(op_handle(name), name)
    return out


def _frontend_ops():
    """Yield ``(module, attribute, function, op_name)`` for every front-end function of an operator."""
    handles = _op_handles()
    registered = set(registered_ops())
    for modname, module in list(sys.modules.items()):
        if module is None or not modname.startswith(_FAMILIES):
            continue
        for attr, func in list(vars(module).items()):
            if not isinstance(func, types.FunctionType):
                continue
            func = getattr(func, "__amp_original__", func)
            op = next((handles[c] for c in func.__code__.co_consts if isinstance(c, int) and c in handles),
                      None)
            if op is None and modname.startswith(_HANDWRITTEN_NUMPY):
                op = next((p + attr for p in ("_npi_", "_np_", "_npx_") if p + attr in registered), None)
            if op is not None:
                yield module, attr, func, op


def patch_frontends(policy: Policy) -> None:
    """Wrap the front-end function of every operator that ``policy`` may cast (through :data:`PATCHES`)."""
    wrappers, islands = {}, policy.float32_islands("cpu")
    for module, attr, func, op in _frontend_ops():
        action = None if policy.is_conditional(op) else policy.action(op)
        if action == NEUTRAL and not any(op in lists.float32_kernels(policy.target_dtype, dev)
                                         for dev in ("cpu", "gpu")) and op not in islands:
            continue
        if func not in wrappers:
            wrappers[func] = _wrap_op(func, op, action)
        PATCHES.set_attr(module, attr, wrappers[func], GROUP)


def _is_array(x):
    return isinstance(x, mx.nd.NDArray)


# NDArray.dtype is a NumPy type (legacy arrays), a np.dtype (numpy-mode arrays) or MXNet's bf16 dtype object.
_DTYPE_NAMES = {t: np.dtype(t).name for t in (np.float16, np.float32, np.float64)}
_DTYPE_NAMES.update({np.dtype(t): name for t, name in list(_DTYPE_NAMES.items())})
_DTYPE_NAMES[BFLOAT16] = "bfloat16"


_LOW_DTYPES = frozenset(t for t, name in _DTYPE_NAMES.items() if FLOAT_RANK.get(name) == 1)


def _dtype_name(arr):
    dtype = arr.dtype
    name = _DTYPE_NAMES.get(dtype)
    return name if name is not None else dtype_name(dtype)


def _arrays(args, kwargs):
    """The array arguments of a call (one level of lists included), ``out=`` excluded."""
    found = []
    for x in itertools.chain(args, (v for k, v in kwargs.items() if k != "out")):
        if isinstance(x, mx.nd.NDArray):
            found.append(x)
        elif isinstance(x, (list, tuple)):
            found.extend(e for e in x if isinstance(e, mx.nd.NDArray))
    return found


def _map_arrays(fn, args, kwargs):
    def one(x):
        if _is_array(x):
            return fn(x)
        if isinstance(x, (list, tuple)) and x and all(_is_array(e) for e in x):
            return type(x)(fn(e) for e in x)
        return x
    return [one(a) for a in args], {k: (v if k == "out" else one(v)) for k, v in kwargs.items()}


def _map_outputs(fn, out):
    if _is_array(out):
        return fn(out)
    if isinstance(out, (list, tuple)):
        return type(out)(fn(o) if _is_array(o) else o for o in out)
    return out


def _cast(arr, dtype):
    """Cast one legacy or numpy-mode array to ``dtype`` with ``amp_cast``."""
    if isinstance(arr, mx.np.ndarray):
        return _AMP_CAST(arr.as_nd_ndarray(), dtype=mx_dtype(dtype)).as_np_ndarray()
    return _AMP_CAST(arr, dtype=mx_dtype(dtype))


def _round(arr, dtype):
    """A float32 array rounded to ``dtype``, kept in float32 (emulated low precision): one ``amp_round``."""
    if isinstance(arr, mx.np.ndarray):
        return _AMP_ROUND(arr.as_nd_ndarray(), dtype=dtype).as_np_ndarray()
    return _AMP_ROUND(arr, dtype=dtype)


def _reusing_parameter_casts(arr, key, make):
    """``make(arr)``, reused within one top-level Block call when ``arr`` is a parameter (has a gradient)."""
    cache = getattr(LOCAL, "param_casts", None)
    if cache is None or arr.grad is None:
        return make(arr)
    slot = (arr.handle.value, key)
    hit = cache.get(slot)
    if hit is None or hit[0] is not arr:
        hit = cache[slot] = (arr, make(arr))
    return hit[1]


def _to_dtype(arr, dtype):
    return _reusing_parameter_casts(arr, dtype, lambda a: _cast(a, dtype))


def _round_trip(arr, dtype):
    return _reusing_parameter_casts(arr, ("round", dtype), lambda a: _round(a, dtype))


def _emulated_input(x, target):
    """``x`` as an emulated low precision op reads it: float32 holding values rounded to ``target``."""
    dtype = _dtype_name(x)
    if dtype == target:
        return _to_dtype(x, "float32")
    if FLOAT_RANK.get(dtype) == 1:
        x, dtype = _to_dtype(x, "float32"), "float32"
    return _round_trip(x, target) if dtype == "float32" else x


def _converter(policy, op, action, arrays):
    """Return the per-array conversion an imperative call needs (None when nothing is to be done)."""
    target = policy.target_dtype
    if action == FOLLOW:
        action = LP16 if any(_dtype_name(x) == target for x in arrays) else NEUTRAL
    mode = policy.lp16_mode(op, arrays[0].context.device_type) if action == LP16 else None
    if mode == EMULATED:
        return lambda x: _emulated_input(x, target)
    if mode == FLOAT32:
        action = FP32
    if action == LP16:
        return lambda x: _to_dtype(x, target) if _dtype_name(x) == "float32" else x
    if action == FP32:
        return lambda x: _to_dtype(x, "float32") if FLOAT_RANK.get(_dtype_name(x)) == 1 else x
    if action == WIDEST:
        floats = {_dtype_name(x) for x in arrays} & FLOAT_RANK.keys()
        if len(floats) > 1:
            widest = max(floats, key=FLOAT_RANK.get)
            widest = "float32" if FLOAT_RANK[widest] == 1 else widest
            return lambda x: _to_dtype(x, widest) if _dtype_name(x) in floats - {widest} else x
    return None


def _wrap_op(func, op, action):
    """Wrap one front-end function; ``action`` is fixed by the policy, or None for conditional ops."""
    signature = inspect.signature(func) if action is None else None
    inert_on_wide = action in (FP32, NEUTRAL, FOLLOW)  # nothing to do unless a 16-bit array comes in

    def amp_op(*args, **kwargs):
        policy = STATE.policy
        if policy is None or getattr(LOCAL, "disabled", 0):
            return func(*args, **kwargs)
        arrays = _arrays(args, kwargs)
        if not arrays or (inert_on_wide and not any(x.dtype in _LOW_DTYPES for x in arrays)):
            return func(*args, **kwargs)
        act = action or policy.action(op, _attributes(signature, args, kwargs))
        target, names = policy.target_dtype, [_dtype_name(x) for x in arrays]
        if act == FP32 and not any(FLOAT_RANK.get(n) == 1 for n in names):
            return func(*args, **kwargs)  # no 16-bit array to widen
        if act == NEUTRAL or (act == WIDEST and all(n == target for n in names if n in FLOAT_RANK)):
            # float32 between casts where its low precision kernel is slow (Policy.imperative_in_float32)
            if (kwargs.get("out") is None and target in names
                    and policy.imperative_in_float32(op, arrays[0].context.device_type)):
                return _in_float32(target, func, args, kwargs)
            if act == NEUTRAL:
                return func(*args, **kwargs)
        convert = _converter(policy, op, act, arrays)
        if convert is None:
            return func(*args, **kwargs)
        args, kwargs = _map_arrays(convert, args, kwargs)
        device = arrays[0].context.device_type
        mode = policy.lp16_mode(op, device) if act == LP16 else None
        kernel = policy.kernel(op, device, mode) if mode is not None else None
        if kernel is not None and kwargs.get("out") is None:
            out = _library_call(kernel, func, args, kwargs)
            return _map_outputs(convert, out) if mode == EMULATED else out
        out = func(*args, **kwargs)
        if mode == EMULATED:
            # the op's low precision output, rounded like its inputs (in place when the caller gave out=)
            target = kwargs.get("out")
            if target is None:
                return _map_outputs(convert, out)
            for dst in (target if isinstance(target, (list, tuple)) else [target]):
                nd_dst = dst.as_nd_ndarray() if isinstance(dst, mx.np.ndarray) else dst
                if _dtype_name(nd_dst) == "float32":
                    _AMP_ROUND(nd_dst, dtype=policy.target_dtype, out=nd_dst)
        return out
    amp_op = functools.wraps(func)(amp_op)
    amp_op.__amp_original__ = func
    return amp_op


def _in_float32(target, func, args, kwargs):
    """Run dtype-neutral (or widest-type, on target-dtype inputs only) ``func`` on float32 copies of its inputs of
    dtype ``target`` and cast its first output back (as the graph rewriter's float32 islands do)."""
    args, kwargs = _map_arrays(lambda x: _to_dtype(x, "float32") if _dtype_name(x) == target else x, args, kwargs)
    out = func(*args, **kwargs)
    if isinstance(out, (list, tuple)):
        return type(out)([_cast(out[0], target)] + list(out[1:]))
    return _cast(out, target)


def _library_call(kernel, func, args, kwargs):
    """Run this project's library op ``kernel`` in place of front-end ``func`` (same arguments): the array
    arguments in order are its inputs, the other given arguments its attributes."""
    bound = inspect.signature(func).bind(*args, **kwargs).arguments
    bound.update(bound.pop("kwargs", {}) if isinstance(bound.get("kwargs"), dict) else {})
    inputs, attrs = [], {}
    for name, value in bound.items():
        if _is_array(value):
            inputs.append(value)
        elif name not in ("out", "name") and value is not None and value is not mx.base._Null:
            attrs[name] = value
    numpy = isinstance(inputs[0], mx.np.ndarray)
    op = getattr(mx.nd, kernel)
    op = getattr(op, "__amp_original__", op)  # the inputs are converted already: not through AMP again
    out = op(*[x.as_nd_ndarray() if numpy else x for x in inputs], **attrs)
    return out.as_np_ndarray() if numpy else out


def _attributes(signature, args, kwargs):
    """The call's non-array arguments as the strings MXNet stores in node attributes (positional ones too)."""
    try:
        bound = signature.bind_partial(*args, **kwargs).arguments
    except TypeError:
        bound = kwargs
    extra = bound.pop("kwargs", {}) if isinstance(bound.get("kwargs"), dict) else {}
    return {k: str(v) for k, v in dict(bound, **extra).items() if not _is_array(v)}


def block_call(original: Callable) -> Callable:
    """The ``Block.__call__`` hook: parameter casts are reused within one top-level call."""
    @functools.wraps(original)
    def __call__(self, *args):
        if getattr(LOCAL, "param_casts", None) is not None or active_policy() is None:
            return original(self, *args)
        LOCAL.param_casts = {}
        try:
            return original(self, *args)
        finally:
            LOCAL.param_casts = None
    return __call__
