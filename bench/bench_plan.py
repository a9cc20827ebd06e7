"""Per op, on each CPU class this machine can run: bfloat16 kernels (native) against float32 kernels on
bf16-rounded values (emulated), the two plans a CPU class's default chooses between.

Each op of the models the other benches time (the matrix products of a BERT-base layer, the attention products,
ResNet-50's convolutions) runs as a one-op graph converted with ``mxnet.amp.inference.convert.convert(...,
cast_params_offline=True)``, once with ``emulate=False`` and once with ``emulate=True``, alternating in one
process, best of ``--repeat`` runs after a warm-up; a child process per CPU class: this CPU's own class and
each lower one it stands in for (``mxnet.amp.core.cpu.stand_in_env``: oneDNN's ISA caps). Class (a) has no bfloat16
kernels, so it has no native column. The table gives milliseconds per call, the ratio emulated / native (> 1:
native is faster) and the faster plan; the last column says whether the class's default plan
(``mxnet.amp.lists.cpu_class_plan``) is the faster one for that op.

``--record`` writes the rows into ``python/mxnet/amp/lists/cpu_op_evidence.json``, replacing the rows of the
classes measured (the evidence behind ``CPU_CLASS_PLANS``; a test checks that every class's plan is the faster
one for every op measured there).

    python bench/bench_plan.py [--classes b,c] [--repeat 5] [--record]
"""
import argparse
import datetime
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import best_of, child_json  # noqa: E402

EVIDENCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "mxnet", "amp", "lists",
                        "cpu_op_evidence.json")

#: (label, op, input shape, op attributes): the shapes of BERT-base (batch 8 x 128 tokens) and ResNet-50
#: (batch 16).
CASES = (
    ("BERT-base qkv 768->768", "FullyConnected", (1024, 768), {"num_hidden": 768}),
    ("BERT-base ffn1 768->3072", "FullyConnected", (1024, 768), {"num_hidden": 3072}),
    ("BERT-base ffn2 3072->768", "FullyConnected", (1024, 3072), {"num_hidden": 768}),
    ("BERT-base scores QK^T, 96 heads", "batch_dot", (96, 128, 64), {"transpose_b": True}),
    ("BERT-base context AV, 96 heads", "batch_dot", (96, 128, 128), {}),
    ("ResNet-50 3x3 64->64 at 56x56", "Convolution", (16, 64, 56, 56),
     {"num_filter": 64, "kernel": (3, 3), "pad": (1, 1)}),
    ("ResNet-50 1x1 256->64 at 56x56", "Convolution", (16, 256, 56, 56), {"num_filter": 64, "kernel": (1, 1)}),
    ("ResNet-50 3x3 256->256 at 14x14", "Convolution", (16, 256, 14, 14),
     {"num_filter": 256, "kernel": (3, 3), "pad": (1, 1)}),
)


def _graph(op, shape, attrs):
    """``(symbol, args, feed)`` of a one-op graph with random float32 operands."""
    import mxnet as mx
    rng = np.random.RandomState(0)
    data = mx.sym.var("data")
    if op == "batch_dot":
        other = (shape[0], shape[1], shape[2]) if attrs.get("transpose_b") else (shape[0], shape[2], 64)
        sym = mx.sym.batch_dot(data, mx.sym.var("rhs"), name="op", **attrs)
        args = {"rhs": mx.nd.array(rng.uniform(-1, 1, other))}
    else:
        sym = getattr(mx.sym, op)(data, name="op", **attrs)
        arg_shapes, _, _ = sym.infer_shape(data=shape)
        args = {k: mx.nd.array(rng.uniform(-1, 1, s)) for k, s in zip(sym.list_arguments(), arg_shapes)
                if k != "data"}
    return sym, args, {"data": mx.nd.array(rng.uniform(-1, 1, shape))}


def measure(repeat):
    """Time every case's two plans in this process: ``[{label, op, native_ms, emulated_ms}]``."""
    import mxnet as mx
    from mxnet.amp.inference.convert import convert
    from mxnet.amp.core.support import native_support
    rows = []
    for label, op, shape, attrs in CASES:
        sym, args, feed = _graph(op, shape, attrs)
        plans = ("native", "emulated") if native_support("bfloat16", "cpu") else ("emulated",)
        calls = {}
        for plan in plans:
            out = convert(sym, args, {}, "bfloat16", cast_params_offline=True, emulate=plan == "emulated")
            exe = out.symbol.bind(mx.cpu(), dict(out.arg_params, **feed), grad_req="null")
            calls[plan] = lambda exe=exe: exe.forward(is_train=False)[0].wait_to_read()
        best = best_of(calls, repeat, inner=1)
        rows.append(dict(label=label, op=op, **{"%s_ms" % p: round(1000 * t, 3) for p, t in best.items()}))
    return rows


def _run_class(name, repeat):
    from mxnet.amp.core import cpu
    env = dict(os.environ, **cpu.stand_in_env(name))
    for key in ("MXNET_AMP_EMULATE", cpu.CPUINFO_ENV):
        env.pop(key, None)
    return child_json([sys.executable, os.path.abspath(__file__), "--child", "--repeat", str(repeat)], 1800, env)


def record(results, command):
    """Replace the measured classes' rows of cpu_op_evidence.json."""
    from mxnet.amp.core import cpu
    with open(EVIDENCE) as f:
        data = json.load(f)
    for name, result in results.items():
        data["classes"][name] = {"date": datetime.date.today().isoformat(), "cpu": result["cpu"],
                                 "command": command, "ops": result["rows"]}
    with open(EVIDENCE, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    print("recorded classes %s in %s (CPU %s)" % (", ".join(sorted(results)), os.path.normpath(EVIDENCE),
                                                  cpu.model_name()))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", help="classes to run (default: this CPU's and every lower one)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--record", action="store_true", help="write the rows into lists/cpu_op_evidence.json")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    from mxnet.amp import lists
    from mxnet.amp.core import cpu
    if args.child:
        print(json.dumps({"rows": measure(args.repeat), "cpu": "%s, %d cores%s" % (
            cpu.model_name(), os.cpu_count(), ", %s" % cpu.stand_in() if cpu.stand_in() else "")}))
        return 0
    real = cpu.hardware_class()
    names = args.classes.split(",") if args.classes else [c.name for c in cpu.CLASSES[:cpu.CLASSES.index(real) + 1]]
    for name in names:
        cpu.stand_in_env(name)  # refuses a class above this CPU's before anything runs
    print("CPU: %s, class (%s); best of %d, %s" % (cpu.model_name(), real.name, args.repeat,
                                                   datetime.date.today().isoformat()))
    results = {}
    for name in names:
        result = _run_class(name, args.repeat)
        if "error" in result:
            print("\nclass (%s): %s" % (name, result["error"]))
            continue
        results[name] = result
        plan = lists.cpu_class_plan("bfloat16", name)[0]
        print("\nclass (%s) (%s); default plan: %s" % (name, result["cpu"], plan))
        print("%-34s | %10s | %11s | %17s | %s" % ("op", "native ms", "emulated ms", "emulated / native",
                                                   "default plan is the faster"))
        for row in result["rows"]:
            if "native_ms" not in row:
                print("%-34s | %10s | %11.2f | %17s | %s" % (row["label"], "-", row["emulated_ms"], "-",
                                                             "yes (no bf16 kernels)"))
                continue
            ratio = row["emulated_ms"] / row["native_ms"]
            faster = "native" if ratio > 1 else "emulated"
            print("%-34s | %10.2f | %11.2f | %16.2fx | %s" % (row["label"], row["native_ms"], row["emulated_ms"],
                                                              ratio, "yes" if faster == plan else "NO"))
    if args.record and results:
        record(results, "python bench/bench_plan.py " + " ".join(argv if argv is not None else sys.argv[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
