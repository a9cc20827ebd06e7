"""ONNX export of mixed precision models.

The converters of the AMP ops for MXNet's own exporter (``mx.onnx.export_model``) are in
:mod:`.onnx_converters`.

:func:`export_onnx` adds what deployment needs on top: float32 inputs and outputs (``keep_io_types``) and a
choice for bfloat16 models, which most ONNX runtimes (onnxruntime on CPU included) cannot compute in:

=============  =========================================================================================
bf16_mode      what the ONNX model holds
=============  =========================================================================================
'emulate'      float32 compute with every bfloat16 value rounded by ``Cast`` pairs: MXNet's bf16 numerics,
               runs anywhere (default)
'float16'      bfloat16 replaced by float16 (values out of float16 range overflow)
'float32'      bfloat16 replaced by float32: a float32 model (weights bfloat16-rounded only when they were
               cast offline, ``cast_params_offline=True``)
'bfloat16'     the graph as is, for runtimes with bfloat16 kernels
=============  =========================================================================================

Weights stored as bfloat16 are written as float32 initializers holding the bfloat16 values (MXNet's exporter
has no bfloat16 initializers), followed by a ``Cast`` where the graph reads them in bfloat16.
"""
import json
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import mxnet as mx
from mxnet.gluon import HybridBlock
import numpy as np

from ..base.dtypes import TYPE_CODES, dtype_name
from ..base.files import atomic_output
from ..graph.infer import infer_entry_dtypes
from ..graph.symbol_json import CAST_OPS, assemble, compact, drop_rounding, num_outputs
from .blocks import block_graph
from .onnx_converters import register_converters

__all__ = ["export_onnx"]

BF16_MODES = ("emulate", "float16", "float32", "bfloat16")


def export_onnx(model: Union[mx.sym.Symbol, HybridBlock],
                params: Optional[Union[Dict[str, mx.nd.NDArray], Tuple[Dict[str, mx.nd.NDArray], ...]]],
                input_shapes: Sequence[Sequence[int]], path: str, input_types: Optional[Sequence[Any]] = None,
                keep_io_types: bool = True, bf16_mode: str = "emulate") -> str:
    """Export a (mixed precision) model to an ONNX file.

    Parameters
    ----------
    model : Symbol or HybridBlock
        A converted symbol, or a block (e.g. the ``SymbolBlock`` from :func:`convert_hybrid_block`).
    params : dict of str to NDArray, or (arg_params, aux_params), or None
        The symbol's parameters; None for a block (its own parameters are used).
    input_shapes : list of tuple
        One shape per model input, in the order of the symbol's inputs (the block's arguments).
    path : str
        Where to write the ``.onnx`` file; written atomically (nothing is left behind on failure).
    input_types : list of dtype, optional
        One per input; default float32.
    keep_io_types : bool
        Cast low precision outputs to float32, so callers feed and read float32 (default True).
    bf16_mode : {'emulate', 'float16', 'float32', 'bfloat16'}
        How bfloat16 values are written (see the module docstring). Ignored for float16 models.

    Returns
    -------
    str
        ``path``.

    Raises
    ------
    ValueError
        Unknown ``bf16_mode``, wrong number of input shapes, params given with a block, or a graph with
        oneDNN fused ops (convert with ``fuse=False`` for export).
    TypeError
        ``model`` is neither a Symbol nor a HybridBlock.

    Example
    -------
    >>> net16 = amp.convert_hybrid_block(net, x, "float16", cast_params_offline=True)
    >>> amp.export_onnx(net16, None, [x.shape], "net16.onnx")
    """
    if bf16_mode not in BF16_MODES:
        raise ValueError("export_onnx: bf16_mode %r is not one of %s" % (bf16_mode, ", ".join(BF16_MODES)))
    register_converters()
    sym, params, input_names = _model_graph(model, params, input_shapes, input_types)
    input_types = list(input_types or [np.float32] * len(input_names))
    gdict = json.loads(sym.tojson(remove_amp_cast=False))
    fused = sorted({n["op"] for n in gdict["nodes"] if n["op"].startswith("_sg_")})
    if fused:
        raise ValueError("export_onnx: the graph holds oneDNN fused ops (%s), which ONNX cannot express; "
                         "convert with fuse=False for export" % ", ".join(fused))
    var_dtypes = {n: a.dtype for n, a in params.items()}
    var_dtypes.update({n: np.dtype(t) for n, t in zip(input_names, input_types)})
    gdict = _mxnet_kernels(gdict, var_dtypes)
    gdict, params = _replace_bf16(gdict, params, var_dtypes, bf16_mode)
    var_dtypes.update({n: a.dtype for n, a in params.items()})
    if keep_io_types:
        gdict = _float32_heads(gdict, var_dtypes)
    out_sym = mx.sym.load_json(json.dumps(gdict))
    with atomic_output(path) as tmp:
        mx.onnx.export_model(out_sym, params, in_shapes=[tuple(s) for s in input_shapes],
                             in_types=input_types, onnx_file_path=tmp)
        _post_process(tmp)
    return path


#: This project's oneDNN 3 ops and the MXNet ops they replace (which MXNet's exporter converts).
_MXNET_OPS = {"amp_fully_connected": "FullyConnected", "amp_batch_dot": "batch_dot",
              "amp_convolution": "Convolution", "amp_deconvolution": "Deconvolution",
              "amp_selfatt_qk": "_contrib_interleaved_matmul_selfatt_qk",
              "amp_selfatt_valatt": "_contrib_interleaved_matmul_selfatt_valatt",
              "amp_encdec_qk": "_contrib_interleaved_matmul_encdec_qk",
              "amp_encdec_valatt": "_contrib_interleaved_matmul_encdec_valatt",
              "amp_layer_norm": "LayerNorm", "amp_softmax": "softmax", "amp_log_softmax": "log_softmax",
              "amp_batch_norm": "BatchNorm", "amp_concat": "Concat", "amp_broadcast_mul": "broadcast_mul"}


def _mxnet_kernels(gdict, var_dtypes):
    """``gdict`` with this project's oneDNN 3 ops as the MXNet ops they stand for. A float32 ``out_dtype``
    (bfloat16 operands, float32 accumulation and output) becomes the op in float32 on operands cast to
    float32: the same values, unrounded. A folded scale (``alpha``) becomes a ``_mul_scalar`` after the op, a fused
    residual sum (``with_sum``) an ``elemwise_add``, float32 parameters (``param_dtype``) casts to the data's dtype,
    and a fused ``act_type`` an ``Activation`` (GELU: ``LeakyReLU``; ReLU6, hard sigmoid and hard swish: their scalar,
    ``clip`` and product ops) after that, all in float32 and the
    result cast to the op's output dtype, as the kernel rounds once. ``amp_batch_norm`` becomes ``BatchNorm`` without
    its mode flag, on its data cast to float32. LayerNorm and softmax kernels with a ``dtype`` (float32 statistics,
    output in that dtype) become MXNet's op on their data cast to float32, cast to ``dtype`` after, and
    ``amp_broadcast_mul`` ``broadcast_mul`` on both operands cast to float32."""
    counts = num_outputs(gdict)
    dtypes = infer_entry_dtypes(gdict, var_dtypes)
    nodes, new_counts, remap = [], [], {}

    def add(node, inputs):
        nodes.append(dict(node, inputs=[[src, idx, 0] for src, idx in inputs]))
        new_counts.append(1)
        return len(nodes) - 1, 0

    for nid, node in enumerate(gdict["nodes"]):
        inputs = [remap[(src, idx)] for src, idx, _ in node["inputs"]]
        if node["op"] not in _MXNET_OPS:
            nodes.append(dict(node, inputs=[[src, idx, 0] for src, idx in inputs]))
            new_counts.append(counts[nid])
            remap.update({(nid, i): (len(nodes) - 1, i) for i in range(counts[nid])})
            continue
        attrs = dict(node.get("attrs", {}))
        alpha = attrs.pop("alpha", None)
        act = attrs.pop("act_type", None)
        addend = inputs.pop() if attrs.pop("with_sum", "False") in ("True", "true", "1") else None
        out_dtype = attrs.pop("dtype", "None")
        data_dtype = dtypes.get(tuple(node["inputs"][0][:2])) if node["inputs"] else None
        if node["op"] == "amp_batch_norm":  # no mode flag; float32 data, the output cast back to the data's dtype
            inputs = inputs[:5]
            out_dtype = data_dtype if data_dtype not in (None, "float32") else out_dtype
        if attrs.pop("param_dtype", None) is not None and data_dtype not in (None, "float32"):
            # float32 parameters the kernel rounds to the data's dtype: the same rounding as a cast
            inputs = inputs[:1] + [add({"op": "amp_cast", "name": "%s_in%d_%s" % (node["name"], k, data_dtype),
                                        "attrs": {"dtype": data_dtype}}, [entry])
                                   for k, entry in enumerate(inputs[1:], 1)]
        # the operands, or the data only (LayerNorm and softmax: float32 parameters; a product: both operands)
        cast = len(inputs) if out_dtype == "None" or node["op"] == "amp_broadcast_mul" else 1
        epilogue = act is not None or addend is not None or (alpha is not None and float(alpha) != 1.0)
        if epilogue and attrs.get("out_dtype") != "float32" and dtypes.get((nid, 0)) not in (None, "float32"):
            out_dtype = dtypes[(nid, 0)]  # computed in float32, rounded once at the end
        if attrs.pop("out_dtype", None) == "float32" or out_dtype != "None":
            inputs = [add({"op": "amp_cast", "name": "%s_in%d_float32" % (node["name"], k),
                           "attrs": {"dtype": "float32"}}, [entry]) if k < cast else entry
                      for k, entry in enumerate(inputs)]
        out = add(dict(node, op=_MXNET_OPS[node["op"]], attrs=attrs), inputs)
        if alpha is not None and float(alpha) != 1.0:  # a folded scale: the multiplication after the product
            out = add({"op": "_mul_scalar", "name": node["name"] + "_alpha", "attrs": {"scalar": alpha}}, [out])
        if addend is not None:
            if epilogue and out_dtype not in ("None", "float32"):
                addend = add({"op": "amp_cast", "name": node["name"] + "_addend_float32",
                              "attrs": {"dtype": "float32"}}, [addend])
            out = add({"op": "elemwise_add", "name": node["name"] + "_sum", "attrs": {}}, [out, addend])
        if act in ("relu6", "hard_sigmoid", "hard_swish"):  # MobileNets': clip(x, 0, 6); clip(x + 3, 0, 6) / 6, times x
            hard = act != "relu6"
            low = add({"op": "_plus_scalar", "name": node["name"] + "_plus3", "attrs": {"scalar": "3"}}, [out]) \
                if hard else out
            clip = add({"op": "clip", "name": node["name"] + "_relu6", "attrs": {"a_min": "0", "a_max": "6"}}, [low])
            if hard:
                clip = add({"op": "_div_scalar", "name": node["name"] + "_div6", "attrs": {"scalar": "6"}}, [clip])
            out = add({"op": "elemwise_mul", "name": node["name"] + "_" + act, "attrs": {}}, [out, clip]) \
                if act == "hard_swish" else clip
        elif act is not None:  # MXNet's GELU is LeakyReLU's
            out = add({"op": "LeakyReLU" if act == "gelu" else "Activation", "name": node["name"] + "_" + act,
                       "attrs": {"act_type": act}}, [out])
        if out_dtype not in ("None", "float32"):
            out = add({"op": "amp_cast", "name": node["name"] + "_" + out_dtype, "attrs": {"dtype": out_dtype}},
                      [out])
        remap[(nid, 0)] = out
    out = assemble(gdict, nodes, new_counts, [remap[(h[0], h[1])] for h in gdict["heads"]])
    return compact(out, _unread(out), {})  # amp_batch_norm's mode flag, no longer read


def _unread(gdict):
    """The nodes of ``gdict`` that no head depends on."""
    read, todo = set(), [h[0] for h in gdict["heads"]]
    while todo:
        nid = todo.pop()
        if nid not in read:
            read.add(nid)
            todo.extend(src for src, _, _ in gdict["nodes"][nid]["inputs"])
    return set(range(len(gdict["nodes"]))) - read


def _post_process(path):
    """Fix what MXNet's exporter writes: weights listed as graph inputs (which blocks constant folding), and
    equal ``Split``s without ``num_outputs`` (its RNN converter's; opset 18+ needs the attribute)."""
    import onnx
    model = onnx.load(path)
    weights = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in weights]
    del model.graph.input[:]
    model.graph.input.extend(inputs)
    for node in model.graph.node:
        if (node.op_type == "Split" and len(node.input) < 2
                and "num_outputs" not in {a.name for a in node.attribute}):
            node.attribute.append(onnx.helper.make_attribute("num_outputs", len(node.output)))
    onnx.save(model, path)


def _model_graph(model, params, input_shapes, input_types):
    """Return ``(legacy symbol, {name: legacy NDArray}, input names)`` for a symbol or a block."""
    if isinstance(model, HybridBlock):
        if params is not None:
            raise ValueError("export_onnx: pass params=None with a block (its own parameters are exported)")
        types = input_types or [np.float32] * len(input_shapes)
        data = [mx.nd.zeros(tuple(s), dtype=t) for s, t in zip(input_shapes, types)]
        if mx.util.is_np_array():
            data = [d.as_np_ndarray() for d in data]
        try:
            inputs, sym, arrays = block_graph(model, data)
        except TypeError as err:
            raise ValueError("export_onnx: the block does not take %d inputs (one per input shape): %s"
                             % (len(input_shapes), err))
        names = [s.name for s in inputs]
    elif isinstance(model, mx.sym.Symbol):
        if isinstance(params, (list, tuple)) and len(params) == 2:
            arrays = dict(params[0], **params[1])
        elif isinstance(params, dict):
            arrays = dict(params)
        else:
            raise TypeError("export_onnx: params must be a dict or (arg_params, aux_params), got %s"
                            % type(params).__name__)
        sym = model
        names = [n for n in model.list_inputs() if n not in arrays]
        if len(names) != len(input_shapes):
            raise ValueError("export_onnx: %d input shapes given for %d model inputs (%s)"
                             % (len(input_shapes), len(names), ", ".join(names)))
    else:
        raise TypeError("export_onnx: model must be a Symbol or a HybridBlock, got %s" % type(model).__name__)
    if isinstance(sym, mx.sym.np._Symbol):
        sym = sym.as_nd_ndarray()
    arrays = {k: (v.as_nd_ndarray() if isinstance(v, mx.np.ndarray) else v) for k, v in arrays.items()
              if k in set(sym.list_inputs())}
    return sym, arrays, names


class _Nodes:
    """Builds a node list with cast memoisation (one cast per tensor and dtype)."""

    def __init__(self, names):
        self.nodes, self.counts, self.memo, self.names = [], [], {}, set(names)

    def add(self, node, count=1):
        self.nodes.append(node)
        self.counts.append(count)
        return len(self.nodes) - 1

    def cast(self, entry, dtype):
        if (entry, dtype) not in self.memo:
            base = "%s_onnx_%s" % (self.nodes[entry[0]]["name"], dtype)
            name, k = base, 1
            while name in self.names:
                name, k = "%s%d" % (base, k), k + 1
            self.names.add(name)
            nid = self.add({"op": "amp_cast", "name": name, "attrs": {"dtype": dtype},
                            "inputs": [[entry[0], entry[1], 0]]})
            self.memo[(entry, dtype)] = (nid, 0)
        return self.memo[(entry, dtype)]

    def graph(self, gdict, heads):
        return assemble(gdict, self.nodes, self.counts, heads)


def _replace_bf16(gdict, params, var_dtypes, mode):
    """Apply ``bf16_mode`` to a graph and its parameters; return ``(graph, params)``."""
    bf16 = {n for n, a in params.items() if dtype_name(a.dtype) == "bfloat16"}
    has_casts = any(n.get("attrs", {}).get("dtype") == "bfloat16" for n in gdict["nodes"])
    if not bf16 and not has_casts:
        return gdict, params
    params = dict(params)
    if mode == "float32":
        gdict = drop_rounding(gdict, "bfloat16")
    if mode in ("float16", "float32"):
        for node in gdict["nodes"]:
            attrs = node.get("attrs", {})
            if attrs.get("dtype") == "bfloat16":
                attrs["dtype"] = mode
            if node["op"] == "null" and attrs.get("__dtype__") == TYPE_CODES["bfloat16"]:
                attrs["__dtype__"] = TYPE_CODES[mode]
        params.update({n: _as_float32(params[n]).astype(mode) for n in bf16})
        return gdict, params
    dtypes = infer_entry_dtypes(gdict, var_dtypes)
    counts = num_outputs(gdict)
    build = _Nodes(n["name"] for n in gdict["nodes"])
    remap = {}
    for old_id, node in enumerate(gdict["nodes"]):
        inputs = [remap[(nid, idx)] for nid, idx, _ in node["inputs"]]
        in_bf16 = [dtypes.get((nid, idx)) == "bfloat16" for nid, idx, _ in node["inputs"]]
        compute = node["op"] not in ("null",) + CAST_OPS
        if mode == "emulate" and compute:
            inputs = [build.cast(e, "float32") if low else e for e, low in zip(inputs, in_bf16)]
        new = dict(node, inputs=[[nid, idx, 0] for nid, idx in inputs])
        if node["op"] == "null" and node["name"] in bf16:
            new["attrs"] = {k: v for k, v in node.get("attrs", {}).items() if k != "__dtype__"}
        new_id = build.add(new, counts[old_id])
        for i in range(counts[old_id]):
            out = (new_id, i)
            low = dtypes.get((old_id, i)) == "bfloat16"
            if (node["op"] == "null" and node["name"] in bf16) or (mode == "emulate" and compute and low):
                out = build.cast(out, "bfloat16")
            remap[(old_id, i)] = out
    params.update({n: _as_float32(params[n]) for n in bf16})
    return build.graph(gdict, [remap[(nid, idx)] for nid, idx, _ in gdict["heads"]]), params


def _as_float32(arr):
    """A bfloat16 array's values in float32. ``amp_cast`` reads oneDNN's blocked layouts, which MXNet 1.9.1's
    ``astype`` cannot for bfloat16 (a converted model's weights are reordered in place when it runs)."""
    return mx.nd.amp_cast(arr, dtype="float32")


def _float32_heads(gdict, var_dtypes):
    """Cast low precision outputs to float32."""
    dtypes = infer_entry_dtypes(gdict, var_dtypes)
    low = [h for h in gdict["heads"] if dtypes.get((h[0], h[1])) in ("float16", "bfloat16")]
    if not low:
        return gdict
    build = _Nodes(n["name"] for n in gdict["nodes"])
    for node, count in zip(gdict["nodes"], num_outputs(gdict)):
        build.add(node, count)
    heads = [build.cast((n, i), "float32") if [n, i, v] in low else (n, i) for n, i, v in gdict["heads"]]
    return build.graph(gdict, heads)
