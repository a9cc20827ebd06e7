"""MXNet's own type inference, asked about symbol-JSON graphs and single nodes (cached per op and attributes).

The rewrite needs to know what dtype each tensor has and which dtypes an op wants and gives; MXNet answers
that better than any table: these functions run ``infer_type_partial`` on the graph, or on a one-op probe.
"""
import functools
import json
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import mxnet as mx

from ..base.dtypes import DTYPE_OF_CODE, TYPE_CODES, dtype_name
from .symbol_json import Entry, with_var_dtypes

__all__ = ["infer_entry_dtypes", "lp_input_dtypes", "output_dtypes"]


def infer_entry_dtypes(graph: dict, var_dtypes: Mapping[str, Any]) -> Dict[Entry, Optional[str]]:
    """Return ``{(node_id, output_index): dtype name or None}`` for every entry some node or head reads.

    Runs MXNet's partial type inference once on a copy of the graph whose heads are all those entries.
    Unknown types give ``None``. Where MXNet cannot type the graph at all (bfloat16 data beside float32
    parameters: its ops want one dtype for all their inputs), the variables still have the dtypes given, and
    every other entry ``None``.
    """
    wanted = sorted({tuple(e[:2]) for node in graph["nodes"] for e in node["inputs"]}
                    | {tuple(h[:2]) for h in graph["heads"]})
    nodes = with_var_dtypes(graph["nodes"], var_dtypes)
    probe = dict(graph, nodes=nodes, heads=[[nid, idx, 0] for nid, idx in wanted])
    try:
        _, out_types, _ = mx.sym.load_json(json.dumps(probe)).infer_type_partial()
    except mx.base.MXNetError:
        out_types = None
    if out_types is None:
        given = {i: DTYPE_OF_CODE.get(node.get("attrs", {}).get("__dtype__")) for i, node in enumerate(nodes)
                 if node["op"] == "null"}
        return {entry: given.get(entry[0]) for entry in wanted}
    return {entry: dtype_name(t) for entry, t in zip(wanted, out_types)}


def lp_input_dtypes(node: dict, target: str) -> List[Optional[str]]:
    """Return the dtype each input of op ``node`` wants when the op runs in ``target`` (None: not known).

    MXNet's type inference answers, given the first input (the data) in ``target``: most ops then want every
    input in ``target``, but some keep parameters in float32: BatchNorm's gamma, beta and statistics, also
    inside a oneDNN-fused ``conv + BatchNorm`` node, whose kernel reads them as float32.
    """
    key = json.dumps({k: node.get(k) for k in ("op", "attrs", "subgraphs")}, sort_keys=True)
    return list(_input_dtypes(key, len(node["inputs"]), target))


@functools.lru_cache(maxsize=4096)
def _input_dtypes(key, count, target):
    if not count:
        return ()
    sym = _probe(key, [target] + [None] * (count - 1))
    if sym is None:
        return (None,) * count
    args, _, aux = sym.infer_type_partial()
    found = dict(zip(sym.list_arguments() + sym.list_auxiliary_states(), (args or []) + (aux or [])))
    return tuple(dtype_name(found.get("amp_in%d" % i)) for i in range(count))


def _probe(key, dtypes):
    """A one-op symbol: op ``key`` (JSON of op, attrs, subgraphs) reading variables of ``dtypes`` (None: not
    given); None when MXNet cannot load it or infer its types."""
    nodes = [{"op": "null", "name": "amp_in%d" % i, "inputs": []} for i in range(len(dtypes))]
    for node, dtype in zip(nodes, dtypes):
        if dtype is not None:
            node["attrs"] = {"__dtype__": TYPE_CODES[dtype]}
    nodes.append(dict({k: v for k, v in json.loads(key).items() if v is not None}, name="amp_probe",
                      inputs=[[i, 0, 0] for i in range(len(dtypes))]))
    probe = {"nodes": nodes, "arg_nodes": list(range(len(dtypes))), "heads": [[len(dtypes), 0, 0]],
             "attrs": json.loads(mx.sym.var("amp_in0").tojson())["attrs"]}  # this MXNet's version
    try:
        sym = mx.sym.load_json(json.dumps(probe))
        sym.infer_type_partial()
    except mx.base.MXNetError:
        return None
    return sym


def output_dtypes(node: dict, dtypes: Sequence[Optional[str]]) -> Tuple[Optional[str], ...]:
    """Return the dtypes of the outputs of op ``node`` (None: not known) when its inputs are of ``dtypes``
    (None: not known), by MXNet's type inference."""
    key = json.dumps({k: node.get(k) for k in ("op", "attrs", "subgraphs")}, sort_keys=True)
    return _output_dtypes(key, tuple(dtypes))


@functools.lru_cache(maxsize=4096)
def _output_dtypes(key, dtypes):
    sym = _probe(key, dtypes) if dtypes else None
    outs = sym.infer_type_partial()[1] if sym is not None else None
    return tuple(dtype_name(d) for d in (outs or ()))
