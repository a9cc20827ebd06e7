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

``--paired`` times float32 and ours only, in one process per round that alternates blocks of steps of the two
(:func:`paired_child`): on a machine whose processes differ by a third in speed from one start to the next, the
ratio within a process is the figure to trust for models whose step takes a millisecond.
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


def _setup(row, config, init=True):
    """``(step, net, batches)`` of one MXNet configuration: ``step(i)`` runs training step ``i``; ``init=False``
    leaves ``amp.init`` to the caller."""
    import mxnet as mx
    from mxnet import autograd, gluon
    kind, name = row.split(":", 1)
    amp = None
    if config in ("ours", "ours, no floor"):
        from mxnet import amp
        if init:
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

    return step, net, batches


def _block(step, steps, warmup=20):
    """Seconds per step over ``steps`` steps after ``warmup`` untimed ones (one sync at each end)."""
    import mxnet as mx
    for i in range(warmup):
        step(i)
    mx.nd.waitall()
    start = time.perf_counter()
    for i in range(steps):
        step(i)
    mx.nd.waitall()
    return (time.perf_counter() - start) / steps


def mxnet_child(row, config, steps, repeat):
    """Milliseconds per training step of one MXNet configuration (float32: and the graph's multiply-accumulates)."""
    import warnings
    warnings.filterwarnings("ignore")
    step, net, batches = _setup(row, config)
    times = [_block(step, steps, warmup=20 if r == 0 else 0) for r in range(repeat)]
    out = {"ms": statistics.median(times) * 1e3}
    if config == "mxnet fp32":
        out["macs"] = _macs(net, batches[0][0])
    return out


def paired_child(row, steps, repeat):
    """float32 and ours in one process, in alternating blocks of steps: ``amp.init`` before each block of ours and
    ``amp.reset`` after it (both graphs are rebuilt in the warm-up steps). Returns the medians and the median of the
    blocks' ratios, free of the spread between processes."""
    import warnings
    from mxnet import amp
    warnings.filterwarnings("ignore")
    fp32 = _setup(row, "mxnet fp32")[0]
    amp.init("bfloat16")
    ours = _setup(row, "ours", init=False)[0]
    amp.reset()
    times = {"mxnet fp32": [], "ours": []}
    for _ in range(repeat):
        times["mxnet fp32"].append(_block(fp32, steps))
        amp.init("bfloat16")
        times["ours"].append(_block(ours, steps))
        amp.reset()
    ratios = [a / b for a, b in zip(times["mxnet fp32"], times["ours"])]
    return {"mxnet fp32": statistics.median(times["mxnet fp32"]) * 1e3,
            "ours": statistics.median(times["ours"]) * 1e3, "ratio": statistics.median(ratios)}


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


def _paired_table(rows, args):
    """The --paired table: per row, the medians over the rounds of float32's and ours' step and of their ratio."""
    print("float32 and ours alternating in one process per round (%d rounds, %d blocks of %d steps each); ms per "
          "training step; ratio > 1: ours is faster" % (args.rounds, args.repeat, args.steps))
    print("%-30s | %10s | %10s | %8s | %s" % ("row", "fp32 ms", "ours ms", "ratio", "ratio per round"))
    found = []
    for row in rows:
        results = [child_json([sys.executable, os.path.abspath(__file__), "--child-paired", row, "--steps",
                               str(args.steps), "--repeat", str(args.repeat)], args.timeout)
                   for _ in range(args.rounds)]
        good = [r for r in results if "error" not in r]
        if not good:
            print("%-30s | error: %s" % (row, results[-1]["error"]))
            continue
        ratio = statistics.median(r["ratio"] for r in good)
        found.append((ratio, row))
        print("%-30s | %10.3f | %10.3f | %7.2fx | %s" % (
            row, statistics.median(r["mxnet fp32"] for r in good), statistics.median(r["ours"] for r in good), ratio,
            " ".join("%.2f" % r["ratio"] for r in good)), flush=True)
    if found:
        print("ours against mxnet fp32, paired: median %.2fx, slowest %s at %.2fx, rows below 1.0x: %d of %d" % (
            statistics.median(f[0] for f in found), min(found)[1], min(found)[0], sum(f[0] < 1 for f in found),
            len(found)))
    return 0


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
    parser.add_argument("--paired", action="store_true",
                        help="float32 and ours only, alternating in one process per round (paired_child)")
    parser.add_argument("--child", nargs=2, metavar=("ROW", "CONFIG"), help=argparse.SUPPRESS)
    parser.add_argument("--child-paired", metavar="ROW", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(mxnet_child(args.child[0], args.child[1], args.steps, args.repeat)))
        return 0
    if args.child_paired:
        print(json.dumps(paired_child(args.child_paired, args.steps, args.repeat)))
        return 0
    rows = []
    for item in args.rows.split(","):
        rows += (["matrix:" + r for r in MATRIX_ROWS] if item == "matrix" else
                 ["dense:" + r for r in DENSE_ROWS] if item == "dense" else [item])
    cpu_banner()
    if args.paired:
        return _paired_table(rows, args)
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
