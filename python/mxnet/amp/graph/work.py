"""How much arithmetic a graph's products do: the multiply-accumulates of one forward pass through its matrix
products, convolutions and recurrent layers, from the shapes MXNet infers on the graph.

``amp.init`` keeps a graph whose products total fewer than a floor in float32 (``lists.training_graph_floor``,
``amp.init(min_graph_macs=...)``): there the fixed costs of low precision (casts, the set-up of each low precision
kernel, a larger backward graph) exceed what its faster arithmetic saves.
"""
import math
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import mxnet as mx

from .symbol_json import FALSE_VALUES, num_outputs, to_graph, to_symbol

__all__ = ["product_macs"]

Shapes = List[Tuple[int, ...]]


def _contracted(out: Shapes, k: int) -> int:
    return math.prod(out[0]) * k


def _transposed_a(attrs: Mapping[str, str]) -> bool:
    return attrs.get("transpose_a", "False") not in FALSE_VALUES


def _dot(ins: Shapes, out: Shapes, attrs: Mapping[str, str]) -> int:
    a = ins[0]
    return _contracted(out, a[-2] if _transposed_a(attrs) and len(a) > 1 else a[-1])


def _legacy_dot(ins: Shapes, out: Shapes, attrs: Mapping[str, str]) -> int:
    return _contracted(out, ins[0][0] if _transposed_a(attrs) else ins[0][-1])


def _einsum(ins: Shapes, out: Shapes, attrs: Mapping[str, str]) -> int:
    sizes = {}
    for subscripts, shape in zip(attrs.get("subscripts", "").split("->")[0].split(","), ins):
        letters = subscripts.strip()
        if "." in letters or len(letters) != len(shape):
            return math.prod(out[0]) * max(math.prod(s) for s in ins)  # ellipses: an upper bound
        sizes.update(zip(letters, shape))
    return math.prod(sizes.values())


def _heads(attrs: Mapping[str, str]) -> int:
    return int(attrs.get("heads", "1"))


#: op -> MACs of one call, from its input shapes, output shapes and attributes (strings). Ops of the low precision
#: lists missing here make a graph's count unknown (:func:`product_macs` returns None).
_PRODUCT_MACS: Dict[str, Callable[[Shapes, Shapes, Mapping[str, str]], int]] = {
    "FullyConnected": lambda ins, out, attrs: _contracted(out, ins[1][-1]),
    "Convolution": lambda ins, out, attrs: _contracted(out, math.prod(ins[1][1:])),
    "Deconvolution": lambda ins, out, attrs: math.prod(ins[0]) * math.prod(ins[1][1:]),
    "RNN": lambda ins, out, attrs: math.prod(ins[1]) * ins[0][0] * ins[0][1],  # parameters x steps x batch
    "batch_dot": _dot,
    "_npi_matmul": lambda ins, out, attrs: _contracted(out, ins[0][-1]),
    "dot": _legacy_dot,
    "_npi_einsum": _einsum,
    "_contrib_interleaved_matmul_selfatt_qk":
        lambda ins, out, attrs: _contracted(out, ins[0][2] // (3 * _heads(attrs))),
    "_contrib_interleaved_matmul_selfatt_valatt": lambda ins, out, attrs: _contracted(out, ins[1][-1]),
    "_contrib_interleaved_matmul_encdec_qk": lambda ins, out, attrs: _contracted(out, ins[0][2] // _heads(attrs)),
    "_contrib_interleaved_matmul_encdec_valatt": lambda ins, out, attrs: _contracted(out, ins[1][-1]),
}
for _alias, _op in (("_npx_fully_connected", "FullyConnected"), ("_npx_convolution", "Convolution"),
                    ("_npx_deconvolution", "Deconvolution"), ("_npx_rnn", "RNN"), ("_npx_batch_dot", "batch_dot"),
                    ("_np_dot", "dot")):
    _PRODUCT_MACS[_alias] = _PRODUCT_MACS[_op]


def product_macs(sym: mx.sym.Symbol, var_shapes: Mapping[str, Sequence[int]],
                 is_product: Callable[[str], bool]) -> Optional[int]:
    """The multiply-accumulates of one forward pass through ``sym``'s products, or None when not known.

    Parameters
    ----------
    sym : Symbol
        Legacy or numpy-mode symbol.
    var_shapes : dict of str to tuple
        Shapes of some inputs (the data); the others are inferred.
    is_product : callable
        Whether an op is one that low precision speeds up (the policy's low precision ops): such an op missing
        from ``_PRODUCT_MACS``, or one whose shapes cannot be inferred, makes the count unknown.
    """
    graph = to_graph(sym)
    counts = num_outputs(graph)
    products = [(nid, node) for nid, node in enumerate(graph["nodes"])
                if node["op"] != "null" and (node["op"] in _PRODUCT_MACS or is_product(node["op"]))]
    if not products:
        return 0
    if any(node["op"] not in _PRODUCT_MACS for _, node in products):
        return None
    # the shapes of exactly the entries wanted: the products' inputs and outputs, made the graph's heads
    heads = [entry for nid, node in products
             for entry in [e[:2] for e in node["inputs"]] + [[nid, i] for i in range(counts[nid])]]
    probe = to_symbol(dict(graph, heads=[[nid, idx, 0] for nid, idx in heads]), like=sym)
    try:
        _, shapes, _ = probe.infer_shape_partial(**dict(var_shapes))
    except mx.base.MXNetError:
        return None
    if not shapes or not all(s and all(d > 0 for d in s) for s in shapes):
        return None
    shapes = iter(tuple(s) for s in shapes)
    total = 0
    for nid, node in products:
        ins = [next(shapes) for _ in node["inputs"]]
        out = [next(shapes) for _ in range(counts[nid])]
        total += _PRODUCT_MACS[node["op"]](ins, out, node.get("attrs", {}))
    return total
