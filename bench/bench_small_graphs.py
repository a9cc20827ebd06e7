"""Training steps of small models under ``amp.init("bfloat16")`` against float32: the training matrix's ten tiny
models and a sweep of Dense stacks around the floor below which ``amp.init`` keeps a graph in float32.

Configurations, each in a child process of its own, alternating over ``--rounds`` rounds (the table shows the median
of the rounds; each child times ``--steps`` steps ``--repeat`` times after a warm-up and reports the median step,
synchronising once per repeat, as a training loop that logs now and then does):

* ``mxnet fp32``: the hybridized model, ``gluon.Trainer`` with Adam;
* ``ours``: ``amp.init("bfloat16")`` with ``amp.init_trainer`` and ``amp.scale_loss``, the defaults (the measured
  floor: ``mxnet.amp.lists.training_graph_floor``);
* ``ours, no floor``: the same with ``min_graph_macs=0`` (every graph converted: what the floor avoids);
* ``contrib``: ``mxnet.contrib.amp``'s ``init("bfloat16")``, ``init_trainer`` and ``scale_loss``, the predecessor;
* ``torch fp32`` and ``torch autocast`` (the Dense stacks): the same stack in PyTorch with Adam, in float32 and under
  ``torch.autocast("cpu", torch.bfloat16)``, run by ``--torch-python`` (default: this interpreter) in a process that
  never imports MXNet. The matrix's models have no PyTorch twin.

Rows: ``matrix:ROW`` (tests/python/unittest/matrix_models.py, batch 16) and ``dense:UNITSxBATCH`` (three Dense layers,
UNITS wide, 10 classes). Prints ms per step, the multiply-accumulates per forward pass, ours against float32,
contrib and PyTorch autocast, and the slowest row of each column.

    python bench/bench_small_graphs.py [--rows matrix,dense] [--rounds 3] [--torch-python PATH]
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import child_json, cpu_banner  # noqa: E402

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MATRIX_ROWS = ("cnn_batchnorm", "deconv_decoder", "embedding_dense", "lstm", "gru", "legacy_transformer",
               "numpy_transformer", "interleaved_attention", "shared_weights", "two_losses")
DENSE_ROWS = ("128x16", "256x16", "256x128", "512x16", "512x128", "1024x16", "1024x128")
MXNET_CONFIGS = ("mxnet fp32", "ours", "ours, no floor", "contrib")
TORCH_CONFIGS = ("torch fp32", "torch autocast")


def _dense_model(spec):
    """``(net, batches, losses, numpy_mode, lr)`` of a Dense stack ``UNITSxBATCH``."""
    import mxnet as mx
    import numpy as np
    from mxnet import gluon
    units, batch = (int(v) for v in spec.split("x"))
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(units, activation="relu"), gluon.nn.Dense(units, activation="relu"), gluon.nn.Dense(10))
    rs = np.random.RandomState(0)
    batches = [(mx.nd.array(rs.randn(batch, units)), mx.nd.array(rs.randint(0, 10, batch)))]
    return net, batches, lambda n, x, y: [gluon.loss.SoftmaxCrossEntropyLoss()(n(x), y).mean()], False, 0.001


def _matrix_model(row):
    import mxnet as mx
    import numpy as np
    sys.path.insert(0, os.path.join(_ROOT, "tests", "python", "unittest"))
    import matrix_models
    spec = matrix_models.ROWS[row]
    if spec.numpy_mode:
        mx.npx.set_np()
    rs = np.random.RandomState(matrix_models.SEED)
    batches = [tuple(matrix_models._to_arrays(v, mx.cpu(), spec.numpy_mode) for v in spec.data(rs))
               for _ in range(2)]
    return spec.build(), batches, spec.losses, spec.numpy_mode, spec.lr


def mxnet_child(row, config, steps, repeat):
    """Milliseconds per training step of one MXNet configuration (float32: and the graph's multiply-accumulates)."""
    import warnings
    import mxnet as mx
    from mxnet import autograd, gluon
    warnings.filterwarnings("ignore")
    kind, name = row.split(":", 1)
    amp = None
    if config in ("ours", "ours, no floor"):
        from mxnet import amp
        amp.init("bfloat16", min_graph_macs=0 if config == "ours, no floor" else None)
    elif config == "contrib":
        from mxnet.contrib import amp
        amp.init("bfloat16")
    mx.random.seed(7)
    net, batches, losses, _, lr = (_dense_model if kind == "dense" else _matrix_model)(name)
    net.initialize(mx.init.Xavier())
    net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": lr})
    if amp is not None:
        amp.init_trainer(trainer)

    def step(i):
        x, y = batches[i % len(batches)]
        with autograd.record():
            parts = losses(net, x, y)
            if amp is None:
                autograd.backward(parts)
            else:
                with amp.scale_loss(parts, trainer) as scaled:
                    autograd.backward(scaled)
        trainer.step(1)

    for i in range(20):
        step(i)
    mx.nd.waitall()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for i in range(steps):
            step(i)
        mx.nd.waitall()
        times.append((time.perf_counter() - start) / steps)
    out = {"ms": statistics.median(times) * 1e3}
    if config == "mxnet fp32":
        out["macs"] = _macs(net, batches[0][0])
    return out


def _macs(net, x):
    from mxnet.amp import lists
    from mxnet.amp.graph.work import product_macs
    inputs, out = net._cached_graph
    lp16 = frozenset(lists.list_lp16_ops("bfloat16"))
    return product_macs(out, {inputs[0].name: x.shape}, lp16.__contains__)


TORCH_SCRIPT = """
import json, statistics, sys, time
import torch
units, batch = (int(v) for v in sys.argv[1].split("x"))
steps, repeat, autocast = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(units, units), torch.nn.ReLU(), torch.nn.Linear(units, units),
                          torch.nn.ReLU(), torch.nn.Linear(units, 10))
opt = torch.optim.Adam(net.parameters(), lr=0.001)
x, y = torch.randn(batch, units), torch.randint(0, 10, (batch,))
def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = torch.nn.functional.cross_entropy(net(x), y)
    loss.backward()
    opt.step()
for _ in range(20):
    step()
times = []
for _ in range(repeat):
    start = time.perf_counter()
    for _ in range(steps):
        step()
    times.append((time.perf_counter() - start) / steps)
print(json.dumps({"ms": statistics.median(times) * 1e3, "threads": torch.get_num_threads()}))
"""


def run(row, config, args):
    if config in TORCH_CONFIGS:
        return child_json([args.torch_python, "-c", TORCH_SCRIPT, row.split(":", 1)[1], str(args.steps),
                           str(args.repeat), "1" if config == "torch autocast" else "0"], args.timeout)
    return child_json([sys.executable, os.path.abspath(__file__), "--child", row, config, "--steps", str(args.steps),
                       "--repeat", str(args.repeat)], args.timeout)


def _measure(row, args):
    """{config: median ms over the rounds (or the last error)} and the graph's multiply-accumulates."""
    configs = MXNET_CONFIGS + (TORCH_CONFIGS if row.startswith("dense:") else ())
    times, errors, macs = {c: [] for c in configs}, {}, None
    for _ in range(args.rounds):
        for config in configs:
            res = run(row, config, args)
            if "error" in res:
                errors[config] = res["error"]
            else:
                times[config].append(res["ms"])
                macs = res.get("macs") or macs
    return {c: statistics.median(v) for c, v in times.items() if v}, errors, macs


def _ratio_text(ratio):
    return "%7.2fx" % ratio if ratio == ratio else "%8s" % "-"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="matrix,dense",
                        help="'matrix', 'dense' or a comma-separated list of rows (matrix:gru, dense:512x16)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=50, help="steps per timed repeat")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--timeout", type=int, default=300, help="seconds per configuration")
    parser.add_argument("--torch-python", default=sys.executable, help="interpreter with torch")
    parser.add_argument("--child", nargs=2, metavar=("ROW", "CONFIG"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(mxnet_child(args.child[0], args.child[1], args.steps, args.repeat)))
        return 0
    rows = []
    for item in args.rows.split(","):
        rows += (["matrix:" + r for r in MATRIX_ROWS] if item == "matrix" else
                 ["dense:" + r for r in DENSE_ROWS] if item == "dense" else [item])
    cpu_banner()
    print("median of %d rounds; ms per training step; ratios > 1: ours is faster" % args.rounds)
    configs = MXNET_CONFIGS + TORCH_CONFIGS
    print("%-30s %9s | %s | %8s %8s %8s" % ("row", "MACs", " | ".join("%14s" % c for c in configs), "vs fp32",
                                           "vs contrib", "vs torch"))
    ratios = []
    for row in rows:
        ms, errors, macs = _measure(row, args)
        ratio = {base: ms[base] / ms["ours"] if "ours" in ms and base in ms else float("nan")
                 for base in ("mxnet fp32", "contrib", "torch autocast")}
        ratios.append((row, ratio))
        print("%-30s %9s | %s | %s %s %s" % (
            row, "%.2gM" % (macs / 1e6) if macs else "-",
            " | ".join("%14.3f" % ms[c] if c in ms else "%14s" % ("error" if c in errors else "-") for c in configs),
            *(_ratio_text(ratio[base]) for base in ("mxnet fp32", "contrib", "torch autocast"))), flush=True)
        for config, why in errors.items():
            print("    %s: %s" % (config, why))
    for base in ("mxnet fp32", "contrib", "torch autocast"):
        known = [(r[base], row) for row, r in ratios if r[base] == r[base]]
        if known:
            low = min(known)
            print("ours against %s: median %.2fx, slowest %s at %.2fx, rows below 1.0x: %d of %d" % (
                base, statistics.median(k[0] for k in known), low[1], low[0], sum(k[0] < 1 for k in known),
                len(known)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
