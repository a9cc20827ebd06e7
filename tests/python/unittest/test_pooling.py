"""The library's max pooling (amp_pooling): values and gradients against NumPy on float32 and bfloat16 data, ties and
padding as MXNet's Pooling treats them, the attributes it takes and refuses, and where training graphs route it."""
import mxnet as mx
import numpy as np
import pytest

from mxnet import autograd
from mxnet.amp import lists
from mxnet.amp.base.dtypes import BFLOAT16
from mxnet.amp.core import library  # noqa: F401  (loads the library's ops)

from amp_testing import bf16_round

RNG = np.random.RandomState(0)
LOWEST = np.finfo(np.float32).min


def _out_size(n, k, s, p, full):
    return (n + 2 * p - k + (s - 1 if full else 0)) // s + 1


def np_max_pool(x, kernel, stride, pad, full=False):
    """Max pooling in NumPy: the output, and for each window the flat index of its first largest value (-1: none)."""
    n, c, h, w = x.shape
    oh, ow = (_out_size(h, kernel[0], stride[0], pad[0], full), _out_size(w, kernel[1], stride[1], pad[1], full))
    y = np.full((n, c, oh, ow), LOWEST, np.float32)
    arg = np.full((n, c, oh, ow), -1, np.int64)
    for i in range(oh):
        for j in range(ow):
            y0, x0 = i * stride[0] - pad[0], j * stride[1] - pad[1]
            ys, xs = range(max(y0, 0), min(y0 + kernel[0], h)), range(max(x0, 0), min(x0 + kernel[1], w))
            flat = [(a * w + b) for a in ys for b in xs]
            if not flat:
                continue
            window = x.reshape(n, c, h * w)[:, :, flat]
            first = window.argmax(axis=2)  # NumPy's argmax: the first largest, as MXNet routes the gradient
            y[:, :, i, j] = np.take_along_axis(window, first[..., None], axis=2)[..., 0]
            arg[:, :, i, j] = np.asarray(flat)[first]
    return y, arg


def np_max_pool_grad(shape, arg, dy):
    dx = np.zeros((shape[0], shape[1], shape[2] * shape[3]), np.float64)
    for idx in np.ndindex(*arg.shape):
        if arg[idx] >= 0:
            dx[idx[0], idx[1], arg[idx]] += dy[idx]
    return dx.reshape(shape)


def _array(values, dtype):
    arr = mx.nd.array(values)
    return mx.nd.amp_cast(arr, dtype=BFLOAT16) if dtype == "bfloat16" else arr


def _np(arr):
    return mx.nd.amp_cast(arr, dtype=np.float32).asnumpy()


CASES = [  # kernel, stride, pad, convention, shape
    ((3, 3), (2, 2), (1, 1), "valid", (2, 3, 9, 8)),   # ResNet's stem: overlapping windows, padding
    ((3, 2), (2, 3), (0, 1), "full", (1, 2, 10, 7)),   # "full": a last column of windows over padding only
    ((2, 2), (1, 1), (0, 0), "valid", (3, 2, 5, 6)),
    ((4, 3), (3, 3), (2, 1), "full", (2, 1, 7, 11)),
]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("kernel,stride,pad,convention,shape", CASES)
def test_values_and_gradients_match_numpy(dtype, kernel, stride, pad, convention, shape):
    values = np.round(RNG.standard_normal(shape) * 4).astype(np.float32) / 4  # many ties
    if dtype == "bfloat16":
        values = bf16_round(values)
    x = _array(values, dtype)
    x.attach_grad()
    attrs = dict(kernel=kernel, stride=stride, pad=pad, pool_type="max", pooling_convention=convention)
    with autograd.record():
        y = mx.nd.amp_pooling(x, **attrs)
    want, arg = np_max_pool(values, kernel, stride, pad, convention == "full")
    got = _np(y)
    assert y.dtype == x.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, bf16_round(want) if dtype == "bfloat16" else want)
    head = RNG.uniform(-1, 1, want.shape).astype(np.float32)
    if dtype == "bfloat16":
        head = bf16_round(head)
    y.backward(_array(head, dtype))
    grad = np_max_pool_grad(shape, arg, head.astype(np.float64))  # overlapping windows add up exactly here
    if dtype == "bfloat16":  # added in float32, rounded once
        np.testing.assert_array_equal(_np(x.grad), bf16_round(grad.astype(np.float32)))
    else:
        np.testing.assert_allclose(x.grad.asnumpy(), grad, rtol=1e-6, atol=1e-7)
    # the same values as MXNet's float32 Pooling (a padding-only window's -FLT_MAX rounds to -inf in bfloat16)
    mxnet_pool = mx.nd.Pooling(mx.nd.array(values), **attrs).asnumpy()
    np.testing.assert_array_equal(got, bf16_round(mxnet_pool) if dtype == "bfloat16" else mxnet_pool)


def test_global_pooling_takes_the_whole_plane():
    values = RNG.standard_normal((2, 3, 5, 4)).astype(np.float32)
    y = mx.nd.amp_pooling(mx.nd.array(values), kernel=(1, 1), global_pool=True)
    np.testing.assert_array_equal(y.asnumpy(), values.max(axis=(2, 3), keepdims=True))


def test_a_nan_in_a_window_is_its_maximum():
    values = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    values[0, 0, 1, 0] = np.nan
    y = mx.nd.amp_pooling(mx.nd.array(values), kernel=(2, 2), stride=(2, 2)).asnumpy()
    assert np.isnan(y[0, 0, 0, 0]) and y[0, 0, 0, 1] == 7 and y[0, 0, 1, 1] == 15


@pytest.mark.parametrize("attrs,message", [
    (dict(kernel=(2, 2), pool_type="avg"), "attribute pool_type must be one of 'max' (got 'avg')"),
    (dict(kernel=(2, 2), pooling_convention="same"),
     "attribute pooling_convention must be one of 'valid', 'full' (got 'same')"),
    (dict(kernel=(2, 2), layout="NHWC"), "attribute layout must be one of 'None', 'NCHW' (got 'NHWC')"),
    (dict(kernel=(2, 2, 2)), "kernel, stride and pad must have 2 values each (2-D pooling; got 3, 2, 2)"),
    (dict(kernel=(9, 2)), "kernel (9, 2) is larger than the padded data (4, 4)"),
])
def test_refused_attributes_are_named_with_the_valid_choices(attrs, message):
    with pytest.raises(mx.base.MXNetError, match=message.replace("(", r"\(").replace(")", r"\)")):
        mx.nd.amp_pooling(mx.nd.ones((1, 1, 4, 4)), **attrs).wait_to_read()


def test_the_gradient_must_come_in_the_datas_dtype():
    x = _array(np.ones((1, 1, 4, 4), np.float32), "bfloat16")
    x.attach_grad()
    with autograd.record():
        y = mx.nd.amp_pooling(x, kernel=(2, 2), stride=(2, 2))
    with pytest.raises(mx.base.MXNetError, match="the output gradient has dtype float32; it must have the data's, "
                                                 "bfloat16"):
        y.backward(mx.nd.ones(y.shape))
        x.grad.wait_to_read()


@pytest.mark.parametrize("attrs,routed", [
    ({"kernel": "(3, 3)", "stride": "(2, 2)", "pad": "(1, 1)"}, True),   # max and valid: the defaults
    ({"kernel": "(2, 2)", "pool_type": "max", "pooling_convention": "full", "layout": "NCHW"}, True),
    ({"kernel": "(2, 2)", "pool_type": "avg"}, False),
    ({"kernel": "(2, 2)", "pooling_convention": "same"}, False),
    ({"kernel": "(3,)"}, False),
    ({"kernel": "(2, 2, 2)", "layout": "NCDHW"}, False),
])
def test_training_graphs_route_only_the_pooling_the_kernel_takes(attrs, routed):
    want = "amp_pooling" if routed else None
    assert lists.storage_kernel("bfloat16", "cpu", "Pooling", attrs) == want
    assert lists.storage_kernel("bfloat16", "cpu", "_npx_pooling", attrs) == want
    assert lists.storage_kernel("float16", "cpu", "Pooling", attrs) is None
    assert lists.storage_kernel("bfloat16", "gpu", "Pooling", attrs) is None
