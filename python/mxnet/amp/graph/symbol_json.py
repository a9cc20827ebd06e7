"""Symbol-JSON graphs as plain dicts: to and from symbols, assembling, compacting, variable attributes.

Every graph pass of the package works on the dict ``json.loads(sym.tojson())`` gives (``nodes``, ``heads``,
``arg_nodes``, ``node_row_ptr``); an entry is ``(node id, output index)``. This module holds what they share.
"""
from collections import Counter
import json
import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

import mxnet as mx

from ..base.dtypes import TYPE_CODES, dtype_name

__all__ = ["CAST_OPS", "MODE_NODE", "Entry", "FALSE_VALUES", "is_mode_node", "to_graph", "to_symbol", "num_outputs",
           "entry_uses", "assemble", "NodeList", "compact", "drop_rounding", "with_var_dtypes", "record_shapes"]

#: Ops that AMP itself inserts; the rewriter never casts their inputs.
CAST_OPS = ("amp_cast", "amp_multicast", "amp_round")

#: Name of the nodes of a graph's mode flag (:meth:`mxnet.amp.graph.builder.CastBuilder.mode_flag`):
#: ``amp_mode`` and ``amp_mode_ones``.
MODE_NODE = "amp_mode"

#: ``(node id, output index)``.
Entry = Tuple[int, int]

#: How symbol JSON spells a false boolean attribute.
FALSE_VALUES = ("False", "0", "false")


def is_mode_node(node: Mapping[str, Any]) -> bool:
    """Whether a symbol-JSON node is one of the nodes of the graph's mode flag (AMP's own, as its casts)."""
    return re.match(r"%s(_ones)?\d*$" % MODE_NODE, node["name"]) is not None and node["op"] in ("_ones", "Dropout")


def to_graph(sym: mx.sym.Symbol) -> dict:
    """The symbol-JSON dict of ``sym``, AMP's casts included."""
    return json.loads(sym.tojson(remove_amp_cast=False))


def to_symbol(graph: dict, like: Optional[mx.sym.Symbol] = None) -> mx.sym.Symbol:
    """The symbol of a symbol-JSON dict: numpy-mode when ``like`` is a numpy-mode symbol."""
    out = mx.sym.load_json(json.dumps(graph))
    return out.as_np_ndarray() if isinstance(like, mx.sym.np._Symbol) else out


def num_outputs(graph: dict) -> List[int]:
    """Number of outputs of every node of a symbol-JSON dict (from ``node_row_ptr``, else from its uses)."""
    ptr = graph.get("node_row_ptr")
    if ptr is not None:
        return [ptr[i + 1] - ptr[i] for i in range(len(graph["nodes"]))]
    counts = [1] * len(graph["nodes"])
    for node in graph["nodes"]:
        for nid, idx, _ in node["inputs"]:
            counts[nid] = max(counts[nid], idx + 1)
    for nid, idx, _ in graph["heads"]:
        counts[nid] = max(counts[nid], idx + 1)
    return counts


def entry_uses(graph: dict) -> Counter:
    """How many times each entry is read, by nodes and as a head."""
    uses = Counter((src, idx) for node in graph["nodes"] for src, idx, _ in node["inputs"])
    uses.update((src, idx) for src, idx, _ in graph["heads"])
    return uses


def assemble(graph: dict, nodes: List[dict], counts: Sequence[int], heads: Iterable[Sequence[int]]) -> dict:
    """A symbol-JSON dict like ``graph`` with new ``nodes`` (``counts`` outputs each) and ``heads``."""
    ptr = [0]
    for n in counts:
        ptr.append(ptr[-1] + n)
    return dict(graph, nodes=nodes, heads=[[nid, idx, 0] for nid, idx, *_ in heads], node_row_ptr=ptr,
                arg_nodes=[i for i, n in enumerate(nodes) if n["op"] == "null"])


class NodeList:
    """The nodes of a graph being rebuilt, each with its number of outputs: :meth:`add` returns a node's new id,
    :meth:`graph` assembles them (:func:`assemble`)."""

    def __init__(self) -> None:
        self.nodes: List[dict] = []
        self.counts: List[int] = []

    def add(self, node: dict, count: int = 1) -> int:
        self.nodes.append(node)
        self.counts.append(count)
        return len(self.nodes) - 1

    def graph(self, like: dict, heads: Iterable[Sequence[int]]) -> dict:
        return assemble(like, self.nodes, self.counts, heads)


def compact(graph: dict, dropped: Set[int], alias: Mapping[Entry, Entry]) -> dict:
    """Remove the nodes ``dropped``; readers of an output ``(node, index)`` in ``alias`` read its value.

    Alias chains are followed, so a dropped node may alias another dropped node's output.
    """
    def resolve(entry):
        while entry in alias:
            entry = alias[entry]
        return entry
    counts = num_outputs(graph)
    new_id, nodes, new_counts = {}, [], []
    for nid, node in enumerate(graph["nodes"]):
        if nid in dropped:
            continue
        inputs = [resolve((src, idx)) for src, idx, _ in node["inputs"]]
        new_id[nid] = len(nodes)
        nodes.append(dict(node, inputs=[[new_id[src], idx, 0] for src, idx in inputs]))
        new_counts.append(counts[nid])
    heads = [(new_id[src], idx) for src, idx in (resolve((h[0], h[1])) for h in graph["heads"])]
    return assemble(graph, nodes, new_counts, heads)


def drop_rounding(graph: dict, dtype: Optional[str] = None) -> dict:
    """Remove the ``amp_round`` nodes (to ``dtype``, or all): their readers read the unrounded tensor."""
    alias = {(nid, 0): tuple(node["inputs"][0][:2]) for nid, node in enumerate(graph["nodes"])
             if node["op"] == "amp_round" and dtype in (None, node["attrs"]["dtype"])}
    return compact(graph, {nid for nid, _ in alias}, alias) if alias else graph


def with_var_dtypes(nodes: List[dict], var_dtypes: Mapping[str, Any],
                    var_shapes: Optional[Mapping[str, Sequence[int]]] = None) -> List[dict]:
    """Return ``nodes`` with the known dtypes (and shapes) of variables in their ``__dtype__`` (``__shape__``)
    attributes.

    Type inference reads dtypes from there; MXNet's ``infer_type`` keyword arguments silently drop bfloat16.
    Shapes there let a graph bind from its data shapes alone, also through the library's ops, which lib_api
    cannot infer backwards (a parameter's shape from its reader's output).
    """
    out = []
    for node in nodes:
        if node["op"] == "null":
            attrs = dict(node.get("attrs", {}))
            dtype = dtype_name(var_dtypes.get(node["name"]))
            if dtype in TYPE_CODES:
                attrs["__dtype__"] = TYPE_CODES[dtype]
            if (var_shapes or {}).get(node["name"]):
                attrs["__shape__"] = str(tuple(var_shapes[node["name"]]))
            node = dict(node, attrs=attrs) if attrs else node
        out.append(node)
    return out


def record_shapes(sym: mx.sym.Symbol, graph: dict, var_shapes: Dict[str, Sequence[int]]) -> None:
    """Write into ``graph``'s variables (``__shape__``) the shapes that ``sym`` infers from ``var_shapes``."""
    arg_shapes, _, aux_shapes = sym.infer_shape_partial(**var_shapes)
    names = sym.list_arguments() + sym.list_auxiliary_states()
    shapes = dict(zip(names, (arg_shapes or []) + (aux_shapes or [])))
    for node in graph["nodes"]:
        shape = shapes.get(node["name"]) if node["op"] == "null" else None
        if shape and all(d > 0 for d in shape):
            node.setdefault("attrs", {})["__shape__"] = str(tuple(shape))
