"""``amp.init`` / ``amp.reset`` / ``amp.disable``: how the casting policy reaches running code.

Two mechanisms, both undone by :func:`reset`:

* **Graphs** (hybridized Gluon blocks, ``SymbolBlock``, ``Symbol.bind``/``simple_bind``): the symbol is
  rewritten once by :func:`mxnet.amp.graph.rewrite_symbol` when the cached graph is built, so a hybridized
  block pays nothing per call and each weight is cast once however often the block is applied.
* **Imperative calls** (``mx.nd``, ``mx.np``, ``mx.npx`` and non-hybridized blocks): the front-end functions of
  operators that need a cast (everything but the dtype-neutral ones) are replaced by thin wrappers that cast
  their array arguments and call the original. Inside one top-level ``Block`` call, a parameter cast to a
  dtype is reused, not cast again.

``with amp.disable():`` switches both off for the current thread: imperative calls run untouched, and graph
nodes created inside carry the ``__amp_disabled__`` attribute, which the rewriter leaves alone.
"""
import contextlib
import ctypes
import functools
import gc
import inspect
import json
import sys
import threading
import types
import warnings
import weakref

import mxnet as mx
from mxnet.base import OpHandle, c_str
import numpy as np
from mxnet.gluon import block as _gluon_block
from mxnet.symbol import symbol as _symbol_mod

from . import advice, graph, lists
from .policy import (DISABLED_ATTR, EMULATED, FLOAT32, FOLLOW, FP32, LP16, NATIVE, NEUTRAL, WIDEST, make_policy,
                     mx_dtype)

__all__ = ["init", "reset", "disable", "is_enabled", "target_dtype", "training_dtype", "current_policy"]

_FAMILIES = ("mxnet.ndarray", "mxnet.numpy", "mxnet.numpy_extension")
_HANDWRITTEN_NUMPY = ("mxnet.ndarray.numpy", "mxnet.ndarray.numpy_extension")
_FLOAT_RANK = {"float16": 1, "bfloat16": 1, "float32": 2, "float64": 3}


class _State:
    """Process-wide AMP state: the policy and everything patched to apply it."""

    def __init__(self):
        self.policy = None
        self.float32_by_choice = False  # amp.init("auto") chose no low precision on this machine
        self.patches = []  # (owner, attribute, original)
        self.rewritten = weakref.WeakSet()  # blocks whose cached graph was rewritten


_STATE = _State()
_LOCAL = threading.local()  # .disabled (int depth), .param_casts (dict or None)
_AMP_CAST = mx.nd.amp_cast
_AMP_ROUND = mx.nd.amp_round  # from the C++ library, loaded by mxnet.amp._ext


def current_policy():
    """Return the active :class:`~mxnet.amp.policy.Policy`, or None when ``amp.init`` was not called."""
    return _STATE.policy


def target_dtype():
    """Return the dtype name given to :func:`init` ('float16' or 'bfloat16'), or None when AMP is off."""
    return None if _STATE.policy is None else _STATE.policy.target_dtype


def training_dtype():
    """The dtype trainers scale losses for: :func:`target_dtype`, ``'float32'`` where ``amp.init("auto")`` chose
    no low precision (a static scale of 1 that still skips non-finite steps), None without ``amp.init``."""
    return target_dtype() or ("float32" if _STATE.float32_by_choice else None)


def _gpus():
    return mx.context.num_gpus()


def is_enabled():
    """Whether AMP applies to code running now in this thread (False before ``init`` or inside ``disable``)."""
    return _STATE.policy is not None and not getattr(_LOCAL, "disabled", 0)


def _active_policy():
    return _STATE.policy if is_enabled() else None


def init(target_dtype="float16", target_precision_ops=None, conditional_fp32_ops=None, fp32_ops=None,
         emulate=None, layout_optimization=False, *, extra_lp16_ops=None, extra_fp32_ops=None,
         keep_lp16_outputs=False, kernels="auto"):
    """Turn on automatic mixed precision for everything that runs afterwards.

    Call it before building the model. Calling it again with the same settings does nothing; with other
    settings it raises (call :func:`reset` first).

    Parameters
    ----------
    target_dtype : {'float16', 'bfloat16', 'auto'}
        The low precision type. ``'auto'`` chooses for this machine (:mod:`mxnet.amp.advice`): float16 where
        MXNet sees CUDA GPUs, bfloat16 on CPUs with bf16 arithmetic (classes (c) and (d)), elsewhere none: the
        model stays float32, one info line says why, and ``init_trainer``, ``scale_loss`` and checkpoints keep
        working. bfloat16 given explicitly on a CPU without bf16 arithmetic (classes (a) and (b)) warns once
        per process (:class:`mxnet.amp.SlowBfloat16Warning`).
    target_precision_ops : list of str, optional
        Replaces the built-in list of ops that run in ``target_dtype``, as in ``mxnet.contrib.amp``: ops of
        the built-in list missing from it follow their inputs (low precision when one arrives in low precision).
    conditional_fp32_ops : list of (str, str, list of str), optional
        ``(op, attribute, values)``: run ``op`` in float32 when ``attribute`` takes one of ``values``. Replaces
        the built-in entries (the ops they named follow their inputs unless listed again).
    fp32_ops : list of str, optional
        Replaces the built-in list of ops that run in float32 (loss outputs included); ops of the built-in
        list missing from it follow their inputs.
    emulate : bool, optional
        Force (True) or forbid (False) emulation: values are rounded to ``target_dtype`` around low precision
        ops while kernels run in float32. The default picks per op and device
        (:meth:`~mxnet.amp.policy.Policy.lp16_mode`): native where the kernel exists (GPUs for float16, CPUs
        with AVX-512 for bfloat16), plain float32 for ops without a kernel on such a device, emulated on
        devices without any (MXNet 1.9.1 has no CPU float16 kernels).
    layout_optimization : bool, optional
        Also rewrite hybridized graphs on GPU contexts to channels-last convolutions (tensor cores run
        low precision convolutions fastest in NHWC). On CPU contexts it is skipped with a warning: MXNet
        1.9.1 runs convolutions only in NCHW there.
    extra_lp16_ops, extra_fp32_ops : list of str, optional
        Ops to run in ``target_dtype`` / float32 *on top of* the lists (built-in or given); everything else
        keeps its treatment. Use these to adjust a few ops (``extra_fp32_ops=["FullyConnected"]``).
    keep_lp16_outputs : bool, optional
        Leave a hybridized graph's outputs in ``target_dtype`` where its last op ran in it; by default they
        come back in their original dtype (float32), as MXNet 2.0's AMP does.
    kernels : {'auto', 'mxnet'}, optional
        Whose kernels run the matrix products: ``'auto'`` uses this project's oneDNN 3 kernels for
        FullyConnected, batch_dot and matmul where the device runs the target dtype natively and they are
        available (:meth:`mxnet.amp.policy.Policy.library_kernel`), ``'mxnet'`` always MXNet's.

    Raises
    ------
    ValueError
        Unknown dtype or op name, or an op named in two overrides.
    RuntimeError
        ``init`` was already called with different settings.

    Examples
    --------
    >>> from mxnet import amp
    >>> amp.init("bfloat16")
    >>> with amp.disable():
    ...     y = net(x)          # runs in float32
    >>> amp.reset()             # back to plain MXNet
    """
    resolved, why = advice.resolve(target_dtype)
    if resolved is None:  # "auto" where low precision does not pay: AMP stays off, its trainer calls work
        if _STATE.policy is not None:
            raise RuntimeError("amp.init() was already called with %r; call mxnet.amp.reset() before initialising "
                               "again with target_dtype='auto'" % (_STATE.policy,))
        if not _STATE.float32_by_choice:
            advice.log_choice(why)
        _STATE.float32_by_choice = True
        return
    if why != "given":
        advice.log_choice(why)
    policy = make_policy(resolved, target_precision_ops, conditional_fp32_ops, fp32_ops, emulate=emulate,
                         layout_optimization=layout_optimization, extra_lp16_ops=extra_lp16_ops,
                         extra_fp32_ops=extra_fp32_ops, keep_lp16_outputs=keep_lp16_outputs,
                         kernels=kernels)
    if _STATE.float32_by_choice:
        raise RuntimeError("amp.init(target_dtype='auto') chose float32 on this machine; call mxnet.amp.reset() "
                           "before initialising again with %r" % (policy,))
    if _STATE.policy is not None:
        if _STATE.policy == policy:
            return
        raise RuntimeError("amp.init() was already called with %r; call mxnet.amp.reset() before initialising "
                           "again with %r" % (_STATE.policy, policy))
    _STATE.policy = policy
    if policy.target_dtype == "bfloat16" and emulate is not True and _gpus() == 0:
        advice.warn_if_slow("bfloat16", "cpu")
    _patch_frontends(policy)
    _patch(_gluon_block.HybridBlock, "_get_graph", _amp_get_graph)
    _patch(_gluon_block.Block, "__call__", _amp_block_call)
    _patch(_gluon_block.HybridBlock, "export", _amp_export)
    _patch(_symbol_mod.Symbol, "bind", _amp_bind("bind"))
    _patch(_symbol_mod.Symbol, "simple_bind", _amp_bind("simple_bind"))
    existing = [b for b in gc.get_objects() if isinstance(b, _gluon_block.Block)]
    if existing:
        for blk in existing:
            if isinstance(blk, _gluon_block.HybridBlock) and blk._cached_op is not None:
                blk._clear_cached_op()
        warnings.warn("amp.init() was called after %d Gluon blocks were created; AMP applies to everything "
                      "that runs from now on (hybridized blocks rebuild their graph on the next call), but "
                      "call amp.init() before building the model to be sure." % len(existing), stacklevel=2)


def reset():
    """Undo :func:`init` completely: restore every patched function and rebuild rewritten graphs in fp32.

    Parameters keep their values and dtypes (AMP casts on the fly and never changes them).
    """
    for owner, name, original in reversed(_STATE.patches):
        setattr(owner, name, original)
    _STATE.patches = []
    for blk in list(_STATE.rewritten):
        blk._cached_graph = blk.__dict__.pop("_amp_original")  # a SymbolBlock keeps its graph when cleared
        del blk._amp_graph
        blk._clear_cached_op()
    _STATE.rewritten = weakref.WeakSet()
    _STATE.policy = None
    _STATE.float32_by_choice = False


@contextlib.contextmanager
def disable():
    """Run the enclosed code as if AMP were off (this thread only; nestable).

    Imperative calls are not cast, and graph nodes created inside (e.g. a hybridized block's first call) run
    in the types that arrive. A graph built before entering keeps its casts.
    """
    _LOCAL.disabled = getattr(_LOCAL, "disabled", 0) + 1
    try:
        with mx.AttrScope(**{DISABLED_ATTR: "1"}):
            yield
    finally:
        _LOCAL.disabled -= 1


def _patch(owner, name, replacement):
    _STATE.patches.append((owner, name, getattr(owner, name)))
    setattr(owner, name, functools.wraps(getattr(owner, name))(replacement))


# --- imperative front ends ------------------------------------------------------------------------------

def _op_handles():
    """Map each operator handle value to one of its registered names."""
    out = {}
    for name in mx.operator.get_all_registered_operators():
        hdl = OpHandle()
        mx.base.check_call(mx.base._LIB.NNGetOpHandle(c_str(name), ctypes.byref(hdl)))
        out.setdefault(hdl.value, name)
    return out


def _frontend_ops():
    """Yield ``(module, attribute, function, op_name)`` for every front-end function of an operator."""
    handles = _op_handles()
    registered = set(mx.operator.get_all_registered_operators())
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


def _patch_frontends(policy):
    wrappers = {}
    for module, attr, func, op in _frontend_ops():
        action = None if policy.is_conditional(op) else policy.action(op)
        if action == NEUTRAL and not any(op in lists.float32_kernels(policy.target_dtype, dev)
                                         for dev in ("cpu", "gpu")):
            continue
        if func not in wrappers:
            wrappers[func] = _wrap_op(func, op, action)
        _STATE.patches.append((module, attr, func))
        setattr(module, attr, wrappers[func])


def _is_array(x):
    return isinstance(x, mx.nd.NDArray)


# NDArray.dtype is a NumPy type (legacy arrays), a np.dtype (numpy-mode arrays) or MXNet's bf16 dtype object.
_DTYPE_NAMES = {t: np.dtype(t).name for t in (np.float16, np.float32, np.float64)}
_DTYPE_NAMES.update({np.dtype(t): name for t, name in list(_DTYPE_NAMES.items())})
_DTYPE_NAMES[mx_dtype("bfloat16")] = "bfloat16"


def _dtype_name(arr):
    dtype = arr.dtype
    name = _DTYPE_NAMES.get(dtype)
    return name if name is not None else graph.dtype_name(dtype)


def _arrays(args, kwargs):
    """The array arguments of a call (one level of lists included), ``out=`` excluded."""
    found = []
    for x in list(args) + [v for k, v in kwargs.items() if k != "out"]:
        if _is_array(x):
            found.append(x)
        elif isinstance(x, (list, tuple)):
            found.extend(e for e in x if _is_array(e))
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
    cache = getattr(_LOCAL, "param_casts", None)
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
    if _FLOAT_RANK.get(dtype) == 1:
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
        return lambda x: _to_dtype(x, "float32") if _FLOAT_RANK.get(_dtype_name(x)) == 1 else x
    if action == WIDEST:
        floats = {_dtype_name(x) for x in arrays} & _FLOAT_RANK.keys()
        if len(floats) > 1:
            widest = max(floats, key=_FLOAT_RANK.get)
            widest = "float32" if _FLOAT_RANK[widest] == 1 else widest
            return lambda x: _to_dtype(x, widest) if _dtype_name(x) in floats - {widest} else x
    return None


def _wrap_op(func, op, action):
    """Wrap one front-end function; ``action`` is fixed by the policy, or None for conditional ops."""
    signature = inspect.signature(func) if action is None else None

    def amp_op(*args, **kwargs):
        policy = _STATE.policy
        if policy is None or getattr(_LOCAL, "disabled", 0):
            return func(*args, **kwargs)
        arrays = _arrays(args, kwargs)
        if not arrays:
            return func(*args, **kwargs)
        act = action or policy.action(op, _attributes(signature, args, kwargs))
        if act == NEUTRAL:  # an op of lists.float32_kernels: float32 between casts where its kernel is slow
            return _neutral_in_float32(policy, op, func, arrays, args, kwargs)
        convert = _converter(policy, op, act, arrays)
        if convert is None:
            return func(*args, **kwargs)
        args, kwargs = _map_arrays(convert, args, kwargs)
        device = arrays[0].context.device_type
        mode = policy.lp16_mode(op, device) if act == LP16 else None
        kernel = (policy.library_kernel(op, device) if mode == NATIVE else
                  policy.emulation_kernel(op, device) if mode == EMULATED else None)
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


def _neutral_in_float32(policy, op, func, arrays, args, kwargs):
    """Run dtype-neutral ``func`` on float32 copies of its low precision inputs and cast its first output back,
    where ``policy.neutral_in_float32`` says so (as the graph rewriter does); otherwise just run it."""
    target = policy.target_dtype
    if (kwargs.get("out") is not None or not policy.neutral_in_float32(op, arrays[0].context.device_type)
            or not any(_dtype_name(x) == target for x in arrays)):
        return func(*args, **kwargs)
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


def _amp_block_call(self, *args):
    """``Block.__call__``: reuse parameter casts within one top-level call."""
    if getattr(_LOCAL, "param_casts", None) is not None or _active_policy() is None:
        return _amp_block_call.__wrapped__(self, *args)
    _LOCAL.param_casts = {}
    try:
        return _amp_block_call.__wrapped__(self, *args)
    finally:
        _LOCAL.param_casts = None


# --- graphs ---------------------------------------------------------------------------------------------

def _device_type(arrays, default="cpu"):
    for a in arrays:
        if _is_array(a):
            return a.context.device_type
    return default


def _amp_get_graph(self, *args):
    """``HybridBlock._get_graph``: rewrite the cached graph once, when it is (re)built under AMP."""
    inputs, out = _amp_get_graph.__wrapped__(self, *args)
    policy = _active_policy()
    if policy is None or out is getattr(self, "_amp_graph", None):
        return inputs, out
    flat = [a for a in _flatten(args) if a is not None]
    var_dtypes = {p.name: p.dtype for p in self.collect_params().values()}
    var_dtypes.update({s.name: a.dtype for s, a in zip(inputs, flat) if _is_array(a)})
    var_shapes = {s.name: a.shape for s, a in zip(inputs, flat) if _is_array(a)}
    original = inputs, out
    out, _ = graph.rewrite_symbol(out, policy, _device_type(flat), var_dtypes, var_shapes)
    if policy.layout_optimization:
        out = _channels_last(out, inputs, flat)
    self._cached_graph = inputs, out
    self._amp_graph = out
    self.__dict__.setdefault("_amp_original", original)
    _STATE.rewritten.add(self)
    return inputs, out


def _amp_export(self, path, epoch=0, remove_amp_cast=True):
    """``HybridBlock.export``: with ``remove_amp_cast`` (the default) the file holds the plain float32 graph.

    MXNet removes ``amp_cast``/``amp_multicast`` itself; the emulation rounding (``amp_round``, an op of this
    project's library) goes too, so the exported model loads in MXNet without ``mxnet.amp``.
    """
    original = _amp_export.__wrapped__
    if not remove_amp_cast or not self._cached_graph:
        return original(self, path, epoch, remove_amp_cast)
    inputs, out = self._cached_graph
    plain = mx.sym.load_json(json.dumps(graph.drop_rounding(json.loads(out.tojson(remove_amp_cast=False)))))
    self._cached_graph = inputs, (plain.as_np_ndarray() if isinstance(out, mx.sym.np._Symbol) else plain)
    try:
        return original(self, path, epoch, remove_amp_cast)
    finally:
        self._cached_graph = inputs, out


def _channels_last(out, inputs, arrays):
    """The ``amp_layout`` pass on a graph that runs on a GPU; on CPU a warning with the reason."""
    from . import layout
    ctx = next((a.context for a in arrays if _is_array(a)), mx.cpu())
    refusal = layout.layout_refusal(ctx)
    if refusal is not None:
        warnings.warn("amp layout_optimization skipped: %s" % refusal, stacklevel=4)
        return out
    pairs = [(s.name, a) for s, a in zip(inputs, arrays) if _is_array(a)]
    return layout.optimize_layout(out, input_shapes={n: a.shape for n, a in pairs},
                                  input_dtypes={n: a.dtype for n, a in pairs}, ctx=ctx)


def _flatten(args):
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from _flatten(a)
        else:
            yield a


def _amp_bind(method):
    def amp_bind(self, ctx, *args, **kwargs):
        original = getattr(amp_bind, "__wrapped__")
        policy = _active_policy()
        if policy is None:
            return original(self, ctx, *args, **kwargs)
        names = self.list_arguments()
        arrays = kwargs.get("args", args[0] if args and method == "bind" else None)
        if isinstance(arrays, (list, tuple)):
            arrays = dict(zip(names, arrays))
        if isinstance(arrays, dict):
            dtypes = {k: v.dtype for k, v in arrays.items()}
            shapes = {k: v.shape for k, v in arrays.items()}
        else:  # simple_bind(ctx, grad_req, type_dict, stype_dict, group2ctx, ..., **shapes)
            dtypes = _inferred_dtypes(self, kwargs.get("type_dict") or {})
            shapes = {k: v for k, v in kwargs.items() if k in names}
        sym, _ = graph.rewrite_symbol(self, policy, ctx.device_type, dtypes, shapes)
        if not isinstance(arrays, dict):
            sym = _with_dtypes(sym, dtypes)
        return original(sym, ctx, *args, **kwargs)
    return amp_bind


def _inferred_dtypes(sym, type_dict):
    """``type_dict`` completed with the dtypes the original graph infers from it (the parameters', say)."""
    try:
        arg_types, _, aux_types = sym.infer_type_partial(**type_dict)
    except mx.base.MXNetError:
        return dict(type_dict)
    names = sym.list_arguments() + sym.list_auxiliary_states()
    found = {k: t for k, t in zip(names, (arg_types or []) + (aux_types or [])) if t is not None}
    return dict(found, **type_dict)


def _with_dtypes(sym, dtypes):
    """``sym`` with ``dtypes`` written into its variables' ``__dtype__``: a cast between a parameter and its
    reader hides the parameter's type from ``simple_bind``'s type inference."""
    gdict = json.loads(sym.tojson(remove_amp_cast=False))
    out = mx.sym.load_json(json.dumps(dict(gdict, nodes=graph.with_var_dtypes(gdict["nodes"], dtypes))))
    return out.as_np_ndarray() if isinstance(sym, mx.sym.np._Symbol) else out
