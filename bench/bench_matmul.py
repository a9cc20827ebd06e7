"""bfloat16 matrix products on CPU: MXNet's kernels against this project's oneDNN 3 kernels (libmxnet_amp).

Side by side in one process, the variants of each shape alternating (load from other processes hits them
alike), best of --repeat runs:
- FullyConnected: MXNet float32, MXNet bfloat16 (its oneDNN 2.4), ``amp_fully_connected`` (oneDNN 3), and
  oneDNN 3's matmul called directly through the library's C entry point (no MXNet op around it);
- batch_dot: MXNet float32 (MXNet has no bfloat16 batch_dot), ``amp_batch_dot``.
Shapes: the GEMMs of BERT-base (768 units, 12 heads, 3072 hidden) and of the transformer encoder block of
bench_inference.py (512 units, 8 heads, 2048 hidden), 128 tokens, batch 16. Then the block end to end
(bench_inference.py's runs: fp32, ours with the library kernels and with MXNet's, mxnet.contrib.amp in a
child process of its own), with the deviation from fp32.

Usage: python bench/bench_matmul.py [--repeat 10] [--batch 16] [--skip-block]
"""
import argparse
import ctypes
import os
import sys

import numpy as np

from timing import best_of, cpu_banner, print_gflops

TOKENS, SEQ = 2048, 128  # batch 16 x 128 tokens

#: (label, rows M, inputs K, outputs N) of the FullyConnected layers, M = batch x tokens.
FC_SHAPES = (
    ("BERT qkv/out 768->768", 768, 768),
    ("BERT ffn1 768->3072", 768, 3072),
    ("BERT ffn2 3072->768", 3072, 768),
    ("block q/k/v/proj 512->512", 512, 512),
    ("block ffn1 512->2048", 512, 2048),
    ("block ffn2 2048->512", 2048, 512),
)
#: (label, heads, head size): attention scores (T x d by d x T) and context (T x T by T x d) per head.
ATTENTION_SHAPES = (("BERT", 12, 64), ("block", 8, 64))


class _Matmul(ctypes.Structure):
    _fields_ = ([("ndims", ctypes.c_int), ("a_dtype", ctypes.c_int), ("b_dtype", ctypes.c_int),
                 ("c_dtype", ctypes.c_int), ("bias_dtype", ctypes.c_int), ("act", ctypes.c_int),
                 ("alpha", ctypes.c_float)]
                + [(n, ctypes.c_int64 * 6) for n in ("a_dims", "a_strides", "b_dims", "b_strides", "c_dims",
                                                     "c_strides")]
                + [(n, ctypes.c_void_p) for n in ("a", "b", "bias", "addend", "c")])


def direct_matmul(m, k, n):
    """A function running y = x W^T + b, bf16 (M, K) x (N, K), through oneDNN 3 with no MXNet op around it."""
    from mxnet.amp.core import library
    lib = ctypes.CDLL(os.path.join(os.path.dirname(library.LIBRARY_PATH), "libmxnet_amp_onednn.so"))
    func = lib.mxnet_amp_onednn_matmul
    func.argtypes = [ctypes.POINTER(_Matmul), ctypes.c_char_p, ctypes.c_int]
    rng = np.random.RandomState(0)
    bufs = [(rng.uniform(-1, 1, s).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
            for s in ((m, k), (n, k), (n,), (m, n))]
    desc = _Matmul(ndims=2, a_dtype=12, b_dtype=12, c_dtype=12, bias_dtype=12, alpha=1.0)
    desc.a_dims[:2], desc.a_strides[:2] = (m, k), (k, 1)
    desc.b_dims[:2], desc.b_strides[:2] = (k, n), (1, k)
    desc.c_dims[:2], desc.c_strides[:2] = (m, n), (n, 1)
    desc.a, desc.b, desc.bias, desc.c = (b.ctypes.data for b in bufs)
    error = ctypes.create_string_buffer(512)

    def run():
        if func(ctypes.byref(desc), error, 512) != 0:
            raise RuntimeError(error.value.decode())
    return run, bufs


def fc_table(repeat, tokens):
    import mxnet as mx
    from mxnet.amp.core import library
    from mxnet.amp.base.dtypes import BFLOAT16
    have_ours = library.onednn()[0]
    rng = np.random.RandomState(0)
    rows = []
    for label, k, n in FC_SHAPES:
        x, w, b = (mx.nd.array(rng.uniform(-1, 1, s)) for s in ((tokens, k), (n, k), (n,)))
        xb, wb, bb = (mx.nd.amp_cast(t, dtype=BFLOAT16) for t in (x, w, b))
        variants = {"mxnet fp32": lambda: mx.nd.FullyConnected(x, w, b, num_hidden=n).wait_to_read(),
                    "mxnet bf16": lambda: mx.nd.FullyConnected(xb, wb, bb, num_hidden=n).wait_to_read()}
        if have_ours:
            variants["ours bf16"] = lambda: mx.nd.amp_fully_connected(xb, wb, bb, num_hidden=n).wait_to_read()
            variants["oneDNN 3 direct"], _keep = direct_matmul(tokens, k, n)
        seconds = best_of(variants, repeat)
        rows.append((label, {v: 2.0 * tokens * k * n / s / 1e9 for v, s in seconds.items()}))
    return rows


def attention_table(repeat, batch):
    import mxnet as mx
    from mxnet.amp.core import library
    from mxnet.amp.base.dtypes import BFLOAT16
    rng = np.random.RandomState(0)
    rows = []
    for label, heads, d in ATTENTION_SHAPES:
        q = mx.nd.array(rng.uniform(-1, 1, (batch * heads, SEQ, d)))
        att = mx.nd.array(rng.uniform(0, 1, (batch * heads, SEQ, SEQ)))
        qb, attb = mx.nd.amp_cast(q, dtype=BFLOAT16), mx.nd.amp_cast(att, dtype=BFLOAT16)
        for what, args, kw, flops in (
                ("%s scores QK^T" % label, (q, q), dict(transpose_b=True), 2.0 * batch * heads * SEQ * SEQ * d),
                ("%s context AV" % label, (att, q), {}, 2.0 * batch * heads * SEQ * SEQ * d)):
            low = tuple(qb if a is q else attb for a in args)
            variants = {"mxnet fp32": lambda: mx.nd.batch_dot(*args, **kw).wait_to_read()}
            if library.onednn()[0]:
                variants["ours bf16"] = lambda: mx.nd.amp_batch_dot(*low, **kw).wait_to_read()
            seconds = best_of(variants, repeat)
            rows.append((what, {v: flops / s / 1e9 for v, s in seconds.items()}))
    return rows


def block_table(batch, repeat):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_inference as bi
    groups = (("fp32", "ours bf16", "ours bf16 mxnet kernels"), ("contrib bf16",))
    results = {}
    for group in groups:
        results.update(bi.run_child("transformer", group, batch, repeat, 900))
    base = results["fp32"]
    ref = np.array(base.get("output", []))
    print("\ntransformer encoder block end to end (512 units, 8 heads, 128 tokens, batch %d)" % batch)
    print("%-24s | %10s | %8s | %s" % ("variant", "ms/batch", "vs fp32", "max rel dev vs fp32"))
    for name in ("fp32", "contrib bf16", "ours bf16 mxnet kernels", "ours bf16"):
        res = results[name]
        if "error" in res:
            print("%-24s | %s" % (name, res["error"]))
            continue
        out = np.array(res["output"])
        dev = np.abs(out - ref).max() / np.abs(ref).max() if ref.size and out.size == ref.size else float("nan")
        print("%-24s | %10.1f | %7.2fx | %.2e" % (name, 1000 * res["seconds"], base["seconds"] / res["seconds"],
                                                  dev))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--skip-block", action="store_true", help="only the GEMM tables")
    args = parser.parse_args(argv)
    has_bf16 = cpu_banner()
    if not has_bf16:
        print("note: no avx512_bf16 here -- bfloat16 runs oneDNN's slower paths; run this on an AVX-512-BF16 "
              "CPU for the targets (bf16 FullyConnected >= 800 GFLOP/s, block >= 3x fp32)")
    tokens = args.batch * SEQ
    print_gflops("FullyConnected, %d rows (batch %d x %d tokens)" % (tokens, args.batch, SEQ),
                 fc_table(args.repeat, tokens), "shape")
    print_gflops("batch_dot per attention head, batch %d" % args.batch, attention_table(args.repeat, args.batch),
                 "shape")
    if not args.skip_block:
        block_table(args.batch, max(3, args.repeat // 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
