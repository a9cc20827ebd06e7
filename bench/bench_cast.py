"""Fused multi-tensor cast vs MXNet's per-array amp_cast vs a plain copy of the same bytes.

For TOTAL float32 parameters split into 1, 100 and 10 000 tensors, times casting all of them to
float16 and to bfloat16 with
- fused:    mxnet.amp.core.ops.multi_cast (one op call, new output arrays)
- fused out=: the same into preallocated outputs (the steady state of casting parameters each step;
            a fresh 200 MB output costs page faults that have nothing to do with the kernel)
- builtin:  mx.nd.amp_cast per array (what casting a parameter list costs in MXNet 1.9.1)
and prints the speed-up of fused over builtin, and the bandwidth of fused out= (4 bytes read + 2
written per element) as a fraction of a copy's bandwidth (the faster of MXNet copyto and
numpy.copyto of TOTAL float32).

Usage: python bench/bench_cast.py [--total 100000000] [--repeat 3]
"""
import argparse

import mxnet as mx
import numpy as np

from mxnet.amp.core import library, ops
from timing import copy_seconds, split, timed

from mxnet.amp.base.dtypes import BFLOAT16 as BF16


def fused(params, dtype, out=None):
    outs = ops.multi_cast(params, dtype, out=out)
    mx.nd.waitall()
    return outs


def builtin(params, dtype):
    outs = [mx.nd.amp_cast(p, dtype=dtype) for p in params]
    mx.nd.waitall()
    return outs


def copy_bandwidth(total, repeat):
    """GB/s of the faster of MXNet copyto and numpy.copyto, counting bytes read + written."""
    seconds = copy_seconds(total, repeat)
    return 8.0 * total / 1e9 / seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total", type=int, default=100_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 100, 10_000])
    args = parser.parse_args()

    copy_gbs = copy_bandwidth(args.total, args.repeat)
    gbytes = 6.0 * args.total / 1e9
    print("mxnet.amp fused multi-tensor cast, %d float32 parameters, kernels: %s"
          % (args.total, library.cpu_isa()))
    print("copy bandwidth: %.1f GB/s" % copy_gbs)
    print("%8s %9s %9s %11s %11s %9s %10s %10s" % ("tensors", "to", "fused ms", "fused out=",
                                                   "builtin ms", "speed-up", "out= GB/s",
                                                   "% of copy"))
    rng = np.random.default_rng(0)
    for count in args.counts:
        params = [mx.nd.array(rng.standard_normal(n, dtype=np.float32)) for n in
                  split(args.total, count)]
        mx.nd.waitall()
        for name, dtype in (("float16", np.float16), ("bfloat16", BF16)):
            out = [mx.nd.empty(p.shape, dtype=dtype) for p in params]
            t_fused = timed(lambda: fused(params, dtype), args.repeat)
            t_out = timed(lambda: fused(params, dtype, out), args.repeat)
            t_builtin = timed(lambda: builtin(params, dtype), args.repeat)
            print("%8d %9s %9.1f %11.1f %11.1f %8.2fx %10.1f %9.0f%%"
                  % (count, name, 1e3 * t_fused, 1e3 * t_out, 1e3 * t_builtin,
                     t_builtin / t_fused, gbytes / t_out, 100 * gbytes / t_out / copy_gbs))
            del out
        del params


if __name__ == "__main__":
    main()
