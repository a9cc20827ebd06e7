"""Inference conversion: turn a float32 model into a mixed precision one, ready to save, run or export.

The casts come from :func:`mxnet.amp.graph.rewrite_symbol`, the same rewrite ``amp.init`` applies to training
graphs, so both follow one set of lists. Conversion adds three things on top:

* **oneDNN fusion first** (CPU, on by default): ``conv + BatchNorm + relu`` and friends become ``_sg_mkldnn_*``
  nodes before casts are inserted, so the low precision graph runs the fused kernels.
* **Offline parameter casting** (``cast_params_offline=True``): a parameter whose every reader wants the target
  dtype is stored in that dtype and its cast disappears; parameters some reader needs in float32 (BatchNorm
  statistics, say) stay float32. A shared parameter is stored and cast once. In an *emulated* graph (no low
  precision kernels on the device, see :meth:`~mxnet.amp.policy.Policy.emulates`) the parameter is stored
  in the target dtype too and read through an exact cast to float32 (numpy-mode bfloat16 models, whose
  arrays cannot be bfloat16 in MXNet 1.9.1: in float32, already rounded, without a rounding node).
* **A summary** (:class:`ConversionSummary`): casts in the graph, ops per precision, parameter bytes.
"""
from dataclasses import dataclass
import json
import warnings

import numpy as np

from . import advice, fusion, graph, lists
from .compat import renamed_keywords
from .converted_block import ConvertedBlock, flatten_arrays, nest
from .fold import fold_batchnorm
from .policy import make_policy, mx_dtype, native_support

__all__ = ["convert_symbol", "convert_model", "convert_hybrid_block", "convert", "Conversion",
           "ConversionSummary", "ConvertedBlock", "flatten_arrays", "nest"]


@dataclass(frozen=True)
class ConversionSummary:
    """What a conversion produced.

    Attributes
    ----------
    target_dtype : str
        'float16' or 'bfloat16'.
    device_type : str
        'cpu' or 'gpu': the device the graph was converted for.
    fused : bool
        Whether oneDNN fusion ran before the rewrite.
    emulated : bool
        Whether low precision ops are emulated (rounding casts around float32 kernels).
    lp16_modes : tuple of (str, int)
        Op nodes that run in low precision, by how they run (:meth:`~mxnet.amp.policy.Policy.lp16_mode`):
        'native' (target dtype kernel), 'emulated', 'float32' (no such kernel on a device that runs the
        target dtype natively).
    kernels : tuple of (str, int)
        Nodes that run this project's library kernels, per kernel (``amp_fully_connected``, ...); they are
        counted as 'native' in ``lp16_modes`` too.
    casts, multicasts : int
        Cast nodes in the converted graph: ``amp_cast`` + ``amp_round`` (emulation rounding), and
        ``amp_multicast``.
    ops : tuple of (str, int)
        Op nodes per decision: 'lp16' (target dtype), 'fp32', 'widest', 'neutral' (runs in what arrives).
    params_cast : int
        Parameters converted offline (stored in the target dtype, or rounded to it when emulated).
    param_bytes_before, param_bytes_after : int
        Bytes of all parameters before and after conversion.
    """

    target_dtype: str
    device_type: str
    fused: bool
    emulated: bool
    casts: int
    multicasts: int
    ops: tuple
    lp16_modes: tuple
    params_cast: int
    param_bytes_before: int
    param_bytes_after: int
    kernels: tuple = ()

    def as_dict(self):
        """Return a JSON-safe dict of every field."""
        return {"target_dtype": self.target_dtype, "device_type": self.device_type, "fused": self.fused,
                "emulated": self.emulated, "casts": self.casts, "multicasts": self.multicasts,
                "ops": dict(self.ops), "lp16_modes": dict(self.lp16_modes), "params_cast": self.params_cast,
                "param_bytes_before": self.param_bytes_before, "param_bytes_after": self.param_bytes_after,
                "kernels": dict(self.kernels)}

    def format(self):
        """Return a short human-readable report (several lines)."""
        mode = "emulated (float32 kernels, values rounded to %s)" % self.target_dtype if self.emulated \
            else "native %s kernels" % self.target_dtype
        ops = ", ".join("%s %d" % (k, v) for k, v in self.ops) or "none"
        modes = dict(self.lp16_modes)
        lp16 = "%d native, %d emulated, %d in float32 (no %s kernel for the op on this device)" % (
            modes.get("native", 0), modes.get("emulated", 0), modes.get("float32", 0), self.target_dtype)
        if self.kernels:
            lp16 += "; on this project's oneDNN 3 kernels: %s" % ", ".join("%s %d" % kv for kv in self.kernels)
        return "\n".join([
            "target dtype:     %s on %s, %s%s" % (self.target_dtype, self.device_type, mode,
                                                  ", oneDNN-fused" if self.fused else ""),
            "casts inserted:   %d amp_cast/amp_round, %d amp_multicast" % (self.casts, self.multicasts),
            "ops by precision: %s" % ops,
            "low precision:    %s" % lp16,
            "parameters:       %d cast offline; %s -> %s bytes" % (
                self.params_cast, format(self.param_bytes_before, ","), format(self.param_bytes_after, ","))])


@dataclass(frozen=True)
class Conversion:
    """Result of :func:`convert`: the converted symbol, its parameters and the summary."""

    symbol: object
    arg_params: dict
    aux_params: dict
    summary: ConversionSummary


def convert(sym, arg_params=None, aux_params=None, target_dtype="float16", target_dtype_ops=None,
            fp32_ops=None, conditional_fp32_ops=None, excluded_sym_names=None, cast_params_offline=False,
            ctx=None, fuse=None, emulate=None, input_names=None, extra_lp16_ops=None, extra_fp32_ops=None,
            keep_lp16_outputs=False, kernels="auto"):
    """Convert a float32 symbol (and its parameters) to mixed precision; return a :class:`Conversion`.

    Parameters
    ----------
    sym : Symbol
        Legacy or numpy-mode symbol; not modified.
    arg_params, aux_params : dict of str to NDArray, optional
        The parameters; not modified (arrays that need no change are shared with the result).
    target_dtype : {'float16', 'bfloat16', 'auto'}
        ``'auto'``: float16 on a GPU context, bfloat16 on CPUs with bf16 arithmetic, else the model is returned
        in float32 (see :mod:`mxnet.amp.advice`).
    target_dtype_ops, fp32_ops, conditional_fp32_ops : optional
        Replace the built-in lists, as in ``mxnet.contrib.amp`` (see :func:`mxnet.amp.init`:
        ``target_dtype_ops`` is its ``target_precision_ops``). A fused node runs in the target dtype when
        ``target_dtype_ops`` names one of its ops.
    excluded_sym_names : list of str, optional
        Node names kept in float32. A fused node is kept in float32 when it contains an excluded node,
        an op named in ``fp32_ops`` or ``extra_fp32_ops``, or a node that a conditional float32 entry
        (built-in or given) matches.
    cast_params_offline : bool
        Store parameters in the target dtype where every reader wants it (see the module docstring). Without
        it, as upstream, only the parameters of ops that follow low precision inputs (ops a replaced list
        dropped, see :class:`~mxnet.amp.policy.Policy`) are stored so.
    ctx : Context, optional
        Device the model will run on (default: the current default context, ``mx.current_context()``, the
        CPU unless set): decides emulation and fusion.
    fuse : bool, optional
        Fuse with the oneDNN subgraph backend before converting. Default: on for bfloat16 on CPU when MXNet
        has oneDNN (oneDNN's fused ops have no float16 kernels). With the parameters given, BatchNorm is
        folded into the convolution before it first, in float64 (:func:`mxnet.amp.fold.fold_batchnorm`):
        oneDNN's own conv + BatchNorm fusion folds after the cast and loses accuracy.
    emulate : bool, optional
        ``True``: every low precision op emulated (float32 kernels on rounded values); ``False``: every one
        cast to the target dtype (a graph for hardware that has the kernels). Default: per op and device
        (:meth:`~mxnet.amp.policy.Policy.lp16_mode`): native where the kernel exists, plain float32 where
        the device runs the dtype natively but lacks the op's kernel, emulated on devices without any.
    input_names : list of str, optional
        Variables that are model inputs, never cast offline. Default: every variable without an array in
        ``arg_params``/``aux_params``; without parameters, as ``mxnet.contrib.amp``, every variable without a
        ``__dtype__`` attribute.
    extra_lp16_ops, extra_fp32_ops : list of str, optional
        Ops to run in the target dtype / float32 on top of the lists, as in :func:`mxnet.amp.init`.
    keep_lp16_outputs : bool
        Leave outputs in the target dtype where the last op ran in it; by default they come back in their
        original dtype (float32).
    kernels : {'auto', 'mxnet'}
        Whose kernels run the matrix products. ``'auto'``: this project's oneDNN 3 kernels
        (``amp_fully_connected``, ``amp_batch_dot``, ``amp_matmul``) in place of FullyConnected, batch_dot
        and matmul where the device runs the target dtype natively and they are available
        (:meth:`~mxnet.amp.policy.Policy.library_kernel`); ``'mxnet'``: MXNet's own. Without parameters
        (:func:`convert_symbol`) MXNet's: the library's ops need their weights' shapes to bind.

    Returns
    -------
    Conversion

    Every variable whose dtype is known (the parameters given, parameters cast offline, and with
    ``input_names`` every other variable) carries it in its ``__dtype__`` attribute, so the symbol binds from
    the input shapes alone (``mx.mod.Module(sym).bind(data_shapes=...)``).

    Raises
    ------
    TypeError
        ``sym`` is not a Symbol or a parameter is not an NDArray.
    ValueError
        Unknown dtype or op name, an op in two overrides, a widest-type cast in ``target_dtype_ops`` or
        ``fp32_ops`` (as upstream), or fusion asked for on a GPU or without oneDNN.
    """
    import mxnet as mx
    if not isinstance(sym, mx.sym.Symbol):
        raise TypeError("convert: sym must be an mxnet Symbol, got %s" % type(sym).__name__)
    arg_params = _check_params(arg_params, "arg_params")
    aux_params = _check_params(aux_params, "aux_params")
    device_type = _device_type(ctx)
    target_dtype, why = advice.resolve(target_dtype, device_type)
    if target_dtype is None:  # "auto" on a CPU where low precision does not pay: the float32 model as it is
        advice.log_choice(why)
        nbytes = _nbytes(list(arg_params.values()) + list(aux_params.values()))
        return Conversion(sym, dict(arg_params), dict(aux_params), ConversionSummary(
            "float32", device_type, False, False, 0, 0, (), (), 0, nbytes, nbytes))
    if why != "given":
        advice.log_choice(why)
    fuse = fusion.resolve_fuse(fuse, device_type, lists.normalize_dtype(target_dtype))
    if kernels == "auto" and not (arg_params or aux_params):  # the library's ops need their weights' shapes
        kernels = "mxnet"  # to bind (lib_api infers none backwards): a symbol without parameters keeps MXNet's
    policy = make_policy(target_dtype, target_dtype_ops, conditional_fp32_ops, fp32_ops, excluded_sym_names,
                         emulate, extra_lp16_ops=extra_lp16_ops, extra_fp32_ops=extra_fp32_ops,
                         where="target_dtype_ops", replace_widest=False, keep_lp16_outputs=keep_lp16_outputs,
                         kernels=kernels)
    if fuse:
        if arg_params or aux_params:
            sym, arg_params, aux_params = fold_batchnorm(sym, arg_params, aux_params, policy.excluded_sym_names)
        sym = graph.route_library_kernels(sym, policy, device_type)  # before the fuser swallows them
        sym, arg_params, aux_params = fusion.fuse(sym, arg_params, aux_params)
        policy = fusion.policy_for_fused_nodes(sym, policy)
    params = dict(arg_params, **aux_params)
    var_dtypes = {name: arr.dtype for name, arr in params.items()}
    new_sym, stats = graph.rewrite_symbol(sym, policy, device_type, var_dtypes, inference=True)
    gdict = json.loads(new_sym.tojson(remove_amp_cast=False))
    params_cast, storage = {}, {}
    if cast_params_offline:
        offline = _param_names(sym, params, input_names)
    else:  # as upstream: the parameters of an op that follows low precision inputs are low precision
        offline = _read_only_by(sym, stats.followed) & (
            set(params) if input_names is None else set(sym.list_inputs()) - set(input_names))
    if offline:
        # numpy-mode arrays cannot be bfloat16 in MXNet 1.9.1: emulated numpy-mode models keep float32 storage
        numpy = isinstance(sym, mx.sym.np._Symbol)
        emulated_storage = "float32" if numpy and policy.target_dtype == "bfloat16" else policy.target_dtype
        gdict, storage = _cast_params_in_graph(gdict, offline, policy.target_dtype, var_dtypes, emulated_storage,
                                               device_type)
        params_cast = _cast_arrays({n: params[n] for n in storage if n in params}, storage, policy.target_dtype)
        params_cast.update({n: None for n in storage if n not in params})  # convert_symbol: no arrays
    known = dict.fromkeys(set(sym.list_inputs()) - set(input_names), np.float32) if input_names is not None else {}
    known.update({name: arr.dtype for name, arr in params.items()})
    known.update({name: mx_dtype(dtype) for name, dtype in storage.items()})
    gdict = dict(gdict, nodes=graph.with_var_dtypes(gdict["nodes"], known,
                                                    {name: arr.shape for name, arr in params.items()}))
    out_sym = mx.sym.load_json(json.dumps(gdict))
    if isinstance(sym, mx.sym.np._Symbol):
        out_sym = out_sym.as_np_ndarray()
    cast = {k: v for k, v in params_cast.items() if v is not None}
    new_args = {k: cast.get(k, v) for k, v in arg_params.items()}
    new_aux = {k: cast.get(k, v) for k, v in aux_params.items()}
    emulated = stats.lp16_modes["emulated"] > 0
    if emulate is not True:  # bfloat16 on a CPU class where it is slow: once per process, with the choices
        advice.warn_if_slow(policy.target_dtype, device_type, stacklevel=_stacklevel_outside_package())
    if emulated and emulate is None and not native_support(policy.target_dtype, device_type):
        warnings.warn(_emulation_warning(policy.target_dtype, device_type), stacklevel=_stacklevel_outside_package())
    summary = ConversionSummary(
        policy.target_dtype, device_type, fuse, emulated,
        sum(n["op"] in ("amp_cast", "amp_round") for n in gdict["nodes"]),
        sum(n["op"] == "amp_multicast" for n in gdict["nodes"]), tuple(sorted(stats.actions.items())),
        tuple(sorted(stats.lp16_modes.items())), len(params_cast), _nbytes(params.values()),
        _nbytes(list(new_args.values()) + list(new_aux.values())), tuple(sorted(stats.kernels.items())))
    return Conversion(out_sym, new_args, new_aux, summary)


def _emulation_warning(dtype, device_type):
    """The text of the warning that a converted model emulates its low precision ops."""
    return ("convert: MXNet has no %s kernels on this %s (oneDNN needs AVX-512 for bfloat16 on CPU; MXNet 1.9.1 "
            "has no fast CPU float16 and no GPU bfloat16 kernels; MXNET_AMP_EMULATE overrides the detection), so "
            "the converted model emulates its low precision ops: float32 kernels on values rounded to %s: %s "
            "numerics, no low precision arithmetic. Pass emulate=False to build the native graph for a machine that "
            "has the kernels, or emulate=True to silence this warning." % (dtype, device_type.upper(), dtype,
                                                                            dtype))


def _stacklevel_outside_package():
    """``stacklevel`` that points a warning at the first caller outside ``mxnet.amp``."""
    import os
    import sys
    package = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == package:
        frame, level = frame.f_back, level + 1
    return level


def convert_symbol(sym, target_dtype="float16", target_dtype_ops=None, fp32_ops=None,
                   conditional_fp32_ops=None, excluded_sym_names=None, *legacy, cast_params_offline=False,
                   ctx=None, fuse=False, emulate=None, input_names=None, extra_lp16_ops=None, extra_fp32_ops=None,
                   keep_lp16_outputs=False, kernels="auto", **deprecated):
    """Return ``sym`` converted to mixed precision (no parameters involved).

    As upstream's, the symbol's ops stay as they are, with casts around them: no oneDNN fusion unless
    ``fuse=True`` (``None``: :func:`convert`'s default). With ``cast_params_offline=True`` every variable not
    in ``input_names`` whose readers all want the target dtype becomes a variable of that dtype (store its
    values accordingly). See :func:`convert` for the parameters. ``mxnet.contrib.amp``'s positional
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
    return convert(sym, None, None, target_dtype, target_dtype_ops, fp32_ops, conditional_fp32_ops,
                   excluded_sym_names, names["cast_params_offline"], ctx, fuse, emulate, names["input_names"],
                   extra_lp16_ops, extra_fp32_ops, keep_lp16_outputs, kernels).symbol


def convert_model(sym, arg_params, aux_params, target_dtype="float16", target_dtype_ops=None, fp32_ops=None,
                  conditional_fp32_ops=None, excluded_sym_names=None, cast_params_offline=False, *,
                  ctx=None, fuse=None, emulate=None, extra_lp16_ops=None, extra_fp32_ops=None,
                  keep_lp16_outputs=False, kernels="auto", **deprecated):
    """Convert a float32 model; return ``(sym, arg_params, aux_params)``.

    See :func:`convert` for the parameters (use it directly to get the :class:`ConversionSummary` too).
    ``cast_optional_params`` (``mxnet.contrib.amp``'s name of ``cast_params_offline``) is accepted with a
    ``DeprecationWarning``.

    Example
    -------
    >>> sym, args, aux = mx.model.load_checkpoint("resnet", 0)
    >>> sym, args, aux = amp.convert_model(sym, args, aux, "bfloat16", cast_params_offline=True)
    >>> mx.model.save_checkpoint("resnet-bf16", 0, sym, args, aux, remove_amp_cast=False)
    """
    offline = renamed_keywords("convert_model", deprecated,
                               {"cast_params_offline": cast_params_offline})["cast_params_offline"]
    out = convert(sym, arg_params, aux_params, target_dtype, target_dtype_ops, fp32_ops, conditional_fp32_ops,
                  excluded_sym_names, offline, ctx, fuse, emulate, None, extra_lp16_ops, extra_fp32_ops,
                  keep_lp16_outputs, kernels)
    return out.symbol, out.arg_params, out.aux_params


def convert_hybrid_block(block, data_example=None, *args, **kwargs):
    """Convert a Gluon ``HybridBlock``; return a runnable ``SymbolBlock`` (a :class:`ConvertedBlock`, whose
    ``export`` keeps the casts) with the converted parameters.

    Two call forms:

    * ``convert_hybrid_block(block, data_example, target_dtype="float16", target_dtype_ops=None,
      fp32_ops=None, conditional_fp32_ops=None, excluded_sym_names=None, ctx=None,
      cast_params_offline=False, *, fuse=None, emulate=None, layout=None, extra_lp16_ops=None,
      extra_fp32_ops=None, keep_lp16_outputs=False, kernels="auto")``, as in MXNet 2.0 (which spells ``ctx``
      ``device``; both are accepted);
    * ``convert_hybrid_block(block, target_dtype="float16", target_dtype_ops=None, fp32_ops=None,
      conditional_fp32_ops=None, excluded_sym_names=None, ctx=None, cast_optional_params=False)``, as in
      ``mxnet.contrib.amp`` 1.9.1: no data example, so the block must be hybridized and have run once; its
      cached graph is converted (``layout`` needs the data example's shapes and is not available here).

    Parameters
    ----------
    block : HybridBlock
        Legacy or numpy-mode; nested blocks and several inputs/outputs are fine. Not modified, except that
        it runs once on ``data_example`` when its parameters are not initialized yet.
    data_example : NDArray or list of NDArray
        One example per input (values are not used beyond shape/type inference).
    ctx : Context, optional
        Where the result lives and runs; default: the context of ``data_example`` (of the parameters in the
        form without a data example).
    layout : {None, 'NCHW', 'NHWC'}
        'NHWC' rewrites 2-D convolutions to channels-last with the weights transposed offline
        (:func:`mxnet.amp.layout.convert_layout`; GPU contexts only, refused on CPU with the reason).

    See :func:`convert` for the other parameters.

    Raises
    ------
    RuntimeError
        Called without a data example on a block that was not hybridized and run (nothing to convert).

    Example
    -------
    >>> low = amp.convert_hybrid_block(net, mx.nd.zeros((1, 3, 224, 224)), "bfloat16")
    >>> y = low(x)
    """
    from mxnet.gluon import HybridBlock
    if not isinstance(block, HybridBlock):
        raise TypeError("convert_hybrid_block: block must be a gluon HybridBlock, got %s"
                        % type(block).__name__)
    if data_example is None or isinstance(data_example, (str, type, np.dtype)):
        return _convert_cached_block(block, *(() if data_example is None else (data_example,)) + args, **kwargs)
    data = list(data_example) if isinstance(data_example, (list, tuple)) else [data_example]
    try:
        flat, _ = flatten_arrays(data)
    except TypeError:
        flat = None
    if not flat:
        raise TypeError("convert_hybrid_block: data_example must be an NDArray or a (nested) list of NDArrays, one "
                        "per argument of the block's forward, as the block is called (or, in mxnet.contrib.amp's "
                        "form, the target dtype), got %r" % (data_example,))
    return _convert_block(block, data, *args, **kwargs)


def _convert_block(block, data, target_dtype="float16", target_dtype_ops=None, fp32_ops=None,
                   conditional_fp32_ops=None, excluded_sym_names=None, ctx=None, cast_params_offline=False, *,
                   fuse=None, emulate=None, layout=None, extra_lp16_ops=None, extra_fp32_ops=None, device=None,
                   keep_lp16_outputs=False, kernels="auto", **deprecated):
    """:func:`convert_hybrid_block` given data examples (MXNet 2.0's form)."""
    offline = renamed_keywords("convert_hybrid_block", deprecated, {"cast_params_offline": cast_params_offline},
                               stacklevel=4)["cast_params_offline"]
    if layout not in _LAYOUTS:
        raise ValueError("convert_hybrid_block: layout must be one of %s, got %r"
                         % (", ".join(repr(v) for v in _LAYOUTS), layout))
    flat, in_format = flatten_arrays(data)
    ctx = _one_context(ctx, device) or flat[0].context
    inputs, out, params = block_graph(block, data)
    options = dict(target_dtype=target_dtype, target_dtype_ops=target_dtype_ops, fp32_ops=fp32_ops,
                   conditional_fp32_ops=conditional_fp32_ops, excluded_sym_names=excluded_sym_names,
                   cast_params_offline=offline, fuse=fuse, emulate=emulate, extra_lp16_ops=extra_lp16_ops,
                   extra_fp32_ops=extra_fp32_ops, keep_lp16_outputs=keep_lp16_outputs, kernels=kernels)
    return _block_from_graph([s.name for s in inputs], [d.dtype for d in flat], out, params, ctx, options,
                             layout, [d.shape for d in flat], (in_format, block._out_format))


def _convert_cached_block(block, target_dtype="float16", target_dtype_ops=None, fp32_ops=None,
                          conditional_fp32_ops=None, excluded_sym_names=None, ctx=None, cast_optional_params=False,
                          **kwargs):
    """:func:`convert_hybrid_block` without data examples (``mxnet.contrib.amp`` 1.9.1's form)."""
    if "cast_params_offline" in kwargs:
        offline = kwargs.pop("cast_params_offline")
    else:
        offline = cast_optional_params
        if cast_optional_params:
            renamed_keywords("convert_hybrid_block", {"cast_optional_params": True},
                             {"cast_params_offline": False}, stacklevel=4)
    if kwargs.get("layout", "NHWC") is None:
        del kwargs["layout"]
    unknown = set(kwargs) - {"fuse", "emulate", "extra_lp16_ops", "extra_fp32_ops", "device", "keep_lp16_outputs",
                             "kernels"}
    if unknown:
        raise TypeError("convert_hybrid_block() without a data example got unexpected keyword arguments %s%s"
                        % (", ".join(sorted(unknown)), " (layout needs a data example)" if "layout" in unknown
                           else ""))
    if not block._cached_graph:
        raise RuntimeError("convert_hybrid_block: called without a data example (mxnet.contrib.amp's form), so "
                           "the block's cached graph is converted, but %s has none: call block.hybridize() and "
                           "run it once (block(x)) first, or pass a data example: convert_hybrid_block(block, x, "
                           "%r)" % (type(block).__name__, target_dtype))
    inputs, out = block._cached_graph
    inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    params = _block_arrays(block)
    ctx = _one_context(ctx, kwargs.pop("device", None)) or next(iter(params.values())).context
    names_of_codes = {code: name for name, code in graph.TYPE_CODES.items()}
    dtypes = [mx_dtype(names_of_codes.get(s.attr("__dtype__"), "float32")) for s in inputs]
    options = dict(kwargs, target_dtype=target_dtype, target_dtype_ops=target_dtype_ops, fp32_ops=fp32_ops,
                   conditional_fp32_ops=conditional_fp32_ops, excluded_sym_names=excluded_sym_names,
                   cast_params_offline=offline)
    return _block_from_graph([s.name for s in inputs], dtypes, out, params, ctx, options, None, None,
                             (block._in_format, block._out_format))


def _one_context(ctx, device):
    if ctx is not None and device is not None and ctx != device:
        raise TypeError("convert_hybrid_block: got both ctx=%s and device=%s (MXNet 2.0's name for ctx)"
                        % (ctx, device))
    return ctx if ctx is not None else device


def _block_from_graph(names, dtypes, out, params, ctx, options, layout, shapes, formats):
    """Convert a block's graph ``out`` (inputs ``names`` of ``dtypes``); return the ``SymbolBlock``, which takes
    and returns the nesting of the block's arguments and outputs (Gluon's ``formats``: inputs, outputs)."""
    import mxnet as mx
    if len(names) != len(dtypes):  # e.g. a block whose cached graph came from another call structure
        raise ValueError("convert_hybrid_block: the block's graph has %d input(s) (%s) but the data example gives "
                         "%d array(s): pass one array per argument, nested as the block is called"
                         % (len(names), ", ".join(names), len(dtypes)))
    arg_params = {k: v for k, v in params.items() if k in set(out.list_arguments())}
    aux_params = {k: v for k, v in params.items() if k in set(out.list_auxiliary_states())}
    res = convert(out, arg_params, aux_params, ctx=ctx, input_names=names, **options)
    sym, arg_params, aux_params = res.symbol, res.arg_params, res.aux_params
    if layout == "NHWC":
        from .layout import convert_layout
        sym, arg_params, aux_params = convert_layout(
            sym, arg_params, aux_params, dict(zip(names, shapes)), input_dtypes=dict(zip(names, dtypes)), ctx=ctx)
    new_params = dict(arg_params, **aux_params)
    is_np = isinstance(out, mx.sym.np._Symbol)
    if is_np:  # numpy-mode blocks hold (and export) numpy-mode arrays, which cannot be bfloat16 in MXNet 1.9.1
        new_params = {k: v if graph.dtype_name(v.dtype) == "bfloat16" else v.as_np_ndarray()
                      for k, v in new_params.items()}
    inputs = [mx.sym.var(n, dtype=d) for n, d in zip(names, dtypes)]
    net = ConvertedBlock.nested(sym, [s.as_np_ndarray() for s in inputs] if is_np else inputs, *formats)
    for name, param in net.collect_params().items():
        param.cast(new_params[name].dtype)
        param.grad_req = "null"  # an inference model; numpy mode cannot allocate bfloat16 gradients
    net.collect_params().load_dict(new_params, ctx=ctx)
    return net


_LAYOUTS = (None, "NCHW", "NHWC")



def block_graph(block, data):
    """Return ``(input symbols, output symbol, {name: NDArray})`` of a HybridBlock run on ``data``.

    The block runs once when its parameters are not initialized yet (deferred shapes). Arrays are legacy
    NDArrays on their first context. Waits for every queued operation (a host sync): an inference-mode
    convolution, the caller's or this function's, leaves an asynchronous reorder of its weight in MXNet's
    queue, and reading the weight on the host while it runs fails ("We can't generate TBlob for MKLDNN data").
    """
    import mxnet as mx
    from mxnet.gluon.parameter import DeferredInitializationError
    params = block.collect_params()
    try:
        for p in params.values():
            p.data()
    except DeferredInitializationError:
        block(*data)
    mx.nd.waitall()
    inputs, out = block._get_graph(*data)
    return list(inputs) if isinstance(inputs, (list, tuple)) else [inputs], out, _block_arrays(block)


def _block_arrays(block):
    """``{name: NDArray}`` of a block's parameters: legacy arrays on their first context."""
    arrays = {}
    for p in block.collect_params().values():
        arr = p.data(p.list_ctx()[0])
        arrays[p.name] = arr.as_nd_ndarray() if hasattr(arr, "as_nd_ndarray") else arr
    return arrays


def _param_names(sym, params, input_names):
    """Variables that hold parameters: all but ``input_names`` when given, else those with arrays, else (as
    ``mxnet.contrib.amp``) those whose ``__dtype__`` attribute is set."""
    if input_names is not None:
        return set(sym.list_inputs()) - set(input_names)
    if params:
        return set(params)
    attrs = sym.attr_dict()
    marked = {name for name in sym.list_inputs() if "__dtype__" in attrs.get(name, {})}
    if not marked:
        warnings.warn("convert: cast_params_offline=True without parameters or input_names treats the variables "
                      "with a __dtype__ attribute as parameters (as mxnet.contrib.amp); this symbol has none, so "
                      "nothing is cast offline. Pass input_names (the model inputs) to cast every other variable.",
                      stacklevel=_stacklevel_outside_package())
    return marked


def _read_only_by(sym, names):
    """Variables of ``sym`` whose every reader is a node named in ``names``."""
    nodes = json.loads(sym.tojson())["nodes"]
    readers = {}
    for node in nodes:
        for src, _, _ in node["inputs"]:
            readers.setdefault(nodes[src]["name"], set()).add(node["name"])
    return {n["name"] for n in nodes if n["op"] == "null" and readers.get(n["name"]) and
            readers[n["name"]] <= set(names)}


def _check_params(params, where):
    import mxnet as mx
    params = dict(params or {})
    for name, arr in params.items():
        if not isinstance(arr, mx.nd.NDArray):
            raise TypeError("convert: %s[%r] is a %s; expected an NDArray" % (where, name, type(arr).__name__))
    return {k: (v.as_nd_ndarray() if isinstance(v, mx.np.ndarray) else v) for k, v in params.items()}


def _device_type(ctx):
    import mxnet as mx
    if ctx is None:  # the default context, as in mx.test_utils.set_default_context or `with mx.gpu():`
        ctx = mx.context.current_context()
    if not isinstance(ctx, mx.Context):
        raise TypeError("convert: ctx must be an mxnet Context such as mx.cpu() or mx.gpu(0), got %r" % (ctx,))
    if ctx.device_type not in ("cpu", "gpu"):
        raise ValueError("convert: ctx must be a CPU or GPU context, got %s" % ctx)
    return ctx.device_type


def _cast_params_in_graph(gdict, param_names, target, var_dtypes, emulated_storage, device_type):
    """Store parameters that are only read in one low precision dtype in that dtype; drop the casts.

    Returns ``(new graph dict, {name: storage dtype name})``. A parameter is stored in ``target`` when every
    reader casts it to ``target`` or is an ``amp_multicast`` whose output for it is of dtype ``target`` or whose
    inputs are all variables (``mxnet.contrib.amp`` narrows those), and in float16/bfloat16 when every reader
    is the user's own ``amp_cast`` to that dtype. A parameter only read through emulation rounding
    (``amp_round``, or an ``amp_cast`` to ``target`` and back) is stored in ``emulated_storage``: ``target``, as
    upstream stores it, read through an exact cast to float32 (half the memory, the same values; on CPUs the
    library's ``amp_multi_cast``, see :func:`_read_as_float32`), or float32 holding the rounded values, its
    rounding nodes gone.
    """
    nodes = gdict["nodes"]
    readers = {}
    for nid, node in enumerate(nodes):
        for src, _, _ in node["inputs"]:
            readers.setdefault(src, []).append(nid)
    head_ids = {h[0] for h in gdict["heads"]}
    dtypes = None
    alias, storage = {}, {}
    for vid, node in enumerate(nodes):
        if node["op"] != "null" or node["name"] not in param_names or vid in head_ids:
            continue
        first = readers.get(vid, [])
        if not first:
            continue
        cast_dtypes = {nodes[c]["attrs"]["dtype"] if nodes[c]["op"] == "amp_cast" else None for c in first}
        if all(_is_round(nodes[c], target) for c in first):  # emulation
            if emulated_storage == "float32":
                alias.update({(c, 0): (vid, 0) for c in first})
            else:  # read in float32, exactly
                for c in first:
                    nodes[c] = _read_as_float32(nodes[c], device_type)
            storage[node["name"]] = emulated_storage
        elif cast_dtypes == {target}:
            ups = [r for c in first for r in readers.get(c, [])]
            if len(first) == 1 and ups and all(_is_cast_to(nodes[u], "float32") for u in ups):
                alias[(first[0], 0)] = (vid, 0)  # an amp_cast round trip
                if emulated_storage == "float32":
                    alias.update({(u, 0): (vid, 0) for u in ups})
                else:
                    for u in ups:
                        nodes[u] = _read_as_float32(nodes[u], device_type)
                storage[node["name"]] = emulated_storage
            else:
                alias.update({(c, 0): (vid, 0) for c in first})
                storage[node["name"]] = target
        elif len(cast_dtypes) == 1 and cast_dtypes <= {"float16", "bfloat16"}:  # the user's own casts
            alias.update({(c, 0): (vid, 0) for c in first})
            storage[node["name"]] = cast_dtypes.pop()
        elif all(nodes[c]["op"] == "amp_multicast" or _is_cast_to(nodes[c], target) for c in first):
            # amp_multicast readers: those of variables only narrow them (mxnet.contrib.amp's rule for
            # variables of unknown dtype), the others where the variable's output is of dtype target
            if dtypes is None:
                dtypes = graph.infer_entry_dtypes(gdict, var_dtypes)
            slots = [(c, k) for c in first if nodes[c]["op"] == "amp_multicast"
                     and not all(nodes[src]["op"] == "null" for src, _, _ in nodes[c]["inputs"])
                     for k, e in enumerate(nodes[c]["inputs"]) if e[0] == vid]
            if all(dtypes.get(slot) == target for slot in slots):
                alias.update({(c, 0): (vid, 0) for c in first if nodes[c]["op"] == "amp_cast"})
                storage[node["name"]] = target
    for name, dtype in storage.items():
        if dtype != "float32":
            node = next(n for n in nodes if n["op"] == "null" and n["name"] == name)
            node.setdefault("attrs", {})["__dtype__"] = graph.TYPE_CODES[dtype]
    if not alias:
        return gdict, storage
    return graph.compact(gdict, {nid for nid, _ in alias}, alias), storage


def _read_as_float32(node, device_type):
    """``node`` turned into the exact cast to float32 of a parameter stored in low precision. On CPUs that is the
    library's ``amp_multi_cast``: MXNet's bfloat16 ``amp_cast`` runs about 170x slower there without AVX-512
    (6.0 s against 35 ms for 100 M values), and an emulated model reads every weight once per call."""
    if device_type == "cpu":
        return dict(node, op="amp_multi_cast", attrs={"num_args": "1", "dtype": "float32"})
    return dict(node, op="amp_cast", attrs={"dtype": "float32"})


def _is_round(node, dtype):
    return node["op"] == "amp_round" and node["attrs"]["dtype"] == dtype


def _is_cast_to(node, dtype):
    return node["op"] == "amp_cast" and node["attrs"]["dtype"] == dtype


def _cast_arrays(arrays, storage, target):
    """Cast ``arrays`` to ``storage[name]``; float32 storage means rounded to ``target`` (emulation)."""
    from . import _ext
    groups = {}
    for name, arr in arrays.items():
        groups.setdefault((storage[name], str(arr.context)), []).append(name)
    out = {}
    for (kind, _), names in sorted(groups.items()):
        cast = _ext.multi_cast([arrays[n] for n in names], target if kind == "float32" else kind)
        if kind == "float32":
            cast = _ext.multi_cast(cast, "float32")
        out.update(zip(names, cast))
    return out


def _nbytes(arrays):
    return int(sum(a.size * np.dtype(a.dtype).itemsize for a in arrays if a is not None))

