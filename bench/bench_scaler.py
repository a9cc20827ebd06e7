"""Loss-scaler overhead per training step: mxnet.amp vs mxnet.contrib.amp, as a fraction of the step.

For two float32 models on the CPU,
- ResNet-18 (gluon model zoo, random init, batch of 2 images 3x64x64),
- a "many small parameters" model: 250 Dense(8) layers = 500 parameters,
times one full iteration (forward, backward, ``trainer.step``) three ways, interleaved round by round:
- plain:    ``gluon.Trainer`` without loss scaling,
- amp:      ``mxnet.amp.init_trainer`` + ``scale_loss`` (fused check of every gradient, one host sync),
- contrib:  ``mxnet.contrib.amp.init_trainer`` + ``scale_loss`` (``multi_all_finite`` in chunks of 200 on the
            first device only).
Overhead = min(variant) - min(plain) over interleaved rounds (the minimum filters out interference from other
processes, as ``timeit`` does); printed in ms and as a fraction of the plain step.

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

from mxnet.amp import trainer as amp_trainer


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


def make_step(build, variant):
    mx.random.seed(0)
    net, x = build()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 1e-4, "momentum": 0.9})
    if variant == "amp":
        amp_trainer.init_trainer(trainer)
        scale = amp_trainer.scale_loss
    elif variant == "contrib":
        contrib_amp._amp_initialized = True  # see the module docstring: measure the scaler, not the casts
        contrib_amp._amp_loss_scale_initialized = True  # makes init_trainer create a fresh contrib LossScaler
        contrib_amp.init_trainer(trainer)
        scale = contrib_amp.scale_loss

    def step():
        with autograd.record():
            loss = net(x).sum()
            if variant == "plain":
                loss.backward()
            else:
                with scale(loss, trainer) as scaled:
                    scaled.backward()
        trainer.step(x.shape[0])
        mx.nd.waitall()
    return step


def measure(build, rounds):
    steps = {variant: make_step(build, variant) for variant in ("plain", "amp", "contrib")}
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
    print("%-22s %10s %10s %10s %14s %14s" % ("model", "plain ms", "amp ms", "contrib ms", "amp overhead",
                                               "contrib overhead"))
    for name, build in (("resnet18 (62 params)", resnet18), ("500 small params", many_small)):
        best = measure(build, args.rounds)
        over = {v: best[v] - best["plain"] for v in ("amp", "contrib")}
        print("%-22s %10.2f %10.2f %10.2f %8.2f ms %+5.1f%% %8.2f ms %+5.1f%%"
              % (name, 1e3 * best["plain"], 1e3 * best["amp"], 1e3 * best["contrib"],
                 1e3 * over["amp"], 100 * over["amp"] / best["plain"],
                 1e3 * over["contrib"], 100 * over["contrib"] / best["plain"]))


if __name__ == "__main__":
    main()
