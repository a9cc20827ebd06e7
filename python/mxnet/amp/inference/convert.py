"""Inference conversion: turn a float32 model into a mixed precision one, ready to save, run or export.

The casts come from :func:`mxnet.amp.graph.rewrite.rewrite_symbol`, the same rewrite ``amp.init`` applies to
training graphs, so both follow one set of lists. Conversion adds three things on top:

* **oneDNN fusion first** (CPU, on by default): BatchNorm folded into the convolution before it
  (:mod:`mxnet.amp.graph.fold`), the library's kernels routed, then ``conv + BatchNorm + relu`` and friends
  become ``_sg_mkldnn_*`` nodes (:mod:`mxnet.amp.graph.fusion`) before casts are inserted.
* **Offline parameter casting** (``cast_params_offline=True``, :mod:`.params`).
* **A summary** (:class:`~mxnet.amp.ConversionSummary`): casts in the graph, ops per precision, parameter bytes.

:func:`convert` is the one pipeline; :func:`convert_symbol`, :func:`convert_model` and
:func:`mxnet.amp.inference.blocks.convert_hybrid_block` are its call forms.
"""
import warnings
from typing import Any, Dict, Optional, Sequence, Tuple

import mxnet as mx
import numpy as np

from .. import lists
from ..core import advice
from ..base.callers import stacklevel_outside_package
from ..core.compat import renamed_keywords
from ..base.dtypes import mx_dtype
from ..core.policy import Policy, make_policy
from ..core.support import native_support
from ..graph import fusion
from ..graph.fold import fold_batchnorm
from ..graph.builder import RewriteStats
from ..graph.rewrite import rewrite_symbol, route_library_kernels
from ..graph.symbol_json import to_graph, to_symbol, with_var_dtypes
from .constant_fold import fold_parameter_ops
from .onnx_converters import register_converters
from .params import cast_offline, nbytes
from .summary import Conversion, ConversionSummary

__all__ = ["convert", "convert_symbol", "convert_model"]


def convert(sym: mx.sym.Symbol, arg_params: Optional[Dict[str, mx.nd.NDArray]] = None,
            aux_params: Optional[Dict[str, mx.nd.NDArray]] = None, target_dtype: Any = "float16", *,
            target_dtype_ops: Optional[Sequence[str]] = None, fp32_ops: Optional[Sequence[str]] = None,
            conditional_fp32_ops: Optional[Sequence[Tuple[str, str, Sequence[str]]]] = None,
            excluded_sym_names: Optional[Sequence[str]] = None, cast_params_offline: bool = False,
            ctx: Optional[mx.Context] = None, fuse: Optional[bool] = None, emulate: Optional[bool] = None,
            input_names: Optional[Sequence[str]] = None, extra_lp16_ops: Optional[Sequence[str]] = None,
            extra_fp32_ops: Optional[Sequence[str]] = None, keep_lp16_outputs: bool = False,
            kernels: str = "auto", fold_params: bool = False) -> Conversion:
    """Convert a float32 symbol (and its parameters) to mixed precision; return a :class:`Conversion`.

    The parameters are :func:`convert_model`'s, plus ``input_names``: the variables that are model inputs,
    never cast offline (default: every variable without an array in ``arg_params``/``aux_params``; without
    parameters, as ``mxnet.contrib.amp``, every variable without a ``__dtype__`` attribute).

    Raises
    ------
    TypeError
        ``sym`` is not a Symbol or a parameter is not an NDArray.
    ValueError
        Unknown dtype or op name, an op in two overrides, a widest-type cast in ``target_dtype_ops`` or
        ``fp32_ops`` (as upstream), or fusion asked for on a GPU or without oneDNN.
    """
    if not isinstance(sym, mx.sym.Symbol):
        raise TypeError("convert: sym must be an mxnet Symbol, got %s" % type(sym).__name__)
    register_converters()  # the result exports with mx.onnx.export_model, amp.reset() or not
    arg_params = _check_params(arg_params, "arg_params")
    aux_params = _check_params(aux_params, "aux_params")
    device_type = _device_type(ctx)
    target_dtype, why = advice.resolve(target_dtype, device_type)
    if target_dtype is None:  # "auto" on a CPU where low precision does not pay: the float32 model as it is
        advice.log_choice(why)
        size = nbytes(list(arg_params.values()) + list(aux_params.values()))
        return Conversion(sym, dict(arg_params), dict(aux_params), ConversionSummary(
            "float32", device_type, False, False, 0, 0, (), (), 0, size, size))
    if why != "given":
        advice.log_choice(why)
    fuse = fusion.resolve_fuse(fuse, device_type, lists.normalize_dtype(target_dtype))
    # the library's ops need their weights' shapes to bind (lib_api infers none backwards): a symbol without
    # parameters keeps MXNet's kernels
    policy = make_policy(target_dtype, target_dtype_ops, conditional_fp32_ops, fp32_ops, excluded_sym_names,
                         emulate, extra_lp16_ops=extra_lp16_ops, extra_fp32_ops=extra_fp32_ops,
                         where="target_dtype_ops", replace_widest=False, keep_lp16_outputs=keep_lp16_outputs,
                         kernels="mxnet" if kernels == "auto" and not (arg_params or aux_params) else kernels)
    if fuse:
        sym, arg_params, aux_params, policy = _fused(sym, arg_params, aux_params, policy, device_type)
    params = dict(arg_params, **aux_params)
    new_sym, stats = rewrite_symbol(sym, policy, device_type, {n: a.dtype for n, a in params.items()},
                                    inference=True)
    graph, storage, cast = cast_offline(sym, to_graph(new_sym), params, input_names, stats, policy.target_dtype,
                                        device_type, cast_params_offline)
    cast_arrays = {k: v for k, v in cast.items() if v is not None}
    new_args = {k: cast_arrays.get(k, v) for k, v in arg_params.items()}
    new_aux = {k: cast_arrays.get(k, v) for k, v in aux_params.items()}
    if fold_params:
        graph, new_args, new_aux, _ = fold_parameter_ops(graph, new_args, new_aux)
    known = dict.fromkeys(set(sym.list_inputs()) - set(input_names), np.float32) if input_names is not None else {}
    known.update({name: arr.dtype for name, arr in params.items()})
    known.update({name: mx_dtype(dtype) for name, dtype in storage.items()})
    known.update({name: arr.dtype for name, arr in dict(new_args, **new_aux).items()})
    shapes = {n: a.shape for n, a in dict(params, **new_args, **new_aux).items()}
    graph = dict(graph, nodes=with_var_dtypes(graph["nodes"], known, shapes))
    _warn(policy, device_type, stats, emulate)
    summary = _summary(policy, device_type, fuse, stats, graph, len(cast), params, new_args, new_aux)
    return Conversion(to_symbol(graph, like=sym), new_args, new_aux, summary)


def _fused(sym, arg_params, aux_params, policy, device_type):
    """BatchNorm folded into convolutions (with the parameters), the library's kernels routed (before the fuser
    swallows their nodes), then oneDNN fusion; the policy extended to the fused nodes."""
    if arg_params or aux_params:
        sym, arg_params, aux_params = fold_batchnorm(sym, arg_params, aux_params, policy.excluded_sym_names)
    sym = route_library_kernels(sym, policy, device_type)
    sym, arg_params, aux_params = fusion.fuse(sym, arg_params, aux_params)
    return sym, arg_params, aux_params, fusion.policy_for_fused_nodes(sym, policy)


def _warn(policy: Policy, device_type: str, stats: RewriteStats, emulate: Optional[bool]) -> None:
    """bfloat16 on a CPU class where it is slow (once per process, with the choices); emulation the caller did
    not ask for."""
    if emulate is not True:
        advice.warn_if_slow(policy.target_dtype, device_type, stacklevel=stacklevel_outside_package())
    if stats.lp16_modes["emulated"] > 0 and emulate is None and not native_support(policy.target_dtype, device_type):
        warnings.warn(_emulation_warning(policy.target_dtype, device_type), stacklevel=stacklevel_outside_package())


def _summary(policy, device_type, fuse, stats, graph, params_cast, params, new_args, new_aux):
    nodes = graph["nodes"]
    return ConversionSummary(
        policy.target_dtype, device_type, fuse, stats.lp16_modes["emulated"] > 0,
        sum(n["op"] in ("amp_cast", "amp_round") for n in nodes), sum(n["op"] == "amp_multicast" for n in nodes),
        tuple(sorted(stats.actions.items())), tuple(sorted(stats.lp16_modes.items())), params_cast,
        nbytes(params.values()), nbytes(list(new_args.values()) + list(new_aux.values())),
        tuple(sorted(stats.kernels.items())))


def _emulation_warning(dtype, device_type):
    """The text of the warning that a converted model emulates its low precision ops."""
    return ("convert: MXNet has no %s kernels on this %s (oneDNN needs AVX-512 for bfloat16 on CPU; MXNet 1.9.1 "
            "has no fast CPU float16 and no GPU bfloat16 kernels; MXNET_AMP_EMULATE overrides the detection), so "
            "the converted model emulates its low precision ops: float32 kernels on values rounded to %s: %s "
            "numerics, no low precision arithmetic. Pass emulate=False to build the native graph for a machine that "
            "has the kernels, or emulate=True to silence this warning." % (dtype, device_type.upper(), dtype,
                                                                           dtype))


def convert_symbol(sym: mx.sym.Symbol, target_dtype: Any = "float16", target_dtype_ops: Optional[Sequence[str]] = None,
                   fp32_ops: Optional[Sequence[str]] = None,
                   conditional_fp32_ops: Optional[Sequence[Tuple[str, str, Sequence[str]]]] = None,
                   excluded_sym_names: Optional[Sequence[str]] = None, *legacy: Any,
                   cast_params_offline: bool = False, ctx: Optional[mx.Context] = None, fuse: Optional[bool] = False,
                   emulate: Optional[bool] = None, input_names: Optional[Sequence[str]] = None,
                   extra_lp16_ops: Optional[Sequence[str]] = None, extra_fp32_ops: Optional[Sequence[str]] = None,
                   keep_lp16_outputs: bool = False, kernels: str = "auto", **deprecated: Any) -> mx.sym.Symbol:
    """Return ``sym`` converted to mixed precision (no parameters involved).

    As upstream's, the symbol's ops stay as they are, with casts around them: no oneDNN fusion unless
    ``fuse=True`` (``None``: :func:`convert`'s default). With ``cast_params_offline=True`` every variable not
    in ``input_names`` whose readers all want the target dtype becomes a variable of that dtype (store its
    values accordingly). See :func:`mxnet.amp.convert_model` for the parameters. ``mxnet.contrib.amp``'s positional
    ``data_names, cast_optional_params`` after ``excluded_sym_names`` and its keyword names are accepted with a
    ``DeprecationWarning``.

    Example
    -------
    >>> low = amp.convert_symbol(sym, "bfloat16")
    >>> low.save("net-bf16-symbol.json", remove_amp_cast=False)
    """
    if len(legacy) > 2:
        raise TypeError("convert_symbol() takes at most 8 positional arguments (%d given)" % (6 + len(legacy)))
    deprecated.update(zip(("data_names", "cast_optional_params"), legacy))
    names = renamed_keywords("convert_symbol", deprecated,
                             {"input_names": input_names, "cast_params_offline": cast_params_offline})
    return convert(sym, None, None, target_dtype=target_dtype, target_dtype_ops=target_dtype_ops, fp32_ops=fp32_ops,
                   conditional_fp32_ops=conditional_fp32_ops, excluded_sym_names=excluded_sym_names,
                   cast_params_offline=names["cast_params_offline"], ctx=ctx, fuse=fuse, emulate=emulate,
                   input_names=names["input_names"], extra_lp16_ops=extra_lp16_ops, extra_fp32_ops=extra_fp32_ops,
                   keep_lp16_outputs=keep_lp16_outputs, kernels=kernels).symbol


def convert_model(sym: mx.sym.Symbol, arg_params: Dict[str, mx.nd.NDArray], aux_params: Dict[str, mx.nd.NDArray],
                  target_dtype: Any = "float16", target_dtype_ops: Optional[Sequence[str]] = None,
                  fp32_ops: Optional[Sequence[str]] = None,
                  conditional_fp32_ops: Optional[Sequence[Tuple[str, str, Sequence[str]]]] = None,
                  excluded_sym_names: Optional[Sequence[str]] = None, cast_params_offline: bool = False, *,
                  ctx: Optional[mx.Context] = None, fuse: Optional[bool] = None, emulate: Optional[bool] = None,
                  extra_lp16_ops: Optional[Sequence[str]] = None, extra_fp32_ops: Optional[Sequence[str]] = None,
                  keep_lp16_outputs: bool = False, kernels: str = "auto", fold_params: bool = False,
                  **deprecated: Any) -> Tuple[mx.sym.Symbol, Dict[str, mx.nd.NDArray], Dict[str, mx.nd.NDArray]]:
    """Convert a float32 model; return ``(sym, arg_params, aux_params)``.

    Every variable whose dtype is known carries it in its ``__dtype__`` attribute, so the symbol binds from the
    input shapes alone (:func:`mxnet.amp.inference.convert.convert` also returns the summary).

    Parameters
    ----------
    sym : Symbol
        Legacy or numpy-mode symbol; not modified.
    arg_params, aux_params : dict of str to NDArray
        The parameters; not modified (arrays needing no change are shared with the result).
    target_dtype : {'float16', 'bfloat16', 'auto'}
        ``'auto'``: float16 on a GPU context, bfloat16 on CPUs with bf16 arithmetic, else the model is returned
        in float32 (:mod:`mxnet.amp.core.advice`).
    target_dtype_ops, fp32_ops, conditional_fp32_ops : optional
        Replace the built-in lists, as in ``mxnet.contrib.amp`` (:func:`mxnet.amp.init`'s
        ``target_precision_ops`` is ``target_dtype_ops``). A fused node runs in the target dtype when
        ``target_dtype_ops`` names one of its ops.
    excluded_sym_names : list of str, optional
        Node names kept in float32; a fused node too when it contains one, an op of ``fp32_ops`` or
        ``extra_fp32_ops``, or a node a conditional float32 entry matches.
    cast_params_offline : bool
        Store parameters in the target dtype where every reader wants it (:mod:`mxnet.amp.inference.params`);
        without it, as upstream, only those of ops that follow low precision inputs. ``cast_optional_params``,
        ``mxnet.contrib.amp``'s name, is accepted with a ``DeprecationWarning``.
    ctx : Context, optional
        Where the model will run (default ``mx.current_context()``): decides emulation and fusion.
    fuse : bool, optional
        oneDNN fusion before converting; default on for bfloat16 on CPU when MXNet has oneDNN. With the
        parameters given, BatchNorm is folded into the convolution before it first, in float64
        (:func:`mxnet.amp.graph.fold.fold_batchnorm`): oneDNN's own folding after the cast loses accuracy.
    emulate : bool, optional
        ``True``: every low precision op emulated (float32 kernels on rounded values); ``False``: every one
        cast to the target dtype. Default: per op and device (:meth:`mxnet.amp.Policy.lp16_mode`).
    extra_lp16_ops, extra_fp32_ops : list of str, optional
        Ops to run in the target dtype / float32 on top of the lists, as in :func:`mxnet.amp.init`.
    keep_lp16_outputs : bool
        Leave outputs in the target dtype where the last op ran in it (default: their original dtype).
    kernels : {'auto', 'mxnet'}
        ``'auto'``: this project's oneDNN 3 kernels run the products and convolutions where the device runs
        the target dtype natively and they are available (:meth:`mxnet.amp.Policy.library_kernel`);
        ``'mxnet'``: MXNet's own.
    fold_params : bool
        Compute parameter-only subgraphs once, as new parameters ``NODE_folded`` (GluonNLP's query/key/value weight
        concatenation: :mod:`mxnet.amp.inference.constant_fold`); parameter names then differ from the model's.
    Returns
    -------
    (Symbol, dict, dict)
        The converted symbol and parameters.

    Raises
    ------
    TypeError, ValueError
        ``sym`` is not a Symbol or a parameter not an NDArray; an unknown dtype or op name, an op in two overrides,
        a widest-type cast in ``target_dtype_ops`` or ``fp32_ops`` (as upstream), fusion on a GPU or without oneDNN.

    Example
    -------
    >>> sym, args, aux = mx.model.load_checkpoint("resnet", 0)
    >>> sym, args, aux = amp.convert_model(sym, args, aux, "bfloat16", cast_params_offline=True)
    >>> mx.model.save_checkpoint("resnet-bf16", 0, sym, args, aux, remove_amp_cast=False)
    """
    offline = renamed_keywords("convert_model", deprecated,
                               {"cast_params_offline": cast_params_offline})["cast_params_offline"]
    out = convert(sym, arg_params, aux_params, target_dtype=target_dtype, target_dtype_ops=target_dtype_ops,
                  fp32_ops=fp32_ops, conditional_fp32_ops=conditional_fp32_ops,
                  excluded_sym_names=excluded_sym_names, cast_params_offline=offline, ctx=ctx, fuse=fuse,
                  emulate=emulate, extra_lp16_ops=extra_lp16_ops, extra_fp32_ops=extra_fp32_ops,
                  keep_lp16_outputs=keep_lp16_outputs, kernels=kernels, fold_params=fold_params)
    return out.symbol, out.arg_params, out.aux_params


def _check_params(params, where):
    params = dict(params or {})
    for name, arr in params.items():
        if not isinstance(arr, mx.nd.NDArray):
            raise TypeError("convert: %s[%r] is a %s; expected an NDArray" % (where, name, type(arr).__name__))
    return {k: (v.as_nd_ndarray() if isinstance(v, mx.np.ndarray) else v) for k, v in params.items()}


def _device_type(ctx):
    if ctx is None:  # the default context, as in mx.test_utils.set_default_context or `with mx.gpu():`
        ctx = mx.context.current_context()
    if not isinstance(ctx, mx.Context):
        raise TypeError("convert: ctx must be an mxnet Context such as mx.cpu() or mx.gpu(0), got %r" % (ctx,))
    if ctx.device_type not in ("cpu", "gpu"):
        raise ValueError("convert: ctx must be a CPU or GPU context, got %s" % ctx)
    return ctx.device_type
