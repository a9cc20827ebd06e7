"""Symbol-graph rewriting shared by ``amp.init`` (hybridized blocks, bound symbols) and model conversion.

The rewrite works on the symbol's JSON form (:mod:`.symbol_json`): every op node gets a plan (:mod:`.plan`: what
the :class:`~mxnet.amp.core.policy.Policy` decides, resolved against the dtypes that arrive) and its inputs are
routed through casts by a :class:`~mxnet.amp.graph.builder.CastBuilder`. Casts are memoised per ``(tensor,
dtype)``, so a tensor read by many nodes (a weight shared by a block that is applied several times, say) is
cast once; a cast of a cast looks through to the original tensor, so no ``fp32 -> lp16 -> fp32`` chains appear;
tensors already of the wanted dtype, and integer tensors, are not cast. The passes of :mod:`.postops` finish.
"""
import functools
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import mxnet as mx
import numpy as np

from .. import lists
from ..base.dtypes import DTYPE_OF_CODE, FLOAT_RANK, mx_dtype
from ..core.policy import FP32, LP16, NEUTRAL, WIDEST, Policy
from ..base.op_names import MATMUL_OPS
from .builder import CastBuilder, RewriteStats
from .infer import infer_entry_dtypes, lp_input_dtypes, output_dtypes
from .plan import NodePlan, kernel_op, plan_node
from .postops import (drop_noop_casts, fanout_copies, float32_islands, float32_library_outputs, fuse_activation,
                      fuse_hard_activations, fuse_scale, fuse_sum, library_casts, storage_kernels)
from .products import rounded_products
from .symbol_json import CAST_OPS, Entry, assemble, entry_uses, num_outputs, record_shapes, to_graph, to_symbol

__all__ = ["rewrite_symbol", "rewrite_graph", "route_library_kernels"]


def route_library_kernels(sym: mx.sym.Symbol, policy: Policy, device_type: str) -> mx.sym.Symbol:
    """Return ``sym`` with the nodes that get this project's library kernels renamed to them.

    :func:`rewrite_symbol` does the same; model conversion calls this before oneDNN fusion, so that the
    fuser leaves those nodes alone (it would put MXNet's fused FullyConnected in their place).
    """
    graph = to_graph(sym)
    changed = False
    for node in graph["nodes"]:
        if node["op"] != "null" and policy.action(node["op"], node.get("attrs"), node["name"]) == LP16:
            op = kernel_op(node["op"], policy, device_type, policy.lp16_mode(node["op"], device_type))
            changed = changed or op != node["op"]
            node["op"] = op
    return to_symbol(graph, like=sym) if changed else sym


class _Rewrite:
    """One rewrite of one graph: the builder, the map from old entries to new ones, and what is known of the
    new entries (rounded yet or not, low precision or not)."""

    def __init__(self, graph: dict, policy: Policy, device_type: str, var_dtypes: Mapping[str, Any],
                 inference: bool):
        self.graph, self.policy, self.device_type, self.inference = graph, policy, device_type, inference
        self.target = policy.target_dtype
        self.old_dtypes = infer_entry_dtypes(graph, var_dtypes)
        self.counts = num_outputs(graph)
        self.uses = entry_uses(graph)
        self.build = CastBuilder(n["name"] for n in graph["nodes"])
        self.remap: Dict[Entry, Entry] = {}
        self.unrounded = set()  # outputs of emulated ops not rounded yet: rounded where read, unless deferred
        self.lowish = set()  # entries computed in low precision (natively or emulated), also through neutral ops

    def settle(self, entry: Entry) -> Entry:
        return self.build.round_trip(entry, self.target) if entry in self.unrounded else entry

    def is_low(self, entry: Entry) -> bool:
        return entry in self.unrounded or entry in self.lowish or self.build.is_low(entry, self.target)

    def record(self, node: dict, plan: NodePlan) -> None:
        stats = self.build.stats
        if plan.followed:
            stats.followed.add(node["name"])
        if plan.mode is not None:
            stats.lp16_modes[plan.mode] += 1
        stats.actions[plan.action] += 1
        if plan.op in MATMUL_OPS and plan.action == LP16 or plan.neutral_kernel or plan.stats_kernel:
            stats.kernels[plan.op] += 1

    def defers(self, node: dict, plan: NodePlan, inputs: List[Entry]) -> bool:
        """Rounding after an op that commutes with it gives the same values (and gradients in training graphs),
        often cheaper (lists.rounding). Only a tensor's sole reader defers: no tensor is rounded twice."""
        return bool(plan.action == NEUTRAL and not plan.float32_island and inputs
                    and self.unrounded.issuperset(inputs)
                    and all(self.uses[(nid, idx)] == 1 for nid, idx, _ in node["inputs"])
                    and lists.commutes_with_rounding(node["op"], node.get("attrs"), gradient=not self.inference))

    def route(self, node: dict, plan: NodePlan, inputs: List[Entry]) -> List[Entry]:
        """The node's inputs routed through the casts its plan needs."""
        build, target = self.build, self.target
        if plan.neutral_kernel:
            return [inputs[0]] + [build.cast(e, "float32") for e in inputs[1:]] + [build.mode_flag()]
        if plan.stats_kernel:  # the data as it arrives (target dtype or float32); the rest as the kernel wants them
            wants = lp_input_dtypes(dict(node, op=plan.op), target)
            return [inputs[0]] + [build.cast(e, want) if want in FLOAT_RANK else e
                                  for e, want in zip(inputs[1:], wants[1:])]
        if plan.action == LP16 and "param_dtype" in plan.attrs:  # float32 parameters read as they are
            return [build.cast(inputs[0], target)] + inputs[1:]
        if plan.action == LP16:
            low = build.round_trip if plan.emulated else build.cast
            return [low(e, target) if want in (None, target) else
                    build.cast(e, want) if want in FLOAT_RANK else e
                    for e, want in zip(inputs, lp_input_dtypes(node, target))]
        if plan.action == FP32 or plan.float32_island:
            return [build.cast(e, "float32") for e in inputs]
        if plan.action == WIDEST:
            return build.widest(inputs)
        return inputs

    def out_dtypes(self, old_id: int, plan: NodePlan, new: dict, inputs: List[Entry]) -> List[Optional[str]]:
        """What is known of the dtypes of the new node's outputs."""
        dtypes = [self.old_dtypes.get((old_id, i)) for i in range(self.counts[old_id])]
        if plan.action == LP16 and not plan.emulated:
            return [self.target if d in FLOAT_RANK or d is None else d for d in dtypes]
        if plan.stats_kernel:  # the dtype it writes, whatever arrives
            return [plan.attrs["dtype"]] + dtypes[1:]
        arriving = [self.build.dtype.get(e) for e in inputs]
        if arriving == [self.old_dtypes.get(tuple(e[:2])) for e in self.graph["nodes"][old_id]["inputs"]]:
            return dtypes
        # Different dtypes arrive than in the original graph: MXNet's type inference on the op tells the outputs'
        # (a dtype-neutral op after low precision ones is low precision too); else not known.
        inferred = output_dtypes(new, arriving)
        return [i if i is not None else None if d is None or d in FLOAT_RANK else d
                for d, i in zip(dtypes, inferred + (None,) * len(dtypes))]

    def node_op(self, old_id: int, node: dict) -> None:
        """Rewrite one op node."""
        inputs = [self.remap[(nid, idx)] for nid, idx, _ in node["inputs"]]
        plan = plan_node(node, self.policy, self.device_type, self.inference,
                         [self.build.dtype.get(e) for e in inputs], any(self.is_low(e) for e in inputs))
        if node["op"] not in CAST_OPS:
            self.record(node, plan)
        defer = self.defers(node, plan, inputs)
        if not defer:
            inputs = [self.settle(e) for e in inputs]
        inputs = self.route(node, plan, inputs)
        new = dict({k: v for k, v in node.items() if k != "inputs"}, op=plan.op,
                   inputs=[[nid, idx, 0] for nid, idx in inputs])
        if plan.attrs:
            kept = {k: v for k, v in node.get("attrs", {}).items() if k not in plan.removed_attrs}
            new["attrs"] = dict(kept, **plan.attrs)
        carries_low = plan.action == LP16 or (plan.stats_kernel and plan.attrs["dtype"] == self.target) or (
            plan.action in (NEUTRAL, WIDEST) and node["op"] not in CAST_OPS and bool(inputs)
            and "dtype" not in node.get("attrs", {})
            and (any if plan.action == NEUTRAL else all)(self.is_low(e) for e in inputs))
        new_id = self.build.add(new, self.counts[old_id], self.out_dtypes(old_id, plan, new, inputs))
        for i in range(self.counts[old_id]):
            self.remap[(old_id, i)] = (new_id, i)
            if plan.emulated or defer:
                self.unrounded.add((new_id, i))
            if carries_low:
                self.lowish.add((new_id, i))
        if plan.float32_island:
            back = self.build.cast((new_id, 0), self.target)
            self.build.cast_source.pop(back, None)  # readers see a low precision tensor (widest-type casts too)
            self.remap[(old_id, 0)] = back
            self.lowish.add(back)

    def heads(self) -> List[Entry]:
        heads = [self.settle(self.remap[(nid, idx)]) for nid, idx, _ in self.graph["heads"]]
        if self.policy.keep_lp16_outputs:
            return heads
        # outputs in their original dtype, as from the float32 graph
        return [self.build.cast(new, "float32") if self.old_dtypes.get(tuple(old[:2])) in ("float32", None) else new
                for new, old in zip(heads, self.graph["heads"])]


def rewrite_graph(graph: dict, policy: Policy, device_type: str, var_dtypes: Mapping[str, Any],
                  inference: bool = False) -> Tuple[dict, RewriteStats]:
    """Rewrite a symbol-JSON dict; return ``(new_graph_dict, RewriteStats)``. See :func:`rewrite_symbol`."""
    policy = policy.for_graph(device_type, inference)
    rewrite = _Rewrite(graph, policy, device_type, var_dtypes, inference)
    for old_id, node in enumerate(graph["nodes"]):
        if node["op"] == "null":
            new_id = rewrite.build.add({k: v for k, v in node.items() if k != "inputs"} | {"inputs": []},
                                       rewrite.counts[old_id],
                                       [rewrite.old_dtypes.get((old_id, i)) for i in range(rewrite.counts[old_id])])
            rewrite.remap.update({(old_id, i): (new_id, i) for i in range(rewrite.counts[old_id])})
        else:
            rewrite.node_op(old_id, node)
    out = assemble(graph, rewrite.build.nodes, rewrite.build.num_outputs, rewrite.heads())
    # training graphs keep low precision outputs inside: backward keeps every library kernel's output
    out = float32_library_outputs(out, policy, var_dtypes, outputs_only=not inference)
    out = fuse_scale(drop_noop_casts(out, var_dtypes, rewrite.build.stats))
    out = fuse_activation(fuse_sum(out, var_dtypes), training=not inference)
    if inference:
        out = fuse_hard_activations(out, var_dtypes, rewrite.build.stats)
        out = rounded_products(out, var_dtypes, policy.target_dtype,
                               lists.rounded_products(policy.target_dtype, device_type))
    if policy.storage:  # bfloat16 tensors on float32 arithmetic: see Policy.for_graph
        out = storage_kernels(out, var_dtypes, policy.target_dtype,
                              functools.partial(lists.storage_kernel, policy.target_dtype, device_type))
        keeps = lists.storage_ops(policy.target_dtype, device_type)
        out = library_casts(float32_islands(out, var_dtypes, policy.target_dtype, lambda op: op not in keeps))
    else:  # MXNet's ops whose bfloat16 kernels are slower than float32 between casts (lists.float32_island_ops)
        slow = policy.float32_islands(device_type)
        if slow:  # MXNet's own casts there: its oneDNN casts are fast on these CPUs (library_casts is class (a)'s)
            out = float32_islands(out, var_dtypes, policy.target_dtype, slow.__contains__)
    if not inference and policy.fanout_copies(device_type):
        out = fanout_copies(out, var_dtypes, policy.target_dtype)
    return out, rewrite.build.stats


def rewrite_symbol(sym: mx.sym.Symbol, policy: Policy, device_type: str = "cpu",
                   var_dtypes: Optional[Mapping[str, Any]] = None,
                   var_shapes: Optional[Mapping[str, Sequence[int]]] = None,
                   inference: bool = False) -> Tuple[mx.sym.Symbol, RewriteStats]:
    """Insert AMP casts into a symbol according to ``policy``.

    Parameters
    ----------
    sym : Symbol
        Legacy or numpy-mode symbol; not modified.
    policy : Policy
        The operator decisions.
    device_type : {'cpu', 'gpu'}
        Where the graph will run: decides which low precision ops are emulated (rounded to the target dtype
        around a float32 kernel, see :meth:`Policy.emulates`).
    var_dtypes : dict of str to dtype, optional
        Known dtypes of the symbol's inputs. Variables not listed use their ``__dtype__`` attribute, then
        float32.
    var_shapes : dict of str to tuple, optional
        Known shapes of some inputs (e.g. the data). Shapes inferred from them on the original graph are
        recorded on every variable (``__shape__``): ops of the C++ library cannot infer their input shapes
        backwards, so parameters awaiting deferred initialisation would otherwise stay unknown.
    inference : bool
        The graph only runs forward: emulation may also round after ops whose gradient does not commute with
        rounding (max pooling, ReLU; see :mod:`mxnet.amp.lists.rounding`).

    Returns
    -------
    (Symbol, RewriteStats)
        The rewritten symbol (numpy-mode if ``sym`` was) and what was inserted.
    """
    graph = to_graph(sym)
    dtypes = {}
    for node in graph["nodes"]:
        if node["op"] == "null":
            code = node.get("attrs", {}).get("__dtype__")
            dtypes[node["name"]] = mx_dtype(DTYPE_OF_CODE[code]) if code in DTYPE_OF_CODE else np.float32
    dtypes.update(var_dtypes or {})
    if var_shapes:
        record_shapes(sym, graph, dict(var_shapes))
    new_graph, stats = rewrite_graph(graph, policy, device_type, dtypes, inference)
    return to_symbol(new_graph, like=sym), stats
