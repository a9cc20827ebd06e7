"""LayerNorm and softmax in bfloat16 graphs on CPU: the float32 island against this project's kernels.

Side by side in one process, the variants of each shape alternating (load from other processes hits them alike),
best of --repeat rounds, forward and forward + backward (autograd):
- LayerNorm over (16, 128, 512): the float32 island a bfloat16 graph had (cast to float32, MXNet's float32
  LayerNorm, cast back), MXNet's float32 LayerNorm alone, ``amp_layer_norm`` on bfloat16 (oneDNN 3) and on
  float32 data written as bfloat16;
- softmax over the attention scores (128, 128, 128): the float32 island, MXNet's float32 softmax, ``amp_softmax``
  on float32, on bfloat16 and on float32 scores written as bfloat16 (forward: the library's row kernel; backward:
  oneDNN 3), the same with full lengths (``use_length``: the row kernel both ways), and with random lengths
  (MXNet's float32 softmax beside it). Forward and backward on oneDNN 3 alone: ``ONEDNN_VERBOSE=1``.

Usage: python bench/bench_norms.py [--repeat 20]
"""
import argparse

import numpy as np

from timing import best_of, cpu_banner


def _cases(mx, bf16):
    rng = np.random.RandomState(0)
    x = mx.nd.array(rng.uniform(-2, 2, (16, 128, 512)).astype(np.float32))
    gamma, beta = mx.nd.ones(512), mx.nd.zeros(512)
    s = mx.nd.array(rng.uniform(-4, 4, (128, 128, 128)).astype(np.float32))
    full = mx.nd.full((128, 128), 128, dtype="int32")
    some = mx.nd.array(rng.randint(1, 129, (128, 128)), dtype="int32")

    def low(a):
        return mx.nd.amp_cast(a, dtype=bf16)

    def island(op):
        return lambda a, *args: low(op(mx.nd.amp_cast(a, dtype=np.float32), *args))

    xl, sl = low(x), low(s)
    layer_norm = {
        "fp32 island (cast, LayerNorm, cast)": (island(mx.nd.LayerNorm), (xl, gamma, beta)),
        "MXNet LayerNorm float32 alone": (mx.nd.LayerNorm, (x, gamma, beta)),
        "amp_layer_norm bf16 -> bf16": (mx.nd.amp_layer_norm, (xl, gamma, beta)),
        "amp_layer_norm fp32 -> bf16": (lambda *a: mx.nd.amp_layer_norm(*a, dtype="bfloat16"), (x, gamma, beta)),
    }
    softmax = {
        "fp32 island (cast, softmax, cast)": (island(mx.nd.softmax), (sl,)),
        "MXNet softmax float32 alone": (mx.nd.softmax, (s,)),
        "amp_softmax fp32 -> fp32": (mx.nd.amp_softmax, (s,)),
        "amp_softmax fp32 -> fp32, full lengths": (lambda a: mx.nd.amp_softmax(a, full, use_length=True), (s,)),
        "amp_softmax bf16 -> bf16, full lengths": (lambda a: mx.nd.amp_softmax(a, full, use_length=True), (sl,)),
        "amp_softmax bf16 -> bf16": (mx.nd.amp_softmax, (sl,)),
        "amp_softmax fp32 -> bf16": (lambda a: mx.nd.amp_softmax(a, dtype="bfloat16"), (s,)),
        "amp_softmax bf16, random lengths": (lambda a: mx.nd.amp_softmax(a, some, use_length=True), (sl,)),
        "MXNet softmax fp32, random lengths": (lambda a: mx.nd.softmax(a, some, use_length=True), (s,)),
    }
    return {"LayerNorm (16, 128, 512)": layer_norm, "softmax (128, 128, 128)": softmax}


def _runner(mx, func, args, backward):
    """``func(*args)``, and with ``backward`` its gradient for ``args[0]`` from a head gradient made beforehand."""
    if not backward:
        return lambda: func(*args).wait_to_read()
    data = args[0].copy()
    data.attach_grad()
    inputs = [data] + list(args[1:])
    head = mx.nd.ones_like(func(*inputs))

    def run():
        with mx.autograd.record():
            out = func(*inputs)
        out.backward(head)
        data.grad.wait_to_read()
    return run


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    import mxnet as mx
    import mxnet.amp  # noqa: F401  (loads the library's ops)
    from mxnet.amp.base.dtypes import BFLOAT16
    print(cpu_banner())
    for title, variants in _cases(mx, BFLOAT16).items():
        for backward in (False, True):
            runs = {name: _runner(mx, f, a, backward) for name, (f, a) in variants.items()}
            best = best_of(runs, args.repeat)
            base = best[next(iter(best))]
            print("\n%s, %s" % (title, "forward + backward" if backward else "forward"))
            for name, seconds in best.items():
                print("  %-42s %8.3f ms  %5.2fx" % (name, seconds * 1e3, base / seconds))


if __name__ == "__main__":
    main()
