"""oneDNN fusion for inference conversion: whether it applies, running MXNet's subgraph backend, and the
policy of the fused nodes (from the ops inside them).

:func:`mxnet.amp.convert.convert` folds BatchNorm first (:mod:`mxnet.amp.fold`), routes the library's kernels,
then calls :func:`fuse` and :func:`policy_for_fused_nodes` before it rewrites the graph.
"""
from dataclasses import replace
import json

__all__ = ["resolve_fuse", "fuse", "policy_for_fused_nodes"]

#: MXNet's subgraph backend that fuses for oneDNN.
FUSION_BACKEND = "MKLDNN"


def has_onednn():
    """Whether this MXNet build has oneDNN (MKLDNN), whose subgraph backend fuses."""
    import mxnet as mx
    return mx.runtime.Features().is_enabled("MKLDNN")


def resolve_fuse(fuse, device_type, dtype):
    """``fuse`` checked, ``None`` resolved: fuse bfloat16 CPU graphs where MXNet has oneDNN.

    Raises
    ------
    ValueError
        ``fuse`` is not None/True/False, or True where fusion cannot apply (float16, a GPU, no oneDNN).
    """
    if fuse is None:
        return device_type == "cpu" and dtype == "bfloat16" and has_onednn()
    if fuse not in (True, False):
        raise ValueError("convert: fuse must be None (auto), True or False, got %r" % (fuse,))
    if fuse and dtype != "bfloat16":
        raise ValueError("convert: fuse=True with %s: oneDNN's fused ops have no %s kernels and would all run "
                         "in float32; fusion applies to bfloat16 only" % (dtype, dtype))
    if fuse and device_type != "cpu":
        raise ValueError("convert: fuse=True applies oneDNN (CPU) fusion, but ctx is a %s" % device_type)
    if fuse and not has_onednn():
        raise ValueError("convert: fuse=True needs an MXNet build with oneDNN (MKLDNN); this one has none")
    return fuse


def fuse(sym, arg_params, aux_params):
    """Run the oneDNN subgraph backend on ``sym``; return the fused symbol and its parameter dicts."""
    import mxnet as mx
    is_np = isinstance(sym, mx.sym.np._Symbol)
    legacy = sym.as_nd_ndarray() if is_np else sym
    args, aux = dict(arg_params), dict(aux_params)
    fused = legacy.optimize_for(FUSION_BACKEND, args, aux, ctx=mx.cpu(), skip_infer=True)
    keep = set(fused.list_inputs())
    args = {k: v for k, v in args.items() if k in keep or k not in set(legacy.list_inputs())}
    aux = {k: v for k, v in aux.items() if k in keep or k not in set(legacy.list_inputs())}
    return (fused.as_np_ndarray() if is_np else fused), args, aux


def policy_for_fused_nodes(sym, policy):
    """``policy`` extended to the oneDNN-fused nodes of ``sym`` according to the ops inside them.

    A fused node is kept in float32 (its name excluded) when it contains an excluded node, an op the user
    forced to float32 (``fp32_ops``, ``extra_fp32_ops``) or a node a conditional float32 entry matches
    (built-in or given: ``Activation(softrelu)`` fused into a convolution, say). When the user replaced the
    low precision list, a fused op runs in low precision if that list names one of its inner ops.
    """
    forced_fp32 = set(policy.extra_fp32_ops) | set(policy.fp32_ops or ())
    excluded, lp16 = [], set()
    for node in json.loads(sym.tojson())["nodes"]:
        inner = [n for sub in node.get("subgraphs", ()) for n in sub["nodes"] if n["op"] != "null"]
        if any(n["name"] in policy.excluded_sym_names or n["op"] in forced_fp32
               or policy.conditional_fp32_applies(n["op"], n.get("attrs")) for n in inner):
            excluded.append(node["name"])
        elif policy.lp16_ops is not None and any(n["op"] in policy.lp16_ops for n in inner):
            lp16.add(node["op"])
    return replace(policy, excluded_sym_names=policy.excluded_sym_names + tuple(excluded),
                   lp16_ops=None if policy.lp16_ops is None else policy.lp16_ops + tuple(sorted(lp16)))
