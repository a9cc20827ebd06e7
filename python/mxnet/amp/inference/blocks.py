"""Converting Gluon blocks: :func:`convert_hybrid_block` in its two call forms (MXNet 2.0's, with a data
example; ``mxnet.contrib.amp``'s, on the block's cached graph), and the graph of a block as conversion reads it.
"""
from typing import Any, Dict, List, Sequence, Tuple

import mxnet as mx
import numpy as np
from mxnet.gluon import HybridBlock
from mxnet.gluon.parameter import DeferredInitializationError

from ..core.compat import renamed_keywords
from ..base.dtypes import DTYPE_OF_CODE, dtype_name, mx_dtype
from ..graph.layout import convert_layout
from .convert import convert
from .converted_block import ConvertedBlock, flatten_arrays

__all__ = ["convert_hybrid_block", "block_graph"]

_LAYOUTS = (None, "NCHW", "NHWC")


def convert_hybrid_block(block: HybridBlock, data_example: Any = None, *args: Any,
                         **kwargs: Any) -> ConvertedBlock:
    """Convert a Gluon ``HybridBlock``; return a runnable ``SymbolBlock`` (a :class:`ConvertedBlock`, whose
    ``export`` keeps the casts) with the converted parameters.

    Two call forms:

    * ``convert_hybrid_block(block, data_example, target_dtype="float16", target_dtype_ops=None,
      fp32_ops=None, conditional_fp32_ops=None, excluded_sym_names=None, ctx=None,
      cast_params_offline=None, *, fuse=None, emulate=None, layout=None, extra_lp16_ops=None,
      extra_fp32_ops=None, keep_lp16_outputs=False, kernels="auto", fold_params=False)``, as in MXNet
      2.0 (which spells ``ctx`` ``device``; both are accepted);
    * ``convert_hybrid_block(block, target_dtype="float16", target_dtype_ops=None, fp32_ops=None,
      conditional_fp32_ops=None, excluded_sym_names=None, ctx=None, cast_optional_params=None)``, as in
      ``mxnet.contrib.amp`` 1.9.1: no data example, so the block must be hybridized and have run once; its
      cached graph is converted (``layout`` needs the data example's shapes and is not available here).

    Unlike :func:`convert_model`, whose caller gets the parameters back, a converted block stores every weight
    that only low precision ops read in the target dtype by default (``cast_params_offline=None``): no weight is
    cast at every call (the per-call casts took 73% of AlexNet's time at batch 1, AMD EPYC, 2026-12-07). The
    parameter names stay those of the block's graph, and :meth:`ConvertedBlock.load_parameters` casts a float32
    file into them. ``cast_params_offline=False`` (or contrib's ``cast_optional_params=False``) keeps float32
    parameters cast at every call, as upstream.

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
    cast_params_offline : bool or None
        None (the default) or True: the weights are stored in the target dtype where every reader takes that dtype;
        False: stored as given, cast at every call.
    layout : {None, 'NCHW', 'NHWC'}
        'NHWC' rewrites 2-D convolutions to channels-last with the weights transposed offline
        (:func:`mxnet.amp.convert_layout`; GPU contexts only, refused on CPU with the reason).

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
                   conditional_fp32_ops=None, excluded_sym_names=None, ctx=None, cast_params_offline=None, *,
                   fuse=None, emulate=None, layout=None, extra_lp16_ops=None, extra_fp32_ops=None, device=None,
                   keep_lp16_outputs=False, kernels="auto", fold_params=False, **deprecated):
    """:func:`convert_hybrid_block` given data examples (MXNet 2.0's form)."""
    offline = renamed_keywords("convert_hybrid_block", deprecated, {"cast_params_offline": cast_params_offline},
                               stacklevel=4)["cast_params_offline"]
    offline = offline is not False  # None: stored in the target dtype (see convert_hybrid_block)
    if layout not in _LAYOUTS:
        raise ValueError("convert_hybrid_block: layout must be one of %s, got %r"
                         % (", ".join(repr(v) for v in _LAYOUTS), layout))
    flat, in_format = flatten_arrays(data)
    ctx = _one_context(ctx, device) or flat[0].context
    inputs, out, params = block_graph(block, data)
    options = dict(target_dtype=target_dtype, target_dtype_ops=target_dtype_ops, fp32_ops=fp32_ops,
                   conditional_fp32_ops=conditional_fp32_ops, excluded_sym_names=excluded_sym_names,
                   cast_params_offline=offline, fuse=fuse, emulate=emulate, extra_lp16_ops=extra_lp16_ops,
                   extra_fp32_ops=extra_fp32_ops, keep_lp16_outputs=keep_lp16_outputs, kernels=kernels,
                   fold_params=fold_params)
    return _block_from_graph([s.name for s in inputs], [d.dtype for d in flat], out, params, ctx, options,
                             layout, [d.shape for d in flat], (in_format, block._out_format))


def _convert_cached_block(block, target_dtype="float16", target_dtype_ops=None, fp32_ops=None,
                          conditional_fp32_ops=None, excluded_sym_names=None, ctx=None, cast_optional_params=None,
                          **kwargs):
    """:func:`convert_hybrid_block` without data examples (``mxnet.contrib.amp`` 1.9.1's form)."""
    if "cast_params_offline" in kwargs:
        offline = kwargs.pop("cast_params_offline")
    else:
        offline = cast_optional_params
        if cast_optional_params is not None:
            renamed_keywords("convert_hybrid_block", {"cast_optional_params": cast_optional_params},
                             {"cast_params_offline": None}, stacklevel=4)
    offline = offline is not False  # None: stored in the target dtype (see convert_hybrid_block)
    if kwargs.get("layout", "NHWC") is None:
        del kwargs["layout"]
    unknown = set(kwargs) - {"fuse", "emulate", "extra_lp16_ops", "extra_fp32_ops", "device", "keep_lp16_outputs",
                             "kernels", "fold_params"}
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
    dtypes = [mx_dtype(DTYPE_OF_CODE.get(s.attr("__dtype__"), "float32")) for s in inputs]
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
    if len(names) != len(dtypes):  # e.g. a block whose cached graph came from another call structure
        raise ValueError("convert_hybrid_block: the block's graph has %d input(s) (%s) but the data example gives "
                         "%d array(s): pass one array per argument, nested as the block is called"
                         % (len(names), ", ".join(names), len(dtypes)))
    arg_params = {k: v for k, v in params.items() if k in set(out.list_arguments())}
    aux_params = {k: v for k, v in params.items() if k in set(out.list_auxiliary_states())}
    res = convert(out, arg_params, aux_params, ctx=ctx, input_names=names, **options)
    sym, arg_params, aux_params = res.symbol, res.arg_params, res.aux_params
    if layout == "NHWC":
        sym, arg_params, aux_params = convert_layout(
            sym, arg_params, aux_params, dict(zip(names, shapes)), input_dtypes=dict(zip(names, dtypes)), ctx=ctx)
    new_params = dict(arg_params, **aux_params)
    is_np = isinstance(out, mx.sym.np._Symbol)
    if is_np:  # numpy-mode blocks hold (and export) numpy-mode arrays, which cannot be bfloat16 in MXNet 1.9.1
        new_params = {k: v if dtype_name(v.dtype) == "bfloat16" else v.as_np_ndarray()
                      for k, v in new_params.items()}
    inputs = [mx.sym.var(n, dtype=d) for n, d in zip(names, dtypes)]
    net = ConvertedBlock.nested(sym, [s.as_np_ndarray() for s in inputs] if is_np else inputs, *formats)
    if shapes is not None:
        net.converted_shapes = {n: tuple(shape) for n, shape in zip(names, shapes)}
    for name, param in net.collect_params().items():
        param.cast(new_params[name].dtype)
        param.grad_req = "null"  # an inference model; numpy mode cannot allocate bfloat16 gradients
    net.collect_params().load_dict(new_params, ctx=ctx)
    return net


def block_graph(block: HybridBlock, data: Sequence[Any]
                ) -> Tuple[List[mx.sym.Symbol], mx.sym.Symbol, Dict[str, mx.nd.NDArray]]:
    """Return ``(input symbols, output symbol, {name: NDArray})`` of a HybridBlock run on ``data``.

    The block runs once when its parameters are not initialized yet (deferred shapes). Arrays are legacy
    NDArrays on their first context. Waits for every queued operation (a host sync): an inference-mode
    convolution, the caller's or this function's, leaves an asynchronous reorder of its weight in MXNet's
    queue, and reading the weight on the host while it runs fails ("We can't generate TBlob for MKLDNN data").
    """
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
