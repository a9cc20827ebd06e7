"""Shared by the tests: NumPy references for rounding to the low precision types exactly as MXNet does, the
marker for tests of the native bfloat16 path, and checks of the library's oneDNN 3 kernels (accumulation
tolerance, finite differences)."""
import os

import numpy as np
import pytest

from mxnet.amp.core import cpu, library
from mxnet.amp.core.support import native_support, plans_native

#: Tests of MXNet's native bfloat16 kernels (oneDNN on AVX-512 CPUs); elsewhere bfloat16 is emulated.
requires_native_bf16 = pytest.mark.skipif(
    not native_support("bfloat16", "cpu"),
    reason="needs a CPU where oneDNN runs bfloat16 natively (AVX-512: avx512f/bw/vl/dq); this one emulates "
           "bfloat16 (or MXNET_AMP_EMULATE=1 is set)")

#: Tests of what the default plan does where it runs bfloat16 natively (classes (c) and (d)); class (b) has MXNet's
#: bfloat16 kernels (requires_native_bf16) but its default plan emulates.
requires_native_plan = pytest.mark.skipif(
    not plans_native("bfloat16", "cpu"),
    reason="the default plan emulates bfloat16 on this CPU (class %s)" % cpu.cpu_class().name)


ONEDNN3, ONEDNN3_INFO = library.onednn()
#: Tests of the library's oneDNN 3 kernels (built with oneDNN 3 and loaded; MXNET_AMP_ONEDNN=0 turns them off).
requires_onednn3 = pytest.mark.skipif(not ONEDNN3, reason="oneDNN 3 kernels unavailable: %s" % ONEDNN3_INFO)
#: ... with bfloat16 operands: oneDNN 3.2 creates those from avx512_core up (CPU classes (b) to (d)).
requires_onednn3_bf16 = pytest.mark.skipif(not library.onednn_bf16()[0],
                                           reason="no bfloat16 oneDNN 3 kernels here: %s" % library.onednn_bf16()[1])
#: A ``dtype`` parametrization whose bfloat16 cell needs :data:`requires_onednn3_bf16`.
ONEDNN3_DTYPES = ("float32", pytest.param("bfloat16", marks=requires_onednn3_bf16))


def mxnet_onednn_runs_bf16():
    """Whether MXNet's own oneDNN 2.4 creates bfloat16 primitives in this process: on the real CPU (never a
    mocked cpuinfo) with AVX-512 (F, BW, VL, DQ), unless ``DNNL_MAX_CPU_ISA`` caps it below ``AVX512_CORE``."""
    cap = os.environ.get("DNNL_MAX_CPU_ISA", "ALL").upper()
    return cpu.AVX512_CORE <= cpu.read_flags("/proc/cpuinfo") and (cap == "ALL" or cap.startswith("AVX512_CORE"))


_BASE = "fpu vme sse sse2 ssse3 sse4_1 sse4_2 popcnt aes xsave avx f16c fma avx2 bmi1 bmi2"
_AVX512 = "avx512f avx512dq avx512cd avx512bw avx512vl"
#: CPU class -> (model name, flags): real CPUs of each class of mxnet.amp.cpu (abridged flag lists).
CPUS = {
    "a": ("AMD EPYC 7763 (Zen 3)", _BASE),
    "b": ("Intel Xeon Platinum 8380 (Ice Lake)", "%s %s avx512_vnni avx512vbmi avx512_vbmi2 avx512ifma" % (
        _BASE, _AVX512)),
    "c": ("AMD EPYC 9654 (Zen 4)", "%s %s avx512_vnni avx512_bf16" % (_BASE, _AVX512)),
    "d": ("Intel Xeon Platinum 8480+ (Sapphire Rapids)", "%s %s avx512_vnni avx512_bf16 avx512_fp16 amx_bf16 "
          "amx_tile amx_int8" % (_BASE, _AVX512)),
}


def cpuinfo_of_class(tmp_path, cls, processors=2):
    """Write a /proc/cpuinfo of a CPU of class ``cls`` under ``tmp_path``; return its path (for
    ``MXNET_AMP_CPUINFO``: it changes what the policy believes, never what the CPU runs)."""
    model, flags = CPUS[cls]
    path = tmp_path / ("cpuinfo_%s" % cls)
    path.write_text("".join("processor\t: %d\nvendor_id\t: x\nmodel name\t: %s\nflags\t\t: %s\n\n"
                            % (i, model, flags) for i in range(processors)))
    return str(path)


def hardware_report_of_class(tmp_path, cls):
    """``python -m mxnet.amp hardware --dtype bfloat16`` as on a CPU of class ``cls`` (mocked cpuinfo)."""
    import subprocess
    import sys
    env = dict(os.environ, **{cpu.CPUINFO_ENV: cpuinfo_of_class(tmp_path, cls)})
    env.pop("MXNET_AMP_EMULATE", None)
    out = subprocess.run([sys.executable, "-m", "mxnet.amp", "hardware", "--dtype", "bfloat16"], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


def bf16_round(values):
    """Round float32 values to the nearest bfloat16 (ties to even), returned as float32; NaN stays NaN."""
    a = np.ascontiguousarray(values, dtype=np.float32)
    bits = a.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    out = rounded.astype(np.uint32).view(np.float32).copy()
    out[np.isnan(a)] = np.nan
    return out


def fp16_round(values):
    """Round float32 values to float16 and back (NumPy's conversion is IEEE round-to-nearest-even)."""
    return np.asarray(values, dtype=np.float32).astype(np.float16).astype(np.float32)


def lp_round(values, dtype):
    """Round to ``dtype`` ('bfloat16' or 'float16'), returned as float32."""
    return bf16_round(values) if dtype == "bfloat16" else fp16_round(values)


def assert_accumulated(got, ref, magnitude, k, out_dtype):
    """|got - ref| within float32 accumulation over ``k`` terms of scale ``magnitude`` (the sum of |terms|),
    plus the rounding of a bfloat16 output; ``ref`` is a float64 reference on the rounded operands."""
    tol = 4 * k * 2.0 ** -24 * magnitude + 1e-30
    if out_dtype == "bfloat16":
        tol = tol + 2.0 ** -8 * np.abs(ref)
    err = np.abs(got.astype(np.float64) - ref)
    assert (err <= tol).all(), "max error %.3g (tolerance %.3g)" % (err.max(), np.max(tol))


def central_differences(loss, values, i, step):
    """d loss / d values[i] by central differences with ``step``, elementwise (``loss`` takes the list)."""
    fd = np.zeros_like(values[i])
    for idx in np.ndindex(*values[i].shape):
        plus, minus = [u.copy() for u in values], [u.copy() for u in values]
        plus[i][idx] += step / 2
        minus[i][idx] -= step / 2
        fd[idx] = (loss(plus) - loss(minus)) / step
    return fd


def grads_of(op, arrays, head, **attrs):
    """``(y, [gradient of each array])`` of ``y = op(*arrays, **attrs)`` for the output gradient ``head``."""
    from mxnet import autograd
    for a in arrays:
        a.attach_grad()
    with autograd.record():
        y = op(*arrays, **attrs)
    y.backward(head)
    return y, [a.grad for a in arrays]


def check_float32_params(op, x, w, b, head, **attrs):
    """``op`` with ``param_dtype="float32"`` (float32 weight and bias beside bfloat16 data) against the same op on
    the parameters cast to bfloat16: the output and the data gradient bit for bit (the kernel rounds the weight as a
    cast does; the bias is one bfloat16 represents exactly); the weight and bias gradients float32, and rounded to
    bfloat16 within one bfloat16 step of the cast path's (which rounds its float32 accumulator once)."""
    import mxnet as mx
    from mxnet.amp.base.dtypes import BFLOAT16

    def low(v):
        return mx.nd.amp_cast(mx.nd.array(v), dtype=BFLOAT16)

    b = bf16_round(b)
    y, grads = grads_of(op, [low(x), mx.nd.array(w), mx.nd.array(b)], low(head), param_dtype="float32", **attrs)
    ref_y, refs = grads_of(op, [low(x), low(w), low(b)], low(head), **attrs)
    assert y.dtype == grads[0].dtype == BFLOAT16 and grads[1].dtype == grads[2].dtype == np.float32
    as32 = [mx.nd.amp_cast(a, dtype=np.float32).asnumpy() for a in [y, grads[0], ref_y, refs[0]]]
    np.testing.assert_array_equal(as32[0], as32[2])
    np.testing.assert_array_equal(as32[1], as32[3])
    for got, want in zip(grads[1:], refs[1:]):
        got, want = got.asnumpy(), mx.nd.amp_cast(want, dtype=np.float32).asnumpy()
        np.testing.assert_allclose(bf16_round(got), want, rtol=2 ** -7, atol=2 ** -8 * np.abs(want).max())
    return grads


def converted_deviation_and_ops(net, x, dtype="bfloat16"):
    """Convert ``net`` with ``amp.convert_hybrid_block(net, x, dtype)``; return its largest deviation from ``net``'s
    float32 output (relative to that output's largest value) and the set of ops in its graph."""
    import json
    from mxnet import amp
    ref = net(x).asnumpy()
    low = amp.convert_hybrid_block(net, x, dtype)
    deviation = float(np.abs(low(x).asnumpy() - ref).max() / np.abs(ref).max())
    return deviation, {n["op"] for n in json.loads(low._cached_graph[1].tojson())["nodes"]}
