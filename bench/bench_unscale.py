"""Fused unscale + finite check vs MXNet's builtin path vs a plain copy of the same bytes.

For TOTAL float32 gradients split into 1, 100 and 10 000 tensors, times:
- fused:    mxnet.amp.core.ops.unscale_and_check (one op: reads each gradient once, scales in place)
- builtin:  multi_all_finite in chunks of 200 arrays (as mxnet.contrib.amp does) + ``g *= inv_scale``
            per gradient
- copy:     the faster of MXNet ``copyto`` and ``numpy.copyto`` of one buffer of the same size
and prints speed-up of fused over builtin and fused bandwidth as a fraction of copy bandwidth (both
move 2 x bytes: one read and one write of every gradient byte). "call ms" is the fused op on the same
number of 1-element arrays: MXNet's fixed cost of one op call with that many arrays, which no kernel
can remove. "trainer ms" is what ``amp.init_trainer`` actually runs: the gradients are views of one
contiguous buffer (mxnet.amp.grad_buffer), so the check is one call over one array whatever the count.

Usage: python bench/bench_unscale.py [--total 100000000] [--repeat 5]
"""
import argparse

import mxnet as mx
import numpy as np

from mxnet.amp.core import library, ops
from timing import copy_seconds, split, timed

CHUNK = 200  # arrays per multi_all_finite call in mxnet.contrib.amp


def fused(grads, inv_scale):
    flag = ops.unscale_and_check(grads, inv_scale)
    return flag.asnumpy()[0]


def builtin(grads, inv_scale):
    flag = mx.nd.ones((1,))
    for i in range(0, len(grads), CHUNK):
        part = grads[i:i + CHUNK]
        mx.nd.multi_all_finite(*part, num_arrays=len(part), init_output=False, out=flag)
    for g in grads:
        g *= inv_scale
    return flag.asnumpy()[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total", type=int, default=100_000_000, help="float32 gradients in all")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 100, 10_000])
    args = parser.parse_args()

    gbytes = 2 * 4 * args.total / 1e9  # one read + one write of every gradient byte
    t_copy = copy_seconds(args.total, args.repeat)
    print("mxnet.amp fused unscale+check, %d float32 gradients (%.1f MB), kernels: %s"
          % (args.total, 4 * args.total / 1e6, library.cpu_isa()))
    print("copy of the same bytes: %.1f ms (%.1f GB/s)" % (1e3 * t_copy, gbytes / t_copy))
    print("%8s %10s %10s %12s %10s %10s %10s %11s %10s" % (
        "tensors", "fused ms", "call ms", "builtin ms", "speed-up", "fused GB/s", "% of copy", "trainer ms",
        "% of copy"))
    rng = np.random.default_rng(0)
    for count in args.counts:
        grads = [mx.nd.array(rng.standard_normal(n, dtype=np.float32)) for n in
                 split(args.total, count)]
        flat = mx.nd.concat(*[g.reshape((-1,)) for g in grads], dim=0) if count > 1 else grads[0].copy()
        mx.nd.waitall()
        inv = 0.5  # a dozen halvings over the run: values stay far from subnormals
        tiny = [mx.nd.ones((1,)) for _ in range(count)]
        t_fused = timed(lambda: fused(grads, inv), args.repeat)
        t_call = timed(lambda: fused(tiny, 1.0), args.repeat)
        t_builtin = timed(lambda: builtin(grads, inv), args.repeat)
        t_trainer = timed(lambda: fused([flat], inv), args.repeat)
        assert fused(grads, inv) == 1.0
        print("%8d %10.1f %10.1f %12.1f %9.2fx %10.1f %9.0f%% %11.1f %9.0f%%"
              % (count, 1e3 * t_fused, 1e3 * t_call, 1e3 * t_builtin, t_builtin / t_fused,
                 gbytes / t_fused, 100 * t_copy / t_fused, 1e3 * t_trainer, 100 * t_copy / t_trainer))
        del grads, flat


if __name__ == "__main__":
    main()
