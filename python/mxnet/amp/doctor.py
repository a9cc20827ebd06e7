"""``amp.doctor``: find where a model breaks in low precision, and say what to do about it.

The model runs twice on the same batch: in float32, and rewritten for the target dtype with every low
precision op emulated (values rounded to the dtype, float32 kernels), which reproduces fp16/bf16 overflow and
underflow on any machine. Ops whose low precision output turns inf/nan (or all zero) while the float32 output
is finite (or not all zero) are reported in graph order (only where the trouble starts: consumers of a broken
tensor are not listed), then the parameters whose gradients overflow at the
initial loss scale, and advice.

    python -m mxnet.amp doctor --symbol net-symbol.json --params net-0000.params --input-shape 8,3,32,32
"""
from dataclasses import dataclass, field
import json
import math

import numpy as np

from . import graph, lists
from .policy import LP16, make_policy

__all__ = ["Finding", "Report", "diagnose", "diagnose_block", "add_arguments", "run"]

_MAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38}


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
            out.append("parameters whose gradients overflow at loss scale %g: %s"
                       % (self.loss_scale, ", ".join(self.overflowing_grads)))
        out.append("advice:")
        out += ["  - " + line for line in self.advice()]
        return "\n".join(out)


def _outputs_by_node(sym, args, aux, ctx):
    """Run ``sym`` once; return {node name: output array} for every op node's first output."""
    import mxnet as mx
    internals = sym.get_internals()
    names = [n for n in internals.list_outputs() if n.endswith("_output")]
    group = mx.sym.Group([internals[n] for n in names])
    exe = group.bind(ctx, args={k: v for k, v in args.items() if k in group.list_arguments()},
                     aux_states={k: v for k, v in aux.items() if k in group.list_auxiliary_states()},
                     grad_req="null")
    return {n[:-len("_output")]: o.asnumpy() for n, o in zip(names, exe.forward(is_train=False))}


def diagnose(sym, arg_params, aux_params, data, dtype="float16", loss_scale=None, ctx=None):
    """Compare a model's float32 and emulated low precision runs on one batch.

    Parameters
    ----------
    sym : Symbol
        The model (legacy or numpy mode).
    arg_params, aux_params : dict of str to NDArray
        Its parameters.
    data : dict of str to array-like
        The batch, by input name.
    dtype : {'float16', 'bfloat16'}
    loss_scale : float, optional
        Scale of the head gradient for the gradient check (default: 2**16 for float16, 1 for bfloat16).
    ctx : Context, optional
        Default CPU.

    Returns
    -------
    Report
    """
    import mxnet as mx
    ctx = ctx or mx.cpu()
    policy = make_policy(dtype, emulate=True)
    scale = float(loss_scale if loss_scale is not None else (2.0 ** 16 if policy.target_dtype == "float16" else 1.0))
    inputs = {k: mx.nd.array(v, ctx=ctx) for k, v in data.items()}
    args = dict({k: v.as_in_context(ctx) for k, v in arg_params.items()}, **inputs)
    aux = {k: v.as_in_context(ctx) for k, v in aux_params.items()}
    low, _ = graph.rewrite_symbol(sym, policy, ctx.device_type, {k: v.dtype for k, v in args.items()},
                                  {k: v.shape for k, v in inputs.items()})
    ref = _outputs_by_node(sym, args, aux, ctx)
    got = _outputs_by_node(low, args, aux, ctx)
    report = Report(policy.target_dtype, loss_scale=scale)
    nodes = json.loads(sym.tojson(remove_amp_cast=False))["nodes"]
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
            report.findings.append(Finding(name, node["op"], kind, float(np.abs(fp32).max())))
        broken.add(name)
    report.overflowing_grads, report.max_grad_abs = _gradient_check(low, sym, args, aux, arg_params, scale, ctx)
    return report


def _gradient_check(low, sym, args, aux, params, scale, ctx):
    """Backward of the low precision graph with head gradient ``scale``: params with non-finite grads."""
    import mxnet as mx
    grads = {k: mx.nd.zeros(v.shape, ctx=ctx) for k, v in params.items()}
    outs = []
    for s, g in ((low, grads), (sym, {k: mx.nd.zeros(v.shape, ctx=ctx) for k, v in params.items()})):
        exe = s.bind(ctx, args=args, args_grad={k: v for k, v in g.items() if k in s.list_arguments()},
                     grad_req={k: ("write" if k in g else "null") for k in s.list_arguments()}, aux_states=aux)
        heads = exe.forward(is_train=True)
        exe.backward([mx.nd.ones(h.shape, ctx=ctx) * (scale if s is low else 1.0) for h in heads])
        outs.append({k: v.asnumpy() for k, v in g.items()})
    low_grads, fp32_grads = outs
    bad = [k for k, v in low_grads.items() if not np.isfinite(v).all()]
    peak = max((float(np.abs(v).max()) for v in fp32_grads.values() if v.size), default=0.0)
    return bad, peak


def diagnose_block(block, data, dtype="float16", loss_scale=None, ctx=None):
    """:func:`diagnose` for a Gluon ``HybridBlock`` called on ``data`` (one array or a list of arrays)."""
    import mxnet as mx
    arrays = list(data) if isinstance(data, (list, tuple)) else [data]
    block.hybridize()
    block(*arrays)
    inputs, out = block._cached_graph
    params = {p.name: p.data() for p in block.collect_params().values()}
    aux_names = set(out.list_auxiliary_states())
    return diagnose(out, {k: v for k, v in params.items() if k not in aux_names},
                    {k: v for k, v in params.items() if k in aux_names},
                    {s.name: a.asnumpy() if isinstance(a, mx.nd.NDArray) else a for s, a in zip(inputs, arrays)},
                    dtype, loss_scale, ctx)


def _shape(text):
    try:
        shape = tuple(int(d) for d in text.split(","))
    except ValueError:
        shape = ()
    if not shape or min(shape) <= 0:
        raise ValueError("--input-shape must be positive integers separated by commas, e.g. 1,3,224,224; "
                         "got %r" % text)
    return shape


def add_arguments(parser):
    """Options of ``python -m mxnet.amp doctor``."""
    parser.add_argument("--symbol", required=True, help="NET-symbol.json")
    parser.add_argument("--params", required=True, help="NET-0000.params")
    parser.add_argument("--input-shape", required=True, help="shape of the input 'data', e.g. 1,3,224,224")
    parser.add_argument("--input-name", default="data")
    parser.add_argument("--data", help=".npy file with the batch (default: standard normal values)")
    parser.add_argument("--dtype", choices=("float16", "bfloat16"), default="float16")
    parser.add_argument("--loss-scale", type=float, help="head gradient scale (default 65536 for float16)")


def run(args):
    """Load the model, diagnose it, print the report; return the exit status."""
    import os
    import mxnet as mx
    for path in (args.symbol, args.params) + ((args.data,) if args.data else ()):
        if not os.path.isfile(path):
            raise FileNotFoundError("no such file: %s" % path)
    shape = _shape(args.input_shape)
    sym = mx.sym.load(args.symbol)
    loaded = mx.nd.load(args.params)
    arg = {k.split(":", 1)[-1]: v for k, v in loaded.items() if not k.startswith("aux:")}
    aux = {k[4:]: v for k, v in loaded.items() if k.startswith("aux:")}
    batch = np.load(args.data) if args.data else np.random.RandomState(0).standard_normal(shape).astype(np.float32)
    if batch.shape != shape:
        raise ValueError("--data has shape %s but --input-shape is %s" % (batch.shape, shape))
    print(diagnose(sym, arg, aux, {args.input_name: batch}, args.dtype, args.loss_scale).format())
    return 0
