"""One training step: fp32 vs mxnet.contrib.amp bf16 vs mxnet.amp bf16, for a vision model or a BERT-style encoder.

``--model resnet18`` (the default), ``mobilenet_v2`` or ``densenet121``: the Gluon model-zoo model (10 classes) at
``--batch`` x 3 x ``--size`` x ``--size`` (32x3x64x64), SGD with momentum; PyTorch runs torchvision's.
``--model encoder``: 4 post-LN encoder layers of 768 units, 12 heads, 3072 hidden units, 128 tokens, a 2-class head,
AdamW (this package's ``adamw``, in every configuration); ``--batch`` sequences (use 8).

Each configuration runs in its own child process (contrib's ``init`` cannot be undone); the configurations
alternate and repeat, and the table shows the median step time and its ratio to the same framework's fp32
(speed-up > 1 is faster).

``--profile`` runs each configuration once more under MXNet's profiler (operator bulking off, so that every op
is timed on its own) and oneDNN's verbose mode, and prints per step: milliseconds in forward ops, backward ops,
casts, the finite check, the optimizer and the rest (the step's wall time minus those: engine, Python), the
number of cast calls and the number of oneDNN reorders (MXNet's oneDNN 2 and this project's oneDNN 3 counted
together). Run it on an AVX-512-BF16 CPU and elsewhere to compare.

Where PyTorch imports (and for ResNet-18 torchvision; never a dependency of this project), the same step runs in
PyTorch too: ``torch_fp32`` and ``torch_bf16`` (``torch.autocast("cpu", torch.bfloat16)``), timed alike (no
profile), in child processes that never import MXNet (which would cut PyTorch to one thread); the table prints
their thread count.
``--stand-in b`` runs every configuration as CPU class (b) on a higher-class CPU (oneDNN's ISA caps);
``--record`` writes ``mxnet.amp``'s ratio into ``python/mxnet/amp/core/cpu_ratios.json`` (see bench_inference.py).

    python bench/bench_train_step.py [--model resnet18|mobilenet_v2|densenet121|encoder] [--repeats 3] [--steps 5]
        [--batch 32]
        [--size 64] [--profile] [--record] [--stand-in a|b|c]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import add_stand_in, apply_stand_in, cpu_banner  # noqa: E402

CONFIGS = ("fp32", "contrib_bf16", "amp_bf16", "torch_fp32", "torch_bf16")
#: Configurations that run only where PyTorch (and for ResNet-18 torchvision) imports: never a dependency.
TORCH_CONFIGS = ("torch_fp32", "torch_bf16")
#: The vision models: name -> (Gluon model-zoo name, torchvision name, title).
VISION = {"resnet18": ("resnet18_v1", "resnet18", "ResNet-18"),
          "mobilenet_v2": ("mobilenetv2_1.0", "mobilenet_v2", "MobileNet v2"),
          "densenet121": ("densenet121", "densenet121", "DenseNet-121")}
MODELS = tuple(VISION) + ("encoder",)
ENCODER_LAYERS, ENCODER_SEQ = 4, 128
#: Step-profile columns, in print order; an op is counted in the first category whose test it passes.
CATEGORIES = ("forward", "backward", "casts", "check", "optimizer")
_CASTS = ("amp_cast", "amp_multicast", "amp_round", "amp_multi_cast", "amp_multi_widest_cast")
_CHECKS = ("amp_multi_unscale_check", "amp_scaler_update", "multi_all_finite", "all_finite")


def category(op):
    """The step-profile category of MXNet profiler row ``op`` (None: not an operator, e.g. a C API call)."""
    if op.startswith("MX") or op.startswith("Memory") or op in ("", "Name"):
        return None
    base = op[len("_backward_"):] if op.startswith("_backward_") else op
    if base in _CASTS:
        return "casts"
    if base in _CHECKS:
        return "check"
    if op.endswith("_update"):
        return "optimizer"
    return "backward" if op.startswith("_backward") or op == "add_n" else "forward"


def _profiled(step, steps):
    """Per step: {category: ms}, wall ms, cast calls and oneDNN reorders, over ``steps`` profiled steps."""
    import ctypes
    from mxnet import profiler
    libc = ctypes.CDLL(None)
    # MXNet writes its trace when the process ends: into a temporary folder, not the working directory
    trace = os.path.join(tempfile.mkdtemp(prefix="mxnet_amp_profile_"), "profile.json")
    profiler.set_config(profile_all=True, aggregate_stats=True, filename=trace)
    sys.stdout.flush()
    libc.fflush(None)
    print("@@profile-begin", flush=True)
    profiler.set_state("run")
    start = time.perf_counter()
    for _ in range(steps):
        step()
    wall = (time.perf_counter() - start) / steps * 1e3
    profiler.set_state("stop")
    libc.fflush(None)
    print("@@profile-end", flush=True)
    ms, casts = dict.fromkeys(CATEGORIES, 0.0), 0
    for line in profiler.dumps(reset=True).splitlines():
        parts = line.split()
        if len(parts) < 6:
            continue
        try:
            count, total = int(parts[-5]), float(parts[-4])
        except ValueError:
            continue
        cat = category(" ".join(parts[:-5]))
        if cat is not None:
            ms[cat] += total / steps
            casts += count / steps if cat == "casts" else 0
    return {"ms": ms, "wall_ms": wall, "casts": casts}


def build(model, batch, size):
    """``(net, data, labels, optimizer, options)`` of one workload (uninitialised net)."""
    import mxnet as mx
    from mxnet import gluon
    mx.random.seed(0)
    if model == "encoder":
        from mxnet.amp.training import adamw  # noqa: F401  (registers the optimizer)
        from bench_inference import _encoder
        net = gluon.nn.HybridSequential()
        for _ in range(ENCODER_LAYERS):
            net.add(_encoder(units=768, heads=12, hidden=3072, seq=ENCODER_SEQ))
        net.add(gluon.nn.Dense(2, flatten=True))
        x = mx.nd.random.uniform(-1, 1, shape=(batch, ENCODER_SEQ, 768))
        y = mx.nd.array(mx.nd.random.randint(0, 2, shape=(batch,)).asnumpy())
        return net, x, y, "adamw", {"learning_rate": 1e-4}
    net = gluon.model_zoo.vision.get_model(VISION[model][0], classes=10)
    x = mx.nd.random.uniform(shape=(batch, 3, size, size))
    y = mx.nd.array(mx.nd.random.randint(0, 10, shape=(batch,)).asnumpy())
    return net, x, y, "sgd", {"learning_rate": 0.01, "momentum": 0.9}


def torch_step(model, batch, size, autocast):
    """The same training step in PyTorch, as a function (``autocast``: ``torch.autocast("cpu", bfloat16)``)."""
    import contextlib
    import torch
    torch.manual_seed(0)
    if model == "encoder":
        layer = torch.nn.TransformerEncoderLayer(768, 12, 3072, dropout=0.0, batch_first=True)
        body = torch.nn.TransformerEncoder(layer, ENCODER_LAYERS, enable_nested_tensor=False)
        net = torch.nn.Sequential(body, torch.nn.Flatten(), torch.nn.Linear(ENCODER_SEQ * 768, 2))
        x = torch.rand(batch, ENCODER_SEQ, 768) * 2 - 1
        opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    else:
        import torchvision
        net = getattr(torchvision.models, VISION[model][1])(num_classes=10)
        x = torch.rand(batch, 3, size, size)
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    y = torch.randint(0, 2 if model == "encoder" else 10, (batch,))
    region = (lambda: torch.autocast("cpu", torch.bfloat16)) if autocast else contextlib.nullcontext

    def step(mark=_no_mark):
        opt.zero_grad()
        with region():
            loss = torch.nn.functional.cross_entropy(net(x), y)
        mark("forward")
        loss.backward()
        mark("backward")
        opt.step()
        mark("step")
    return step


def _no_mark(phase):
    """The phase hook of a step that nobody watches (``bench_memory.py`` passes one that reads RSS)."""


def torch_missing(model, python=None):
    """Why PyTorch's rows of ``model`` cannot run here (torch, or torchvision for ResNet-18, does not import in a
    fresh process of ``python``, by default this one's interpreter), or None where they can."""
    code = "import torch" + ("; import torchvision" if model in VISION else "")
    proc = subprocess.run([python or sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    return None if proc.returncode == 0 else (lines[-1] if lines else "exit status %d" % proc.returncode)[:120]


def _child(config, steps, batch, size, profile=False, model="resnet18"):
    if config in TORCH_CONFIGS:  # this process never imports MXNet
        import torch
        return _timed(torch_step(model, batch, size, config == "torch_bf16"), steps), torch.get_num_threads()
    import mxnet as mx
    from mxnet import autograd, gluon
    if config == "contrib_bf16":
        from mxnet.contrib import amp as peer
        peer.init(target_dtype="bfloat16")
    elif config == "amp_bf16":
        from mxnet import amp
        amp.init("bfloat16")
    net, x, y, optimizer, options = build(model, batch, size)
    net.initialize(mx.init.Xavier())
    net.hybridize(static_alloc=True, static_shape=True)
    trainer = gluon.Trainer(net.collect_params(), optimizer, options)
    if config == "contrib_bf16":
        peer.init_trainer(trainer)
    elif config == "amp_bf16":
        amp.init_trainer(trainer)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    def step():
        with autograd.record():
            loss = loss_fn(net(x), y)
            if config == "contrib_bf16":
                with peer.scale_loss(loss, trainer) as scaled:
                    autograd.backward(scaled)
            elif config == "amp_bf16":
                with amp.scale_loss(loss, trainer) as scaled:
                    autograd.backward(scaled)
            else:
                loss.backward()
        trainer.step(batch)
        mx.nd.waitall()
    if profile:
        step()
        step()
        return _profiled(step, steps)
    return _timed(step, steps), None


def _timed(step, steps):
    """Median seconds of ``steps`` calls of ``step`` after one warm-up call (graph build, kernel selection)."""
    step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _run_child(config, args, profile=False):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", config, "--steps", str(args.steps),
           "--batch", str(args.batch), "--size", str(args.size), "--model", args.model] + (
               ["--profile"] if profile else [])
    env = dict(os.environ)
    if profile:  # every op timed on its own; oneDNN 2 (MXNet) and 3 (this project) print each primitive run
        env.update(MXNET_EXEC_BULK_EXEC_TRAIN="0", MXNET_EXEC_BULK_EXEC_INFERENCE="0", DNNL_VERBOSE="1",
                   ONEDNN_VERBOSE="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    inside, reorders = False, 0
    for line in proc.stdout.splitlines():
        if line.startswith("@@profile-"):
            inside = line == "@@profile-begin"
        elif inside and ",exec," in line and ",reorder," in line:
            reorders += 1
        elif line.startswith("{"):
            row = json.loads(line)
            if profile and "error" not in row:
                row["reorders"] = reorders / args.steps
            return row
    tail = (proc.stderr.strip().splitlines() or ["exit code %d" % proc.returncode])[-1]
    return {"config": config, "error": tail[:160]}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=MODELS, default="resnet18")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--child", choices=CONFIGS)
    parser.add_argument("--profile", action="store_true", help="also print a per-step time split")
    parser.add_argument("--record", action="store_true",
                        help="write mxnet.amp's ratio to fp32 into python/mxnet/amp/core/cpu_ratios.json for this CPU "
                             "class (the default plan's row of this workload)")
    add_stand_in(parser)
    args = parser.parse_args()
    apply_stand_in(args.stand_in)
    if args.child:
        try:
            result = _child(args.child, args.steps, args.batch, args.size, args.profile, args.model)
            print(json.dumps(dict(result, config=args.child) if args.profile
                             else {"config": args.child, "seconds": result[0], "threads": result[1]}))
        except Exception as err:  # report the peer's failure as a row instead of a traceback
            print(json.dumps({"config": args.child, "error": ("%s: %s" % (type(err).__name__, err))[:160]}))
        return
    no_torch = torch_missing(args.model)
    configs = [c for c in CONFIGS if c not in TORCH_CONFIGS or not no_torch]
    cpu_banner()
    results = {c: [] for c in configs}
    errors, threads = {}, {}
    for _ in range(args.repeats):
        for config in configs:
            row = _run_child(config, args)
            if "error" in row:
                errors[config] = row["error"]
            else:
                results[config].append(row["seconds"])
                if row.get("threads"):
                    threads[config] = row["threads"]
    base = statistics.median(results["fp32"]) if results["fp32"] else None
    what = ("%s training step, batch %d x 3 x %d x %d" % (VISION[args.model][2], args.batch, args.size, args.size)
            if args.model in VISION else "encoder training step (%d layers of 768, 12 heads), batch %d x %d"
            % (ENCODER_LAYERS, args.batch, ENCODER_SEQ))
    print("%s, %d repeats x %d steps, %s" % (what, args.repeats, args.steps, time.strftime("%Y-%m-%d")))
    print("%-14s %12s %16s" % ("config", "median s", "speed vs fp32"))
    if set(TORCH_CONFIGS) & set(configs):
        print("(PyTorch rows: speed vs torch_fp32)")
    if len(configs) < len(CONFIGS):
        print("(not run: %s; %s)" % (", ".join(sorted(set(CONFIGS) - set(configs))), no_torch))
    for config in configs:
        if results[config]:
            med = statistics.median(results[config])
            own = (statistics.median(results["torch_fp32"]) if results.get("torch_fp32") else None) \
                if config in TORCH_CONFIGS else base  # each framework against its own float32
            ratio = "%.2fx" % (own / med) if own else "n/a"
            print("%-14s %12.4f %16s%s" % (config, med, ratio, "  (torch %d threads, a process without MXNet)"
                                           % threads[config] if config in threads else ""))
        else:
            print("%-14s %12s %16s  %s" % (config, "failed", "-", errors.get(config, "")))
    if args.record and base and results["amp_bf16"]:
        from bench_inference import record
        from mxnet.amp.core.support import plans_native
        workload = ("%s training step, %dx3x%dx%d, SGD momentum" % (VISION[args.model][2], args.batch, args.size,
                                                                      args.size)
                    if args.model in VISION else "encoder training step, %dx%dx768, AdamW" % (args.batch,
                                                                                                  ENCODER_SEQ))
        plan = "native" if plans_native("bfloat16", "cpu") else "emulated"
        record({(workload, plan): round(base / statistics.median(results["amp_bf16"]), 2)},
               "python bench/bench_train_step.py " + " ".join(sys.argv[1:]))
    if args.profile:
        print_profile([_run_child(config, args, profile=True) for config in configs if config not in TORCH_CONFIGS])


def print_profile(rows):
    """The ``--profile`` table: ms per step by category, wall time, casts and oneDNN reorders per step."""
    print("\nstep profile (ms per step; MXNet profiler, bulking off, so slower than the timed steps above)")
    print("%-14s %s %9s %8s %10s" % ("config", " ".join("%9s" % c for c in CATEGORIES + ("rest",)), "wall",
                                     "casts", "reorders"))
    for row in rows:
        if "error" in row:
            print("%-14s failed: %s" % (row["config"], row["error"]))
            continue
        rest = row["wall_ms"] - sum(row["ms"].values())
        print("%-14s %s %9.1f %8.0f %10.0f" % (row["config"], " ".join("%9.1f" % v for v in
                                                                       [row["ms"][c] for c in CATEGORIES] + [rest]),
                                               row["wall_ms"], row["casts"], row["reorders"]))


if __name__ == "__main__":
    main()
