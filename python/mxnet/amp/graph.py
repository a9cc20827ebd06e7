"""Symbol-graph rewriting shared by ``amp.init`` (hybridized blocks, bound symbols) and model conversion.

The rewrite works on the symbol's JSON form: every op node asks the :class:`~mxnet.amp.policy.Policy` what it
needs (low precision, float32, the widest input type, or nothing) and its inputs are routed through casts.
Casts are memoised per ``(tensor, dtype)``, so a tensor read by many nodes (a weight shared by a block that is
applied several times, say) is cast once; a cast of a cast looks through to the original tensor, so no
``fp32 -> lp16 -> fp32`` chains appear; tensors already of the wanted dtype, and integer tensors, are not cast.
"""
from collections import Counter
from dataclasses import dataclass, field
import functools
import itertools
import json
import re

import numpy as np

from . import lists
from .policy import EMULATED, FLOAT32, FOLLOW, FP32, LP16, NATIVE, NEUTRAL, WIDEST, mx_dtype

__all__ = ["MODE_NODE", "is_mode_node", "rewrite_symbol", "rewrite_graph", "route_library_kernels",
           "infer_entry_dtypes", "dtype_name", "num_outputs", "assemble", "compact", "drop_rounding",
           "lp_input_dtypes", "with_var_dtypes", "RewriteStats", "CAST_OPS", "TYPE_CODES"]

#: Ops that AMP itself inserts; the rewriter never casts their inputs.
CAST_OPS = ("amp_cast", "amp_multicast", "amp_round")

_FLOAT_RANK = {"float16": 1, "bfloat16": 1, "float32": 2, "float64": 3}


@dataclass
class RewriteStats:
    """What a rewrite did: cast nodes inserted, op nodes per action, how the low precision ones run, and the
    nodes that followed low precision inputs (``FOLLOW`` resolved to ``LP16``).

    ``lp16_modes`` counts the nodes that run in low precision by :meth:`Policy.lp16_mode`: 'native',
    'emulated', or 'float32' (the device has no kernel for the op in the target dtype; counted as 'fp32' in
    ``actions`` too). ``kernels`` counts the nodes given to this project's library kernels by op name
    (:meth:`Policy.library_kernel`: ``FullyConnected`` nodes become ``amp_fully_connected``, say).
    """

    casts: int = 0
    multicasts: int = 0
    actions: Counter = field(default_factory=Counter)
    lp16_modes: Counter = field(default_factory=Counter)
    followed: set = field(default_factory=set)
    kernels: Counter = field(default_factory=Counter)

    def as_dict(self):
        """Return a JSON-safe summary."""
        return {"casts": self.casts, "multicasts": self.multicasts, "ops": dict(self.actions),
                "lp16_modes": dict(self.lp16_modes), "kernels": dict(self.kernels)}


def dtype_name(dtype):
    """Return 'float32', 'bfloat16', 'int32', ... for a NumPy/MXNet dtype (None stays None)."""
    if dtype is None:
        return None
    dtype = np.dtype(dtype)
    return "bfloat16" if dtype.names == ("bfloat16",) else dtype.name


def with_var_dtypes(nodes, var_dtypes, var_shapes=None):
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


def infer_entry_dtypes(graph, var_dtypes):
    """Return ``{(node_id, output_index): dtype name or None}`` for every entry some node or head reads.

    Runs MXNet's partial type inference once on a copy of the graph whose heads are all those entries.
    Unknown types (or a graph MXNet cannot type) give ``None``.
    """
    import mxnet as mx
    wanted = sorted({tuple(e[:2]) for node in graph["nodes"] for e in node["inputs"]}
                    | {tuple(h[:2]) for h in graph["heads"]})
    probe = dict(graph, nodes=with_var_dtypes(graph["nodes"], var_dtypes),
                 heads=[[nid, idx, 0] for nid, idx in wanted])
    try:
        _, out_types, _ = mx.sym.load_json(json.dumps(probe)).infer_type_partial()
    except mx.base.MXNetError:
        out_types = None
    if out_types is None:
        return dict.fromkeys(wanted)
    return {entry: dtype_name(t) for entry, t in zip(wanted, out_types)}


#: Name of the nodes of a graph's mode flag (``_Builder.mode_flag``): ``amp_mode`` and ``amp_mode_ones``.
MODE_NODE = "amp_mode"


def is_mode_node(node):
    """Whether a symbol-JSON node is one of the nodes of the graph's mode flag (AMP's own, as its casts)."""
    return re.match(r"%s(_ones)?\d*$" % MODE_NODE, node["name"]) is not None and node["op"] in ("_ones", "Dropout")


class _Builder:
    """Accumulates the rewritten node list; owns cast memoisation and naming."""

    def __init__(self, names):
        self.nodes = []
        self.num_outputs = []
        self.dtype = {}        # new entry -> dtype name or None
        self.cast_source = {}  # new entry produced by amp_cast -> the entry it cast
        self.memo = {}
        self.names = set(names)
        self.stats = RewriteStats()
        self.mode = None       # the entry of mode_flag(), once made

    def add(self, node, num_outputs, dtypes=()):
        self.nodes.append(node)
        self.num_outputs.append(num_outputs)
        nid = len(self.nodes) - 1
        for idx, dtype in enumerate(dtypes):
            self.dtype[(nid, idx)] = dtype
        return nid

    def unique(self, base):
        name, k = base, 1
        while name in self.names:
            name, k = "%s%d" % (base, k), k + 1
        self.names.add(name)
        return name

    def cast(self, entry, dtype):
        """Return an entry holding ``entry`` as ``dtype`` (float types only; others pass through).

        A cast of a cast reads the original tensor instead (no fp32 -> lp16 -> fp32 chains).
        """
        entry = self.cast_source.get(entry, entry)
        have = self.dtype.get(entry)
        if have == dtype or (have is not None and have not in _FLOAT_RANK) or have == "float64":
            return entry
        key = (entry, dtype)
        if key not in self.memo:
            self.memo[key] = self._add_cast(entry, dtype)
            self.cast_source[self.memo[key]] = entry
        return self.memo[key]

    def _add_cast(self, entry, dtype):
        src = self.nodes[entry[0]]["name"]
        nid = self.add({"op": "amp_cast", "name": self.unique("%s_amp_cast_%s" % (src, dtype)),
                        "attrs": {"dtype": dtype}, "inputs": [[entry[0], entry[1], 0]]}, 1, (dtype,))
        self.stats.casts += 1
        return (nid, 0)

    def mode_flag(self):
        """The graph's mode as a float32 (1,) tensor: ``Dropout(p=0.5)`` of a tensor of ones, which MXNet runs
        with the training flag it runs every op of the call with: exactly 1 in inference (Dropout is then the
        identity), 0 or 2 in training. lib_api tells a library op nothing about the mode; this input does (one
        per graph; it draws one random number per training call)."""
        if self.mode is None:
            ones = self.add({"op": "_ones", "name": self.unique(MODE_NODE + "_ones"),
                             "attrs": {"shape": "(1,)", "dtype": "float32"}, "inputs": []}, 1, ("float32",))
            drop = self.add({"op": "Dropout", "name": self.unique(MODE_NODE), "attrs": {"p": "0.5"},
                             "inputs": [[ones, 0, 0]]}, 2, ("float32", "float32"))
            self.mode = (drop, 0)
        return self.mode

    def is_low(self, entry, dtype):
        """Whether ``entry`` is known to hold ``dtype`` values: of that dtype, or rounded to it (emulation)."""
        node = self.nodes[entry[0]]
        return self.dtype.get(entry) == dtype or (node["op"] == "amp_round" and node["attrs"]["dtype"] == dtype)

    def round_trip(self, entry, dtype):
        """Return ``entry`` rounded to ``dtype`` but stored as float32 (emulated low precision).

        Float32 tensors go through one ``amp_round``; low precision ones are cast to float32 (and rounded
        unless already in ``dtype``); tensors of unknown dtype go through ``amp_cast`` to ``dtype`` and back
        (which leaves non-float tensors alone); other dtypes pass unchanged.
        """
        entry = self.cast_source.get(entry, entry)
        key = (entry, "round", dtype)
        if key in self.memo:
            return self.memo[key]
        have = self.dtype.get(entry)
        if have == "float32":
            name = self.unique("%s_amp_round_%s" % (self.nodes[entry[0]]["name"], dtype))
            nid = self.add({"op": "amp_round", "name": name, "attrs": {"dtype": dtype},
                            "inputs": [[entry[0], entry[1], 0]]}, 1, ("float32",))
            rounded = (nid, 0)
            self.stats.casts += 1
        elif have == dtype:
            rounded = self.cast(entry, "float32")
        elif have in _FLOAT_RANK and _FLOAT_RANK[have] == 1:
            rounded = self.round_trip(self.cast(entry, "float32"), dtype)
        elif have is None:  # unknown dtype: amp_cast there and back (non-float tensors pass unchanged)
            rounded = self._add_cast(self._add_cast(entry, dtype), "float32")
        else:
            rounded = entry
        self.memo[key] = rounded
        self.memo[(rounded, "round", dtype)] = rounded
        return rounded

    def widest(self, entries):
        """Return ``entries`` routed through one ``amp_multicast`` unless their dtypes already agree."""
        entries = [self.cast_source.get(e, e) for e in entries]
        dtypes = [self.dtype.get(e) for e in entries]
        floats = [i for i, d in enumerate(dtypes) if d is None or d in _FLOAT_RANK]
        if len(floats) < 2 or (None not in dtypes and len({dtypes[i] for i in floats}) == 1):
            return entries
        key = ("widest", tuple(entries[i] for i in floats))
        if key not in self.memo:
            known = [dtypes[i] for i in floats if dtypes[i] is not None]
            out = None
            if len(known) == len(floats):
                ranks = {_FLOAT_RANK[d] for d in known}
                out = "float32" if ranks == {1} and len(set(known)) > 1 else max(known, key=_FLOAT_RANK.get)
            src = self.nodes[entries[floats[0]][0]]["name"]
            nid = self.add({"op": "amp_multicast", "name": self.unique("%s_amp_multicast" % src),
                            "attrs": {"num_outputs": str(len(floats)), "cast_narrow": "False"},
                            "inputs": [[entries[i][0], entries[i][1], 0] for i in floats]},
                           len(floats), (out,) * len(floats))
            self.memo[key] = nid
            self.stats.multicasts += 1
        nid = self.memo[key]
        routed = list(entries)
        for k, i in enumerate(floats):
            routed[i] = (nid, k)
        return routed


def lp_input_dtypes(node, target):
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
    import mxnet as mx
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


def output_dtypes(node, dtypes):
    """Return the dtypes of the outputs of op ``node`` (None: not known) when its inputs are of ``dtypes``
    (None: not known), by MXNet's type inference."""
    key = json.dumps({k: node.get(k) for k in ("op", "attrs", "subgraphs")}, sort_keys=True)
    return _output_dtypes(key, tuple(dtypes))


@functools.lru_cache(maxsize=4096)
def _output_dtypes(key, dtypes):
    sym = _probe(key, dtypes) if dtypes else None
    outs = sym.infer_type_partial()[1] if sym is not None else None
    return tuple(dtype_name(d) for d in (outs or ()))


def num_outputs(graph):
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


def rewrite_graph(graph, policy, device_type, var_dtypes, inference=False):
    """Rewrite a symbol-JSON dict; return ``(new_graph_dict, RewriteStats)``. See :func:`rewrite_symbol`."""
    old_dtypes = infer_entry_dtypes(graph, var_dtypes)
    counts = num_outputs(graph)
    uses = Counter((nid, idx) for node in graph["nodes"] for nid, idx, _ in node["inputs"])
    uses.update((nid, idx) for nid, idx, _ in graph["heads"])
    build = _Builder(n["name"] for n in graph["nodes"])
    target = policy.target_dtype
    remap = {}
    unrounded = set()  # outputs of emulated ops not rounded yet: rounded where read, unless deferred further
    lowish = set()  # entries computed in low precision (natively or emulated), also through dtype-neutral ops

    def settle(entry):
        return build.round_trip(entry, target) if entry in unrounded else entry

    def is_low(entry):
        return entry in unrounded or entry in lowish or build.is_low(entry, target)

    for old_id, node in enumerate(graph["nodes"]):
        inputs = [remap[(nid, idx)] for nid, idx, _ in node["inputs"]]
        new = {k: v for k, v in node.items() if k != "inputs"}
        if node["op"] == "null":
            action = None
        elif node["op"] in CAST_OPS:
            action = NEUTRAL
        else:
            action = policy.action(node["op"], node.get("attrs"), node["name"])
            if action == FOLLOW:
                action = LP16 if any(is_low(e) for e in inputs) else NEUTRAL
                if action == LP16:
                    build.stats.followed.add(node["name"])
            if action == LP16:
                mode = policy.lp16_mode(node["op"], device_type)
                build.stats.lp16_modes[mode] += 1
                action = FP32 if mode == FLOAT32 else action
            build.stats.actions[action] += 1
        # A dtype-neutral op with a library kernel for low precision data (lists.neutral_kernels: BatchNorm) runs
        # on it in a training graph, its parameters in float32, told the graph's mode (_Builder.mode_flag).
        neutral_kernel = (policy.neutral_kernel(node["op"], device_type)
                          if action == NEUTRAL and not inference and inputs and build.dtype.get(inputs[0]) == target
                          and node.get("attrs", {}).get("output_mean_var", "False") in ("False", "0", "false")
                          else None)
        # A dtype-neutral op whose low precision kernel is slow runs in float32 between casts; its first output
        # is cast back, so that what follows sees the dtypes of the low precision graph.
        f32_neutral = (neutral_kernel is None and action == NEUTRAL and node["op"] not in CAST_OPS and bool(inputs)
                       and any(is_low(e) for e in inputs) and policy.neutral_in_float32(node["op"], device_type))
        # Rounding after an op that commutes with it gives the same values (and gradients in training graphs),
        # often cheaper (lists.rounding). Only a tensor's sole reader defers: no tensor is rounded twice.
        defer = (action == NEUTRAL and not f32_neutral and inputs and unrounded.issuperset(inputs)
                 and all(uses[(nid, idx)] == 1 for nid, idx, _ in node["inputs"])
                 and lists.commutes_with_rounding(node["op"], node.get("attrs"), gradient=not inference))
        if not defer:
            inputs = [settle(e) for e in inputs]
        substitute = (policy.native_substitute(node["op"], device_type) if action == NEUTRAL and inputs
                      and all(build.dtype.get(e) == target for e in inputs) else None)
        if substitute is not None:  # the same function, a faster low precision kernel (lists.native_substitutes)
            new["op"], new["attrs"] = substitute[0], dict(node.get("attrs", {}), **substitute[1])
        if neutral_kernel is not None:
            new["op"] = neutral_kernel
            inputs = [inputs[0]] + [build.cast(e, "float32") for e in inputs[1:]] + [build.mode_flag()]
            build.stats.kernels[neutral_kernel] += 1
        lp = action == LP16
        emulate = lp and mode == EMULATED
        if lp:
            new["op"] = _kernel_op(node, policy, device_type, mode)
            if new["op"] in _LIBRARY_OPS:
                build.stats.kernels[new["op"]] += 1
            wants = lp_input_dtypes(node, target)
            low = build.round_trip if emulate else build.cast
            inputs = [low(e, target) if want in (None, target) else
                      build.cast(e, want) if want in _FLOAT_RANK else e
                      for e, want in zip(inputs, wants)]
        elif action == FP32 or f32_neutral:
            inputs = [build.cast(e, "float32") for e in inputs]
        elif action == WIDEST:
            inputs = build.widest(inputs)
        new["inputs"] = [[nid, idx, 0] for nid, idx in inputs]
        carries_low = lp or (action in (NEUTRAL, WIDEST) and node["op"] not in CAST_OPS and bool(inputs)
                             and "dtype" not in node.get("attrs", {})
                             and (any if action == NEUTRAL else all)(is_low(e) for e in inputs))
        out_dtypes = [old_dtypes.get((old_id, i)) for i in range(counts[old_id])]
        if lp and not emulate:
            out_dtypes = [target if d in _FLOAT_RANK or d is None else d for d in out_dtypes]
        elif [build.dtype.get(e) for e in inputs] != [old_dtypes.get(tuple(e[:2])) for e in node["inputs"]]:
            # Different dtypes arrive than in the original graph: MXNet's type inference on the op tells the
            # outputs' (a dtype-neutral op after low precision ones is low precision too); else not known.
            inferred = output_dtypes(new, [build.dtype.get(e) for e in inputs])
            out_dtypes = [i if i is not None else None if d is None or d in _FLOAT_RANK else d
                          for d, i in zip(out_dtypes, inferred + (None,) * len(out_dtypes))]
        new_id = build.add(new, counts[old_id], out_dtypes)
        for i in range(counts[old_id]):
            remap[(old_id, i)] = (new_id, i)
            if emulate or defer:
                unrounded.add((new_id, i))
            if carries_low:
                lowish.add((new_id, i))
        if f32_neutral:
            back = build.cast((new_id, 0), target)
            build.cast_source.pop(back, None)  # readers see a low precision tensor (widest-type casts too)
            remap[(old_id, 0)] = back
            lowish.add(back)
    heads = [settle(remap[(nid, idx)]) for nid, idx, _ in graph["heads"]]
    if not policy.keep_lp16_outputs:  # outputs in their original dtype, as from the float32 graph
        heads = [build.cast(new, "float32") if old_dtypes.get(tuple(old[:2])) in ("float32", None) else new
                 for new, old in zip(heads, graph["heads"])]
    out = assemble(graph, build.nodes, build.num_outputs, heads)
    out = _float32_library_outputs(out, policy, var_dtypes)
    out = _drop_noop_casts(out, var_dtypes, build.stats)
    if inference:
        out = _fuse_relu(_fuse_sum(out, var_dtypes))
    return out, build.stats


#: This project's library kernels (:data:`mxnet.amp.lists.library_kernels` values).
_LIBRARY_OPS = frozenset({"amp_fully_connected", "amp_batch_dot", "amp_matmul", "amp_convolution",
                          "amp_deconvolution"})
#: Library kernels with a fused ReLU (``act_type="relu"``), and those with a fused residual sum (``with_sum``).
_RELU_FUSING = frozenset({"amp_fully_connected", "amp_convolution"})
_SUM_FUSING = frozenset({"amp_convolution"})
#: Sums of two tensors of one shape (no broadcasting).
_SAME_SHAPE_SUMS = frozenset({"elemwise_add", "_Plus", "_plus", "_add"})


def _kernel_op(node, policy, device_type, mode=NATIVE):
    """The op that runs low precision ``node`` (in ``mode``): this project's library kernel where the policy
    picks one."""
    pick = policy.library_kernel if mode == NATIVE else policy.emulation_kernel if mode == EMULATED else None
    return (pick and pick(node["op"], device_type)) or node["op"]


def route_library_kernels(sym, policy, device_type):
    """Return ``sym`` with the nodes that get this project's library kernels renamed to them.

    :func:`rewrite_symbol` does the same; model conversion calls this before oneDNN fusion, so that the
    fuser leaves those nodes alone (it would put MXNet's fused FullyConnected in their place).
    """
    import mxnet as mx
    graph = json.loads(sym.tojson(remove_amp_cast=False))
    changed = False
    for node in graph["nodes"]:
        if node["op"] != "null" and policy.action(node["op"], node.get("attrs"), node["name"]) == LP16:
            op = _kernel_op(node, policy, device_type, policy.lp16_mode(node["op"], device_type))
            changed = changed or op != node["op"]
            node["op"] = op
    if not changed:
        return sym
    out = mx.sym.load_json(json.dumps(graph))
    return out.as_np_ndarray() if isinstance(sym, mx.sym.np._Symbol) else out


def _entry_uses(graph):
    uses = Counter((src, idx) for node in graph["nodes"] for src, idx, _ in node["inputs"])
    uses.update((src, idx) for src, idx, _ in graph["heads"])
    return uses


def _fuse_sum(graph, var_dtypes):
    """Inference graphs: a same-shape sum that is the sole reader of an ``amp_convolution`` output becomes the
    convolution's ``with_sum`` input (oneDNN's sum post-op: a ResNet block's residual add costs no pass of
    its own). The other operand must have the convolution's output dtype and be computed before it."""
    if not any(node["op"] in _SUM_FUSING for node in graph["nodes"]):
        return graph
    uses = _entry_uses(graph)
    dtypes = infer_entry_dtypes(graph, var_dtypes)
    alias, fused = {}, {}
    for nid, node in enumerate(graph["nodes"]):
        if node["op"] not in _SAME_SHAPE_SUMS or len(node["inputs"]) != 2:
            continue
        entries = [tuple(e[:2]) for e in node["inputs"]]
        # The later operand's convolution fuses: the other is then computed before it (graph order).
        for conv_entry, addend in sorted(itertools.permutations(entries), key=lambda p: -p[0][0]):
            conv = fused.get(conv_entry[0], graph["nodes"][conv_entry[0]])
            attrs = conv.get("attrs", {})
            if (conv["op"] in _SUM_FUSING and "act_type" not in attrs and "with_sum" not in attrs
                    and addend[0] < conv_entry[0] and uses[conv_entry] == 1 and conv_entry != addend
                    and dtypes.get(conv_entry) is not None and dtypes.get(conv_entry) == dtypes.get(addend)):
                alias[(nid, 0)] = conv_entry
                fused[conv_entry[0]] = dict(conv, attrs=dict(attrs, with_sum="True"),
                                            inputs=conv["inputs"] + [[addend[0], addend[1], 0]])
                break
    if not alias:
        return graph
    nodes = [fused.get(nid, node) for nid, node in enumerate(graph["nodes"])]
    return compact(dict(graph, nodes=nodes), {nid for nid, _ in alias}, alias)


def _fuse_relu(graph):
    """Inference graphs: a ReLU that is the sole reader of a library product's output becomes its
    ``act_type="relu"`` (a oneDNN post-op: one pass over the output fewer)."""
    uses = _entry_uses(graph)
    alias, fused = {}, {}
    for nid, node in enumerate(graph["nodes"]):
        if node["op"] != "Activation" or node.get("attrs", {}).get("act_type") != "relu":
            continue
        src, idx, _ = node["inputs"][0]
        product = graph["nodes"][src]
        if (product["op"] in _RELU_FUSING and "act_type" not in product.get("attrs", {})
                and uses[(src, idx)] == 1):
            alias[(nid, 0)] = (src, idx)
            fused[src] = dict(product, attrs=dict(product.get("attrs", {}), act_type="relu"))
    if not alias:
        return graph
    nodes = [fused.get(nid, node) for nid, node in enumerate(graph["nodes"])]
    return compact(dict(graph, nodes=nodes), {nid for nid, _ in alias}, alias)


def _float32_library_outputs(graph, policy, var_dtypes):
    """Library kernels whose output is only read as float32 write float32 (``out_dtype``) themselves.

    A product whose readers are casts to float32 (``amp_cast``, or an ``amp_multicast`` whose other inputs
    are float32: a residual sum), through dtype-neutral one-input ops (``x / sqrt(d)`` before a float32
    softmax, say), skips its bfloat16 output: no rounding, no cast, and the neutral ops run in float32
    (MXNet's non-oneDNN bfloat16 elementwise kernels are slow). The casts become no-ops.
    """
    if not any(node["op"] in _LIBRARY_OPS for node in graph["nodes"]):
        return graph
    dtypes = infer_entry_dtypes(graph, var_dtypes)
    readers = {}
    for nid, node in enumerate(graph["nodes"]):
        for src, idx, _ in node["inputs"]:
            readers.setdefault((src, idx), []).append(nid)
    heads = {tuple(h[:2]) for h in graph["heads"]}
    counts = num_outputs(graph)

    @functools.lru_cache(maxsize=None)
    def read_as_float32(entry):
        if entry in heads or not readers.get(entry):
            return False
        for nid in readers[entry]:
            node = graph["nodes"][nid]
            if node["op"] == "amp_cast":
                if node["attrs"]["dtype"] != "float32":
                    return False
            elif node["op"] == "amp_multicast":
                others = [dtypes.get(tuple(e[:2])) for e in node["inputs"] if tuple(e[:2]) != entry]
                if not others or any(d != "float32" for d in others):
                    return False
            elif (len(node["inputs"]) != 1 or node["op"] in CAST_OPS
                  or policy.action(node["op"], node.get("attrs"), node["name"]) != NEUTRAL
                  or counts[nid] != 1 or not read_as_float32((nid, 0))):
                return False
        return True

    nodes = [dict(node, attrs=dict(node.get("attrs", {}), out_dtype="float32"))
             if node["op"] in _LIBRARY_OPS and "out_dtype" not in node.get("attrs", {})
             and read_as_float32((nid, 0)) else node
             for nid, node in enumerate(graph["nodes"])]
    return dict(graph, nodes=nodes)


def assemble(graph, nodes, counts, heads):
    """A symbol-JSON dict like ``graph`` with new ``nodes`` (``counts`` outputs each) and ``heads``."""
    ptr = [0]
    for n in counts:
        ptr.append(ptr[-1] + n)
    return dict(graph, nodes=nodes, heads=[[nid, idx, 0] for nid, idx, *_ in heads], node_row_ptr=ptr,
                arg_nodes=[i for i, n in enumerate(nodes) if n["op"] == "null"])


def compact(graph, dropped, alias):
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


def drop_rounding(graph, dtype=None):
    """Remove the ``amp_round`` nodes (to ``dtype``, or all): their readers read the unrounded tensor."""
    alias = {(nid, 0): tuple(node["inputs"][0][:2]) for nid, node in enumerate(graph["nodes"])
             if node["op"] == "amp_round" and dtype in (None, node["attrs"]["dtype"])}
    return compact(graph, {nid for nid, _ in alias}, alias) if alias else graph


def _drop_noop_casts(graph, var_dtypes, stats):
    """Remove casts whose input already has the wanted dtype, using exact type inference on ``graph``."""
    dtypes = infer_entry_dtypes(graph, var_dtypes)
    alias = {}
    for nid, node in enumerate(graph["nodes"]):
        in_dtypes = [dtypes.get((src, idx)) for src, idx, _ in node["inputs"]]
        if node["op"] == "amp_cast" and in_dtypes[0] is not None and in_dtypes[0] == node["attrs"]["dtype"]:
            alias[(nid, 0)] = tuple(node["inputs"][0][:2])
            stats.casts -= 1
        elif node["op"] == "amp_multicast" and None not in in_dtypes and len(set(in_dtypes)) == 1:
            alias.update({(nid, k): tuple(e[:2]) for k, e in enumerate(node["inputs"])})
            stats.multicasts -= 1
    return compact(graph, {nid for nid, _ in alias}, alias) if alias else graph


def rewrite_symbol(sym, policy, device_type="cpu", var_dtypes=None, var_shapes=None, inference=False):
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
    import mxnet as mx
    graph = json.loads(sym.tojson(remove_amp_cast=False))
    dtypes = {}
    for node in graph["nodes"]:
        if node["op"] == "null":
            code = node.get("attrs", {}).get("__dtype__")
            dtypes[node["name"]] = _DTYPE_CODES.get(code, np.float32)
    for name, dtype in (var_dtypes or {}).items():
        dtypes[name] = dtype
    if var_shapes:
        _record_shapes(sym, graph, var_shapes)
    new_graph, stats = rewrite_graph(graph, policy, device_type, dtypes, inference)
    out = mx.sym.load_json(json.dumps(new_graph))
    if isinstance(sym, mx.sym.np._Symbol):
        out = out.as_np_ndarray()
    return out, stats


def _record_shapes(sym, graph, var_shapes):
    arg_shapes, _, aux_shapes = sym.infer_shape_partial(**var_shapes)
    names = sym.list_arguments() + sym.list_auxiliary_states()
    shapes = dict(zip(names, (arg_shapes or []) + (aux_shapes or [])))
    for node in graph["nodes"]:
        shape = shapes.get(node["name"]) if node["op"] == "null" else None
        if shape and all(d > 0 for d in shape):
            node.setdefault("attrs", {})["__shape__"] = str(tuple(shape))


#: MXNet's type code of each dtype name, as a variable's ``__dtype__`` attribute stores it.
TYPE_CODES = {"float32": "0", "float64": "1", "float16": "2", "uint8": "3", "int32": "4", "int8": "5",
              "int64": "6", "bool": "7", "bfloat16": "12"}
_DTYPE_CODES = {code: mx_dtype(name) for name, code in TYPE_CODES.items()}
