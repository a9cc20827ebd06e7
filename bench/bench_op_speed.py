"""The speed of MXNet 1.9.1's bfloat16 kernels against float32, for every op that bfloat16 reaches natively on a CPU:
the evidence behind the plan's float32 islands (``mxnet.amp.lists.float32_island_ops``).

Each op of ``mxnet.amp.lists.speed_timed_ops`` (one per alias group) is called as the value probe calls it
(``mxnet.amp.cli.probe.op_spec``), its inputs scaled to a MobileNet v2 activation at batch 1: the probe's batch,
channel and spatial sizes (2, 3, 4 in its 2x3x4x4 inputs and their parameters) become 1, 96 and 112 (1x96x112x112,
1.2 M values; the probe's own shapes where the scaled call fails, marked ``probe shapes``), three ways, alternating
in one process, best of ``--repeat`` (fewer rounds where the three calls take over 3 s):

* float32: float32 inputs, MXNet's float32 kernel;
* bfloat16: bfloat16 inputs, MXNet's bfloat16 kernel (what the graph runs where bfloat16 reaches the op);
* island: bfloat16 inputs cast to float32, the float32 kernel, its floating outputs cast back to bfloat16 (what
  the graph runs in a float32 island).

The verdict is ``bfloat16`` where the bfloat16 call took at most ``mxnet.amp.lists.SPEED_MARGIN`` (1.1) times as long
as the island, else ``float32``; ``untimed`` where a call failed. The ops run in child processes of ``--batch`` ops
each, so that a kernel that kills its process marks only its ops (they are then run one per child). PyTorch rows
(clip, relu, add, sigmoid, mul and mean in float32 and bfloat16 on the same shape) follow where torch imports, or
from ``--torch-python``'s interpreter.

``--record`` writes the rows of this CPU's class into ``python/mxnet/amp/lists/op_speed_bf16_cpu.json``.

    python bench/bench_op_speed.py [--ops clip,relu] [--repeat 10] [--record] [--torch-python PATH]
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import best_of  # noqa: E402

EVIDENCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "mxnet", "amp", "lists",
                        "op_speed_bf16_cpu.json")
#: The probe's sizes -> the sizes timed (batch, channels, height and width of a MobileNet v2 activation at batch 1).
SIZES = {2: 1, 3: 96, 4: 112}
#: PyTorch ops beside MXNet's: name -> (expression on x and y, MXNet's op).
TORCH_OPS = {"clip": ("torch.clamp(x, 0, 6)", "clip"), "relu": ("torch.relu(x)", "relu"),
             "add": ("x + y", "elemwise_add"), "sigmoid": ("torch.sigmoid(x)", "sigmoid"),
             "mul": ("x * y", "elemwise_mul"), "mean over H, W": ("x.mean(dim=(2, 3))", "mean")}


def timed_groups(names=None):
    """``{name: alias group}`` of the ops to time: alias groups with an op of ``speed_timed_ops``, each named by its
    first alias without a leading underscore (``clip``, not ``_npi_clip``), else its first."""
    from mxnet.amp import lists
    from mxnet.amp.cli.probe import op_groups
    timed = lists.speed_timed_ops("bfloat16", "cpu")
    groups = {min(g, key=lambda n: (n.startswith("_"), n)): g for g in op_groups() if set(g) & timed}
    return {n: g for n, g in groups.items() if names is None or set(g) & set(names)}


def _scaled(shape):
    if shape and isinstance(shape[0], str):
        return (shape[0], _scaled(shape[1]))
    return tuple(SIZES.get(d, d) for d in shape)


def _inputs(shapes, seed):
    """Float32 and bfloat16 inputs holding the same values (integer inputs shared)."""
    import mxnet as mx
    import numpy as np
    from mxnet.amp.base.dtypes import BFLOAT16
    rng = np.random.RandomState(seed)
    f32, low, floating = [], [], []
    for shape in shapes:
        kind, shape = shape if isinstance(shape[0], str) else ("data", shape)
        if kind == "lengths":
            values = mx.nd.array(rng.randint(1, 4, shape))
        else:
            values = mx.nd.array(rng.uniform(0.1, 0.9, shape))
        if kind in ("int32", "bool"):
            arr = values.astype(kind)
            f32.append(arr), low.append(arr), floating.append(False)
        elif kind == "float32":
            f32.append(values), low.append(values), floating.append(False)
        else:
            f32.append(values), low.append(mx.nd.amp_cast(values, dtype=BFLOAT16)), floating.append(True)
    return f32, low, floating


def time_op(group, repeat, scaled):
    """``{float32_ms, bfloat16_ms, island_ms, verdict}`` of one alias group, or ``{verdict: untimed, why}``."""
    import mxnet as mx
    from mxnet.ndarray._internal import _imperative_invoke
    from mxnet.amp import lists
    from mxnet.amp.base.dtypes import BFLOAT16, dtype_name
    from mxnet.amp.base.registry import op_handle
    from mxnet.amp.cli.probe import op_spec
    spec = op_spec(sorted(group))
    if spec is None:
        return {"verdict": "untimed", "why": "needs attributes the probe has no call for"}
    shapes, attrs = [_scaled(s) if scaled else s for s in spec[0]], spec[1]
    handle, keys, vals = op_handle(sorted(group)[0]), list(attrs), [str(v) for v in attrs.values()]

    def call(inputs):
        out = _imperative_invoke(handle, inputs, keys, vals, None, False, True)
        outs = out if isinstance(out, (list, tuple)) else [out]
        for o in outs:
            o.wait_to_read()
        return outs

    f32, low, floating = _inputs(shapes, 0)

    def island():
        outs = call([mx.nd.amp_cast(a, dtype="float32") if f else a for a, f in zip(low, floating)])
        for o in outs:
            if dtype_name(o.dtype) == "float32":
                mx.nd.amp_cast(o, dtype=BFLOAT16).wait_to_read()
    variants = {"float32": lambda: call(f32), "bfloat16": lambda: call(low), "island": island}
    try:
        first = {name: _seconds(func) for name, func in variants.items()}  # the warm-up, timed
        # slow kernels (MXNet's numpy-mode bfloat16 loops take seconds here) get fewer rounds: about 3 s an op
        rounds = max(1, min(repeat, int(3.0 / max(sum(first.values()), 1e-9))))
        best = best_of(variants, rounds, inner=1) if rounds > 1 else first
    except Exception as err:  # an MXNetError or a TypeError is a result here
        return {"verdict": "untimed", "why": str(err).strip().splitlines()[-1][:160]}
    row = {k + "_ms": round(v * 1e3, 4) for k, v in best.items()}
    row["verdict"] = "bfloat16" if best["bfloat16"] <= lists.SPEED_MARGIN * best["island"] else "float32"
    row["shapes"] = [list(s[1] if isinstance(s[0], str) else s) for s in shapes]
    row["scaled"] = scaled
    return row


def _seconds(func):
    start = time.perf_counter()
    func()
    return time.perf_counter() - start


def child(names, repeat, scaled):
    """Time each named alias group in this process: one JSON line each (the probe's shapes where the scaled call
    fails)."""
    groups = timed_groups(set(names))
    for name in names:
        row = time_op(groups[name], repeat, scaled)
        if scaled and row["verdict"] == "untimed":
            row = time_op(groups[name], repeat, False)
        print(json.dumps(dict(row, op=name)), flush=True)


def _run(names, repeat, timeout, scaled=True):
    """Rows of ``names`` from child processes. A child that dies leaves its unfinished ops to one child each, and an
    op whose own child dies is timed at the probe's shapes (MXNet 1.9.1's Reshape kills the process on a target shape
    that does not fit)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--repeat", str(repeat)] + ([] if scaled else ["--probe-shapes"])
    cmd += ["--child"]
    try:
        proc = subprocess.run(cmd + list(names), capture_output=True, text=True, timeout=timeout)
        out, code = proc.stdout, proc.returncode
    except subprocess.TimeoutExpired as err:
        out, code = (err.stdout or b"").decode() if isinstance(err.stdout, bytes) else (err.stdout or ""), "timeout"
    rows = {}
    for line in out.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            rows[row.pop("op")] = row
    left = [n for n in names if n not in rows]
    if left and len(names) == 1:
        if scaled:
            return _run(left, repeat, timeout, scaled=False)
        return {left[0]: {"verdict": "untimed", "why": "the child process ended (%s)" % code}}
    for name in left:
        rows.update(_run([name], repeat, timeout))
    return rows


def torch_rows(python, shape, repeat):
    """PyTorch's milliseconds per TORCH_OPS op in float32 and bfloat16 (2 threads), or None."""
    script = """
import json, sys, time, torch
torch.set_num_threads(2)
shape, repeat, ops = json.loads(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
rows = {}
for name, expr in ops.items():
    row = {}
    for dtype in ("float32", "bfloat16"):
        x = torch.rand(shape).to(getattr(torch, dtype)); y = torch.rand(shape).to(getattr(torch, dtype))
        for _ in range(3):
            eval(expr)
        best = float("inf")
        for _ in range(max(repeat, 20)):
            t = time.perf_counter(); eval(expr); best = min(best, time.perf_counter() - t)
        row[dtype + "_ms"] = best * 1e3
    rows[name] = row
print(json.dumps({"version": torch.__version__, "rows": rows}))
"""
    ops = {name: expr for name, (expr, _) in TORCH_OPS.items()}
    try:
        proc = subprocess.run([python, "-c", script, json.dumps(list(shape)), str(repeat), json.dumps(ops)],
                              capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def record(rows, groups, command):
    """Replace this CPU class's table in op_speed_bf16_cpu.json."""
    from mxnet.amp.core import cpu
    with open(EVIDENCE) as f:
        data = json.load(f)
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=os.path.dirname(EVIDENCE)).stdout.strip() or None
    except OSError:
        commit = None
    name = cpu.cpu_class().name
    data["classes"][name] = {
        "date": datetime.date.today().isoformat(), "commit": commit, "command": command,
        "cpu": "%s, %d cores%s" % (cpu.model_name(), os.cpu_count(), ", %s" % cpu.stand_in() if cpu.stand_in() else ""),
        "ops": {op: dict(rows[op], aliases=sorted(set(groups[op]) - {op})) for op in sorted(rows)}}
    with open(EVIDENCE, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
    print("recorded class (%s) in %s" % (name, os.path.normpath(EVIDENCE)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", help="comma-separated ops (default: every op of lists.speed_timed_ops)")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--probe-shapes", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=40, help="ops per child process")
    parser.add_argument("--timeout", type=int, default=60, help="seconds per child process")
    parser.add_argument("--record", action="store_true", help="write this class's rows into the evidence file")
    parser.add_argument("--torch-python", default=sys.executable, help="interpreter with torch, for its rows")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.repeat, not args.probe_shapes)
        return 0
    from timing import cpu_banner
    if not cpu_banner():
        print("this CPU has no bfloat16 arithmetic (class (a) or (b)): MXNet's bfloat16 kernels are not what the "
              "default plan runs here; the table is recorded per class")
    if args.record and args.ops:
        parser.error("--record writes a whole table: leave --ops out")
    groups = timed_groups(set(args.ops.split(",")) if args.ops else None)
    names = sorted(groups)
    rows = {}
    for start in range(0, len(names), args.batch):
        rows.update(_run(names[start:start + args.batch], args.repeat, args.timeout))
    print("\n%d ops, best of %d (ms); inputs at 1x96x112x112 unless marked" % (len(rows), args.repeat))
    print("%-34s | %9s | %9s | %9s | %9s | %s" % ("op", "float32", "bfloat16", "island", "bf16/fp32", "verdict"))
    for op in names:
        row = rows[op]
        if row["verdict"] == "untimed":
            print("%-34s | %9s | %9s | %9s | %9s | untimed: %s" % (op, "-", "-", "-", "-", row["why"]))
            continue
        probe = "" if row["scaled"] else " (probe shapes)"
        print("%-34s | %9.3f | %9.3f | %9.3f | %8.2fx | %s%s" % (
            op, row["float32_ms"], row["bfloat16_ms"], row["island_ms"], row["bfloat16_ms"] / row["float32_ms"],
            row["verdict"], probe))
    verdicts = [r["verdict"] for r in rows.values()]
    print("\nbfloat16 %d, float32 islands %d, untimed %d" % tuple(verdicts.count(v)
                                                                 for v in ("bfloat16", "float32", "untimed")))
    torch = torch_rows(args.torch_python, _scaled((2, 3, 4, 4)), args.repeat)
    if torch is None:
        print("PyTorch: not importable by %s (--torch-python)" % args.torch_python)
    else:
        print("\nPyTorch %s, same shape (ms): op | float32 | bfloat16 | MXNet bfloat16 as planned" % torch["version"])
        for name, (_, op) in TORCH_OPS.items():
            t, ours = torch["rows"][name], rows.get(op)
            planned = ("-" if ours is None or ours["verdict"] == "untimed" else "%.3f" % (
                ours["bfloat16_ms"] if ours["verdict"] == "bfloat16" else ours["island_ms"]))
            print("%-16s | %8.3f | %8.3f | %s" % (name, t["float32_ms"], t["bfloat16_ms"], planned))
    if args.record:
        record(rows, groups, "python bench/bench_op_speed.py " + " ".join(argv if argv is not None
                                                                                else sys.argv[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
