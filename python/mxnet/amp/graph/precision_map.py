"""The precision map of a rewritten graph: how each node runs (low precision, emulated, float32, a cast...),
along the data path and per block. :mod:`mxnet.amp.cli.plots` draws it."""
from collections import Counter
import re
from typing import Counter as CounterType, List, Sequence, Tuple

import mxnet as mx

from ..core.policy import FP32, LP16, NEUTRAL, WIDEST, Policy
from .symbol_json import CAST_OPS, is_mode_node, to_graph

__all__ = ["ROLES", "precision_map", "data_path", "stage_summary"]

#: ``(name, op, role, [input indices])``.
Node = Tuple[str, str, str, List[int]]

#: How a node runs, in the order of the legend, with its colour.
ROLES = (("low precision", "#f28e2b"), ("low precision (emulated)", "#ffbe7d"), ("float32", "#4e79a7"),
         ("widest type", "#76b7b2"), ("dtype-neutral", "#bab0ac"), ("cast", "#e15759"), ("input", "#ffffff"))


def precision_map(sym: mx.sym.Symbol, policy: Policy, device_type: str = "cpu") -> List[Node]:
    """Return ``[(name, op, role, [input indices])]`` for the op and variable nodes of a rewritten symbol.

    ``role`` is one of the names in :data:`ROLES`: what the policy decided for the node on ``device_type``
    (AMP's own nodes, its casts and the graph's mode flag, are 'cast').
    """
    nodes = to_graph(sym)["nodes"]
    out = []
    for node in nodes:
        op = node["op"]
        if op == "null":
            role = "input"
        elif op in CAST_OPS or is_mode_node(node):
            role = "cast"
        else:
            action = policy.action(op, node.get("attrs"), node["name"])
            role = {FP32: "float32", WIDEST: "widest type", NEUTRAL: "dtype-neutral"}.get(action)
            if action == LP16:
                role = {"native": "low precision", "emulated": "low precision (emulated)",
                        "float32": "float32"}[policy.lp16_mode(op, device_type)]
        out.append((node["name"], op, role, [i[0] for i in node["inputs"]]))
    return out


def data_path(nodes: Sequence[Node]) -> Tuple[List[Node], int, int]:
    """The nodes the data flows through: parameters and their casts dropped; returns ``(nodes, parameters
    dropped, casts dropped)``."""
    params = {i for i, (name, op, _, _) in enumerate(nodes) if op == "null" and not name.startswith("data")}
    dropped = set(params)
    for i, (_, op, role, inputs) in enumerate(nodes):
        if role == "cast" and all(j in dropped for j in inputs):
            dropped.add(i)
    keep = [i for i in range(len(nodes)) if i not in dropped]
    index = {old: new for new, old in enumerate(keep)}
    kept = [(n[0], n[1], n[2], [index[j] for j in n[3] if j in index]) for n in (nodes[i] for i in keep)]
    return kept, len(params), len(dropped) - len(params)


def _block(name):
    """The block a Gluon node name belongs to: the name without its layer (``resnetv10_stage1_conv0_fwd`` ->
    ``resnetv10_stage1``); None for names that carry no block (oneDNN fused nodes ``sg_mkldnn_*``)."""
    name = re.sub(r"_amp_(cast|round|multicast|fanout)(_\w+)?$", "", name)  # AMP's casts and copies: their source's
    if name.startswith("sg_"):
        return None
    parts = [p for p in name.split("_") if p and p not in ("fwd", "output")]
    return "_".join(parts[:-1]) or name


def stage_summary(nodes: Sequence[Node]) -> List[Tuple[str, CounterType]]:
    """Group the data path of a :func:`precision_map` into blocks: ``[(block, Counter((op, role)))]``.

    Consecutive nodes of one block (by name: a model-zoo stage, a Sequential, the top level) form one
    group, in graph order; nodes without a block name (fused oneDNN nodes) join the block of their first input.
    Parameters and their casts are left out, as in the picture.
    """
    nodes, _, _ = data_path(nodes)
    blocks, groups = [], []
    for name, op, role, inputs in nodes:
        block = _block(name)
        if block is None:
            block = blocks[inputs[0]] if inputs else name
        blocks.append(block)
        if op == "null":
            continue
        if not groups or groups[-1][0] != block:
            groups.append((block, Counter()))
        groups[-1][1][op, role] += 1
    return groups
