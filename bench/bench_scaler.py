"""Loss-scaler overhead per training step: mxnet.amp vs mxnet.contrib.amp, as a fraction of the step.

For two float32 models on the CPU,
- ResNet-18 (gluon model zoo, random init, batch of 2 images 3x64x64),
- a "many small parameters" model: 250 Dense(8) layers = 500 parameters,
times one full iteration (forward, backward, ``trainer.step``) five ways, interleaved round by round:
- plain:    ``gluon.Trainer`` without loss scaling,
- plain-fused: the same, its update replaced by the library's fused SGD (what the ``amp`` variant runs) with a
            constant "finite" flag and scale 1: the step without AMP machinery but with AMP's optimizer,
- amp:      ``mxnet.amp.init_trainer`` + ``scale_loss``: fused check of every gradient, the fused SGD update
            and the scaler's step queued on the device (no host sync in the step),
- amp-sync: the same with ``init_trainer(..., fused=False)``: MXNet's own SGD update after one host sync
            (isolates the scaler's cost: the optimizer is the plain trainer's),
- contrib:  ``mxnet.contrib.amp.init_trainer`` + ``scale_loss`` (``multi_all_finite`` in chunks of 200 on the
            first device only).
Every variant ends its step with ``mx.nd.waitall()``, so what the no-sync step gains by overlapping the host with
the device is not counted. Overhead = min(variant) - min(plain) (and amp - plain-fused: the scaler alone) over
interleaved rounds (the minimum filters out interference from other processes, as ``timeit`` does); printed in ms
and as a fraction of the plain step.

The models stay float32 so that only the scaler is measured: ``mxnet.contrib.amp.init`` would patch every
operator for float16/bfloat16, which this CPU cannot run, so its ``_amp_initialized`` and
``_amp_loss_scale_initialized`` flags are set directly (the loss-scaler code path is the same).

Usage: python bench/bench_scaler.py [--rounds 20]
"""
import argparse
import time

import mxnet as mx
from mxnet import autograd, gluon
from mxnet.contrib.amp import amp as contrib_amp
from mxnet.gluon.model_zoo import vision

from mxnet import amp
from mxnet.amp.training.fused_update import FusedUpdater


def resnet18():
    net = vision.resnet18_v1(classes=10)
    net.initialize(mx.init.Xavier())
    return net, mx.nd.random.uniform(shape=(2, 3, 64, 64))


def many_small():
    net = gluon.nn.HybridSequential()
    for _ in range(250):
        net.add(gluon.nn.Dense(8, in_units=8))
    net.initialize(mx.init.Xavier(magnitude=1.0))
    return net, mx.nd.random.uniform(shape=(4, 8))


def _fused_without_amp(trainer):
    """``trainer.step`` with the fused SGD update and no check, no scaler (flag 1, scale 1)."""
    updater = FusedUpdater(trainer, "sgd_mom")
    flag, unit = mx.nd.ones((1,)), mx.nd.array([1.0, 0, 0, 0, 0, 0], dtype="float64")

    def step(batch_size):
        if not trainer._kv_initialized:
            trainer._init_kvstore()
        trainer._optimizer.rescale_grad = trainer._scale / batch_size
        updater.step([(i, p) for i, p in enumerate(trainer._params) if p.grad_req != "null"], flag, unit)
    return step


def make_step(build, variant):
    mx.random.seed(0)
    net, x = build()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 1e-4, "momentum": 0.9})
    if variant in ("amp", "amp-sync"):
        amp.init_trainer(trainer, fused=variant == "amp")
        scale = amp.scale_loss
    elif variant == "plain-fused":
        fused_step = _fused_without_amp(trainer)
    elif variant == "contrib":
        contrib_amp._amp_initialized = True  # see the module docstring: measure the scaler, not the casts
        contrib_amp._amp_loss_scale_initialized = True  # makes init_trainer create a fresh contrib LossScaler
        contrib_amp.init_trainer(trainer)
        scale = contrib_amp.scale_loss

    def step():
        with autograd.record():
            loss = net(x).sum()
            if variant.startswith("plain"):
                loss.backward()
            else:
                with scale(loss, trainer) as scaled:
                    scaled.backward()
        if variant == "plain-fused":
            fused_step(x.shape[0])
        else:
            trainer.step(x.shape[0])
        mx.nd.waitall()
    return step


VARIANTS = ("plain", "plain-fused", "amp", "amp-sync", "contrib")


def measure(build, rounds):
    steps = {variant: make_step(build, variant) for variant in VARIANTS}
    times = {variant: [] for variant in steps}
    for variant, step in steps.items():
        for _ in range(3):
            step()  # warm-up: kvstore, optimizer states, caches
    for _ in range(rounds):
        for variant, step in steps.items():
            start = time.perf_counter()
            step()
            times[variant].append(time.perf_counter() - start)
    return {variant: min(values) for variant, values in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    others = VARIANTS[1:]
    print("%-22s %10s %s" % ("model", "plain ms", " ".join("%24s" % ("%s ms (overhead)" % v) for v in others)))
    for name, build in (("resnet18 (62 params)", resnet18), ("500 small params", many_small)):
        best = measure(build, args.rounds)
        cells = ["%8.2f (%+6.2f, %+5.1f%%)" % (1e3 * best[v], 1e3 * (best[v] - best["plain"]),
                                               100 * (best[v] - best["plain"]) / best["plain"]) for v in others]
        print("%-22s %10.2f %s" % (name, 1e3 * best["plain"], " ".join("%24s" % c for c in cells)))
        scaler = best["amp"] - best["plain-fused"]
        print("%-22s scaler alone (amp - plain-fused): %+.2f ms, %+.1f%% of the plain-fused step"
              % ("", 1e3 * scaler, 100 * scaler / best["plain-fused"]))


if __name__ == "__main__":
    main()
