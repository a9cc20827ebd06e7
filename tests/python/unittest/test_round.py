"""amp_round: float32 values rounded to float16/bfloat16 precision, bit-exact against NumPy, gradient rounded."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd

import mxnet.amp  # noqa: F401  (loads the library that registers amp_round)
from amp_testing import lp_round

SPECIALS = [np.inf, -np.inf, np.nan, -0.0, 0.0, 1e-40, -1e-45, 65504.0, 65520.0, 70000.0, 3.0e38, 1.00390625,
            1.01171875, 5.960464477539063e-08, 2.0 ** -25]


def _values(size, seed):
    rs = np.random.RandomState(seed)
    x = (rs.standard_normal(size) * 10.0 ** rs.uniform(-8, 8, size)).astype(np.float32)
    x[:len(SPECIALS)] = SPECIALS
    return x


def _same_bits(a, b):
    nan = np.isnan(b)
    return np.isnan(a[nan]).all() and np.array_equal(a[~nan].view(np.uint32), b[~nan].view(np.uint32))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("size", [0, 1, 17, 100003])
def test_round_is_bit_exact(dtype, size):
    x = _values(max(size, len(SPECIALS)), size)[:size]
    with mx.util.np_shape(size == 0):  # legacy shapes read a 0 dimension as unknown
        out = mx.nd.amp_round(mx.nd.array(x, dtype=np.float32), dtype=dtype).asnumpy()
    assert out.dtype == np.float32 and out.shape == x.shape
    assert _same_bits(out, lp_round(x, dtype))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_round_gradient_is_rounded(dtype):
    x = mx.nd.array(_values(1000, 1))
    x.attach_grad()
    head = _values(1000, 2)
    with autograd.record():
        y = mx.nd.amp_round(x, dtype=dtype)
    y.backward(mx.nd.array(head))
    assert _same_bits(x.grad.asnumpy(), lp_round(head, dtype))


def test_round_rejects_bad_input():
    with pytest.raises(mx.base.MXNetError, match="amp_round: attribute dtype must be float16 or bfloat16"):
        mx.nd.amp_round(mx.nd.ones(3), dtype="float32").wait_to_read()
    with pytest.raises(mx.base.MXNetError, match="amp_round: input 0 must be float32"):
        mx.nd.amp_round(mx.nd.ones(3, dtype=np.float16), dtype="bfloat16").wait_to_read()
