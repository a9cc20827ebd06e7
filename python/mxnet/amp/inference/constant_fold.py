"""Parameter-only computations evaluated once at conversion (``fold_params=True``).

A graph may compute on its parameters alone at every call: GluonNLP's attention concatenates the query, key and
value weights (``Reshape``, ``Concat``, ``stack``) and casts the result to low precision, a full copy of three
weight matrices per layer and call. Such a subgraph is evaluated once, on the parameters given, and its outputs
become parameters of the converted graph (named after the node that computed them); the parameters that only it
read are dropped. Folding never grows what is stored: a parameter that something else reads too is left alone
with everything computed from it (no weight is stored twice), and a subgraph whose results take more bytes than
the parameters it reads stays, as do casts alone (how a parameter is stored is :mod:`.params`' choice). Nothing
random is folded.
"""
import re
from typing import Dict, Iterable, List, Set, Tuple

import mxnet as mx

from ..graph.symbol_json import CAST_OPS, assemble, compact, num_outputs, to_symbol
from .params import nbytes

__all__ = ["fold_parameter_ops"]

#: Ops whose result may differ between calls: never folded.
_RANDOM = re.compile(r"random|sample|dropout|shuffle|bernoulli|multinomial|randint|choice", re.IGNORECASE)


def fold_parameter_ops(graph: dict, arg_params: Dict[str, mx.nd.NDArray], aux_params: Dict[str, mx.nd.NDArray]
                       ) -> Tuple[dict, Dict[str, mx.nd.NDArray], Dict[str, mx.nd.NDArray], int]:
    """Evaluate the nodes of ``graph`` that read parameters only; return ``(graph, arg_params, aux_params, n)``.

    Parameters
    ----------
    graph : dict
        A symbol-JSON dict; not modified.
    arg_params, aux_params : dict of str to NDArray
        Its parameters (every other variable is an input); not modified.

    Returns
    -------
    (dict, dict, dict, int)
        The graph with each folded subgraph replaced by the variables of its outputs, the arguments (the folded
        outputs added, the parameters no node reads any more removed), the auxiliary states (likewise), and the
        number of nodes folded.
    """
    nodes = graph["nodes"]
    params = set(arg_params) | set(aux_params)
    param_ids = {nid for nid, node in enumerate(nodes) if node["op"] == "null" and node["name"] in params}
    folded = _foldable(nodes, param_ids)
    if not folded:
        return graph, arg_params, aux_params, 0
    readers = _readers(graph)
    frontier = sorted({entry for nid in folded for entry in readers if entry[0] == nid
                       and any(r is None or r not in folded for r in readers[entry])})
    arrays = {**arg_params, **aux_params}
    values = _evaluate(graph, frontier, arrays)
    for part in _components(nodes, folded, param_ids):  # keep casts alone, and parts that would store more bytes
        if all(nodes[nid]["op"] in CAST_OPS for nid in part):  # the storage dtype is inference.params' choice
            folded -= part
            continue
        results = nbytes(values[e] for e in frontier if e[0] in part)
        read = {nodes[src]["name"] for nid in part for src, _, _ in nodes[nid]["inputs"] if src in param_ids}
        if results > nbytes(arrays[name] for name in read):
            folded -= part
    frontier = [e for e in frontier if e[0] in folded]
    if not folded:
        return graph, arg_params, aux_params, 0
    taken = {node["name"] for node in nodes}
    counts = num_outputs(graph)
    new_nodes, new_counts, where, new_args = [], [], {}, {}
    for nid, node in enumerate(nodes):
        if nid in folded:
            for entry in (e for e in frontier if e[0] == nid):
                name = _fresh("%s_folded%s" % (node["name"], entry[1] if counts[nid] > 1 else ""), taken)
                where[entry] = (len(new_nodes), 0)
                new_nodes.append({"op": "null", "name": name, "inputs": []})
                new_counts.append(1)
                new_args[name] = values[entry]
            continue
        where.update({(nid, i): (len(new_nodes), i) for i in range(counts[nid])})
        new_nodes.append(dict(node, inputs=[list(where[(src, idx)]) + [0] for src, idx, _ in node["inputs"]]))
        new_counts.append(counts[nid])
    out = assemble(graph, new_nodes, new_counts, [where[(h[0], h[1])] for h in graph["heads"]])
    out, read = _drop_unread_variables(out, params)
    args = {k: v for k, v in arg_params.items() if k in read}
    args.update(new_args)
    return out, args, {k: v for k, v in aux_params.items() if k in read}, len(folded)


def _readers(graph: dict) -> Dict[Tuple[int, int], List]:
    """Entry -> the nodes reading it (None for a head)."""
    readers = {}
    for nid, node in enumerate(graph["nodes"]):
        for src, idx, _ in node["inputs"]:
            readers.setdefault((src, idx), []).append(nid)
    for src, idx, *_ in graph["heads"]:
        readers.setdefault((src, idx), []).append(None)
    return readers


def _foldable(nodes: List[dict], param_ids: Set[int]) -> Set[int]:
    """The nodes computed from parameters only, none of whose parameters anything outside them reads."""
    pinned: Set[int] = set()
    while True:
        folded = set()
        for nid, node in enumerate(nodes):  # topological order
            if (node["op"] != "null" and node["inputs"] and not _RANDOM.search(node["op"])
                    and all((src in param_ids and src not in pinned) or src in folded
                            for src, _, _ in node["inputs"])):
                folded.add(nid)
        inside = {src for nid in folded for src, _, _ in nodes[nid]["inputs"] if src in param_ids}
        outside = {src for nid, node in enumerate(nodes) if nid not in folded
                   for src, _, _ in node["inputs"] if src in param_ids}
        if not inside & outside:
            return folded
        pinned |= inside & outside


def _components(nodes: List[dict], folded: Set[int], param_ids: Set[int]) -> List[Set[int]]:
    """The folded nodes grouped into connected parts (through each other and the parameters they read)."""
    parent = {nid: nid for nid in folded | param_ids}

    def root(n):
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n
    for nid in folded:
        for src, _, _ in nodes[nid]["inputs"]:
            parent[root(src)] = root(nid)
    parts = {}
    for nid in folded:
        parts.setdefault(root(nid), set()).add(nid)
    return list(parts.values())


def _evaluate(graph: dict, entries: Iterable[Tuple[int, int]], params: Dict[str, mx.nd.NDArray]):
    """The values of ``entries`` (computed from ``params`` alone), on the parameters' device."""
    entries = list(entries)
    sym = to_symbol(dict(graph, heads=[[nid, idx, 0] for nid, idx in entries]))
    ctx = next(iter(params.values())).context
    args = {name: params[name] for name in sym.list_arguments()}
    aux = {name: params[name] for name in sym.list_auxiliary_states()}
    outputs = sym.bind(ctx, args, aux_states=aux, grad_req="null").forward(is_train=False)
    return {entry: out.copy() for entry, out in zip(entries, outputs)}


def _drop_unread_variables(graph: dict, params: Set[str]) -> Tuple[dict, Set[str]]:
    """``graph`` without the parameter variables nothing reads; and the names of the parameters still read."""
    read = {graph["nodes"][src]["name"] for node in graph["nodes"] for src, _, _ in node["inputs"]}
    read |= {graph["nodes"][h[0]]["name"] for h in graph["heads"]}
    dropped = {nid for nid, node in enumerate(graph["nodes"])
               if node["op"] == "null" and node["name"] in params and node["name"] not in read}
    return (compact(graph, dropped, {}) if dropped else graph), read


def _fresh(name: str, taken: Set[str]) -> str:
    """``name``, or with a number appended, not in ``taken`` (which it joins)."""
    out, i = name, 1
    while out in taken:
        out, i = "%s_%d" % (name, i), i + 1
    taken.add(out)
    return out
