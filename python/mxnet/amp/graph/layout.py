"""Channels-last (NHWC / NDHWC) layout optimization through the ``amp_layout`` graph pass.

On GPUs, float16 and bfloat16 convolutions run fastest on tensor cores in channels-last layout. The C++
pass ``amp_layout`` (``src/operator/amp/passes/layout.cc``) rewrites every 2-D/3-D Convolution and
Deconvolution to channels-last, carries that layout through the ops that can follow it (activations,
element-wise and broadcast ops, BatchNorm, Pooling, Concat, slicing, Dropout, casts, Flatten and
FullyConnected over a 1x1 map) and puts a transpose only where a channels-last region begins or ends;
graph outputs keep their layout. Each convolution node carries ``__amp_layout__``: the layout it now
runs in, or ``"unchanged: <reason>"``.

MXNet 1.9.1 runs Convolution only in NCHW on CPU, so the rewritten graphs need a GPU context. On CPU,
``emulate=True`` runs every channels-last convolution as transpose -> NCHW convolution -> transpose, and
every channels-last BatchNorm as BatchNorm(axis=1) of a (-1, C, 1, 1) Reshape (MXNet 1.9.1's oneDNN
BatchNorm over axis 3 can crash on AVX-512 CPUs), while everything else is rewritten for real: the way
the rewrite is proven correct without a GPU.
"""
import json
from typing import Any, Dict, Optional, Sequence, Tuple, Union
import warnings

import mxnet as mx
from mxnet.gluon import HybridBlock

from ..core import library  # noqa: F401  (registers the amp_layout pass)

__all__ = ["PASS_NAMES", "layout_refusal", "optimize_layout", "convert_layout", "layout_report"]

PASS_NAMES = ("amp_layout",)
STAMP = "__amp_layout__"
_CONV_OPS = ("Convolution", "Deconvolution")


def layout_refusal(ctx):
    """Why channels-last graphs cannot run on ``ctx``, in one line; None when they can.

    Parameters
    ----------
    ctx : mx.Context
        The context the rewritten graph would run on.

    Returns
    -------
    str or None

    Example
    -------
    >>> reason = layout_refusal(mx.cpu())
    >>> if reason is None:
    ...     optimize_layout(net, x)
    """
    if not isinstance(ctx, mx.Context):
        raise TypeError("layout_refusal: ctx must be an mx.Context, got %r" % (ctx,))
    if ctx.device_type == "gpu":
        return None
    return ("layout optimization refused on %s: MXNet 1.9.1 runs Convolution only in NCHW there; use a "
            "GPU context (or emulate=True to test the rewrite on CPU)" % ctx)


def layout_report(symbol):
    """The ``__amp_layout__`` stamp of every convolution node of a rewritten symbol.

    Parameters
    ----------
    symbol : mx.sym.Symbol
        A symbol returned by :func:`optimize_layout` or :func:`convert_layout`.

    Returns
    -------
    dict
        node name -> ``"NHWC"``, ``"NDHWC"``, ``"NHWC (emulated)"``, ... or ``"unchanged: <reason>"``.
    """
    nodes = json.loads(symbol.tojson())["nodes"]
    return {n["name"]: n.get("attrs", {}).get(STAMP) for n in nodes if n["op"] in _CONV_OPS}


def _run_pass(symbol, args, aux, pass_name="amp_layout", **options):
    """Run a graph pass of libmxnet_amp and check that it ran (MXNet only logs unknown pass names)."""
    if pass_name not in PASS_NAMES:
        raise ValueError("graph pass %r does not exist in libmxnet_amp; valid passes: %s"
                         % (pass_name, ", ".join(PASS_NAMES)))
    opts = {k: int(bool(v)) for k, v in options.items()}
    out = symbol.optimize_for(pass_name, args, aux, ctx=mx.cpu(), **opts)
    _check_ran(out, pass_name)
    return out.as_np_ndarray() if isinstance(symbol, mx.sym.np._Symbol) else out  # pylint: disable=protected-access


def _check_ran(symbol, pass_name):
    """Raise if the pass left no stamp on the convolutions; warn about the ones it left unchanged."""
    report = layout_report(symbol)
    if report and all(stamp is None for stamp in report.values()):
        raise RuntimeError("graph pass %r did not run: it is not registered in MXNet; rebuild "
                           "libmxnet_amp with src/operator/amp/passes/layout.cc" % pass_name)
    reasons = {}
    for name, stamp in report.items():
        if stamp and stamp.startswith("unchanged"):
            reasons.setdefault(stamp, []).append(name)
    for stamp, names in sorted(reasons.items()):
        warnings.warn("amp_layout: %s (%s)" % (stamp, ", ".join(names)), stacklevel=4)


def _check_ctx(ctx, emulate):
    if not isinstance(ctx, mx.Context):
        raise TypeError("optimize_layout: ctx must be an mx.Context, got %r" % (ctx,))
    reason = layout_refusal(ctx)
    if reason and not emulate:
        raise ValueError(reason)


def _check_shapes(input_shapes, where):
    if not isinstance(input_shapes, dict) or not input_shapes:
        raise TypeError("%s: input_shapes must be a non-empty dict name -> shape tuple, got %r"
                        % (where, input_shapes))
    return {name: tuple(shape) for name, shape in input_shapes.items()}


def _inputs(input_shapes, input_dtypes, where):
    """Zero arrays for the graph inputs: they carry the shapes and dtypes into the pass."""
    shapes = _check_shapes(input_shapes, where)
    input_dtypes = input_dtypes or {}
    if not isinstance(input_dtypes, dict) or set(input_dtypes) - set(shapes):
        raise ValueError("%s: input_dtypes must be a dict over names of input_shapes (%s), got %r"
                         % (where, ", ".join(sorted(shapes)), input_dtypes))
    return {name: mx.nd.zeros(shape, dtype=input_dtypes.get(name, "float32"))
            for name, shape in shapes.items()}


def _placeholders(symbol, input_shapes, input_dtypes, where):
    """Zero arrays for the inputs and auxiliary states of symbol."""
    args = _inputs(input_shapes, input_dtypes, where)
    _, _, aux_shapes = symbol.infer_shape(**{k: v.shape for k, v in args.items()})
    if aux_shapes is None:
        raise ValueError("%s: cannot infer the shapes of %s from input_shapes=%r"
                         % (where, symbol.name, input_shapes))
    aux = {name: mx.nd.zeros(shape) for name, shape in zip(symbol.list_auxiliary_states(), aux_shapes)}
    return args, aux


def _host_copies(params):
    """CPU copies, complete before returning: the pass reads their memory directly."""
    copies = {k: v.as_nd_ndarray().copyto(mx.cpu()) for k, v in params.items()}
    for v in copies.values():
        v.wait_to_read()
    return copies


def _needs_pass(symbol, where):
    """False when symbol has no convolution; raises if amp_layout already rewrote it."""
    report = layout_report(symbol)
    done = sorted(name for name, stamp in report.items() if stamp is not None)
    if done:
        raise ValueError("%s: the graph was already rewritten by amp_layout (node %s is stamped %r); "
                         "rewrite the original graph instead" % (where, done[0], report[done[0]]))
    return bool(report)


def optimize_layout(block_or_symbol: Union[HybridBlock, mx.sym.Symbol], *inputs: mx.nd.NDArray,
                    input_shapes: Optional[Dict[str, Sequence[int]]] = None,
                    input_dtypes: Optional[Dict[str, Any]] = None, ctx: Optional[mx.Context] = None,
                    emulate: bool = False, allow_3d: bool = False) -> Union[HybridBlock, mx.sym.Symbol]:
    """Rewrite a hybridizable block or a symbol to channels-last convolutions.

    Weights are transposed by transpose nodes in the graph, so the result still trains the original
    parameters. For a converted inference model with the weights transposed offline, see
    :func:`convert_layout`.

    Parameters
    ----------
    block_or_symbol : HybridBlock or mx.sym.Symbol
        A block is hybridized with the pass as its backend (in place); a symbol is returned rewritten.
    *inputs : NDArray
        For a block: example inputs (their shapes and context are used; nothing is computed).
    input_shapes : dict, optional
        For a symbol: input name -> shape, e.g. ``{"data": (32, 3, 224, 224)}``.
    input_dtypes : dict, optional
        For a symbol: input name -> dtype where not float32, e.g. ``{"data": "float16"}``.
    ctx : mx.Context, optional
        For a symbol: the context the graph will run on (a block takes it from its inputs).
    emulate : bool, optional
        Emulate channels-last convolutions with NCHW ones (allowed on CPU; for tests).
    allow_3d : bool, optional
        Rewrite 3-D convolutions too (NDHWC). MXNet 1.9.1 cannot run them (its cuDNN convolution takes
        3-D data in NCDHW only), so they are left unchanged by default.

    Returns
    -------
    HybridBlock or mx.sym.Symbol
        The block (rewritten in place) or the rewritten symbol.

    Raises
    ------
    ValueError
        The context cannot run channels-last convolutions (CPU without ``emulate``).
    TypeError
        Wrong argument types.

    Example
    -------
    >>> net.hybridize()
    >>> optimize_layout(net, mx.nd.zeros((32, 3, 224, 224), ctx=mx.gpu()))
    >>> out = net(x)
    """
    if isinstance(block_or_symbol, HybridBlock):
        if not inputs:
            raise TypeError("optimize_layout: give example inputs for a block, e.g. "
                            "optimize_layout(net, x)")
        _check_ctx(inputs[0].context, emulate)
        block_or_symbol.optimize_for(*inputs, backend=PASS_NAMES[0], clear=True,
                                     emulate=int(bool(emulate)), allow_3d=int(bool(allow_3d)))
        _check_ran(block_or_symbol._cached_graph[1], PASS_NAMES[0])  # pylint: disable=protected-access
        return block_or_symbol
    if not isinstance(block_or_symbol, mx.sym.Symbol):
        raise TypeError("optimize_layout: expected a HybridBlock or an mx.sym.Symbol, got %s"
                        % type(block_or_symbol).__name__)
    _check_ctx(ctx if ctx is not None else mx.current_context(), emulate)
    if not _needs_pass(block_or_symbol, "optimize_layout"):
        return block_or_symbol
    args, aux = _placeholders(block_or_symbol, input_shapes, input_dtypes, "optimize_layout")
    return _run_pass(block_or_symbol, args, aux, emulate=emulate, allow_3d=allow_3d)


def convert_layout(symbol: mx.sym.Symbol, arg_params: Dict[str, mx.nd.NDArray], aux_params: Dict[str, mx.nd.NDArray],
                   input_shapes: Dict[str, Sequence[int]], input_dtypes: Optional[Dict[str, Any]] = None,
                   ctx: Optional[mx.Context] = None, emulate: bool = False, allow_3d: bool = False
                   ) -> Tuple[mx.sym.Symbol, Dict[str, mx.nd.NDArray], Dict[str, mx.nd.NDArray]]:
    """Rewrite a converted (inference) model to channels-last, transposing the weights offline.

    Parameters
    ----------
    symbol : mx.sym.Symbol
        The model graph.
    arg_params, aux_params : dict of str to NDArray
        Its parameters (any context; they are read on CPU).
    input_shapes : dict
        Input name -> shape, e.g. ``{"data": (1, 3, 224, 224)}``.
    input_dtypes : dict, optional
        Input name -> dtype where not float32, e.g. ``{"data": "float16"}``.
    ctx : mx.Context, optional
        The context the model will run on (default: the current context).
    emulate : bool, optional
        Emulate channels-last convolutions with NCHW ones (allowed on CPU; for tests).
    allow_3d : bool, optional
        Rewrite 3-D convolutions too (NDHWC). MXNet 1.9.1 cannot run them (its cuDNN convolution takes
        3-D data in NCDHW only), so they are left unchanged by default.

    Returns
    -------
    (mx.sym.Symbol, dict, dict)
        The rewritten symbol and its parameters: each convolution weight is replaced by a transposed
        copy named ``<weight>_amp_nhwc`` (on CPU; move the dicts to ``ctx`` as usual).

    Raises
    ------
    ValueError
        The context cannot run channels-last convolutions (CPU without ``emulate``).
    TypeError
        Wrong argument types.

    Example
    -------
    >>> sym, args, aux = convert_layout(sym, args, aux, {"data": (1, 3, 224, 224)}, ctx=mx.gpu())
    """
    if not isinstance(symbol, mx.sym.Symbol):
        raise TypeError("convert_layout: symbol must be an mx.sym.Symbol, got %s"
                        % type(symbol).__name__)
    for name, params in (("arg_params", arg_params), ("aux_params", aux_params)):
        if not isinstance(params, dict):
            raise TypeError("convert_layout: %s must be a dict name -> NDArray, got %s"
                            % (name, type(params).__name__))
    _check_ctx(ctx if ctx is not None else mx.current_context(), emulate)
    if not _needs_pass(symbol, "convert_layout"):
        return symbol, dict(arg_params), dict(aux_params)
    inputs = _inputs(input_shapes, input_dtypes, "convert_layout")
    args = _host_copies(arg_params)
    args.update(inputs)
    aux = _host_copies(aux_params)
    out = _run_pass(symbol, args, aux, emulate=emulate, allow_3d=allow_3d, offline_weights=True)
    used = set(out.list_inputs())
    return (out, {k: v for k, v in args.items() if k in used and k not in inputs},
            {k: v for k, v in aux.items() if k in used})
