"""Find where a model breaks in low precision, and say what to do about it: :func:`diagnose` and
:func:`diagnose_block` (``amp.diagnose``, ``amp.diagnose_block``; ``python -m mxnet.amp doctor`` wraps them).

The model runs twice on the same batch: in float32, and rewritten for the target dtype with every low
precision op emulated (values rounded to the dtype, float32 kernels), which reproduces fp16/bf16 overflow and
underflow on any machine. Ops whose low precision output turns inf/nan (or all zero) while the float32 output
is finite (or not all zero) are reported in graph order (only where the trouble starts: consumers of a broken
tensor are not listed), then the parameters whose gradients overflow at the
initial loss scale, and advice. Both runs execute the graph op by op as it is (no oneDNN fusion at bind), with
the model's auxiliary states (BatchNorm statistics), which the gradient run does not modify.
"""
from dataclasses import dataclass, field
import json
import math
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from .. import lists
from ..base.dtypes import dtype_name
from ..core.policy import LP16, make_policy
from ..graph.rewrite import rewrite_symbol
from ..graph.symbol_json import drop_rounding

__all__ = ["diagnose", "diagnose_block"]

_MAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38}
_LISTED = 6  # parameters named in the report text; the Report holds them all


@dataclass(frozen=True)
class Finding:
    """One op whose low precision output misbehaves: ``kind`` is 'overflow' or 'underflow'."""

    node: str
    op: str
    kind: str
    fp32_max_abs: float


@dataclass
class Report:
    """What :func:`diagnose` found."""

    dtype: str
    findings: list = field(default_factory=list)
    overflowing_grads: list = field(default_factory=list)
    max_grad_abs: float = 0.0
    loss_scale: float = 1.0

    def advice(self):
        """Concrete advice lines, most useful first."""
        lines = []
        overflow_ops = sorted({f.op for f in self.findings if f.kind == "overflow"})
        if overflow_ops:
            lines.append("add these ops to extra_fp32_ops: amp.init(%r, extra_fp32_ops=%r)"
                         % (self.dtype, overflow_ops))
            if self.dtype == "float16":
                lines.append("or use bfloat16, which has the float32 range: amp.init('bfloat16')")
        if any(f.kind == "underflow" for f in self.findings) and self.dtype == "float16":
            lines.append("outputs underflow to zero in float16: scale the input up, or use bfloat16")
        if self.overflowing_grads and self.max_grad_abs > 0:
            safe = 2.0 ** math.floor(math.log2(_MAX[self.dtype] / 2 / self.max_grad_abs))
            lines.append("gradients overflow at loss scale %g: start lower, LossScaler(init_scale=%g)"
                         % (self.loss_scale, max(safe, 1.0)))
        return lines or ["no problem found: the model is %s-safe on this batch" % self.dtype]

    def format(self):
        """The report as text."""
        out = ["amp doctor (%s, emulated on float32 kernels)" % self.dtype]
        if self.findings:
            out.append("ops whose %s output breaks while float32 stays fine (graph order):" % self.dtype)
            out += ["  %-9s %-28s %-20s fp32 max |x| %.3g" % (f.kind, f.node, f.op, f.fp32_max_abs)
                    for f in self.findings]
        if self.overflowing_grads:
            shown = self.overflowing_grads[:_LISTED]
            more = len(self.overflowing_grads) - len(shown)
            out.append("parameters whose gradients overflow at loss scale %g (%d): %s%s"
                       % (self.loss_scale, len(self.overflowing_grads), ", ".join(shown),
                          ", ... (%d more)" % more if more else ""))
        out.append("advice:")
        out += ["  - " + line for line in self.advice()]
        return "\n".join(out)


def _legacy(value, ctx):
    """``value`` (NDArray, numpy-mode ndarray or NumPy array) as a legacy NDArray on ``ctx``."""
    import mxnet as mx
    if isinstance(value, mx.nd.NDArray):
        return (value.as_nd_ndarray() if hasattr(value, "as_nd_ndarray") else value).as_in_context(ctx)
    return mx.nd.array(value, ctx=ctx)


def _as_list(outputs):
    return list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]


def _float32_model(sym, arg_params, aux_params, ctx):
    """The float32 model behind ``sym``: AMP's casts and rounding removed, parameters in float32."""
    import mxnet as mx
    plain = drop_rounding(json.loads(sym.tojson(remove_amp_cast=True)))
    out = mx.sym.load_json(json.dumps(plain))
    params = [{k: _float32(_legacy(v, ctx)) for k, v in p.items()} for p in (arg_params, aux_params)]
    return out, params[0], params[1]


def _float32(array):
    """Low precision arrays as float32 (through ``amp_cast``: a oneDNN bfloat16 layout cannot ``astype``)."""
    import mxnet as mx
    return mx.nd.amp_cast(array, dtype="float32") if dtype_name(array.dtype) in lists.DTYPES else array


def _outputs_by_node(sym, feed):
    """Run ``sym`` once for inference; return {node name: first output as float32 NumPy} for every op node.

    The graph runs as it is, op by op (a ``CachedOp`` of every node's output): an executor's ``bind`` would
    hand it to oneDNN's subgraph backend, whose fusions change which ops exist.
    """
    import mxnet as mx
    nodes = json.loads(sym.tojson(remove_amp_cast=False))
    ops = [i for i, n in enumerate(nodes["nodes"]) if n["op"] != "null"]
    probe = mx.sym.load_json(json.dumps(dict(nodes, heads=[[i, 0, 0] for i in ops])))
    outs = _as_list(mx.nd.CachedOp(probe)(*[feed[n] for n in probe.list_inputs()]))
    return {nodes["nodes"][i]["name"]: _float32(o).asnumpy() for i, o in zip(ops, outs)}


def _check_inputs(sym, params, data):
    """Raise ValueError unless ``data`` holds exactly the inputs of ``sym`` that are not in ``params``."""
    wanted = [n for n in sym.list_inputs() if n not in params]
    missing = [n for n in wanted if n not in data]
    unknown = sorted(set(data) - set(wanted))
    problems = (["no value for %s" % ", ".join(missing)] if missing else []) + (
        ["no input named %s" % ", ".join(unknown)] if unknown else [])
    if problems:
        raise ValueError("diagnose: %s; the model's data inputs are %s" % ("; ".join(problems), ", ".join(wanted)))


def diagnose(sym: Any, arg_params: Mapping[str, Any], aux_params: Mapping[str, Any], data: Mapping[str, Any],
             dtype: str = "float16", loss_scale: Optional[float] = None, ctx: Any = None) -> Report:
    """Compare a model's float32 and emulated low precision runs on one batch.

    Parameters
    ----------
    sym : Symbol
        The model (legacy or numpy mode, one or several inputs and outputs). A graph already converted by
        this library is diagnosed as the float32 model behind it: its AMP casts and rounding are removed.
    arg_params, aux_params : dict of str to NDArray
        Its parameters and auxiliary states (BatchNorm statistics; not modified).
    data : dict of str to array-like
        The batch, by input name: every input of ``sym`` that is not a parameter.
    dtype : {'float16', 'bfloat16'}
    loss_scale : float, optional
        Scale of the head gradient for the gradient check (default: 2**16 for float16, 1 for bfloat16).
    ctx : Context, optional
        Default CPU.

    Returns
    -------
    Report

    Raises
    ------
    ValueError
        ``data`` misses an input of the model or names one it does not have.
    """
    import mxnet as mx
    ctx = ctx or mx.cpu()
    policy = make_policy(dtype, emulate=True)
    scale = float(loss_scale if loss_scale is not None else (2.0 ** 16 if policy.target_dtype == "float16" else 1.0))
    is_np = isinstance(sym, mx.sym.np._Symbol) or mx.util.is_np_shape()
    sym, args, aux = _float32_model(sym, arg_params, aux_params, ctx)
    _check_inputs(sym, dict(args, **aux), data)
    feed = dict(args, **aux, **{k: _legacy(v, ctx) for k, v in data.items()})
    with mx.util.np_shape(is_np):
        low, _ = rewrite_symbol(sym, policy, ctx.device_type, {k: v.dtype for k, v in feed.items()},
                                {k: feed[k].shape for k in data})
        ref = _outputs_by_node(sym, feed)
        got = _outputs_by_node(low, feed)
        grads = _gradient_check(low, sym, feed, [k for k in args if k in sym.list_arguments()], scale)
    report = Report(policy.target_dtype, loss_scale=scale)
    report.findings = _findings(json.loads(sym.tojson())["nodes"], ref, got, policy)
    report.overflowing_grads, report.max_grad_abs = grads
    return report


def _findings(nodes, ref, got, policy):
    """The ops whose low precision output breaks first, in graph order."""
    import mxnet as mx
    findings = []
    broken = set()  # nodes whose low precision output is already off: their consumers are not causes
    low_valued = set()  # nodes whose output a low precision run holds in the target dtype
    for node in nodes:
        name, fp32 = node["name"], ref.get(node["name"])
        lp = got.get("%s_amp_round_%s" % (name, policy.target_dtype), got.get(name))
        if node["op"] != "null" and (
                policy.action(node["op"], node.get("attrs"), name) == LP16 or
                (node["inputs"] and all(nodes[i[0]]["name"] in low_valued for i in node["inputs"])
                 and lists.commutes_with_rounding(node["op"], node.get("attrs")))):
            low_valued.add(name)
            if lp is not None:  # the rewrite may round it later (after ops that commute with rounding)
                lp = mx.nd.amp_round(mx.nd.array(lp), dtype=policy.target_dtype).asnumpy()
        if fp32 is None or lp is None or not np.isfinite(fp32).all():
            continue
        kind = "overflow" if not np.isfinite(lp).all() else (
            "underflow" if np.any(fp32 != 0) and not np.any(lp != 0) else None)
        if kind is None:
            continue
        if not any(nodes[i[0]]["name"] in broken for i in node["inputs"]):
            findings.append(Finding(name, _mxnet_op(node["op"]), kind, float(np.abs(fp32).max())))
        broken.add(name)
    return findings


def _mxnet_op(op):
    """MXNet's op behind one of this project's library kernels (what the user's op lists name), else ``op``."""
    if not lists.is_library_kernel(op):
        return op
    return next(mx_op for dtype in lists.DTYPES for mx_op, kernel in sorted(
        {**lists.library_kernels(dtype, "cpu"), **lists.emulation_kernels(dtype, "cpu")}.items())
        if kernel == op and not mx_op.startswith("_"))


def _gradients(sym, feed, wrt, scale):
    """Gradients of ``wrt`` (names) for head gradient ``scale`` on every float output, in training mode."""
    import mxnet as mx
    arrays = {k: v.copy() for k, v in feed.items()}  # training mode updates the copies' BatchNorm statistics
    for k in wrt:
        arrays[k].attach_grad()
    with mx.autograd.record():
        outs = _as_list(mx.nd.CachedOp(sym)(*[arrays[n] for n in sym.list_inputs()]))
    heads = [o for o in outs if np.dtype(o.dtype).kind == "f"]
    mx.autograd.backward(heads, [mx.nd.ones(h.shape, ctx=h.context, dtype=h.dtype) * scale for h in heads])
    return {k: arrays[k].grad.asnumpy() for k in wrt}


def _gradient_check(low, sym, feed, wrt, scale):
    """Backward of the low precision graph with head gradient ``scale``: params with non-finite grads, and
    the largest float32 gradient (head gradient 1)."""
    low_grads = _gradients(low, feed, wrt, scale)
    fp32_grads = _gradients(sym, feed, wrt, 1.0)
    bad = [k for k in wrt if not np.isfinite(low_grads[k]).all()]
    peak = max((float(np.abs(v).max()) for v in fp32_grads.values() if v.size), default=0.0)
    return bad, peak


def diagnose_block(block: Any, data: Union[Any, Sequence[Any]], dtype: str = "float16",
                   loss_scale: Optional[float] = None, ctx: Any = None) -> Report:
    """:func:`diagnose` for a Gluon ``HybridBlock`` (legacy or numpy mode) called on ``data`` (one array or a
    list of arrays)."""
    arrays = list(data) if isinstance(data, (list, tuple)) else [data]
    block.hybridize()
    block(*arrays)
    inputs, out = block._cached_graph
    wanted = set(out.list_inputs())
    params = {p.name: p.data() for p in block.collect_params().values() if p.name in wanted}
    aux_names = set(out.list_auxiliary_states())
    return diagnose(out, {k: v for k, v in params.items() if k not in aux_names},
                    {k: v for k, v in params.items() if k in aux_names},
                    {s.name: a for s, a in zip(inputs, arrays)}, dtype, loss_scale, ctx)
