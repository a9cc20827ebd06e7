"""Serving a converted encoder: many requests of varying length, latency percentiles, memory and cache growth.

The model is an encoder of BERT-base shape (``--layers`` post-LN blocks of 768 units, 12 heads, 3072 hidden
units; random weights). Each configuration runs in a child process of its own: the variant (fp32,
``mxnet.contrib.amp`` bf16, ``mxnet.amp`` bf16 via ``convert_hybrid_block``), the batch size and the number of
MXNet CPU engine workers (``MXNET_CPU_WORKER_NTHREADS``). The requests are a fixed, seeded mix of sequence
lengths from 8 to 512 (drawn from ``--distinct`` values, so that some lengths repeat), the same for every
configuration.

Reported per configuration: p50 and p99 latency after warm-up (the first request of each length excluded),
p99/p50 (with lengths this varied, the spread of the mix), jitter (the p99 of each warm request's latency over
the median of its length's: the spread a client of one length sees), throughput (tokens per second), the cost
of the first request at a new length (its latency over the median of the later requests of that length), peak
RSS (VmHWM), steady-state RSS (at the end), RSS growth over the second half of the requests (the median RSS of
the last quarter of the requests against that of the second quarter: a request's own tensors come and go with
its length, a leak or an unbounded cache stays), the library's
oneDNN 3 cache entries (``library.onednn_cache``), and the memory of the conversion: RSS with the float32 model
loaded and run once, the peak while converting, and RSS once the float32 model is dropped.

``--env KEY=VALUE`` (repeatable) sets an environment variable in every child: how the service settings of
docs/inference.md were measured, for float32 and AMP alike (``--env MXNET_MKLDNN_CACHE_NUM=64``, say).
``--bucket N`` pads every request to a multiple of N tokens (shape buckets: at most 512 / N shapes; tokens/s
counts the real tokens; a real service masks the padding in attention, this benchmark's encoder has no mask).
``--warm-up`` runs every shape the requests will have once before the first, as a service does at start-up.

Usage: python bench/bench_serving.py [--layers 2] [--requests 48] [--distinct 16] [--batches 1,8]
       [--workers 1,2] [--variants fp32,contrib,ours] [--env KEY=VALUE ...] [--bucket N] [--warm-up]
       [--stand-in a|b|c]
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_inference import _encoder  # noqa: E402  (the same block as the inference bench, at BERT-base size)
from timing import add_stand_in, apply_stand_in, child_json, cpu_banner  # noqa: E402

VARIANTS = ("fp32", "contrib", "ours")
UNITS, HEADS, HIDDEN = 768, 12, 3072


def lengths(requests, distinct, seed=0):
    """The request mix: ``requests`` lengths in [8, 512] drawn from ``distinct`` seeded values."""
    rng = np.random.RandomState(seed)
    pool = sorted({int(v) for v in np.exp(rng.uniform(np.log(8), np.log(512), distinct)).round()})
    return [int(v) for v in rng.choice(pool, requests)]


def _model(layers):
    import mxnet as mx
    from mxnet.gluon import nn
    mx.random.seed(0)
    net = nn.HybridSequential()
    for _ in range(layers):
        net.add(_encoder(units=UNITS, heads=HEADS, hidden=HIDDEN))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    return net


def _rss_mb(key="VmRSS"):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":")) / 1024.0


def serve(variant, batch, layers, mix, bucket=1, warm_up=False):
    """Run the requests in this process; return the measurements as plain data.

    With ``warm_up`` every shape the requests will have is run once before the first request, as a service
    does at start-up."""
    import mxnet as mx
    from mxnet.amp.core import library
    import gc
    net = _model(layers)
    example = mx.nd.array(np.random.RandomState(1).uniform(-1, 1, (batch, 16, UNITS)).astype(np.float32))
    net(example).wait_to_read()
    memory = {"model_mb": _rss_mb()}
    if variant == "ours":
        from mxnet import amp
        net = amp.convert_hybrid_block(net, example, target_dtype="bfloat16", cast_params_offline=True)
    elif variant == "contrib":
        from mxnet.contrib import amp as contrib_amp
        net = contrib_amp.convert_hybrid_block(net, target_dtype="bfloat16", ctx=mx.cpu(), cast_optional_params=True)
    gc.collect()  # the float32 model, no longer referenced
    mx.nd.waitall()
    memory.update(convert_peak_mb=_rss_mb("VmHWM"), converted_mb=_rss_mb())
    padded = [-(-length // bucket) * bucket for length in mix]
    if warm_up:
        for length in sorted(set(padded)):
            net(mx.nd.zeros((batch, length, UNITS))).wait_to_read()
    rng = np.random.RandomState(2)
    seen, latency, rss = {}, [], []
    for length, size in zip(mix, padded):
        x = mx.nd.array(rng.uniform(-1, 1, (batch, size, UNITS)).astype(np.float32))
        start = time.perf_counter()
        y = net(x)
        mx.nd.amp_cast(y, dtype="float32").wait_to_read()
        latency.append(time.perf_counter() - start)
        seen.setdefault(length, []).append(latency[-1])
        rss.append(_rss_mb())
    first = [i for i, length in enumerate(mix) if mix.index(length) == i]
    warm = [t for i, t in enumerate(latency) if i not in set(first)]
    first_cost = [times[0] / statistics.median(times[1:]) for times in seen.values() if len(times) > 1]
    jitter = [t / statistics.median(times[1:]) for times in seen.values() if len(times) > 2 for t in times[1:]]
    return {"p50_ms": 1000 * float(np.percentile(warm, 50)), "p99_ms": 1000 * float(np.percentile(warm, 99)),
            "jitter_p99": float(np.percentile(jitter, 99)) if jitter else float("nan"),
            "tokens_per_s": batch * sum(mix) / sum(latency), "memory": memory,
            "first_request_x": statistics.median(first_cost) if first_cost else float("nan"),
            "peak_rss_mb": _rss_mb("VmHWM"), "steady_rss_mb": rss[-1],
            "second_half_growth": _growth(rss), "cache": library.onednn_cache()}


def _growth(rss):
    """RSS growth over the second half of the requests: the median RSS of the last quarter against that of the
    second (medians, since each request's own tensors come and go with its length)."""
    quarter = max(1, len(rss) // 4)
    second, last = statistics.median(rss[quarter:2 * quarter]), statistics.median(rss[-quarter:])
    return (last - second) / second


def run_child(variant, batch, workers, args, timeout=3600):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", variant, str(batch), "--layers", str(args.layers),
           "--requests", str(args.requests), "--distinct", str(args.distinct), "--bucket", str(args.bucket)]
    cmd += ["--warm-up"] if args.warm_up else []
    env = dict(os.environ, MXNET_CPU_WORKER_NTHREADS=str(workers), **dict(kv.split("=", 1) for kv in args.env))
    return child_json(cmd, timeout, env)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--requests", type=int, default=48)
    parser.add_argument("--distinct", type=int, default=16)
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="an environment variable for every child (repeatable)")
    parser.add_argument("--bucket", type=int, default=1, metavar="N",
                        help="pad each request to a multiple of N tokens (shape buckets)")
    parser.add_argument("--warm-up", action="store_true",
                        help="run every shape of the requests once before the first (a service's start-up)")
    parser.add_argument("--child", nargs=2, metavar=("VARIANT", "BATCH"), help=argparse.SUPPRESS)
    add_stand_in(parser)
    args = parser.parse_args(argv)
    apply_stand_in(args.stand_in)
    bad = [kv for kv in args.env if "=" not in kv or not kv.split("=", 1)[0]]
    if bad:
        parser.error("--env takes KEY=VALUE, got %s" % ", ".join(map(repr, bad)))
    if args.bucket < 1:
        parser.error("--bucket must be a positive number of tokens, got %d" % args.bucket)
    mix = lengths(args.requests, args.distinct)
    if args.child:
        print(json.dumps(serve(args.child[0], int(args.child[1]), args.layers, mix, args.bucket, args.warm_up)))
        return 0
    cpu_banner()
    print("encoder: %d layers of %d units, %d heads; %d requests, lengths %d..%d (%d distinct), seed 0%s"
          % (args.layers, UNITS, HEADS, args.requests, min(mix), max(mix), len(set(mix)),
             "; environment: " + " ".join(args.env) if args.env else "") +
          ("; padded to multiples of %d tokens" % args.bucket if args.bucket > 1 else "") +
          ("; every shape run once before the requests" if args.warm_up else ""))
    header = ("variant", "batch", "workers", "p50 ms", "p99 ms", "p99/p50", "jitter p99", "tokens/s", "vs fp32",
              "1st req", "peak MB", "steady MB", "2nd-half growth", "cache entries",
              "model MB: fp32 / conversion peak / converted")
    print(" | ".join(header))
    for batch in (int(b) for b in args.batches.split(",")):
        for workers in (int(w) for w in args.workers.split(",")):
            base = None
            for variant in args.variants.split(","):
                r = run_child(variant, batch, workers, args)
                if "error" in r:
                    print(" | ".join([variant, str(batch), str(workers), r["error"]]))
                    continue
                base = base or (r if variant == "fp32" else None)
                speed = r["tokens_per_s"] / base["tokens_per_s"] if base else float("nan")
                cache = r["cache"]["entries"] if r["cache"] else "-"
                print(" | ".join([variant, str(batch), str(workers), "%.1f" % r["p50_ms"], "%.1f" % r["p99_ms"],
                                  "%.2f" % (r["p99_ms"] / r["p50_ms"]), "%.2f" % r["jitter_p99"],
                                  "%.0f" % r["tokens_per_s"], "%.2fx" % speed, "%.2fx" % r["first_request_x"],
                                  "%.0f" % r["peak_rss_mb"], "%.0f" % r["steady_rss_mb"],
                                  "%+.1f%%" % (100 * r["second_half_growth"]), str(cache),
                                  "%(model_mb).0f / %(convert_peak_mb).0f / %(converted_mb).0f" % r["memory"]]),
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
