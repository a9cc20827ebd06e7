"""Inference speed of converted models: ResNet-50 and a transformer encoder block on CPU.

Variants, timed in the same run (contrib's bfloat16 in a process of its own: some of MXNet's bfloat16 oneDNN
paths fail or crash on CPUs without AVX-512, and a crash must not end the benchmark):
- fp32:          the float32 symbol, plain executor
- fp32 fused:    the float32 symbol after oneDNN fusion (``optimize_for('MKLDNN')``)
- contrib bf16:  ``mxnet.contrib.amp.convert_model(..., 'bfloat16')`` (the peer we benchmark against)
- ours bf16:     ``mxnet.amp.inference.convert.convert(..., 'bfloat16', cast_params_offline=True)`` (fused by default):
  the default plan of this CPU class (``mxnet.amp.lists.cpu_class_plan``: emulated on classes a and b, native
  on c and d)
- ours bf16 unfused: the same with ``fuse=False``
- ours bf16 mxnet kernels: ``ours bf16`` with ``kernels="mxnet"`` (MXNet's matrix products and convolutions,
  not this project's oneDNN 3 kernels)
- ours bf16 native: ``ours bf16`` with ``emulate=False`` (bfloat16 kernels); only where MXNet has them (AVX-512)
  and the default plan emulates (class b)
- ours bf16 emulate: ``ours bf16`` with ``emulate=True`` (float32 kernels on bf16-rounded values, the library's
  float32 products and convolutions); only where the default plan is native
- torch fp32, torch bf16: PyTorch, in a child process of its own that never imports MXNet (which would cut
  PyTorch to one thread), under ``torch.inference_mode()`` in eval mode, float32 and
  ``torch.autocast("cpu", torch.bfloat16)``: the transformer block as ``torch.nn.TransformerEncoderLayer(512, 8,
  2048, dropout=0, batch_first=True, norm_first=False, activation="relu")`` (a note says whether PyTorch took its
  fast path, ``aten::_transformer_encoder_layer_fwd``), ResNet-50 as ``torchvision.models.resnet50()`` (NCHW);
  random weights of their own, so their ratio and deviation are to ``torch fp32``. Only where torch (and for
  ResNet-50 torchvision) imports, never a dependency: otherwise the rows say why they were skipped
Prints ms per batch (the best of --repeat runs; the runs alternate the variants, so load from other
processes hits them alike), the ratio to fp32 (>1 is faster) and the max deviation from fp32 scaled by
max |fp32 output| (PyTorch rows: to PyTorch's fp32). On CPUs without AVX-512, bfloat16 is emulated (float32
kernels, rounded values): expect it to be slower than fp32 there.

Usage: python bench/bench_inference.py [--models resnet50,transformer] [--batch 16] [--repeat 5] [--record]
    [--stand-in a|b|c]

``--record`` writes the ratios of the native and the emulated plan (whichever of ``ours bf16``,
``ours bf16 native`` and ``ours bf16 emulate`` ran them) into
``python/mxnet/amp/core/cpu_ratios.json`` under this CPU's class (mxnet.amp.core.cpu), replacing that class's rows
of the same workloads: the figures ``python -m mxnet.amp hardware`` and the bfloat16 warning quote. ``--stand-in b``
runs every variant as class (b) on a higher-class CPU (oneDNN's ISA caps, ``mxnet.amp.core.cpu.stand_in_env``);
with ``--record`` the rows go to that class, marked as a stand-in.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

from timing import add_stand_in, apply_stand_in

VARIANTS = ("fp32", "fp32 fused", "contrib bf16", "ours bf16", "ours bf16 unfused", "ours bf16 mxnet kernels",
            "ours bf16 native", "ours bf16 emulate", "torch fp32", "torch bf16")
#: PyTorch's variants: a child process without MXNet, never recorded into cpu_ratios.json.
TORCH_VARIANTS = ("torch fp32", "torch bf16")
#: Variants timed together in one process; contrib's bf16 runs alone (it fails or crashes on some CPUs).
GROUPS = (("fp32", "fp32 fused", "ours bf16", "ours bf16 unfused", "ours bf16 mxnet kernels", "ours bf16 native",
           "ours bf16 emulate"), ("contrib bf16",), TORCH_VARIANTS)
MODELS = ("resnet50", "transformer")
#: Workload names in cpu_ratios.json, and which variant is which plan there.
WORKLOADS = {"resnet50": "ResNet-50 v1 inference, batch %d, 224x224",
             "transformer": "transformer encoder block inference, %dx128x512"}
PLANS = {"ours bf16 native": "native", "ours bf16 emulate": "emulated"}
RATIOS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "mxnet", "amp", "core",
                      "cpu_ratios.json")


def build(model, batch):
    """Return ``(symbol, arg_params, aux_params, {input: array})`` of a float32 model (random weights)."""
    import mxnet as mx
    from mxnet.amp.inference.blocks import block_graph
    mx.random.seed(0)
    if model == "resnet50":
        from mxnet.gluon.model_zoo import vision
        net = vision.resnet50_v1()
        x = np.random.RandomState(0).uniform(-1, 1, (batch, 3, 224, 224)).astype(np.float32)
    else:
        net = _encoder()
        x = np.random.RandomState(0).uniform(-1, 1, (batch, 128, 512)).astype(np.float32)
    net.initialize(mx.init.Xavier())
    data = mx.nd.array(x)
    inputs, sym, params = block_graph(net, [data])
    args = {k: v for k, v in params.items() if k in sym.list_arguments()}
    aux = {k: v for k, v in params.items() if k in sym.list_auxiliary_states()}
    return sym, args, aux, {inputs[0].name: x}


def _encoder(units=512, heads=8, hidden=2048, seq=128):
    """A post-LN transformer encoder block on (batch, seq, units)."""
    from mxnet.gluon import nn, HybridBlock

    class Encoder(HybridBlock):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            with self.name_scope():
                self.q = nn.Dense(units, flatten=False)
                self.k = nn.Dense(units, flatten=False)
                self.v = nn.Dense(units, flatten=False)
                self.proj = nn.Dense(units, flatten=False)
                self.ln1 = nn.LayerNorm()
                self.ffn1 = nn.Dense(hidden, flatten=False, activation="relu")
                self.ffn2 = nn.Dense(units, flatten=False)
                self.ln2 = nn.LayerNorm()

        def hybrid_forward(self, F, x):
            d = units // heads

            def split(t):  # (B, T, C) -> (B * H, T, d)
                t = F.transpose(F.reshape(t, shape=(0, 0, heads, d)), axes=(0, 2, 1, 3))
                return F.reshape(t, shape=(-3, 0, 0))

            att = F.softmax(F.batch_dot(split(self.q(x)), split(self.k(x)), transpose_b=True) / np.sqrt(d))
            o = F.reshape(F.batch_dot(att, split(self.v(x))), shape=(-4, -1, heads, 0, 0))
            o = F.reshape(F.transpose(o, axes=(0, 2, 1, 3)), shape=(0, 0, -3))
            x = self.ln1(x + self.proj(o))
            return self.ln2(x + self.ffn2(self.ffn1(x)))

    return Encoder()


def variant_graph(variant, sym, args, aux):
    """Return ``(symbol, args, aux)`` of one variant."""
    import mxnet as mx
    if variant == "fp32":
        return sym, args, aux
    if variant == "fp32 fused":
        args, aux = dict(args), dict(aux)
        return sym.optimize_for("MKLDNN", args, aux, ctx=mx.cpu(), skip_infer=True), args, aux
    if variant == "contrib bf16":
        from mxnet.contrib import amp as contrib_amp
        return contrib_amp.convert_model(sym, args, aux, target_dtype="bfloat16")
    from mxnet.amp.inference.convert import convert
    out = convert(sym, args, aux, "bfloat16", cast_params_offline=True,
                  fuse=False if variant == "ours bf16 unfused" else None,
                  kernels="mxnet" if variant == "ours bf16 mxnet kernels" else "auto",
                  emulate={"ours bf16 emulate": True, "ours bf16 native": False}.get(variant))
    return out.symbol, out.arg_params, out.aux_params


def time_variants(model, variants, batch, repeat):
    """Time variants in this process, interleaved (load from other processes hits them alike).

    Returns ``{variant: {'seconds': best time per batch, 'output': first outputs}}``.
    """
    import mxnet as mx
    sym, args, aux, data = build(model, batch)
    runs = {}
    for name in variants:
        vsym, vargs, vaux = variant_graph(name, sym, args, aux)
        feed = dict(vargs, **{k: mx.nd.array(v) for k, v in data.items()})
        exe = vsym.bind(mx.cpu(), feed, aux_states=vaux, grad_req="null")
        out = exe.forward(is_train=False)[0]  # warm-up
        runs[name] = (exe, {"seconds": float("inf"),
                            "output": out.astype("float32").asnumpy().ravel()[:4096].tolist()})
    for _ in range(repeat):
        for exe, result in runs.values():
            start = time.perf_counter()
            exe.forward(is_train=False)[0].wait_to_read()
            result["seconds"] = min(result["seconds"], time.perf_counter() - start)
    return {name: result for name, (_, result) in runs.items()}


def time_torch(model, variants, batch, repeat):
    """Time PyTorch variants in this process (which must not import MXNet), interleaved like
    :func:`time_variants`; a row says why it was skipped where torch or torchvision does not import."""
    try:
        import torch
    except ImportError as err:
        return {v: {"error": "skipped: torch does not import (%s)" % err} for v in variants}
    torch.manual_seed(0)
    if model == "resnet50":
        try:
            import torchvision
        except ImportError as err:
            return {v: {"error": "skipped: torchvision does not import (%s)" % err} for v in variants}
        net = torchvision.models.resnet50()
        x = np.random.RandomState(0).uniform(-1, 1, (batch, 3, 224, 224)).astype(np.float32)
    else:
        net = torch.nn.TransformerEncoderLayer(512, 8, 2048, dropout=0.0, batch_first=True, norm_first=False,
                                               activation="relu")
        x = np.random.RandomState(0).uniform(-1, 1, (batch, 128, 512)).astype(np.float32)
    net.eval()
    data = torch.from_numpy(x)
    regions = {"torch fp32": None, "torch bf16": torch.bfloat16}

    def forward(name):
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=regions[name] is not None):
            return net(data)

    runs = {}
    for name in variants:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            forward(name)  # warm-up, profiled: which ops ran
        out = forward(name)  # a second warm-up, not profiled
        note = "torch %d threads" % torch.get_num_threads()
        if model == "transformer":
            fast = any(e.key == "aten::_transformer_encoder_layer_fwd" for e in prof.key_averages())
            note += ", fast path (aten::_transformer_encoder_layer_fwd) %s" % ("taken" if fast else "not taken")
        runs[name] = {"seconds": float("inf"), "output": out.float().numpy().ravel()[:4096].tolist(), "note": note}
    for _ in range(repeat):
        for name, result in runs.items():
            start = time.perf_counter()
            forward(name)
            result["seconds"] = min(result["seconds"], time.perf_counter() - start)
    return runs


def run_child(model, variants, batch, repeat, timeout):
    """Time variants in a fresh process; return their results, or {variant: {'error': ...}}."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", model, ",".join(variants), "--batch", str(batch),
           "--repeat", str(repeat)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {v: {"error": "timed out after %d s" % timeout} for v in variants}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and "activated" not in ln]
    last = lines[-1] if lines else "exit status %d" % proc.returncode
    return {v: {"error": "failed (exit %d): %s" % (proc.returncode, last[:160])} for v in variants}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--timeout", type=int, default=900, help="seconds per variant")
    parser.add_argument("--record", action="store_true",
                        help="write the bfloat16/float32 ratios into python/mxnet/amp/core/cpu_ratios.json for this "
                             "CPU class")
    add_stand_in(parser)
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "VARIANT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child and set(args.child[1].split(",")) <= set(TORCH_VARIANTS):
        # no MXNet here (a stand-in's variables came with the environment)
        print(json.dumps(time_torch(args.child[0], args.child[1].split(","), args.batch, args.repeat)))
        return 0
    apply_stand_in(args.stand_in)
    if args.child:
        result = time_variants(args.child[0], args.child[1].split(","), args.batch, args.repeat)
        print(json.dumps(result))
        return 0
    from mxnet.amp.core import support
    from mxnet.amp.core import cpu
    native, planned = support.native_support("bfloat16", "cpu"), support.plans_native("bfloat16", "cpu")
    klass = cpu.cpu_class()
    print("CPU class (%s) %s%s; the default bfloat16 plan here: %s" % (
        klass.name, klass.title, " (%s)" % cpu.stand_in() if cpu.stand_in() else "", "native kernels" if planned else
        "emulated (float32 kernels on rounded values)%s" % ("; MXNet's bf16 kernels exist" if native else "")))
    print("batch %d, best of %d interleaved runs after one warm-up" % (args.batch, args.repeat))
    skip = {"ours bf16 emulate"} if not planned else set()
    skip |= {"ours bf16 native"} if planned or not native else set()
    groups = tuple(tuple(v for v in g if v not in skip) for g in GROUPS)
    plans = dict(PLANS, **{"ours bf16": "native" if planned else "emulated"})
    recorded = {}
    for model in args.models.split(","):
        results = {}
        for group in groups:
            results.update(run_child(model, group, args.batch, args.repeat, args.timeout))
        print("\n%s" % model)
        print("%-18s | %10s | %12s | %s" % ("variant", "ms/batch", "vs fp32", "max rel dev vs fp32"))
        notes = []
        for name in VARIANTS:
            res = results.get(name, {"error": "not run: the default plan ('ours bf16') is this one here, or "
                                     "MXNet has no bf16 kernels on this CPU"})
            if "error" in res:
                print("%-18s | %s" % (name, res["error"]))
                continue
            base = results["torch fp32" if name in TORCH_VARIANTS else "fp32"]
            ref = np.array(base.get("output", []))
            ratio = base["seconds"] / res["seconds"] if "seconds" in base else float("nan")
            out = np.array(res["output"])
            dev = np.abs(out - ref).max() / np.abs(ref).max() if ref.size and out.size == ref.size else float("nan")
            print("%-18s | %10.1f | %11.2fx | %.2e" % (name, 1000 * res["seconds"], ratio, dev))
            if "note" in res:
                notes.append("%s: %s" % (name, res["note"]))
            if name in plans:
                recorded[(WORKLOADS[model] % args.batch, plans[name])] = round(ratio, 2)
        for note in notes:
            print("  %s" % note)
        if notes:
            print("  (PyTorch rows: their own random weights; 'vs fp32' and the deviation are to torch fp32)")
    if args.record:
        record(recorded, "python bench/bench_inference.py " + " ".join(argv if argv is not None else sys.argv[1:]))
    return 0


def record(ratios, command):
    """Replace this CPU class's rows of the measured workloads in cpu_ratios.json.

    ``ratios``: ``{(workload, plan): float32 time / bfloat16 time}``; bench_train_step.py records through it too.
    """
    import datetime
    from mxnet.amp.core import cpu
    if os.environ.get(cpu.CPUINFO_ENV):
        raise SystemExit("--record measures what the CPU runs, and %s only mocks its flags: unset it (--stand-in "
                         "runs a lower class)" % cpu.CPUINFO_ENV)
    klass = cpu.cpu_class()
    stand_in = cpu.stand_in()
    where = "%s, %d cores%s" % (cpu.model_name(), os.cpu_count(), ", %s" % stand_in if stand_in else "")
    with open(RATIOS) as f:
        data = json.load(f)
    rows = [r for r in data["classes"][klass.name] if (r["workload"], r["variant"]) not in ratios]
    rows += [{"workload": workload, "variant": plan, "ratio": [ratio, ratio],
              "date": datetime.date.today().isoformat(), "cpu": where, "command": command,
              "source": command.split()[1] + " --record"} for (workload, plan), ratio in sorted(ratios.items())]
    data["classes"][klass.name] = rows
    with open(RATIOS, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    print("recorded %d ratio(s) for CPU class (%s) in %s" % (len(ratios), klass.name, os.path.normpath(RATIOS)))


if __name__ == "__main__":
    sys.exit(main())
