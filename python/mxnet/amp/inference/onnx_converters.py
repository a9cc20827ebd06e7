"""Converters for MXNet's ONNX exporter (``mx.onnx.export_model``): the AMP cast ops, ``LayerNorm`` and
``SliceChannel`` for the opsets that removed what MXNet 1.9.1's own emit, and the ops whose MXNet 1.9.1 converters
write float32 constants whatever the data's dtype (GELU, the interleaved attention products: a float16 export
of a GluonNLP BERT did not load in onnxruntime), or do not exist (the encoder-decoder attention products).

The cast ops a converted graph holds (``amp_cast``, ``amp_multicast``, and the library's ``amp_round`` and
``amp_multi_cast``) each become ONNX ``Cast`` nodes, and low precision parameters become low precision
initializers. MXNet's exporter reads graphs with ``Symbol.tojson()``, which drops AMP casts by default; the
registration makes it read them. :func:`register_converters` records all of it in
:data:`~mxnet.amp.base.patches.PATCHES`: importing :mod:`mxnet.amp` registers them, ``amp.reset()`` takes them
back, and every conversion and :func:`mxnet.amp.export_onnx` registers them again.
"""
import functools

import mxnet as mx
import numpy as np

from ..base.dtypes import dtype_name, mx_dtype
from ..base.patches import PATCHES

__all__ = ["register_converters"]


def _onnx_type(dtype):
    from onnx import TensorProto
    return {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16,
            "float64": TensorProto.DOUBLE}[dtype]


def _np_dtype(dtype):
    return mx_dtype(dtype)


def _convert_amp_cast(node, **kwargs):
    from onnx.helper import make_node
    from mxnet.onnx.mx2onnx._op_translations._op_translations_opset12 import get_inputs
    name, inputs, attrs = get_inputs(node, kwargs)
    dtype = attrs["dtype"]
    return [make_node("Cast", inputs, [name], to=_onnx_type(dtype), name=name)], (_np_dtype(dtype),)


def _convert_amp_round(node, **kwargs):
    """``amp_round`` (float32 rounded to float16/bfloat16, kept float32) as a Cast pair."""
    from onnx import TensorProto
    from onnx.helper import make_node
    from mxnet.onnx.mx2onnx._op_translations._op_translations_opset12 import get_inputs
    name, inputs, attrs = get_inputs(node, kwargs)
    low = name + "_low"
    return [make_node("Cast", inputs, [low], to=_onnx_type(attrs["dtype"]), name=low),
            make_node("Cast", [low], [name], to=TensorProto.FLOAT, name=name)], (np.dtype("float32"),)


def _cast_each(node, kwargs, dtypes):
    from onnx.helper import make_node
    from mxnet.onnx.mx2onnx._op_translations._op_translations_opset12 import get_inputs
    name, inputs, _ = get_inputs(node, kwargs)
    # one output is named as MXNet names a one-output node's (the exporter finds a graph output by that name)
    outs = [name] if len(inputs) == 1 else ["%s%d" % (name, i) for i in range(len(inputs))]
    nodes = [make_node("Cast", [src], [out], to=_onnx_type(dtype), name=out)
             for src, dtype, out in zip(inputs, dtypes, outs)]
    return nodes, tuple(_np_dtype(d) for d in dtypes)


def _convert_amp_multicast(node, **kwargs):
    from mxnet.onnx.mx2onnx._op_translations._op_translations_opset12 import get_input_dtypes
    have = [dtype_name(d) for d in get_input_dtypes(node, kwargs)]
    rank = {"float16": 1, "bfloat16": 1, "float32": 2, "float64": 3}
    narrow = node.get("attrs", {}).get("cast_narrow", "False") in ("True", "true", "1")
    pick = min if narrow else max
    want = pick(have, key=rank.get)
    if not narrow and len(set(have)) > 1 and rank[want] == 1:
        want = "float32"  # float16 with bfloat16: neither holds the other
    return _cast_each(node, kwargs, [want] * len(have))


def _convert_amp_multi_cast(node, **kwargs):
    count = len(node["inputs"])
    return _cast_each(node, kwargs, [node["attrs"]["dtype"]] * count)


def _convert_layer_norm(node, **kwargs):
    """LayerNorm as one ONNX ``LayerNormalization`` (opset 17+). MXNet 1.9.1's own converter emits
    ``ReduceMean(axes=...)`` attributes, which opset 18 removed, so it fails with onnx >= 1.13."""
    from onnx.helper import make_node
    from mxnet.onnx.mx2onnx._op_translations._op_translations_opset12 import get_inputs
    name, inputs, attrs = get_inputs(node, kwargs)
    if attrs.get("output_mean_var", "False") in ("True", "true", "1"):
        raise NotImplementedError("LayerNorm with output_mean_var=True has no ONNX export")
    return [make_node("LayerNormalization", inputs, [name], name=name, axis=int(attrs.get("axis", -1)),
                      epsilon=float(attrs.get("eps", 1e-5)))]


def _convert_slice_channel(node, **kwargs):
    """SliceChannel (``split``) for opset 18+, where ONNX ``Split`` needs ``num_outputs``; MXNet 1.9.1's
    converter omits it."""
    from onnx import TensorProto
    from onnx.helper import make_node, make_tensor
    from mxnet.onnx.mx2onnx._op_translations._op_translations_opset12 import get_inputs
    name, inputs, attrs = get_inputs(node, kwargs)
    count, axis = int(attrs["num_outputs"]), int(attrs.get("axis", 1))
    if attrs.get("squeeze_axis", "False") not in ("True", "true", "1"):
        return [make_node("Split", inputs[:1], ["%s%d" % (name, i) for i in range(count)], axis=axis,
                          num_outputs=count, name=name)]
    kwargs["initializer"].append(make_tensor(name + "_axes", TensorProto.INT64, [1], [axis]))
    nodes = [make_node("Split", inputs[:1], ["%s%d_" % (name, i) for i in range(count)], axis=axis,
                       num_outputs=count, name=name)]
    nodes += [make_node("Squeeze", ["%s%d_" % (name, i), name + "_axes"], ["%s%d" % (name, i)])
              for i in range(count)]
    return nodes


def _onnx_of(np_dtype):
    from onnx.helper import np_dtype_to_tensor_dtype
    return np_dtype_to_tensor_dtype(np.dtype(np_dtype))


class _Builder:
    """ONNX nodes and int64 initializers named after one MXNet node."""

    def __init__(self, name, kwargs):
        self.name, self.kwargs, self.nodes, self.count = name, kwargs, [], 0

    def ints(self, values):
        from onnx import TensorProto
        from onnx.helper import make_tensor
        self.count += 1
        out = "%s_c%d" % (self.name, self.count)
        self.kwargs["initializer"].append(make_tensor(out, TensorProto.INT64, [len(values)], list(values)))
        return out

    def add(self, op, inputs, out=None, **attrs):
        from onnx.helper import make_node
        if out is None:
            self.count += 1
            out = "%s_%s%d" % (self.name, op.lower(), self.count)
        self.nodes.append(make_node(op, list(inputs), [out], name=out, **attrs))
        return out

    def heads_part(self, x, heads, parts, part):
        """Part ``part`` of each head of a (T, B, heads * parts * d) tensor, as (B, heads, T, d)."""
        r = self.add("Reshape", [x, self.ints([0, 0, heads, parts, -1])])
        s = self.add("Slice", [r, self.ints([part]), self.ints([part + 1]), self.ints([3])])
        return self.add("Transpose", [self.add("Reshape", [s, self.ints([0, 0, 0, -1])])], perm=[1, 2, 0, 3])


def _convert_attention_qk(parts):
    """Scores (B * heads, Tq, Tk) = (q / sqrt(d)) k^T, the scale computed in the data's dtype (MXNet's
    ``_contrib_interleaved_matmul_{selfatt,encdec}_qk``)."""
    def convert(node, **kwargs):
        from mxnet.onnx.mx2onnx._op_translations._op_translations_opset12 import get_input_dtypes, get_inputs
        name, inputs, attrs = get_inputs(node, kwargs)
        heads, b = int(attrs["heads"]), _Builder(name, kwargs)
        if parts == 3:
            q, k = b.heads_part(inputs[0], heads, 3, 0), b.heads_part(inputs[0], heads, 3, 1)
        else:
            q, k = b.heads_part(inputs[0], heads, 1, 0), b.heads_part(inputs[1], heads, 2, 0)
        d = b.add("Cast", [b.add("Slice", [b.add("Shape", [q]), b.ints([3]), b.ints([4])])],
                  to=_onnx_of(get_input_dtypes(node, kwargs)[0]))
        scaled = b.add("Mul", [q, b.add("Reciprocal", [b.add("Sqrt", [d])])])
        scores = b.add("MatMul", [scaled, b.add("Transpose", [k], perm=[0, 1, 3, 2])])
        size = b.add("Slice", [b.add("Shape", [scores]), b.ints([2]), b.ints([4])])
        b.add("Reshape", [scores, b.add("Concat", [b.ints([-1]), size], axis=0)], out=name)
        return b.nodes
    return convert


def _convert_attention_valatt(parts):
    """Attended values (Tq, B, heads * d) = attention (B * heads, Tq, Tk) times the values (MXNet's
    ``_contrib_interleaved_matmul_{selfatt,encdec}_valatt``)."""
    def convert(node, **kwargs):
        from mxnet.onnx.mx2onnx._op_translations._op_translations_opset12 import get_inputs
        name, inputs, attrs = get_inputs(node, kwargs)
        heads, b = int(attrs["heads"]), _Builder(name, kwargs)
        v = b.heads_part(inputs[0], heads, parts, parts - 1)
        size = b.add("Slice", [b.add("Shape", [inputs[1]]), b.ints([1]), b.ints([3])])
        att = b.add("Reshape", [inputs[1], b.add("Concat", [b.ints([-1, heads]), size], axis=0)])
        out = b.add("Transpose", [b.add("MatMul", [att, v])], perm=[2, 0, 1, 3])
        b.add("Reshape", [out, b.ints([0, 0, -1])], out=name)
        return b.nodes
    return convert


def _convert_leaky_relu(original):
    """``LeakyReLU``: GELU (erf) with its constants in the data's dtype; the other activations as MXNet's."""
    def convert(node, **kwargs):
        from mxnet.onnx.mx2onnx._op_translations._op_translations_opset12 import get_input_dtypes, get_inputs
        name, inputs, attrs = get_inputs(node, kwargs)
        if attrs.get("act_type", "leaky") != "gelu":
            return original(node, **kwargs)
        from onnx.helper import make_tensor
        dtype = np.dtype(get_input_dtypes(node, kwargs)[0])
        consts = {}
        for key, value in (("sqrt2", np.sqrt(2.0)), ("one", 1.0), ("half", 0.5)):
            consts[key] = "%s_%s" % (name, key)
            kwargs["initializer"].append(make_tensor(consts[key], _onnx_of(dtype), [], np.array(
                [value], dtype=dtype).tobytes(), raw=True))
        b = _Builder(name, kwargs)
        erf = b.add("Erf", [b.add("Div", [inputs[0], consts["sqrt2"]])])
        half_x = b.add("Mul", [inputs[0], consts["half"]])
        b.add("Mul", [half_x, b.add("Add", [erf, consts["one"]])], out=name)
        return b.nodes
    return convert


#: The group of :data:`~mxnet.amp.base.patches.PATCHES` that the registration records.
GROUP = "onnx"


def register_converters() -> None:
    """Register the converters with MXNet's ONNX exporter and make it read AMP casts (recorded in
    :data:`~mxnet.amp.base.patches.PATCHES`: ``amp.reset()`` takes them back). Does nothing when they are in place,
    or when the ``onnx`` package is missing (MXNet's exporter needs it too)."""
    try:
        import onnx  # noqa: F401  (MXNet's exporter needs it)
        from mxnet.onnx.mx2onnx._export_onnx import MXNetGraph
    except ImportError:
        return
    if PATCHES.holds(GROUP):
        return
    converters = [(12, "amp_cast", _convert_amp_cast), (12, "amp_round", _convert_amp_round),
                  (12, "amp_multicast", _convert_amp_multicast), (12, "amp_multi_cast", _convert_amp_multi_cast),
                  (17, "LayerNorm", _convert_layer_norm), (18, "SliceChannel", _convert_slice_channel),
                  (12, "LeakyReLU", _convert_leaky_relu(MXNetGraph.registry_[12]["LeakyReLU"])),
                  (12, "_contrib_interleaved_matmul_selfatt_qk", _convert_attention_qk(3)),
                  (12, "_contrib_interleaved_matmul_selfatt_valatt", _convert_attention_valatt(3)),
                  (12, "_contrib_interleaved_matmul_encdec_qk", _convert_attention_qk(1)),
                  (12, "_contrib_interleaved_matmul_encdec_valatt", _convert_attention_valatt(2))]
    for opset, op, func in converters:
        if opset not in MXNetGraph.registry_:
            PATCHES.set_item(MXNetGraph.registry_, opset, {}, GROUP)
        PATCHES.set_item(MXNetGraph.registry_[opset], op, func, GROUP)
    PATCHES.wrap(MXNetGraph, "create_onnx_graph_proto", _keeping_casts, GROUP)


class _KeepCasts(mx.sym.Symbol):
    """A Symbol view whose ``tojson()`` keeps AMP casts (MXNet's default drops them)."""
    __slots__ = []

    def tojson(self, remove_amp_cast=False):
        return super().tojson(remove_amp_cast=False)


def _keeping_casts(original):
    """``MXNetGraph.create_onnx_graph_proto`` reading the graph with its AMP casts."""
    @functools.wraps(original)
    def create_onnx_graph_proto(self, sym, *args, **kwargs):
        view = sym.__copy__()
        view.__class__ = _KeepCasts
        return original(self, view, *args, **kwargs)
    return create_onnx_graph_proto
