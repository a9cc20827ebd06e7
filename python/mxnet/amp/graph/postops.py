"""Passes over a rewritten graph: casts that type inference proves no-ops go, scalar factors fold into the products,
ReLUs (ReLU6, and in inference graphs MobileNet v3's hard sigmoid and hard swish) and residual sums fuse into the library
kernels before them, library kernels write float32 where only float32 is read (in training graphs: the graph's
outputs), and in inference graphs GELUs become the products' oneDNN post-ops."""
import functools
import itertools
from typing import Any, Callable, FrozenSet, List, Mapping, Optional

from ..core.policy import NEUTRAL, Policy
from ..base.op_names import LAYER_NORM_OPS, MATMUL_OPS, SOFTMAX_OPS
from .builder import RewriteStats
from .infer import infer_entry_dtypes
from .symbol_json import CAST_OPS, FALSE_VALUES, Entry, NodeList, compact, entry_uses, num_outputs

__all__ = ["fuse_sum", "fuse_activation", "fuse_hard_activations", "fuse_scale", "float32_library_outputs",
           "drop_noop_casts", "library_casts", "storage_kernels", "float32_islands", "fanout_copies"]

#: Library kernels -> the activations they fuse (``act_type``) in inference and in training graphs (a fused GELU
#: has no gradient), and those with a fused residual sum (``with_sum``).
_ACT_FUSING = {"amp_fully_connected": frozenset({"relu", "gelu"}), "amp_convolution": frozenset({"relu", "relu6"}),
               "amp_batch_norm": frozenset({"relu", "relu6"})}
_TRAINING_ACT_FUSING = {"amp_fully_connected": frozenset({"relu"}), "amp_convolution": frozenset({"relu", "relu6"}),
                        "amp_batch_norm": frozenset({"relu", "relu6"})}
_SUM_FUSING = frozenset({"amp_convolution", "amp_fully_connected", "amp_batch_norm"})
#: Those that also write float32 (``out_dtype``) where the sum's other operand is float32.
_WIDENED_SUM_FUSING = frozenset({"amp_convolution", "amp_fully_connected"})
#: (op, act_type) of the activation nodes that fuse -> the library's act_type.
_ACTIVATIONS = {("Activation", "relu"): "relu", ("_npx_activation", "relu"): "relu",
                ("LeakyReLU", "gelu"): "gelu", ("_npx_leaky_relu", "gelu"): "gelu"}
#: Clips that are a ReLU6 (MobileNets' ``clip(x, 0, 6)``) when their bounds are 0 and 6 -> the library's act_type.
_CLIPS = {"clip": "relu6", "_npi_clip": "relu6"}
#: Library kernels that read float32 or low precision data and write the dtype of their ``dtype`` attribute.
_ANY_FLOAT_DATA = frozenset(LAYER_NORM_OPS + SOFTMAX_OPS)
#: Library products that take a scale (``alpha``), and the scalar ops that fold into it -> (factor of the scalar).
_SCALE_FUSING = frozenset({"amp_batch_dot", "amp_matmul"})
_SCALARS = {"_mul_scalar": lambda s: s, "_div_scalar": lambda s: 1.0 / s, "_npi_multiply_scalar": lambda s: s,
            "_npi_true_divide_scalar": lambda s: 1.0 / s}
#: Sums of two tensors of one shape (no broadcasting).
_SAME_SHAPE_SUMS = frozenset({"elemwise_add", "_Plus", "_plus", "_add"})


def fuse_sum(graph: dict, var_dtypes: Mapping[str, Any]) -> dict:
    """A same-shape sum that is the sole reader of an ``amp_convolution`` or ``amp_fully_connected`` output (or, in
    training graphs, of an ``amp_batch_norm``'s first output) becomes the kernel's ``with_sum`` input (a oneDNN
    post-op: a ResNet block's or a transformer layer's residual add costs no pass of its own; in training graphs
    backward keeps the sum only, not the kernel's output beside it). The other operand must have the product's output
    dtype and be computed before it.

    A float32 residual (the model's float32 input, a pre-LN transformer's residual stream) added to a low precision
    product or convolution reaches the sum through a widest-type cast (``amp_multicast``): the kernel then writes
    float32 itself (``out_dtype``), its accumulator added to the residual, and the cast's two float32 copies go.
    """
    if not any(node["op"] in _SUM_FUSING for node in graph["nodes"]):
        return graph
    uses = entry_uses(graph)
    dtypes = infer_entry_dtypes(graph, var_dtypes)
    alias, fused, dropped = {}, {}, set()
    for nid, node in enumerate(graph["nodes"]):
        if node["op"] not in _SAME_SHAPE_SUMS or len(node["inputs"]) != 2:
            continue
        entries = [tuple(e[:2]) for e in node["inputs"]]
        widening = _widening_cast(graph, entries, uses)
        if widening is not None:
            entries = [tuple(e[:2]) for e in graph["nodes"][widening]["inputs"]]
        # The later operand's convolution fuses: the other is then computed before it (graph order).
        for conv_entry, addend in sorted(itertools.permutations(entries), key=lambda p: -p[0][0]):
            conv = fused.get(conv_entry[0], graph["nodes"][conv_entry[0]])
            attrs = conv.get("attrs", {})
            if widening is None:
                fits = dtypes.get(conv_entry) is not None and dtypes.get(conv_entry) == dtypes.get(addend)
            else:
                fits = (conv["op"] in _WIDENED_SUM_FUSING and dtypes.get(addend) == "float32"
                        and dtypes.get(conv_entry) not in (None, "float32"))
            if (conv["op"] in _SUM_FUSING and "act_type" not in attrs and "with_sum" not in attrs
                    and conv_entry[1] == 0 and addend[0] < conv_entry[0] and uses[conv_entry] == 1
                    and conv_entry != addend and fits):
                alias[(nid, 0)] = conv_entry
                wider = {} if widening is None else {"out_dtype": "float32"}
                fused[conv_entry[0]] = dict(conv, attrs=dict(attrs, with_sum="True", **wider),
                                            inputs=conv["inputs"] + [[addend[0], addend[1], 0]])
                dropped |= {nid} if widening is None else {nid, widening}
                break
    if not alias:
        return graph
    nodes = [fused.get(nid, node) for nid, node in enumerate(graph["nodes"])]
    return compact(dict(graph, nodes=nodes), dropped, alias)


def _widening_cast(graph: dict, entries: List[Entry], uses: Mapping[Entry, int]) -> Optional[int]:
    """The node of the widest-type cast (``amp_multicast``) whose two outputs are ``entries`` and read nowhere else,
    or None."""
    nid = entries[0][0]
    node = graph["nodes"][nid]
    if (node["op"] != "amp_multicast" or node.get("attrs", {}).get("cast_narrow", "False") not in FALSE_VALUES
            or len(node["inputs"]) != 2 or sorted(entries) != [(nid, 0), (nid, 1)]):
        return None
    return nid if uses[(nid, 0)] == 1 and uses[(nid, 1)] == 1 else None


def _activation(node: dict) -> Optional[str]:
    """The library's ``act_type`` computing ``node``'s activation (a ReLU, a GELU, a ReLU6 written as a clip to
    [0, 6]), or None."""
    attrs = node.get("attrs", {})
    if node["op"] in _CLIPS:
        try:
            bounds = float(attrs.get("a_min", "nan")), float(attrs.get("a_max", "nan"))
        except ValueError:
            return None
        return _CLIPS[node["op"]] if bounds == (0.0, 6.0) else None
    return _ACTIVATIONS.get((node["op"], attrs.get("act_type")))


def fuse_activation(graph: dict, training: bool = False) -> dict:
    """A ReLU or ReLU6 (MobileNets' ``clip(x, 0, 6)``), or in inference graphs a GELU after a fully connected layer,
    that is the sole reader of a library kernel's (first) output becomes its ``act_type``: in products a oneDNN
    post-op, computed on the float32 accumulator before the output is rounded; one pass over the output fewer (MXNet
    1.9.1's bfloat16 ``clip`` took 90% of a MobileNet v2's time, AMD EPYC class (c), 2026-12-07). In training graphs
    (after a product or ``amp_batch_norm``) backward also keeps one activation fewer: the kernel's output is the
    activation's."""
    fusing = _TRAINING_ACT_FUSING if training else _ACT_FUSING
    uses = entry_uses(graph)
    alias, fused = {}, {}
    for nid, node in enumerate(graph["nodes"]):
        act = _activation(node)
        if act is None:
            continue
        src, idx, _ = node["inputs"][0]
        product = graph["nodes"][src]
        if (act in fusing.get(product["op"], ()) and "act_type" not in product.get("attrs", {})
                and idx == 0 and uses[(src, idx)] == 1):
            alias[(nid, 0)] = (src, idx)
            fused[src] = dict(product, attrs=dict(product.get("attrs", {}), act_type=act))
    if not alias:
        return graph
    nodes = [fused.get(nid, node) for nid, node in enumerate(graph["nodes"])]
    return compact(dict(graph, nodes=nodes), {nid for nid, _ in alias}, alias)


#: The ops of MobileNet v3's hard sigmoid ``clip(x + 3, 0, 6) / 6`` and hard swish (``x`` times it), per step.
_PLUS_3 = frozenset({"_plus_scalar", "_PlusScalar", "_npi_add_scalar"})
_DIV_6 = frozenset({"_div_scalar", "_DivScalar", "_npi_true_divide_scalar"})
_PRODUCTS = frozenset({"elemwise_mul", "_mul", "_Mul", "broadcast_mul", "_npi_multiply"})


def _scalar(node: dict, ops: FrozenSet[str], value: float) -> bool:
    attrs = node.get("attrs", {})
    try:
        return (node["op"] in ops and float(attrs.get("scalar", "nan")) == value
                and attrs.get("is_int", "False") in FALSE_VALUES)
    except ValueError:
        return False


def fuse_hard_activations(graph: dict, var_dtypes: Mapping[str, Any], stats: RewriteStats) -> dict:
    """In inference graphs, MobileNet v3's hard sigmoid ``clip(y + 3, 0, 6) / 6`` and hard swish (``y`` times it) of
    an ``amp_convolution``'s output ``y`` (each step the sole reader of the one before; ``y`` read by nothing else)
    become the convolution's ``act_type`` (``hard_sigmoid``, ``hard_swish``: oneDNN post-ops on the float32
    accumulator; they have no gradient). Those steps ran on MXNet's element-wise kernels in float32 (the scalar
    addition and the product are float32-list ops), about 100 times slower than PyTorch's on MobileNet v3's
    activations (bench/bench_op_speed.py). A convolution that wrote float32 only for them writes its own dtype again
    where the result was cast back to it (the cast goes)."""
    nodes = graph["nodes"]
    readers = {tuple(h[:2]): [-1] for h in graph["heads"]}  # a graph output is read outside: -1
    for nid, node in enumerate(nodes):
        for src, idx, _ in node["inputs"]:
            readers.setdefault((src, idx), []).append(nid)
    dtypes = None
    alias, fused, dropped = {}, {}, set()
    for d_id, div in enumerate(nodes):
        if not _scalar(div, _DIV_6, 6.0) or d_id in dropped:
            continue
        q_id = div["inputs"][0][0]
        p_id = nodes[q_id]["inputs"][0][0] if nodes[q_id]["inputs"] else None
        if (p_id is None or _activation(nodes[q_id]) != "relu6" or not _scalar(nodes[p_id], _PLUS_3, 3.0)
                or readers.get((q_id, 0)) != [d_id] or readers.get((p_id, 0)) != [q_id]):
            continue
        conv_entry = tuple(nodes[p_id]["inputs"][0][:2])
        conv = nodes[conv_entry[0]]
        if conv["op"] != "amp_convolution" or conv_entry[1] != 0 or "act_type" in conv.get("attrs", {}):
            continue
        conv_readers, d_readers = readers.get(conv_entry, []), readers.get((d_id, 0), [])
        if conv_readers == [p_id]:
            act, last = "hard_sigmoid", d_id
        elif (len(d_readers) == 1 and d_readers[0] >= 0 and sorted(conv_readers) == sorted([p_id, d_readers[0]])
              and nodes[d_readers[0]]["op"] in _PRODUCTS
              and sorted(tuple(e[:2]) for e in nodes[d_readers[0]]["inputs"]) == sorted([conv_entry, (d_id, 0)])):
            act, last = "hard_swish", d_readers[0]
        else:
            continue
        attrs = dict(conv.get("attrs", {}), act_type=act)
        if attrs.get("out_dtype") == "float32":  # written in float32 for the steps only: back to its own dtype
            dtypes = dtypes if dtypes is not None else infer_entry_dtypes(graph, var_dtypes)
            own = dtypes.get(tuple(conv["inputs"][0][:2]))
            after = readers.get((last, 0), [])
            if own not in (None, "float32") and after and all(
                    r >= 0 and nodes[r]["op"] == "amp_cast" and nodes[r]["attrs"]["dtype"] == own for r in after):
                del attrs["out_dtype"]
        fused[conv_entry[0]] = dict(conv, attrs=attrs)
        alias[(last, 0)] = conv_entry
        dropped |= {p_id, q_id, d_id, last}
    if not alias:
        return graph
    out = compact(dict(graph, nodes=[fused.get(nid, node) for nid, node in enumerate(nodes)]), dropped, alias)
    return drop_noop_casts(out, var_dtypes, stats)


def fuse_scale(graph: dict) -> dict:
    """A multiplication or division by a scalar that is the sole reader of an ``amp_batch_dot`` or ``amp_matmul``
    output becomes its ``alpha`` (a oneDNN post-op on the float32 accumulator: attention's ``1 / sqrt(d)`` costs no
    pass over the scores, and training graphs keep no scaled copy of them for backward; the products' gradients
    carry the scale)."""
    uses = entry_uses(graph)
    alias, fused = {}, {}
    for nid, node in enumerate(graph["nodes"]):
        factor = _SCALARS.get(node["op"])
        attrs = node.get("attrs", {})
        if factor is None or attrs.get("is_int", "False") not in ("False", "false", "0"):
            continue
        src, idx, _ = node["inputs"][0]
        product = fused.get(src, graph["nodes"][src])
        scale = factor(float(attrs.get("scalar", "1")))
        if (product["op"] in _SCALE_FUSING and uses[(src, idx)] == 1 and scale != 0.0
                and float(product.get("attrs", {}).get("alpha", "1")) == 1.0):
            alias[(nid, 0)] = (src, idx)
            fused[src] = dict(product, attrs=dict(product.get("attrs", {}), alpha=repr(scale)))
    if not alias:
        return graph
    nodes = [fused.get(nid, node) for nid, node in enumerate(graph["nodes"])]
    return compact(dict(graph, nodes=nodes), {nid for nid, _ in alias}, alias)


def float32_library_outputs(graph: dict, policy: Policy, var_dtypes: Mapping[str, Any],
                            outputs_only: bool = False) -> dict:
    """Library kernels whose output is only read as float32 write float32 (``out_dtype``; LayerNorm and softmax:
    ``dtype``) themselves.

    A product whose readers are casts to float32 (``amp_cast``, or an ``amp_multicast`` whose other inputs
    are float32: a residual sum), or the library's LayerNorm and softmax kernels with a ``dtype`` attribute
    (which take float32 data too and still write that dtype), through dtype-neutral one-input ops (``x /
    sqrt(d)`` before a softmax, say), skips its bfloat16 output: no rounding, no cast, and the neutral ops run in
    float32 (MXNet's non-oneDNN bfloat16 elementwise kernels are slow). The casts become no-ops; an attention
    block's scores reach ``amp_softmax`` in float32, and a softmax that is the graph's output writes float32.

    ``outputs_only`` (training graphs, whose backward keeps every library kernel's output): only kernels whose
    sole readers are the casts of the graph's float32 outputs (logits, probabilities) write float32; inside the graph
    a float32 copy would be kept beside nothing smaller.
    """
    if not any(node["op"] in MATMUL_OPS or node["op"] in _ANY_FLOAT_DATA for node in graph["nodes"]):
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
                if node["attrs"]["dtype"] != "float32" or (outputs_only and (nid, 0) not in heads):
                    return False
            elif outputs_only:
                return False
            elif node["op"] in _ANY_FLOAT_DATA and "dtype" in node.get("attrs", {}):
                read = [tuple(e[:2]) for e in node["inputs"]]
                if read[0] != entry or read.count(entry) != 1:
                    return False  # must read it as its data only (input 0): its output keeps its dtype
            elif node["op"] == "amp_multicast":
                others = [dtypes.get(tuple(e[:2])) for e in node["inputs"] if tuple(e[:2]) != entry]
                if not others or any(d != "float32" for d in others):
                    return False
            elif (len(node["inputs"]) != 1 or node["op"] in CAST_OPS
                  or policy.action(node["op"], node.get("attrs"), node["name"]) != NEUTRAL
                  or counts[nid] != 1 or not read_as_float32((nid, 0))):
                return False
        return True

    def output_attr(node):  # the attribute that sets the output's dtype, where the kernel writes low precision
        attrs = node.get("attrs", {})
        if node["op"] in MATMUL_OPS and "out_dtype" not in attrs:
            return "out_dtype"
        return "dtype" if node["op"] in _ANY_FLOAT_DATA and attrs.get("dtype") == policy.target_dtype else None

    nodes = [dict(node, attrs=dict(node.get("attrs", {}), **{output_attr(node): "float32"}))
             if output_attr(node) is not None and read_as_float32((nid, 0)) else node
             for nid, node in enumerate(graph["nodes"])]
    return dict(graph, nodes=nodes)


def library_casts(graph: dict) -> dict:
    """Every ``amp_cast`` becomes the library's ``amp_multi_cast`` of one array, every widest-type ``amp_multicast``
    its ``amp_multi_widest_cast``: for graphs storing bfloat16 on float32 arithmetic
    (:meth:`~mxnet.amp.core.policy.Policy.for_graph`), where MXNet's casts have no oneDNN kernel and convert element
    by element (26-35 ms for 524 288 values against well under 1 ms, AMD EPYC class (a), 2026-12-06). Their backward
    casts the gradients back and keeps no tensor alive (nnvm/backward_inputs.cc)."""
    def library(node):
        attrs = node.get("attrs", {})
        if node["op"] == "amp_cast":
            return dict(node, op="amp_multi_cast", attrs={"num_args": "1", "dtype": attrs["dtype"]})
        if node["op"] == "amp_multicast" and attrs.get("cast_narrow", "False") in ("False", "false", "0"):
            return dict(node, op="amp_multi_widest_cast", attrs={"num_args": str(len(node["inputs"]))})
        return node
    return dict(graph, nodes=[library(node) for node in graph["nodes"]])


def _cast_node(name: str, entry, to: str) -> dict:
    """The library's cast of one array (``amp_multi_cast``) of ``entry`` to ``to``, named as the rewrite names its
    casts (``<node>_amp_cast_...``: a precision map counts it in its node's block)."""
    return {"op": "amp_multi_cast", "name": name, "attrs": {"num_args": "1", "dtype": to},
            "inputs": [[entry[0], entry[1], 0]]}


def storage_kernels(graph: dict, var_dtypes: Mapping[str, Any], dtype: str,
                    kernel_of: Callable[[str, Mapping[str, str]], Optional[str]]) -> dict:
    """Dtype-neutral nodes reading ``dtype`` data run on the library kernel ``kernel_of(op, attrs)`` names, where it
    names one (``lists.storage_kernel``: 2-D max ``Pooling`` -> ``amp_pooling``), in place of a float32 island, for
    graphs storing ``dtype`` on float32 arithmetic (:meth:`~mxnet.amp.core.policy.Policy.for_graph`). Same inputs,
    attributes and outputs; run before :func:`float32_islands`."""
    dtypes = infer_entry_dtypes(graph, var_dtypes)

    def routed(node):
        kernel = kernel_of(node["op"], node.get("attrs", {})) if node["op"] != "null" else None
        if kernel is None or dtypes.get(tuple(node["inputs"][0][:2])) != dtype:
            return node
        return dict(node, op=kernel)
    return dict(graph, nodes=[routed(node) for node in graph["nodes"]])


def float32_islands(graph: dict, var_dtypes: Mapping[str, Any], dtype: str, in_float32: Callable[[str], bool]
                    ) -> dict:
    """MXNet ops for which ``in_float32(op)`` holds that read ``dtype`` tensors run in float32 between the library's
    casts (each ``dtype`` input cast to float32, each ``dtype`` output cast back): in graphs storing ``dtype`` on
    float32 arithmetic every op but ``lists.storage_ops`` (:meth:`~mxnet.amp.core.policy.Policy.for_graph`), in
    graphs running ``dtype`` natively the ops whose ``dtype`` kernels are slower
    (:meth:`~mxnet.amp.core.policy.Policy.float32_islands`).

    Run after the fusions, so that a ReLU, a ReLU6 or a residual sum that a library kernel absorbs needs no island.
    The library's ops (``amp_*``) and the casts read ``dtype`` themselves.
    """
    dtypes = infer_entry_dtypes(graph, var_dtypes)
    counts = num_outputs(graph)
    new_id, remap, nodes = {}, {}, NodeList()
    add = nodes.add
    for nid, node in enumerate(graph["nodes"]):
        inputs = [remap.get((src, idx), (new_id.get(src), idx)) for src, idx, _ in node["inputs"]]
        low = [dtypes.get((src, idx)) == dtype for src, idx, _ in node["inputs"]]
        island = (any(low) and node["op"] not in CAST_OPS and not node["op"].startswith("amp_")
                  and in_float32(node["op"]))
        if island:
            inputs = [(add(_cast_node("%s_amp_cast_in%d_float32" % (node["name"], k), e, "float32")), 0)
                      if is_low else e for k, (e, is_low) in enumerate(zip(inputs, low))]
        new_id[nid] = add(dict(node, inputs=[[src, idx, 0] for src, idx in inputs]), counts[nid])
        for idx in range(counts[nid]):
            if island and dtypes.get((nid, idx)) == dtype:
                remap[(nid, idx)] = (add(_cast_node("%s_amp_cast_out%d_%s" % (node["name"], idx, dtype),
                                                    (new_id[nid], idx), dtype)), 0)
    return nodes.graph(graph, [remap.get((h[0], h[1]), (new_id[h[0]], h[1])) for h in graph["heads"]])


def fanout_copies(graph: dict, var_dtypes: Mapping[str, Any], dtype: str) -> dict:
    """Each computed ``dtype`` tensor read more than once is read through copies of its own, one per reader, made by
    the library's ``amp_fanout``, for training graphs on CPUs (:meth:`~mxnet.amp.core.policy.Policy.fanout_copies`).

    MXNet's backward sums the gradients of a tensor's readers with ``add_n``, which has no bfloat16 kernel on CPUs: on
    class (a) it adds bfloat16 element by element (538 ms for 2 M values against 2 ms in float32, AMD EPYC,
    2026-12-06), more than ResNet-18's whole step; on classes (c) and (d) it converts every gradient to a new
    float32 array first (``lists.bfloat16.FANOUT_COPIES``). ``amp_fanout``'s backward adds its copies' gradients in
    float32 and rounds once; it keeps no tensor for backward, and the backward nodes of the library's kernels read a
    copy's values from the copied tensor (nnvm/backward_inputs.cc): the copies are freed after forward.
    """
    dtypes = infer_entry_dtypes(graph, var_dtypes)
    readers = entry_uses(graph)
    heads = {tuple(h[:2]) for h in graph["heads"]}
    fanned = {e for e, k in readers.items() if k > 1 and e not in heads and dtypes.get(e) == dtype
              and graph["nodes"][e[0]]["op"] != "null"}
    if not fanned:
        return graph
    counts = num_outputs(graph)
    new_id, nodes, fans, taken = {}, NodeList(), {}, {}
    add = nodes.add
    for nid, node in enumerate(graph["nodes"]):
        inputs = []
        for src, idx, _ in node["inputs"]:
            if (src, idx) in fanned:
                copy = taken[(src, idx)] = taken.get((src, idx), -1) + 1
                inputs.append([fans[(src, idx)], copy, 0])
            else:
                inputs.append([new_id[src], idx, 0])
        new_id[nid] = add(dict(node, inputs=inputs), counts[nid])
        for idx in range(counts[nid]):
            if (nid, idx) in fanned:
                fans[(nid, idx)] = add({"op": "amp_fanout", "name": "%s_amp_fanout_out%d" % (node["name"], idx),
                                        "attrs": {"num_outputs": str(readers[(nid, idx)])},
                                        "inputs": [[new_id[nid], idx, 0]]}, readers[(nid, idx)])
    return nodes.graph(graph, [(new_id[h[0]], h[1]) for h in graph["heads"]])


def drop_noop_casts(graph: dict, var_dtypes: Mapping[str, Any], stats: RewriteStats) -> dict:
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
