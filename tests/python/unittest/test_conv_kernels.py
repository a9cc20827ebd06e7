"""The library's oneDNN 3 convolution (amp_convolution) and its routing and fusion in converted graphs.

Kernel tests run wherever oneDNN 3 loads (its reference kernels compute bfloat16 on CPUs without AVX-512 too):
a NumPy reference in float64 on the bfloat16-rounded operands, with a tolerance from the accumulation length
(float32 accumulation of C/groups * kernel-volume terms, plus the rounding of a bfloat16 output); gradients
against central differences (float32 operands: the convolution is linear in each input) and against MXNet's
float32 Convolution. Routing and fusion tests check graph structure and values of converted blocks.
"""
import itertools
import json

import numpy as np
import pytest

import mxnet as mx
from mxnet import amp, autograd
from mxnet.gluon import nn
from mxnet.amp.inference import blocks, convert as C
from mxnet.amp.graph.rewrite import rewrite_symbol
from mxnet.amp.base.dtypes import BFLOAT16
from mxnet.amp.core.policy import make_policy

from amp_testing import (ONEDNN3_DTYPES, assert_accumulated, bf16_round, central_differences, check_float32_params,
                         grads_of, requires_onednn3, requires_onednn3_bf16)


RNG = np.random.RandomState(0)


def _values(*shape):
    return RNG.uniform(-1, 1, shape).astype(np.float32)


def _bf16(values):
    return mx.nd.amp_cast(mx.nd.array(values), dtype=BFLOAT16)


def _np(arr):
    return mx.nd.amp_cast(arr, dtype=np.float32).asnumpy()


def _reference(x, w, b, stride, pad, dilate, groups):
    """Convolution in float64 (MXNet's geometry) and the same over |x| |w| (the error's scale)."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, c = x.shape[:2]
    o, cg = w.shape[:2]
    spatial = x.ndim - 2
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in pad])
    out_size = [(x.shape[2 + i] + 2 * pad[i] - dilate[i] * (w.shape[2 + i] - 1) - 1) // stride[i] + 1
                for i in range(spatial)]
    y, mag = np.zeros((n, o) + tuple(out_size)), np.zeros((n, o) + tuple(out_size))
    og = o // groups
    for g in range(groups):
        xs, ws = xp[:, g * cg:(g + 1) * cg], w[g * og:(g + 1) * og]
        for offset in itertools.product(*[range(k) for k in w.shape[2:]]):
            window = tuple(slice(offset[i] * dilate[i], offset[i] * dilate[i] + stride[i] * (out_size[i] - 1) + 1,
                                 stride[i]) for i in range(spatial))
            patch = xs[(slice(None), slice(None)) + window]
            wk = ws[(slice(None), slice(None)) + tuple(offset)]
            y[:, g * og:(g + 1) * og] += np.einsum("nc...,oc->no...", patch, wk)
            mag[:, g * og:(g + 1) * og] += np.einsum("nc...,oc->no...", np.abs(patch), np.abs(wk))
    if b is not None:
        shape = (1, o) + (1,) * spatial
        y, mag = y + b.reshape(shape), mag + np.abs(b).reshape(shape)
    return y, mag, cg * int(np.prod(w.shape[2:]))


CASES = [  # data shape, num_filter, kernel, stride, pad, dilate, groups
    ((2, 8, 9, 9), 16, (3, 3), (1, 1), (1, 1), (1, 1), 1),
    ((2, 16, 8, 8), 32, (1, 1), (2, 2), (0, 0), (1, 1), 1),   # ResNet's downsample: floor leaves the edge short
    ((1, 8, 10, 7), 8, (3, 3), (2, 1), (1, 2), (2, 1), 2),    # unequal strides, pads and dilations, groups
    ((2, 8, 12, 12), 8, (3, 3), (1, 1), (1, 1), (1, 1), 8),   # depthwise
    ((2, 3, 17, 17), 16, (7, 7), (2, 2), (3, 3), (1, 1), 1),  # a stem: three channels
    ((3, 5, 11), 6, (3,), (2,), (1,), (1,), 1),               # 1-D
    ((1, 4, 5, 6, 7), 4, (2, 3, 3), (1, 2, 1), (1, 0, 1), (1, 1, 2), 2),  # 3-D
    # at most 16 output positions, no groups: im2col + one matrix product (onednn/conv_gemm.cc)
    ((4, 32, 2, 2), 24, (3, 3), (1, 1), (1, 1), (1, 1), 1),   # a ResNet's last stage: taps mostly in padding
    ((2, 6, 4, 4), 8, (3, 3), (1, 1), (2, 2), (2, 2), 1),     # dilated
    ((1, 4, 2, 2, 3), 5, (2, 2, 3), (1, 1, 1), (1, 0, 1), (1, 1, 1), 1),  # 3-D
]

# Geometries of the matrix-product path (and the 1-D and downsample cases above, which take it too).
GEMM_CASES = [case for case in CASES if case[-1] == 1 and
              np.prod([(case[0][2 + i] + 2 * case[4][i] - case[5][i] * (case[2][i] - 1) - 1) // case[3][i] + 1
                       for i in range(len(case[2]))]) <= 16]


@requires_onednn3
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[0])) + "_k" + "".join(map(str, c[2])))
@pytest.mark.parametrize("dtype", ONEDNN3_DTYPES)
@pytest.mark.parametrize("no_bias", [False, True])
def test_convolution_matches_numpy(case, dtype, no_bias):
    shape, num_filter, kernel, stride, pad, dilate, groups = case
    x, w = _values(*shape), _values(num_filter, shape[1] // groups, *kernel)
    b = None if no_bias else _values(num_filter)
    attrs = dict(kernel=kernel, stride=stride, pad=pad, dilate=dilate, num_filter=num_filter, num_group=groups,
                 no_bias=no_bias)
    cast = _bf16 if dtype == "bfloat16" else mx.nd.array
    rounded = (lambda v: v) if dtype == "float32" else bf16_round
    y = mx.nd.amp_convolution(*[cast(v) for v in (x, w, b) if v is not None], **attrs)
    ref, mag, k = _reference(rounded(x), rounded(w), None if b is None else rounded(b), stride, pad, dilate, groups)
    assert y.shape == ref.shape and y.dtype == (BFLOAT16 if dtype == "bfloat16" else np.float32)
    assert_accumulated(_np(y), ref, mag, k, dtype)
    mxnet = mx.nd.Convolution(*[mx.nd.array(rounded(v)) for v in (x, w, b) if v is not None], **attrs)
    assert mxnet.shape == y.shape  # MXNet's shape rule


@requires_onednn3
@requires_onednn3_bf16
@pytest.mark.parametrize("out_dtype", ["float32", "bfloat16"])
def test_fused_residual_sum_and_relu(out_dtype):
    x, w, b = _values(2, 8, 6, 6), _values(16, 8, 3, 3), _values(16)
    addend = _values(2, 16, 6, 6)
    attrs = dict(kernel=(3, 3), pad=(1, 1), num_filter=16)
    add_in = mx.nd.array(addend) if out_dtype == "float32" else _bf16(addend)
    y = mx.nd.amp_convolution(_bf16(x), _bf16(w), _bf16(b), add_in, with_sum=True, act_type="relu",
                              out_dtype=out_dtype, **attrs)
    assert y.dtype == (np.float32 if out_dtype == "float32" else BFLOAT16)
    ref, mag, k = _reference(bf16_round(x), bf16_round(w), bf16_round(b), (1, 1), (1, 1), (1, 1), 1)
    added = addend if out_dtype == "float32" else bf16_round(addend)
    assert_accumulated(_np(y), np.maximum(ref + added, 0), mag + np.abs(added), k, out_dtype)


@requires_onednn3
@pytest.mark.parametrize("dtype", ONEDNN3_DTYPES)
def test_fused_relu6_clips_to_0_and_6_and_masks_the_gradient_at_both_bounds(dtype):
    """act_type="relu6" (MobileNets' clip(x, 0, 6), fused by conversion): forward against NumPy in float64 on the
    rounded operands, with values below 0, inside and above 6; the data, weight and bias gradients against MXNet's
    float32 Convolution on the same values, its output gradient masked where 0 < y < 6 (PyTorch's ReLU6; MXNet's
    clip passes the gradient at the bounds themselves too, which y cannot tell from clipped values)."""
    cast = (lambda v: _bf16(v)) if dtype == "bfloat16" else mx.nd.array
    rounded = bf16_round if dtype == "bfloat16" else (lambda v: v)
    x, w, b = 4 * _values(2, 8, 5, 7), _values(6, 8, 3, 3), 4 * _values(6)
    attrs = dict(kernel=(3, 3), pad=(1, 1), num_filter=6)
    y = mx.nd.amp_convolution(cast(x), cast(w), cast(b), act_type="relu6", **attrs)
    ref, mag, k = _reference(rounded(x), rounded(w), rounded(b), (1, 1), (1, 1), (1, 1), 1)
    assert (ref < 0).any() and (ref > 6).any() and ((ref > 0) & (ref < 6)).any()
    assert_accumulated(_np(y), np.clip(ref, 0, 6), mag, k, dtype)
    head = _values(2, 6, 5, 7)
    arrays = [cast(v) for v in (x, w, b)]
    out, grads = _grads(arrays, cast(head), act_type="relu6", **attrs)
    inside = (_np(out) > 0) & (_np(out) < 6)
    assert inside.any() and not inside.all()
    plain = [mx.nd.array(rounded(v)) for v in (x, w, b)]
    for a in plain:
        a.attach_grad()
    with autograd.record():
        composed = mx.nd.Convolution(*plain, **attrs)
    composed.backward(mx.nd.array(rounded(head) * inside))
    tol = 3e-2 if dtype == "bfloat16" else 1e-5
    for name, got, want in zip(("data", "weight", "bias"), grads, plain):
        want = want.grad.asnumpy()
        np.testing.assert_allclose(_np(got), want, rtol=tol, atol=tol * np.abs(want).max(), err_msg=name)


@requires_onednn3
@pytest.mark.parametrize("dtype", ONEDNN3_DTYPES)
@pytest.mark.parametrize("act", ["hard_sigmoid", "hard_swish"])
def test_fused_hard_sigmoid_and_hard_swish_match_numpy_and_have_no_gradient(dtype, act):
    """act_type="hard_sigmoid" / "hard_swish" (MobileNet v3's clip(y + 3, 0, 6) / 6 and y times it, fused by
    inference conversion): against NumPy in float64 on the rounded operands, with outputs on both sides of -3 and 3;
    a training call is refused with the reason."""
    cast = (lambda v: _bf16(v)) if dtype == "bfloat16" else mx.nd.array
    rounded = bf16_round if dtype == "bfloat16" else (lambda v: v)
    x, w, b = 4 * _values(2, 8, 5, 7), _values(6, 8, 3, 3), 2 * _values(6)
    attrs = dict(kernel=(3, 3), pad=(1, 1), num_filter=6, act_type=act)
    y = mx.nd.amp_convolution(cast(x), cast(w), cast(b), **attrs)
    ref, mag, k = _reference(rounded(x), rounded(w), rounded(b), (1, 1), (1, 1), (1, 1), 1)
    assert (ref < -3).any() and (ref > 3).any()
    gate = np.clip(ref + 3, 0, 6) / 6
    assert_accumulated(_np(y), gate if act == "hard_sigmoid" else ref * gate, mag if act == "hard_sigmoid" else
                       mag * (1 + np.abs(ref) / 3), k, dtype)
    arrays = [cast(v) for v in (x, w, b)]
    with pytest.raises(mx.base.MXNetError, match="act_type %s is fused into inference graphs only; it has no "
                                                 "gradient" % act):
        _grads(arrays, cast(np.ones(ref.shape, np.float32)), **attrs)[1][0].wait_to_read()


@requires_onednn3
def test_invalid_attributes_and_shapes_are_reported():
    x, w = _bf16(_values(1, 4, 5, 5)), _bf16(_values(8, 4, 3, 3))
    for attrs, message in [
            (dict(kernel=(3, 3), num_filter=8, act_type="tanh"),
             "act_type must be relu, relu6, hard_sigmoid or hard_swish \\(got 'tanh'\\)"),
            (dict(kernel=(3, 3), num_filter=8, layout="NHWC"), "layout must be NCW, NCHW or NCDHW \\(got 'NHWC'\\)"),
            (dict(kernel=(3, 3), num_filter=8, stride=(0, 1)), "stride must be a tuple of integers >= 1"),
            (dict(kernel=(3, 3), num_filter=8, stride=(1, 1, 1)), "as many sizes as kernel \\(2\\)"),
            (dict(kernel=(3, 3), num_filter=8, num_group=3), "num_group \\(3\\) must divide"),
            (dict(kernel=(7, 7), num_filter=8), "smaller than the dilated kernel \\(7\\)"),
            (dict(kernel=(3, 3), num_filter=8, out_dtype="float16"), "out_dtype must be float32 or bfloat16")]:
        with pytest.raises(mx.base.MXNetError, match=message):
            mx.nd.amp_convolution(x, w, no_bias=True, **attrs).wait_to_read()
    with pytest.raises(mx.base.MXNetError, match="weight must have shape \\(8,4,3,3,\\)"):
        mx.nd.amp_convolution(x, _bf16(_values(8, 2, 3, 3)), kernel=(3, 3), num_filter=8, no_bias=True).wait_to_read()
    with pytest.raises(mx.base.MXNetError, match="all inputs must be float32, or all bfloat16"):
        mx.nd.amp_convolution(x, mx.nd.array(_values(8, 4, 3, 3)), kernel=(3, 3), num_filter=8,
                              no_bias=True).wait_to_read()


def _grads(arrays, head, op=mx.nd.amp_convolution, **attrs):
    return grads_of(op, arrays, head, **attrs)


@requires_onednn3
@pytest.mark.parametrize("fused", [False, True])
def test_gradients_match_finite_differences(fused):
    # float32 operands: linear in each input (and piecewise linear with the ReLU: steps stay small)
    attrs = dict(kernel=(3, 2), stride=(2, 1), pad=(1, 0), num_filter=4, num_group=2)
    shapes = [(2, 4, 5, 4), (4, 2, 3, 2), (4,)]
    if fused:
        attrs.update(with_sum=True, act_type="relu")
        shapes.append((2, 4, 3, 3))
    values = [_values(*s).astype(np.float64) for s in shapes]
    head = _values(2, 4, 3, 3)
    _, grads = _grads([mx.nd.array(v) for v in values], mx.nd.array(head), **attrs)
    step = 1e-2 if fused else 0.5

    def loss(vals):
        y = mx.nd.amp_convolution(*[mx.nd.array(v) for v in vals], **attrs).asnumpy().astype(np.float64)
        return float((y * head).sum())
    for i in range(len(values)):
        np.testing.assert_allclose(grads[i].asnumpy(), central_differences(loss, values, i, step), rtol=2e-3,
                                   atol=2e-3, err_msg="input %d" % i)


@requires_onednn3
@requires_onednn3_bf16
def test_bf16_gradients_match_mxnet_float32_convolution():
    x, w, b, head = _values(4, 16, 10, 10), _values(32, 16, 3, 3), _values(32), _values(4, 32, 5, 5)
    attrs = dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), num_filter=32)
    y, ours = _grads([_bf16(x), _bf16(w), _bf16(b)], _bf16(head), **attrs)
    ref_y, refs = _grads([mx.nd.array(bf16_round(v)) for v in (x, w, b)], mx.nd.array(bf16_round(head)),
                         op=mx.nd.Convolution, **attrs)
    for got, want in zip([y] + ours, [ref_y] + refs):
        assert got.dtype == BFLOAT16
        want = want.asnumpy()
        np.testing.assert_allclose(_np(got), want, rtol=2 ** -7, atol=2 ** -7 * np.abs(want).max())


@requires_onednn3
@requires_onednn3_bf16
@pytest.mark.parametrize("op, x, w, attrs", [
    ("amp_convolution", (2, 8, 9, 9), (16, 4, 3, 3), dict(kernel=(3, 3), pad=(1, 1), num_filter=16, num_group=2)),
    ("amp_convolution", (2, 16, 4, 4), (8, 16, 3, 3), dict(kernel=(3, 3), stride=(2, 2), num_filter=8)),  # a GEMM
    ("amp_deconvolution", (2, 8, 5, 5), (8, 4, 4, 4), dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=4,
                                                           no_bias=False))], ids=["conv", "conv_gemm", "deconv"])
def test_float32_parameters_are_read_as_they_are(op, x, w, attrs):
    """param_dtype="float32" (training graphs): the weight converted per call, float32 weight and bias gradients."""
    y_shape = getattr(mx.nd, op)(_bf16(_values(*x)), _bf16(_values(*w)), _bf16(_values(attrs["num_filter"])),
                                 **attrs).shape
    check_float32_params(getattr(mx.nd, op), _values(*x), _values(*w), _values(attrs["num_filter"]),
                         _values(*y_shape), **attrs)


@requires_onednn3
@pytest.mark.parametrize("case", GEMM_CASES, ids=lambda c: "x".join(map(str, c[0])) + "_k" + "".join(map(str, c[2])))
@pytest.mark.parametrize("dtype", ONEDNN3_DTYPES)
def test_small_outputs_match_mxnet_forward_and_gradients(case, dtype):
    shape, num_filter, kernel, stride, pad, dilate, _ = case
    assert len(GEMM_CASES) == 5
    x, w, b = _values(*shape), _values(num_filter, shape[1], *kernel), _values(num_filter)
    attrs = dict(kernel=kernel, stride=stride, pad=pad, dilate=dilate, num_filter=num_filter)
    cast = _bf16 if dtype == "bfloat16" else mx.nd.array
    rounded = (lambda v: v) if dtype == "float32" else bf16_round
    out_shape = mx.nd.Convolution(mx.nd.array(x), mx.nd.array(w), mx.nd.array(b), **attrs).shape
    head = _values(*out_shape)
    y, ours = _grads([cast(x), cast(w), cast(b)], cast(head), **attrs)
    ref_y, refs = _grads([mx.nd.array(rounded(v)) for v in (x, w, b)], mx.nd.array(rounded(head)),
                         op=mx.nd.Convolution, **attrs)
    tol = 1e-5 if dtype == "float32" else 2 ** -7
    for name, got, want in zip(("output", "data", "weight", "bias"), [y] + ours, [ref_y] + refs):
        want = want.asnumpy()
        np.testing.assert_allclose(_np(got), want, rtol=tol, atol=tol * np.abs(want).max(), err_msg=name)


@requires_onednn3
@requires_onednn3_bf16
def test_small_output_fused_sum_and_relu():
    x, w, addend = _values(4, 32, 2, 2), _values(24, 32, 3, 3), _values(4, 24, 2, 2)
    y = mx.nd.amp_convolution(_bf16(x), _bf16(w), mx.nd.array(addend), kernel=(3, 3), pad=(1, 1), num_filter=24,
                              no_bias=True, with_sum=True, act_type="relu", out_dtype="float32")
    ref, mag, k = _reference(bf16_round(x), bf16_round(w), None, (1, 1), (1, 1), (1, 1), 1)
    assert_accumulated(_np(y), np.maximum(ref + addend, 0), mag + np.abs(addend), k, "float32")


def _deconv_reference(x, w, b, stride, pad, dilate, adj, groups):
    """Transposed convolution in float64 (MXNet's Deconvolution geometry), and over |x| |w|."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, c = x.shape[:2]
    cg, og = w.shape[0] // groups, w.shape[1]
    spatial = x.ndim - 2
    full = [stride[i] * (x.shape[2 + i] - 1) + dilate[i] * (w.shape[2 + i] - 1) + 1 + adj[i] for i in range(spatial)]
    y, mag = np.zeros((n, og * groups) + tuple(full)), np.zeros((n, og * groups) + tuple(full))
    for g in range(groups):
        xs, ws = x[:, g * cg:(g + 1) * cg], w[g * cg:(g + 1) * cg]
        for offset in itertools.product(*[range(k) for k in w.shape[2:]]):
            window = tuple(slice(offset[i] * dilate[i], offset[i] * dilate[i] + stride[i] * (x.shape[2 + i] - 1) + 1,
                                 stride[i]) for i in range(spatial))
            wk = ws[(slice(None), slice(None)) + tuple(offset)]
            y[(slice(None), slice(g * og, (g + 1) * og)) + window] += np.einsum("nc...,co->no...", xs, wk)
            mag[(slice(None), slice(g * og, (g + 1) * og)) + window] += np.einsum("nc...,co->no...", np.abs(xs),
                                                                                  np.abs(wk))
    crop = (slice(None), slice(None)) + tuple(slice(pad[i], full[i] - pad[i]) for i in range(spatial))
    y, mag = y[crop], mag[crop]
    if b is not None:
        shape = (1, -1) + (1,) * spatial
        y, mag = y + b.reshape(shape), mag + np.abs(b).reshape(shape)
    return y, mag, cg * int(np.prod(w.shape[2:]))


DECONV_CASES = [  # data shape, num_filter, kernel, stride, pad, dilate, adj, groups
    ((2, 8, 5, 5), 8, (4, 4), (2, 2), (1, 1), (1, 1), (0, 0), 1),    # the decoder's upsampling
    ((1, 6, 4, 3), 4, (3, 3), (2, 1), (1, 0), (1, 2), (1, 0), 2),    # adj, unequal geometry, groups
    ((2, 4, 7), 6, (3,), (3,), (0,), (1,), (2,), 1),                 # 1-D
]


@requires_onednn3
@pytest.mark.parametrize("case", DECONV_CASES, ids=lambda c: "x".join(map(str, c[0])) + "_k" + "".join(map(str, c[2])))
@pytest.mark.parametrize("dtype", ONEDNN3_DTYPES)
def test_deconvolution_matches_numpy_and_mxnet(case, dtype):
    shape, num_filter, kernel, stride, pad, dilate, adj, groups = case
    x, w, b = _values(*shape), _values(shape[1], num_filter // groups, *kernel), _values(num_filter)
    attrs = dict(kernel=kernel, stride=stride, pad=pad, dilate=dilate, adj=adj, num_filter=num_filter,
                 num_group=groups, no_bias=False)
    cast = _bf16 if dtype == "bfloat16" else mx.nd.array
    rounded = (lambda v: v) if dtype == "float32" else bf16_round
    y = mx.nd.amp_deconvolution(cast(x), cast(w), cast(b), **attrs)
    ref, mag, k = _deconv_reference(rounded(x), rounded(w), rounded(b), stride, pad, dilate, adj, groups)
    assert y.shape == ref.shape
    assert_accumulated(_np(y), ref, mag, k, dtype)
    mxnet = mx.nd.Deconvolution(*[mx.nd.array(rounded(v)) for v in (x, w, b)], **attrs).asnumpy()
    np.testing.assert_allclose(mxnet, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())  # the same op as MXNet's


@requires_onednn3
@requires_onednn3_bf16
def test_deconvolution_target_shape_and_errors():
    x, w = _bf16(_values(1, 4, 5, 5)), _bf16(_values(4, 2, 3, 3))
    # MXNet's rule: 2 * (5 - 1) + 3 - 10 = 1 to remove, so pad 1 and adj 1 (its own oneDNN kernel rejects this
    # case: "could not create a descriptor for a dilated deconvolution")
    y = mx.nd.amp_deconvolution(x, w, kernel=(3, 3), stride=(2, 2), target_shape=(10, 10), num_filter=2)
    ref, mag, k = _deconv_reference(_np(x), _np(w), None, (2, 2), (1, 1), (1, 1), (1, 1), 1)
    assert y.shape == ref.shape == (1, 2, 10, 10)
    assert_accumulated(_np(y), ref, mag, k, "bfloat16")
    with pytest.raises(mx.base.MXNetError, match="adj \\(2\\) must be smaller than stride \\(2\\)"):
        mx.nd.amp_deconvolution(x, w, kernel=(3, 3), stride=(2, 2), adj=(2, 2), num_filter=2).wait_to_read()
    with pytest.raises(mx.base.MXNetError, match="fused activations and sums are not supported"):
        mx.nd.amp_deconvolution(x, w, kernel=(3, 3), num_filter=2, act_type="relu").wait_to_read()
    with pytest.raises(mx.base.MXNetError, match="weight must have shape \\(4,2,3,3,\\)"):
        mx.nd.amp_deconvolution(x, _bf16(_values(2, 4, 3, 3)), kernel=(3, 3), num_filter=2).wait_to_read()


@requires_onednn3
def test_deconvolution_gradients_match_finite_differences():
    attrs = dict(kernel=(3, 2), stride=(2, 1), pad=(1, 0), adj=(1, 0), num_filter=4, num_group=2, no_bias=False)
    values = [_values(*s).astype(np.float64) for s in [(2, 4, 3, 3), (4, 2, 3, 2), (4,)]]
    y = mx.nd.amp_deconvolution(*[mx.nd.array(v) for v in values], **attrs)
    head = _values(*y.shape)
    arrays = [mx.nd.array(v) for v in values]
    for a in arrays:
        a.attach_grad()
    with autograd.record():
        out = mx.nd.amp_deconvolution(*arrays, **attrs)
    out.backward(mx.nd.array(head))

    def loss(vals):
        y = mx.nd.amp_deconvolution(*[mx.nd.array(v) for v in vals], **attrs).asnumpy().astype(np.float64)
        return float((y * head).sum())
    for i in range(len(values)):
        np.testing.assert_allclose(arrays[i].grad.asnumpy(), central_differences(loss, values, i, 0.5), rtol=2e-3,
                                   atol=2e-3, err_msg="input %d" % i)


# ---- routing and fusion --------------------------------------------------------------------------------------
class _Block(nn.HybridBlock):
    """A ResNet v1 basic block with a downsampling shortcut, then global pooling and a classifier."""

    def __init__(self):
        super().__init__()
        with self.name_scope():
            self.conv1, self.bn1 = nn.Conv2D(16, 3, strides=2, padding=1, use_bias=False), nn.BatchNorm()
            self.conv2, self.bn2 = nn.Conv2D(16, 3, padding=1, use_bias=False), nn.BatchNorm()
            self.down, self.bn3 = nn.Conv2D(16, 1, strides=2, use_bias=False), nn.BatchNorm()
            self.pool, self.fc = nn.GlobalAvgPool2D(), nn.Dense(5)

    def hybrid_forward(self, F, x):
        h = F.Activation(self.bn1(self.conv1(x)), act_type="relu")
        h = self.bn2(self.conv2(h)) + self.bn3(self.down(x))
        return self.fc(self.pool(F.Activation(h, act_type="relu")))


def _block():
    mx.random.seed(0)
    net = _Block()
    net.initialize(mx.init.Xavier())
    x = mx.nd.array(_values(4, 8, 12, 12))
    net(x)
    for p in net.collect_params().values():  # BatchNorm statistics that are not the identity
        if p.name.endswith(("running_mean", "beta")):
            p.set_data(mx.nd.array(_values(*p.shape) * 0.3))
        elif p.name.endswith(("running_var", "gamma")):
            p.set_data(mx.nd.array(1 + 0.5 * np.abs(_values(*p.shape))))
    return net, x


def _convert(net, x, **kwargs):
    inputs, out, params = blocks.block_graph(net, [x])
    args = {k: v for k, v in params.items() if k in set(out.list_arguments())}
    aux = {k: v for k, v in params.items() if k in set(out.list_auxiliary_states())}
    return C.convert(out, args, aux, "bfloat16", input_names=[s.name for s in inputs], **kwargs)


@requires_onednn3
@requires_onednn3_bf16
def test_converted_resnet_block_runs_fused_library_convolutions(monkeypatch):
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")
    net, x = _block()
    want = net(x).asnumpy()
    res = _convert(net, x)
    assert dict(res.summary.kernels)["amp_convolution"] == 3
    nodes = json.loads(res.symbol.tojson(remove_amp_cast=False))["nodes"]
    ops = [n["op"] for n in nodes]
    # BatchNorm folded into the convolutions, the residual sum and both ReLUs are post-ops
    assert not {"BatchNorm", "Convolution", "elemwise_add", "Activation", "_sg_mkldnn_conv"} & set(ops), ops
    convs = [n.get("attrs", {}) for n in nodes if n["op"] == "amp_convolution"]
    assert sorted((a.get("with_sum", ""), a.get("act_type", "")) for a in convs) == [
        ("", ""), ("", "relu"), ("True", "relu")]
    got = blocks.convert_hybrid_block(net, x, "bfloat16")(x)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got.asnumpy(), want, rtol=0, atol=0.03 * np.abs(want).max())
    # MXNet's kernels on request: its oneDNN fusion instead
    assert "amp_convolution" not in [n["op"] for n in json.loads(
        _convert(net, x, kernels="mxnet").symbol.tojson(remove_amp_cast=False))["nodes"]]


def _train_step(sym, params, x, head, kernels=None):
    """Outputs and gradients of one training step of ``sym`` (rewritten as ``amp.init`` does, with kernels)."""
    low = sym if kernels is None else rewrite_symbol(sym, make_policy("bfloat16", kernels=kernels), "cpu")[0]
    args = {k: mx.nd.array(v) for k, v in params.items() if k in low.list_arguments()}
    args["data"] = mx.nd.array(x)
    aux = {k: mx.nd.array(v) for k, v in params.items() if k in low.list_auxiliary_states()}
    grads = {k: mx.nd.zeros(v.shape) for k, v in args.items()}
    exe = low.bind(mx.cpu(), args, args_grad=grads, aux_states=aux)
    y = exe.forward(is_train=True)[0].asnumpy()
    exe.backward(mx.nd.array(head))
    return low, y, {k: v.asnumpy() for k, v in grads.items()}


@requires_onednn3
@requires_onednn3_bf16
def test_training_graphs_run_library_convolutions_at_least_as_accurately_as_mxnets(monkeypatch):
    # One training step of the ResNet block rewritten as amp.init does: outputs and every gradient are as close
    # to float32 with the library's convolutions as with MXNet's own bfloat16 ones (BatchNorm in training mode
    # makes bfloat16 weight gradients noisy for both: their sums cancel).
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")
    RNG.seed(4)
    net, x = _block()
    _, sym, arrays = blocks.block_graph(net, [mx.nd.array(x)])
    sym = mx.sym.Group([sym])
    params = {k: v.asnumpy() for k, v in arrays.items()}
    head = _values(*net(mx.nd.array(x)).shape)
    ours_sym, ours_y, ours = _train_step(sym, params, x.asnumpy(), head, "auto")
    ops = [n["op"] for n in json.loads(ours_sym.tojson(remove_amp_cast=False))["nodes"]]
    assert ops.count("amp_convolution") == 3 and "Convolution" not in ops
    # training graphs fuse the ReLUs and the residual sum into amp_batch_norm (test_batch_norm.py)
    assert "Activation" not in ops and "elemwise_add" not in ops and ops.count("amp_batch_norm") == 3
    mxnet_sym, mxnet_y, theirs = _train_step(sym, params, x.asnumpy(), head, "mxnet")
    assert "amp_convolution" not in [n["op"] for n in json.loads(mxnet_sym.tojson())["nodes"]]
    _, ref_y, ref = _train_step(sym, params, x.asnumpy(), head)

    def error(got, want):
        return np.abs(got - want).max() / np.abs(want).max()
    assert error(ours_y, ref_y) <= 0.03 and error(ours_y, ref_y) <= 1.25 * error(mxnet_y, ref_y) + 1e-3
    # the worst parameter gradient (single ones are noisy: over seeds 0-5 the worst was 0.007-0.54 for both)
    worst = {name: max(error(grads[k], want) for k, want in ref.items() if k != "data")
             for name, grads in (("ours", ours), ("mxnet", theirs))}
    assert worst["ours"] <= 1.25 * worst["mxnet"] + 0.01, worst


@requires_onednn3
@requires_onednn3_bf16
def test_amp_init_hybridized_training_runs_library_convolutions(monkeypatch):
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")
    net, x = _block()
    amp.init("bfloat16")
    net.hybridize()
    with autograd.record():
        y = net(x)
    y.backward()
    ops = [n["op"] for n in json.loads(net._cached_graph[1].tojson(remove_amp_cast=False))["nodes"]]
    assert ops.count("amp_convolution") == 3 and "Convolution" not in ops
    assert y.dtype == np.float32 and np.isfinite(y.asnumpy()).all()
    assert all(np.isfinite(p.grad().asnumpy()).all() and p.grad().dtype == np.float32
               for p in net.collect_params().values() if p.grad_req != "null")


@requires_onednn3
@pytest.mark.parametrize("dtype,emulate", [pytest.param("bfloat16", None, marks=requires_onednn3_bf16),
                                           ("bfloat16", True),
                                           ("float16", True)])
def test_deconvolution_runs_on_the_library_wherever_amp_rewrites_it(monkeypatch, dtype, emulate):
    # MXNet's oneDNN Deconvolution backward aborts on a computed (cast or rounded) weight: AMP routes around it,
    # natively in bfloat16 and, where emulated, in float32 on the rounded values
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")
    sym = mx.sym.Deconvolution(mx.sym.var("data"), kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=4,
                               name="up")
    nodes = json.loads(rewrite_symbol(sym, make_policy(dtype, emulate=emulate), "cpu")[0].tojson(
        remove_amp_cast=False))["nodes"]
    up = next(n for n in nodes if n["name"] == "up")
    assert up["op"] == "amp_deconvolution"
    feeds = [nodes[i]["op"] for i, _, _ in up["inputs"]]
    # native training graphs: the data cast, the float32 weight read as it is (param_dtype)
    assert feeds == (["amp_round", "amp_round"] if emulate else ["amp_cast", "null"])
    assert up.get("attrs", {}).get("param_dtype") == (None if emulate else "float32")
    kept = rewrite_symbol(sym, make_policy(dtype, emulate=emulate, kernels="mxnet"), "cpu")[0]
    assert "amp_deconvolution" not in kept.tojson()
