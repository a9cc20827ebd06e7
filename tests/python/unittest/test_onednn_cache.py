"""The library's oneDNN 3 primitive caches are bounded (least recently used out first), its scratch buffers
shrink back, and both are counted (``library.onednn_cache``): a service sees shapes nobody listed.

Float32 operands, so that the kernels run on every CPU class; the caches do not depend on the dtype.
"""
import json
import os
import subprocess
import sys

import mxnet as mx
import numpy as np
from mxnet.amp.core import library

from amp_testing import requires_onednn3, requires_onednn3_bf16

_CHILD = r"""
import json, sys
import mxnet as mx
import numpy as np
from mxnet.amp.core import library

def rss_mb():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS")) / 1024.0

w = np.random.RandomState(0).uniform(-1, 1, (64, 128)).astype(np.float32)
report = {"rss": {}, "stats": {}, "max_error": 0.0}
def fc(n):
    x = np.random.RandomState(n).uniform(-1, 1, (n, 128)).astype(np.float32)
    y = mx.nd.amp_fully_connected(mx.nd.array(x), mx.nd.array(w), num_hidden=64, no_bias=True).asnumpy()
    ref = x.astype(np.float64) @ w.T.astype(np.float64)
    report["max_error"] = max(report["max_error"], float(np.abs(y - ref).max()))
for n in range(1, int(sys.argv[1]) + 1):  # distinct lengths, as a service's requests
    fc(n)
    if n in (int(sys.argv[1]) // 2, int(sys.argv[1])):
        report["rss"][n] = rss_mb()
report["stats"]["after_new"] = library.onednn_cache()
for n in range(int(sys.argv[1]) - 9, int(sys.argv[1]) + 1):  # the 10 most recent again: cached
    fc(n)
report["stats"]["after_repeat"] = library.onednn_cache()
print(json.dumps(report))
"""


def _run(lengths, capacity):
    env = dict(os.environ, MXNET_AMP_ONEDNN_CACHE_SIZE=str(capacity))
    env.pop("ONEDNN_PRIMITIVE_CACHE_CAPACITY", None)  # oneDNN's own cache follows the library's bound
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(lengths)], capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@requires_onednn3
def test_the_cache_is_bounded_and_least_recently_used_goes_first():
    report = _run(40, 16)
    new, repeat = report["stats"]["after_new"], report["stats"]["after_repeat"]
    assert new["capacity"] == 16 and new["entries"] == 16
    assert (new["misses"], new["hits"], new["evictions"]) == (40, 0, 24)
    # the 10 most recent shapes are still cached: all hits, nothing built or evicted
    assert (repeat["misses"], repeat["hits"], repeat["evictions"], repeat["entries"]) == (40, 10, 24, 16)
    assert report["max_error"] < 1e-4  # evicted and rebuilt primitives compute the same products


@requires_onednn3
def test_300_distinct_lengths_leave_the_entries_bounded_and_rss_flat():
    report = _run(300, 32)
    stats = report["stats"]["after_new"]
    assert stats["entries"] == 32 and stats["evictions"] == 300 - 32
    half, full = report["rss"]["150"], report["rss"]["300"]
    assert full <= half * 1.05, report["rss"]  # no growth with the shapes seen over the second half


@requires_onednn3
def test_the_default_capacity_and_the_counters_in_this_process():
    stats = library.onednn_cache()
    assert set(stats) == set(library.CACHE_FIELDS)
    assert stats["capacity"] == int(os.environ.get("MXNET_AMP_ONEDNN_CACHE_SIZE", 256))
    # oneDNN's own cache would keep every primitive the library's evicted (1024 by default): the same bound
    assert stats["onednn_capacity"] == int(os.environ.get("ONEDNN_PRIMITIVE_CACHE_CAPACITY", stats["capacity"]))
    before = stats["misses"] + stats["hits"]
    x = mx.nd.ones((3, 5))
    mx.nd.amp_fully_connected(x, mx.nd.ones((2, 5)), num_hidden=2, no_bias=True).wait_to_read()
    after = library.onednn_cache()
    assert after["misses"] + after["hits"] == before + 1


# A fresh process: a slot that earlier calls left oversized would shrink during the 256 calls, as it should.
_SHRINK_CHILD = r"""
import json
import mxnet as mx
import numpy as np
from mxnet.amp.core import library
def conv(n, c):  # at most 8 output positions: im2col into a per-thread buffer, then one matmul
    x, w = mx.nd.ones((n, c, 2, 2)), mx.nd.ones((16, c, 3, 3))
    y = mx.nd.amp_convolution(x, w, kernel=(3, 3), pad=(1, 1), num_filter=16, no_bias=True)
    y.wait_to_read()
    return library.onednn_cache()["buffer_bytes"], y
small, _ = conv(1, 8)
large, _ = conv(64, 256)
kept = [conv(1, 8)[0] for _ in range(256)]
again, y = conv(1, 8)
print(json.dumps({"small": small, "large": large, "kept": kept, "again": again,
                  "y": y.asnumpy()[0, :, 0, 0].tolist()}))
"""


# A fresh process, so that the scratch counted is this product's alone.
_HEAD_CHILD = r"""
import json
import mxnet as mx
import numpy as np
from mxnet.amp.base.dtypes import BFLOAT16
from mxnet.amp.core import library
rng = np.random.RandomState(0)
arrays = [rng.uniform(-1, 1, shape).astype(np.float32) for shape in ((8, 98304), (2, 98304), (2,))]
x, w, b = (mx.nd.amp_cast(mx.nd.array(a), dtype=BFLOAT16) for a in arrays)
x64, w64, b64 = (mx.nd.amp_cast(a, dtype="float32").asnumpy().astype(np.float64) for a in (x, w, b))
errors = []
for args, want in (([x, w, b], x64 @ w64.T + b64), ([x, w], x64 @ w64.T)):
    y = mx.nd.amp_fully_connected(*args, num_hidden=2, no_bias=len(args) == 2, out_dtype="float32")
    errors.append(float(np.abs(y.asnumpy() - want).max() / np.abs(want).max()))
print(json.dumps({"errors": errors, "scratch": library.onednn_cache()["buffer_bytes"]}))
"""


@requires_onednn3
@requires_onednn3_bf16
def test_a_narrow_product_with_a_deep_contraction_is_cut_along_it():
    """A classifier head on flattened features, 8 x 98304 by 98304 x 2 with a float32 output: AMX kernels copy B into
    scratch padded to 64 columns (12 MB, kept per thread). Cut along K, the chunks' products add up to the whole one,
    the bias added once, and no buffer exceeds 4 MB."""
    proc = subprocess.run([sys.executable, "-c", _HEAD_CHILD], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, MXNET_CPU_WORKER_NTHREADS="1"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert max(r["errors"]) <= 1e-5, r
    assert r["scratch"] <= 4 << 20, r


@requires_onednn3
def test_scratch_buffers_stay_for_the_next_step_and_shrink_back_after_256_smaller_calls():
    proc = subprocess.run([sys.executable, "-c", _SHRINK_CHILD], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, MXNET_CPU_WORKER_NTHREADS="1"))
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    small, large, again = r["small"], r["large"], r["again"]
    assert large >= 64 * 4 * 256 * 9 * 4  # the column matrix of the large call, float32
    # a training step's smaller layers keep the largest layer's buffers for its next step (no unmap, no faults)
    assert set(r["kept"]) == {large}
    # the 257th smaller call in a row gives the large slots back; buffers under 1 MB are kept as they are
    assert again - small < (large - small) / 4 and again <= small + (1 << 20), (small, large, again)
    np.testing.assert_array_equal(r["y"], np.full(16, 8 * 4, np.float32))


def test_without_onednn3_there_is_no_cache_to_report():
    code = "from mxnet.amp.core import library\nprint(library.onednn_cache())\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, MXNET_AMP_ONEDNN="0"))
    assert proc.returncode == 0 and proc.stdout.strip() == "None", proc.stderr


_THREADS_CHILD = r"""
import json
import mxnet as mx
import numpy as np
from mxnet.amp.core import library
rng = np.random.RandomState(0)
def uniform(*shape, low=-1):
    return mx.nd.array(rng.uniform(low, 1, shape).astype(np.float32))
inputs = [(uniform(32, 256), uniform(64, 256), uniform(4, 16, 2, 2), uniform(8, 16, 3, 3), uniform(8, 16, 32, 32),
           uniform(16, low=0.5), uniform(16)) for _ in range(8)]
mx.nd.waitall()
outs = []
for x, w, d, k, e, g, b in inputs:  # independent ops, pushed at once: with two engine workers, two run at once
    outs.append(mx.nd.amp_fully_connected(x, w, num_hidden=64, no_bias=True))
    outs.append(mx.nd.amp_convolution(d, k, kernel=(3, 3), pad=(1, 1), num_filter=8, no_bias=True))
    outs.append(mx.nd.amp_batch_norm(e, g, b, mx.nd.zeros(16), mx.nd.ones(16), mx.nd.zeros((1,)),
                                     fix_gamma=False)[0])  # training mode: the batch's statistics
print(json.dumps({"threads": library.onednn_threads(), "outs": [o.asnumpy().ravel().tolist() for o in outs]}))
"""


@requires_onednn3
def test_engine_workers_share_the_cores_and_get_the_same_results():
    """Matrix products, convolutions and BatchNorm, with one and with two engine workers."""
    runs = {}
    for workers in (1, 2):
        env = dict(os.environ, MXNET_CPU_WORKER_NTHREADS=str(workers))
        for name in ("OMP_NUM_THREADS", "MXNET_AMP_ONEDNN_THREADS"):
            env.pop(name, None)
        proc = subprocess.run([sys.executable, "-c", _THREADS_CHILD], capture_output=True, text=True, timeout=300,
                              env=env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        runs[workers] = json.loads(proc.stdout.strip().splitlines()[-1])
    cores = os.cpu_count()
    # a call alone gets every core; calls running at once divide them (the team is part of the cache key)
    assert runs[1]["threads"] == runs[2]["threads"] == cores
    for one, two in zip(runs[1]["outs"], runs[2]["outs"]):
        np.testing.assert_allclose(two, one, rtol=1e-5, atol=1e-5)
