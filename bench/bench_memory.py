"""Peak memory of training: fp32 vs mxnet.contrib.amp bf16 vs mxnet.amp bf16 (and PyTorch where installed).

One child process per configuration and workload, so that each peak (``VmHWM``, the process's high-water RSS)
is its own. The workloads:

- ``resnet18-32``, ``resnet18-128``: ResNet-18 v1 (10 classes) at 64x64, batch 32 and 128, SGD with momentum;
- ``encoder``: a BERT-style encoder (4 post-LN layers of 768 units, 12 heads, 3072 hidden units), batch 8 x 128
  tokens, AdamW (MXNet: this package's ``adamw`` optimizer, in every configuration).

The main table shows, per workload and configuration:

- ``base``: the RSS just before the model is built (the framework and its libraries imported, ``amp.init``
  called), and ``peak``, the high-water RSS of the whole run;
- ``vs fp32``: the peak over the float32 peak of the same framework in the same run (MXNet's ``fp32`` row for
  the MXNet rows, ``torch-fp32`` for PyTorch's); ``over base``: the same ratio counted over each row's ``base``,
  ``(peak - base) / (fp32 peak - fp32 base)``: what training itself costs, without the libraries (PyTorch's
  wheel brings about 500 MB that would flatter its plain ratio);
- ``steady``: the RSS after the last step;
- ``scratch``: the bytes of the library's oneDNN 3 scratch buffers at the end (``mxnet.amp`` only,
  :func:`mxnet.amp.core.library.onednn_cache`), and ``JIT``: the RSS of anonymous executable mappings in
  ``/proc/self/smaps`` (oneDNN's generated kernels: this package's oneDNN 3, MXNet's own MKL-DNN, PyTorch's);
  ``libdnnl``: the resident pages of this package's oneDNN 3 library (``libdnnl.so.3``, loaded on the library's
  first product, so after ``base``; MXNet's and PyTorch's oneDNN are inside their own libraries, not counted).

The phase table shows RSS / high-water RSS in MB after each phase of the first step, as the step's own hook
sees them: ``build`` (model built, initialised and hybridised, trainer made, before any forward), ``forward``,
``backward``, ``step`` (the first optimizer update), and ``steady`` (after the last step). MXNet's engine is
waited for (``mx.nd.waitall``) at each boundary; PyTorch is synchronous. Last, one line per workload checks
that ``mxnet.amp``'s ``over base`` ratio is at most PyTorch autocast's in the same run.

The PyTorch rows (``torch-fp32``, ``torch-autocast``: ``torch.autocast("cpu", torch.bfloat16)``) run only
where torch is importable by ``--torch-python`` (default: this interpreter); torch is never a dependency of
this project. MXNet 1.9.1 has no CPU memory-pool statistics (its CPU storage hands freed blocks back to
malloc), so RSS is the measure.

    python bench/bench_memory.py [--workloads resnet18-32,resnet18-128,encoder] [--steps 5]
        [--configs fp32,contrib,ours,ours-bf16w,ours-bf16w-sr,torch-fp32,torch-autocast] [--torch-python PATH]
        [--stand-in a|b|c]

``ours-bf16w``: ``mxnet.amp`` with bf16-true weights (``init_trainer(trainer, weights="bfloat16")``, Kahan);
``ours-bf16w-sr``: the same with stochastic rounding (``rounding="stochastic"``), no compensation buffers.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_train_step import build, torch_missing, torch_step  # noqa: E402
from timing import add_stand_in, apply_stand_in, child_json, cpu_banner  # noqa: E402

WORKLOADS = ("resnet18-32", "resnet18-128", "encoder")
CONFIGS = ("fp32", "contrib", "ours", "ours-bf16w", "ours-bf16w-sr", "torch-fp32", "torch-autocast")
PHASES = ("build", "forward", "backward", "step", "steady")
ENCODER_BATCH = 8


def _status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":")) / 1024.0


def _rss_kb(smaps, counts):
    """The sum of ``Rss`` (kB) over the mappings of a ``/proc/PID/smaps`` text whose header line's fields
    (``start-end perms offset dev inode [path]``) satisfy ``counts``."""
    total, counting = 0, False
    for line in smaps.splitlines():
        fields = line.split()
        if not fields:
            continue
        if "-" in fields[0] and not fields[0].endswith(":"):  # a mapping's header
            counting = counts(fields)
        elif counting and fields[0] == "Rss:":
            total += int(fields[1])
    return total


def anon_exec_kb(smaps):
    """The resident kB of the anonymous executable mappings in the text of a ``/proc/PID/smaps``: JIT code.

    Parameters
    ----------
    smaps : str
        The file's text: a header line per mapping (``start-end perms offset dev inode [path]``), then its
        ``Key: value kB`` lines.

    Returns
    -------
    int
        The sum of ``Rss`` over mappings whose permissions include ``x`` and that name no path.
    """
    return _rss_kb(smaps, lambda fields: len(fields) == 5 and "x" in fields[1])


def library_kb(smaps, prefix):
    """The resident kB of the mappings of the files whose name starts with ``prefix``, in the text of a
    ``/proc/PID/smaps`` (a library's code and data pages, as loaded and touched).

    Parameters
    ----------
    smaps : str
        As for :func:`anon_exec_kb`.
    prefix : str
        The start of the file name (without its folder), e.g. ``"libdnnl"``.

    Returns
    -------
    int
        The sum of ``Rss`` over those mappings.
    """
    return _rss_kb(smaps, lambda fields: len(fields) >= 6 and os.path.basename(fields[5]).startswith(prefix))


def _code_mb():
    """``(JIT code, this package's oneDNN 3 library)``, resident MB."""
    with open("/proc/self/smaps") as f:
        smaps = f.read()
    return anon_exec_kb(smaps) / 1024.0, library_kb(smaps, "libdnnl") / 1024.0


def _mxnet_step(workload, config):
    """The model's training step as a function ``step(mark)``, in MXNet (``config``: fp32, contrib or ours),
    and the RSS just before the model was built."""
    import mxnet as mx
    from mxnet import autograd, gluon
    if config == "contrib":
        from mxnet.contrib import amp as peer
        peer.init(target_dtype="bfloat16")
    elif config.startswith("ours"):
        import warnings
        from mxnet import amp as peer
        warnings.simplefilter("ignore", peer.SlowBfloat16Warning)
        peer.init("bfloat16")
    base = _status("VmRSS")
    net, x, y, optimizer, options = (build("encoder", ENCODER_BATCH, None) if workload == "encoder" else
                                     build("resnet18", int(workload.split("-")[1]), 64))
    net.initialize(mx.init.Xavier())
    net.hybridize(static_alloc=True, static_shape=True)
    trainer = gluon.Trainer(net.collect_params(), optimizer, options)
    if config.startswith("ours-bf16w"):  # bf16-true weights (init_trainer(weights="bfloat16")) need known shapes
        net.infer_shape(x)
        peer.init_trainer(trainer, weights="bfloat16", rounding="stochastic" if config.endswith("-sr") else "kahan")
    elif config == "contrib":
        peer.init_trainer(trainer)
    elif config != "fp32":
        peer.init_trainer(trainer, weights="float32")
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    mx.nd.waitall()  # the initialisers run on the engine: the "build" phase includes them

    def step(mark=None):
        """One step; ``mark(phase)`` after forward, backward and the update, each waited for."""
        def hook(phase):
            if mark is not None:
                mx.nd.waitall()
                mark(phase)
        with autograd.record():
            loss = loss_fn(net(x), y)
            hook("forward")
            if config == "fp32":
                loss.backward()
            else:
                with peer.scale_loss(loss, trainer) as scaled:
                    autograd.backward(scaled)
        hook("backward")
        trainer.step(x.shape[0])
        mx.nd.waitall()
        hook("step")
    return step, base


def _torch_step(workload, config):
    """PyTorch's step (``bench_train_step.torch_step``) and the RSS before its model was built."""
    import torch  # noqa: F401  (imported before the baseline, as MXNet is)
    if workload != "encoder":
        import torchvision  # noqa: F401
    base = _status("VmRSS")
    batch = ENCODER_BATCH if workload == "encoder" else int(workload.split("-")[1])
    return torch_step(workload.split("-")[0], batch, 64, config == "torch-autocast"), base


def child(workload, config, steps):
    """Run ``steps`` training steps; return the memory figures as plain data (MB)."""
    step, base = (_torch_step if config.startswith("torch") else _mxnet_step)(workload, config)
    phases = {}

    def mark(phase):
        phases.setdefault(phase, (_status("VmRSS"), _status("VmHWM")))

    mark("build")
    step(mark)
    for _ in range(steps - 1):
        step()
    phases["steady"] = (_status("VmRSS"), _status("VmHWM"))
    scratch = None
    if config.startswith("ours"):
        from mxnet.amp.core import library
        cache = library.onednn_cache()
        scratch = cache["buffer_bytes"] / 2.0 ** 20 if cache else None
    jit, onednn = _code_mb()
    return {"base_mb": base, "peak_mb": _status("VmHWM"), "rss_mb": _status("VmRSS"), "phases": phases,
            "scratch_mb": scratch, "jit_mb": jit, "onednn_mb": onednn}


def run_child(workload, config, steps, python, timeout=1800):
    return child_json([python, os.path.abspath(__file__), "--child", workload, config, "--steps", str(steps)],
                      timeout)


def reference_of(config):
    """The float32 configuration whose peak a row's ratios divide by: the same framework's."""
    return "torch-fp32" if config.startswith("torch") else "fp32"


def ratios(row, ref):
    """``(peak / ref peak, (peak - base) / (ref peak - ref base))``, or None where ``ref`` did not run."""
    if ref is None:
        return None
    return row["peak_mb"] / ref["peak_mb"], (row["peak_mb"] - row["base_mb"]) / (ref["peak_mb"] - ref["base_mb"])


def _print_main(workload, results):
    for config, r in results.items():
        if "error" in r:
            print("%s | %s | %s" % (workload, config, r["error"]), flush=True)
            continue
        ratio = ratios(r, results.get(reference_of(config)))
        print("%s | %s | %.0f | %.0f | %s | %s | %.0f | %s | %.1f | %s" % (
            workload, config, r["base_mb"], r["peak_mb"], "%.2fx" % ratio[0] if ratio else "-",
            "%.2fx" % ratio[1] if ratio else "-", r["rss_mb"],
            "-" if r["scratch_mb"] is None else "%.1f" % r["scratch_mb"], r["jit_mb"],
            "%.1f" % r["onednn_mb"] if r["onednn_mb"] else "-"))


def _print_phases(workload, results):
    for config, r in results.items():
        if "error" not in r:
            print("%s | %s | %.0f | %s" % (workload, config, r["base_mb"], " | ".join(
                "%.0f / %.0f" % tuple(r["phases"][p]) for p in PHASES)))


def _check(workload, results):
    """One line per mxnet.amp configuration: its over-base ratio against PyTorch autocast's, where both ran."""
    theirs = results.get("torch-autocast")
    for config in ("ours", "ours-bf16w", "ours-bf16w-sr"):
        ours = results.get(config)
        if not ours or not theirs or "error" in ours or "error" in theirs:
            continue
        a, b = ratios(ours, results.get("fp32")), ratios(theirs, results.get("torch-fp32"))
        if a and b:
            print("%s: %s %.2fx over base, PyTorch autocast %.2fx: %s" % (
                workload, config, a[1], b[1], "ok" if a[1] <= b[1] else "NOT MET (above autocast)"))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--torch-python", default=sys.executable, help="the interpreter of the PyTorch rows")
    parser.add_argument("--child", nargs=2, metavar=("WORKLOAD", "CONFIG"), help=argparse.SUPPRESS)
    add_stand_in(parser)
    args = parser.parse_args(argv)
    apply_stand_in(args.stand_in)
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.steps)))
        return 0
    for name, valid in (("workloads", WORKLOADS), ("configs", CONFIGS)):
        bad = [v for v in getattr(args, name).split(",") if v not in valid]
        if bad:
            parser.error("unknown %s %s: expected some of %s" % (name, ", ".join(map(repr, bad)), ", ".join(valid)))
    cpu_banner()
    no_torch = any(c.startswith("torch") for c in args.configs.split(",")) and torch_missing("resnet18",
                                                                                            args.torch_python)
    configs = [c for c in args.configs.split(",") if not c.startswith("torch") or not no_torch]
    skipped = sorted(set(args.configs.split(",")) - set(configs))
    print("%d steps per configuration, one child process each%s" % (
        args.steps, "; not run (torch or torchvision not importable): " + ", ".join(skipped) if skipped else ""))
    results = {}
    print("workload | config | base MB | peak MB | vs fp32 | over base | steady MB | scratch MB | JIT MB | "
          "libdnnl MB")
    for workload in args.workloads.split(","):
        results[workload] = {c: run_child(workload, c, args.steps, args.torch_python if c.startswith("torch")
                                          else sys.executable) for c in configs}
        _print_main(workload, results[workload])
    print("\nRSS / high-water RSS, MB, after each phase of the first step (steady: after the last)")
    print("workload | config | base | %s" % " | ".join(PHASES))
    for workload, rows in results.items():
        _print_phases(workload, rows)
    print()
    for workload, rows in results.items():
        _check(workload, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
