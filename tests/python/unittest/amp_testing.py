"""Shared by the tests: NumPy references for rounding to the low precision types exactly as MXNet does, and
the marker for tests of the native bfloat16 path."""
import numpy as np
import pytest

from mxnet.amp.policy import native_support

#: Tests of MXNet's native bfloat16 kernels (oneDNN on AVX-512 CPUs); elsewhere bfloat16 is emulated.
requires_native_bf16 = pytest.mark.skipif(
    not native_support("bfloat16", "cpu"),
    reason="needs a CPU where oneDNN runs bfloat16 natively (AVX-512: avx512f/bw/vl/dq); this one emulates "
           "bfloat16 (or MXNET_AMP_EMULATE=1 is set)")


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
