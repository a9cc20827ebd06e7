"""Peak memory of training: fp32 vs mxnet.contrib.amp bf16 vs mxnet.amp bf16 (and PyTorch where installed).

One child process per configuration and workload, so that each peak (``VmHWM``, the process's high-water RSS)
is its own; the table shows it, the RSS after the last step, the growth of RSS over the steps after the first
and the ratio of the peak to fp32's in the same run. The workloads:

- ``resnet18-32``, ``resnet18-128``: ResNet-18 v1 (10 classes) at 64x64, batch 32 and 128, SGD with momentum;
- ``encoder``: a BERT-style encoder (4 post-LN layers of 768 units, 12 heads, 3072 hidden units), batch 8 x 128
  tokens, AdamW (MXNet: this package's ``adamw`` optimizer, in every configuration).

The PyTorch rows (``torch-fp32``, ``torch-autocast``: ``torch.autocast("cpu", torch.bfloat16)``) run only
where torch is importable; it is never a dependency of this project. MXNet 1.9.1 has no CPU memory-pool
statistics (its CPU storage hands freed blocks back to malloc), so RSS is the measure.

    python bench/bench_memory.py [--workloads resnet18-32,resnet18-128,encoder] [--steps 5]
        [--configs fp32,contrib,ours,ours-bf16w,torch-fp32,torch-autocast] [--stand-in a|b|c]

``ours-bf16w``: ``mxnet.amp`` with bf16-true weights (``init_trainer(trainer, weights="bfloat16")``).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_train_step import build, torch_missing, torch_step  # noqa: E402
from timing import add_stand_in, apply_stand_in, child_json, cpu_banner  # noqa: E402

WORKLOADS = ("resnet18-32", "resnet18-128", "encoder")
CONFIGS = ("fp32", "contrib", "ours", "ours-bf16w", "torch-fp32", "torch-autocast")
ENCODER_BATCH = 8


def _status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":")) / 1024.0


def _mxnet_step(workload, config):
    """The model's training step as a function, in MXNet (``config``: fp32, contrib or ours)."""
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
    net, x, y, optimizer, options = (build("encoder", ENCODER_BATCH, None) if workload == "encoder" else
                                     build("resnet18", int(workload.split("-")[1]), 64))
    net.initialize(mx.init.Xavier())
    net.hybridize(static_alloc=True, static_shape=True)
    trainer = gluon.Trainer(net.collect_params(), optimizer, options)
    if config == "ours-bf16w":  # bf16-true weights (init_trainer(weights="bfloat16")) need known shapes
        net.infer_shape(x)
    if config != "fp32":
        peer.init_trainer(trainer, weights="bfloat16" if config == "ours-bf16w" else "float32")
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    def step():
        with autograd.record():
            loss = loss_fn(net(x), y)
            if config == "fp32":
                loss.backward()
            else:
                with peer.scale_loss(loss, trainer) as scaled:
                    autograd.backward(scaled)
        trainer.step(x.shape[0])
        mx.nd.waitall()
    return step


def child(workload, config, steps):
    """Run ``steps`` training steps; return the memory figures as plain data."""
    if config.startswith("torch"):
        batch = ENCODER_BATCH if workload == "encoder" else int(workload.split("-")[1])
        step = torch_step(workload.split("-")[0], batch, 64, config == "torch-autocast")
    else:
        step = _mxnet_step(workload, config)
    step()
    after_first = _status("VmRSS")
    for _ in range(steps - 1):
        step()
    return {"peak_mb": _status("VmHWM"), "rss_mb": _status("VmRSS"), "growth_mb": _status("VmRSS") - after_first}


def run_child(workload, config, steps, timeout=1800):
    return child_json([sys.executable, os.path.abspath(__file__), "--child", workload, config, "--steps", str(steps)],
                      timeout)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--steps", type=int, default=5)
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
    configs = [c for c in args.configs.split(",") if not c.startswith("torch") or not torch_missing("resnet18")]
    skipped = sorted(set(args.configs.split(",")) - set(configs))
    print("%d steps per configuration, one child process each%s" % (
        args.steps, "; not run (torch or torchvision not importable): " + ", ".join(skipped) if skipped else ""))
    print("workload | config | peak MB | vs fp32 | RSS after MB | growth after step 1 MB")
    for workload in args.workloads.split(","):
        base = None
        for config in configs:
            r = run_child(workload, config, args.steps)
            if "error" in r:
                print("%s | %s | %s" % (workload, config, r["error"]), flush=True)
                continue
            base = r["peak_mb"] if config == "fp32" else base
            ratio = "%.2fx" % (r["peak_mb"] / base) if base else "-"
            print("%s | %s | %.0f | %s | %.0f | %+.0f" % (workload, config, r["peak_mb"], ratio, r["rss_mb"],
                                                          r["growth_mb"]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
