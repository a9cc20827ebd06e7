"""Optimizer update time for ResNet-50-sized parameters: mxnet.amp's fused update vs MXNet's, vs a copy.

The 299 parameter arrays of ResNet-50 v1 (25.6 M float32 values, shapes from the gluon model zoo) get one update
per call, for each rule:
- ``mxnet``: what ``gluon.Trainer`` calls: ``multi_sgd_update`` / ``multi_sgd_mom_update`` in groups of 4
  (``MXNET_OPTIMIZER_AGGREGATION_SIZE``), ``adam_update`` and ``contrib.adamw_update`` per parameter;
- ``mxnet.amp``: ``amp_multi_update``, one call for all parameters, reading the finite flag and the loss
  scale on the device (the update ``amp.init_trainer`` issues);
- ``copy``: copying as many bytes as the update must touch (SGD: read weight and gradient, write weight: 12 B
  per value; with momentum 20 B; Adam/AdamW 28 B), the fastest of numpy, MXNet ``copyto`` and the library's
  parallel float32 -> float32 ``multi_cast`` over the same number of bytes.
Prints seconds per update, GB/s of touched bytes and the ratios ours / copy (issue 15: at most 1.3) and
mxnet / ours. Results are the same bit for bit (tests/python/unittest/test_fused_update.py).

``--step`` times the whole ``trainer.step`` over the same parameters instead: a plain ``gluon.Trainer``
against one given to ``amp.init_trainer`` after ``amp.init("bfloat16")`` (the finite check, the loss scaler and
the fused update; float32 parameters as in AMP training), for SGD with momentum and Adam, each step waited for.

``--step --model`` does so over the parameters with gradients of a real ``resnet50_v1`` after one forward and
backward (161 arrays, 25.6 M values), beside bare parameters of the same shapes holding the same gradients: the
AMP step over both (``model / bare``, with GB/s of touched bytes) and the plain ``gluon.Trainer`` over the model.

Usage: python bench/bench_optimizer.py [--repeat 5] [--step [--model]]
"""
import argparse
import os
import sys

import mxnet as mx
import numpy as np
from mxnet.gluon.model_zoo import vision

from mxnet.amp.core import library, ops

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import best_of, cpu_banner, split  # noqa: E402

# bytes touched per parameter value: reads + writes of float32 arrays
_TOUCHED = {"sgd": 12, "sgd_mom": 20, "adam": 28, "adamw": 28}


def resnet50_shapes():
    net = vision.resnet50_v1()
    net.initialize()
    net(mx.nd.zeros((1, 3, 224, 224)))
    return [p.shape for p in net.collect_params().values()]


def copy_variants(floats):
    """Copies of ``floats`` float32 values (each read once, written once)."""
    src_np = np.ones(floats, dtype=np.float32)
    dst_np = np.empty_like(src_np)
    src, dst = mx.nd.array(src_np), mx.nd.empty(floats)
    srcs = [src[a:a + n] for a, n in zip(np.cumsum([0] + split(floats, 64))[:-1], split(floats, 64))]
    dsts = [dst[a:a + n] for a, n in zip(np.cumsum([0] + split(floats, 64))[:-1], split(floats, 64))]

    def mx_copy():
        src.copyto(dst)
        dst.wait_to_read()

    def lib_copy():
        ops.multi_cast(srcs, "float32", out=dsts)
        dst.wait_to_read()

    return {"numpy": lambda: np.copyto(dst_np, src_np), "mxnet copyto": mx_copy, "parallel copy": lib_copy}


def update_variants(rule, shapes):
    rng = np.random.RandomState(0)
    weights = [mx.nd.array(rng.randn(*s).astype(np.float32) * 0.01) for s in shapes]
    grads = [mx.nd.array(rng.randn(*s).astype(np.float32) * 0.01) for s in shapes]
    states = [tuple(mx.nd.zeros(s) for _ in ops.UPDATE_RULES[rule]) for s in shapes]
    n = len(shapes)
    lrs, wds = [1e-3] * n, [1e-4] * n
    flag, scaler = mx.nd.ones((1,)), mx.nd.array([1.0, 0, 0, 0, 0, 0], dtype=np.float64)

    def ours():
        ops.multi_update(rule, [(w, g) + s for w, g, s in zip(weights, grads, states)], flag, scaler, lrs, wds,
                         etas=lrs, momentum=0.9).wait_to_read()

    def theirs():
        if rule in ("sgd", "sgd_mom"):
            for a in range(0, n, 4):
                group = list(zip(weights, grads, states))[a:a + 4]
                arrays = [x for w, g, s in group for x in (w, g) + s]
                op = mx.nd.multi_sgd_mom_update if rule == "sgd_mom" else mx.nd.multi_sgd_update
                kwargs = {"momentum": 0.9} if rule == "sgd_mom" else {}
                op(*arrays, out=[w for w, _, _ in group], num_weights=len(group), lrs=lrs[a:a + 4],
                   wds=wds[a:a + 4], **kwargs)
        elif rule == "adam":
            for w, g, (m, v) in zip(weights, grads, states):
                mx.nd.adam_update(w, g, m, v, out=w, lr=1e-3, wd=1e-4)
        else:
            rescale = mx.nd.ones((1,))
            for w, g, (m, v) in zip(weights, grads, states):
                mx.nd.contrib.adamw_update(w, g, m, v, rescale, out=w, lr=1.0, eta=1e-3, wd=1e-4)
        mx.nd.waitall()

    return {"mxnet": theirs, "mxnet.amp": ours}


def model_params():
    """The parameters with gradients of a ``resnet50_v1`` after one forward and backward (batch 2, 64x64)."""
    from mxnet import autograd
    net = vision.resnet50_v1()
    net.initialize(mx.init.Xavier())
    with autograd.record():
        loss = net(mx.nd.random.uniform(shape=(2, 3, 64, 64))).sum()
    loss.backward()
    mx.nd.waitall()
    return [param for param in net.collect_params().values() if param.grad_req != "null"]


def bare_params(like):
    """Bare ``gluon.Parameter``s of the shapes of ``like`` (shapes, or parameters whose gradients they copy)."""
    from mxnet import gluon
    rng = np.random.RandomState(0)
    params = []
    for i, other in enumerate(like):
        shape = other if isinstance(other, tuple) else other.shape
        param = gluon.Parameter("p%d" % i, shape=shape)
        param.initialize(mx.init.Normal(0.01), ctx=mx.cpu())
        param.grad()[:] = (rng.randn(*shape).astype(np.float32) * 0.01 if isinstance(other, tuple)
                           else other.grad())  # a gradient's values never change how long an update takes
        params.append(param)
    return params


def timed_step(params, optimizer, wrapped):
    """``trainer.step`` over ``params`` (plain, or given to ``amp.init_trainer``), every gradient fresh, waited."""
    from mxnet import amp, gluon
    hyper = {"learning_rate": 1e-3, "wd": 1e-4, **({"momentum": 0.9} if optimizer == "sgd" else {})}
    trainer = gluon.Trainer(params, optimizer, hyper)
    if wrapped:
        amp.init_trainer(trainer)

    def step():
        for param in params:
            param.list_data()[0]._fresh_grad = True  # as backward leaves it
        trainer.step(1)
        mx.nd.waitall()
    step()  # the first step lays out the optimizer states and AMP's buffers
    return step


def step_variants(optimizer, shapes, model=False):
    """``trainer.step`` of a plain trainer and of an AMP one over bare parameters of ``shapes``; with ``model``,
    also over a real ``resnet50_v1``'s parameters, against bare ones with the same shapes and gradients."""
    if not model:
        return {"gluon.Trainer": timed_step(bare_params(shapes), optimizer, False),
                "amp.init_trainer": timed_step(bare_params(shapes), optimizer, True)}
    real = model_params()
    return {"gluon.Trainer": timed_step(model_params(), optimizer, False),
            "amp bare": timed_step(bare_params(real), optimizer, True),
            "amp.init_trainer": timed_step(real, optimizer, True)}


def _print_steps(shapes, repeat, model):
    values = sum(int(np.prod(s)) for s in shapes)
    if model:
        print("%-8s | %18s | %14s | %15s | %s" % ("rule", "gluon.Trainer ms", "amp bare ms", "amp model ms",
                                                  "model / bare, GB/s (bare, model)"))
    else:
        print("%-8s | %18s | %21s | %s" % ("rule", "gluon.Trainer ms", "amp.init_trainer ms", "plain / amp"))
    for optimizer in ("sgd", "adam"):
        rule = "sgd_mom" if optimizer == "sgd" else optimizer
        times = best_of(step_variants(optimizer, shapes, model), repeat)
        plain, amp = 1e3 * times["gluon.Trainer"], 1e3 * times["amp.init_trainer"]
        if model:
            bare, touched = 1e3 * times["amp bare"], values * _TOUCHED[rule] / 1e6
            print("%-8s | %18.2f | %14.2f | %15.2f | %.2fx, %.1f, %.1f" % (
                rule, plain, bare, amp, amp / bare, touched / bare, touched / amp))
        else:
            print("%-8s | %18.2f | %21.2f | %.2fx" % (rule, plain, amp, plain / amp))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--step", action="store_true", help="time the whole trainer.step, plain against AMP")
    parser.add_argument("--model", action="store_true", help="with --step: a real resnet50_v1's parameters "
                        "after a backward, against bare ones with the same shapes and gradients")
    args = parser.parse_args()
    cpu_banner()
    if args.step:
        from mxnet import amp
        amp.init(target_dtype="bfloat16")  # before any block is built, as a training script does
    shapes = resnet50_shapes()
    values = sum(int(np.prod(s)) for s in shapes)
    print("%d parameters, %.1f M float32 values; library CPU kernels: %s" % (len(shapes), values / 1e6,
                                                                             library.cpu_isa()))
    if args.step:
        _print_steps(shapes, args.repeat, args.model)
        return
    print("%-8s | %12s | %12s | %12s | %9s | %9s | %s" % ("rule", "copy ms", "mxnet ms", "mxnet.amp ms",
                                                          "amp/copy", "mxnet/amp", "GB/s (copy, mxnet, amp)"))
    for rule, touched in _TOUCHED.items():
        copies = best_of(copy_variants(values * touched // 8), args.repeat)
        copy = min(copies.values())
        times = best_of(update_variants(rule, shapes), args.repeat)
        gbs = ["%.1f" % (values * touched / t / 1e9) for t in (copy, times["mxnet"], times["mxnet.amp"])]
        print("%-8s | %12.2f | %12.2f | %12.2f | %8.2fx | %8.2fx | %s  (copy: %s)"
              % (rule, 1e3 * copy, 1e3 * times["mxnet"], 1e3 * times["mxnet.amp"], times["mxnet.amp"] / copy,
                 times["mxnet"] / times["mxnet.amp"], ", ".join(gbs), min(copies, key=copies.get)))


if __name__ == "__main__":
    main()
