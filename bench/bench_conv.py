"""bfloat16 convolutions on CPU: MXNet's kernels against this project's oneDNN 3 convolution (libmxnet_amp).

Side by side in one process, the variants of each shape alternating (load from other processes hits them
alike), best of --repeat runs, in GFLOP/s:
- forward, the convolutions of ResNet-50 at batch 16 (224 x 224 inputs): MXNet float32, MXNet bfloat16 (its
  oneDNN 2.4, what ``mxnet.contrib.amp`` runs), ``amp_convolution`` (oneDNN 3: reorders to and from its
  layouts included), and ``amp_convolution`` with the block's ReLU fused;
- forward + backward, the convolutions of ResNet-18 on 32 x 3 x 64 x 64 (bench_train_step.py's step):
  MXNet float32, MXNet bfloat16, ``amp_convolution``.
MXNet 1.9.1 runs bfloat16 natively only on CPUs with AVX-512; elsewhere its bfloat16 rows are its slow
fallbacks and oneDNN 3 uses reference kernels: the targets are for AVX-512-BF16 (and AMX) CPUs.

Usage: python bench/bench_conv.py [--repeat 5]  (MXNET_AMP_ONEDNN_THREADS=n: the library's OpenMP team)
"""
import argparse
import sys

import numpy as np

from timing import best_of, cpu_banner, print_gflops

BASELINES = ("mxnet fp32", "mxnet bf16")

#: (label, batch, in channels, size, out channels, kernel, stride) of ResNet-50's convolutions (inference).
RESNET50 = (
    ("stem 7x7/2 3->64", 16, 3, 224, 64, 7, 2),
    ("c2 1x1 64->64", 16, 64, 56, 64, 1, 1),
    ("c2 3x3 64->64", 16, 64, 56, 64, 3, 1),
    ("c2 1x1 64->256", 16, 64, 56, 256, 1, 1),
    ("c2 1x1 256->64", 16, 256, 56, 64, 1, 1),
    ("c3 3x3 128->128", 16, 128, 28, 128, 3, 1),
    ("c3 1x1 512->128", 16, 512, 28, 128, 1, 1),
    ("c4 3x3 256->256", 16, 256, 14, 256, 3, 1),
    ("c4 1x1 1024->256", 16, 1024, 14, 256, 1, 1),
    ("c5 3x3 512->512", 16, 512, 7, 512, 3, 1),
    ("c5 1x1/2 1024->2048", 16, 1024, 14, 2048, 1, 2),
)
#: The same for ResNet-18 training on 64 x 64 inputs, batch 32 (forward + both gradients).
RESNET18_TRAIN = (
    ("stem 7x7/2 3->64", 32, 3, 64, 64, 7, 2),
    ("s1 3x3 64->64", 32, 64, 16, 64, 3, 1),
    ("s2 3x3/2 64->128", 32, 64, 16, 128, 3, 2),
    ("s2 3x3 128->128", 32, 128, 8, 128, 3, 1),
    ("s3 3x3 256->256", 32, 256, 4, 256, 3, 1),
    ("s4 3x3 512->512", 32, 512, 2, 512, 3, 1),
)


def _flops(batch, cin, size, cout, k, stride):
    out = (size + 2 * (k // 2) - k) // stride + 1
    return 2.0 * batch * cout * out * out * cin * k * k


def conv_table(shapes, repeat, train):
    import mxnet as mx
    from mxnet import autograd
    from mxnet.amp.core import library
    from mxnet.amp.base.dtypes import BFLOAT16
    rng = np.random.RandomState(0)
    rows = []
    for label, batch, cin, size, cout, k, stride in shapes:
        attrs = dict(kernel=(k, k), stride=(stride, stride), pad=(k // 2, k // 2), num_filter=cout)
        x, w, b = (mx.nd.array(rng.uniform(-1, 1, s)) for s in ((batch, cin, size, size), (cout, cin, k, k), (cout,)))
        low = [mx.nd.amp_cast(t, dtype=BFLOAT16) for t in (x, w, b)]

        def call(op, arrays, **extra):
            if not train:
                return lambda: op(*arrays, **attrs, **extra).wait_to_read()
            for a in arrays:
                a.attach_grad()

            def step():
                with autograd.record():
                    y = op(*arrays, **attrs, **extra)
                y.backward()
                mx.nd.waitall()
            return step
        variants = {"mxnet fp32": call(mx.nd.Convolution, [x, w, b]),
                    "mxnet bf16": call(mx.nd.Convolution, low)}
        if library.onednn()[0]:
            variants["ours bf16"] = call(mx.nd.amp_convolution, low)
            if not train:
                variants["ours bf16+relu"] = call(mx.nd.amp_convolution, low, act_type="relu")
        try:
            seconds = best_of(variants, repeat, inner=2)
        except mx.base.MXNetError as e:  # MXNet's bfloat16 fallbacks reject some shapes on some CPUs
            print("%s: %s" % (label, str(e).splitlines()[0]))
            continue
        flops = _flops(batch, cin, size, cout, k, stride) * (3 if train else 1)
        rows.append((label, {v: flops / s / 1e9 for v, s in seconds.items()}))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    cpu_banner()
    print_gflops("ResNet-50 convolutions, forward, batch 16", conv_table(RESNET50, args.repeat, train=False),
                 "layer", BASELINES)
    print_gflops("ResNet-18 convolutions, forward + backward, batch 32, 64 x 64",
                 conv_table(RESNET18_TRAIN, args.repeat, train=True), "layer", BASELINES)
    return 0


if __name__ == "__main__":
    sys.exit(main())
