"""Channels-last (amp_layout) vs NCHW: ResNet-50 training and inference step time on a GPU.

On a GPU, for float32 and float16 (``net.cast``), times a hybridized ResNet-50 v1 forward (inference)
and forward+backward (training) in NCHW, then the same block rewritten by
``mxnet.amp.layout.optimize_layout``, and prints the NHWC/NCHW speed-up.

Without a GPU no convolution speed can be measured (MXNet 1.9.1 has no channels-last CPU
convolution); the script then times only the rewrite itself (the pass on the ResNet-50 graph, offline
weight transposition included) and says so.

Usage: python bench/bench_layout.py [--batch 64] [--repeat 20]
"""
import argparse

import mxnet as mx
from mxnet import autograd
from mxnet.gluon.model_zoo import vision

from mxnet.amp.graph import layout
from timing import timed


def step_times(net, x, repeat):
    def infer():
        net(x).wait_to_read()

    def train():
        with autograd.record():
            loss = net(x).astype("float32").mean()
        loss.backward()
        mx.nd.waitall()

    return timed(infer, repeat, warmup=2), timed(train, repeat, warmup=2)


def bench_gpu(batch, repeat):
    ctx = mx.gpu(0)
    for dtype in ("float32", "float16"):
        net = vision.resnet50_v1()
        net.initialize(mx.init.Xavier(), ctx=ctx)
        x = mx.nd.random.uniform(shape=(batch, 3, 224, 224), ctx=ctx)
        net(x)
        net.cast(dtype)
        x = x.astype(dtype)
        net.hybridize(static_alloc=True, static_shape=True)
        nchw = step_times(net, x, repeat)
        layout.optimize_layout(net, x)
        nhwc = step_times(net, x, repeat)
        for i, what in enumerate(("inference", "training")):
            print("%-8s %-9s batch %d: NCHW %.2f ms  NHWC %.2f ms  speed-up %.2fx"
                  % (dtype, what, batch, nchw[i] * 1e3, nhwc[i] * 1e3, nchw[i] / nhwc[i]))


def bench_rewrite(repeat):
    net = vision.resnet50_v1()
    net.initialize()
    x = mx.nd.zeros((1, 3, 224, 224))
    net(x)
    sym = net(mx.sym.var("data"))
    aux_names = set(sym.list_auxiliary_states())
    params = {p.name: p.data() for p in net.collect_params().values()}
    args = {k: v for k, v in params.items() if k not in aux_names}
    aux = {k: v for k, v in params.items() if k in aux_names}
    gpu = mx.gpu(0)  # context object only: nothing runs on it
    t_train = timed(lambda: layout.optimize_layout(sym, input_shapes={"data": x.shape}, ctx=gpu), repeat, warmup=2)
    t_conv = timed(lambda: layout.convert_layout(sym, args, aux, {"data": x.shape}, ctx=gpu), repeat, warmup=2)
    print("no GPU: convolution speed not measured (no channels-last CPU convolution in MXNet 1.9.1)")
    print("ResNet-50 rewrite: training graph %.1f ms, converted model (weights transposed) %.1f ms"
          % (t_train * 1e3, t_conv * 1e3))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=20)
    opts = parser.parse_args()
    if mx.context.num_gpus() > 0:
        bench_gpu(opts.batch, opts.repeat)
    else:
        bench_rewrite(max(1, opts.repeat // 4))


if __name__ == "__main__":
    main()
