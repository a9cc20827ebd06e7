"""The library's oneDNN 3 matrix products (amp_fully_connected, amp_batch_dot, amp_matmul) and their routing.

Kernel tests on bfloat16 operands run where oneDNN 3 creates bfloat16 products (avx512_core and up: CPU classes
(b) to (d); on AVX2 it cannot, and they skip with the reason), float32 ones wherever oneDNN 3 loads: NumPy
references in float64 on the bfloat16-rounded operands, with a tolerance from the accumulation length;
gradients against finite differences (float32 operands: the products are linear, so differences are exact up
to float32 rounding) and against MXNet's float32 kernels. Routing tests check graph structure on every machine;
the fallback without oneDNN 3 runs in a subprocess with ``MXNET_AMP_ONEDNN=0``.
"""
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import mxnet as mx
from mxnet import amp, autograd
from mxnet.gluon import nn
from mxnet.amp.core import library
from mxnet.amp.inference import convert as C
from mxnet.amp.graph.rewrite import rewrite_symbol
from mxnet.amp.base.dtypes import BFLOAT16
from mxnet.amp.core.policy import FLOAT32, KERNELS, NATIVE, make_policy

from amp_testing import (ONEDNN3_DTYPES, ONEDNN3_INFO as ONEDNN_INFO, assert_accumulated, bf16_round,
                         central_differences, check_float32_params, grads_of, requires_onednn3, requires_onednn3_bf16)

RNG = np.random.RandomState(0)


def _bf16(values):
    return mx.nd.amp_cast(mx.nd.array(values), dtype=BFLOAT16)


def _np(arr):
    return mx.nd.amp_cast(arr, dtype=np.float32).asnumpy()


def _values(*shape):
    return RNG.uniform(-1, 1, shape).astype(np.float32)


def _fc_reference(x, w, b, flatten):
    x2 = x.reshape(x.shape[0], -1) if flatten else x.reshape(-1, x.shape[-1])
    x2, w = bf16_round(x2).astype(np.float64), bf16_round(w).astype(np.float64)
    ref, mag = x2 @ w.T, np.abs(x2) @ np.abs(w).T
    if b is not None:
        ref, mag = ref + bf16_round(b), mag + np.abs(bf16_round(b))
    shape = (x.shape[0], w.shape[0]) if flatten else x.shape[:-1] + (w.shape[0],)
    return ref.reshape(shape), mag.reshape(shape), x2.shape[1]


# ---- kernels -----------------------------------------------------------------------------------------------
@requires_onednn3
@requires_onednn3_bf16
@pytest.mark.parametrize("shape, hidden, flatten", [((1, 7), 1, True), ((7, 129), 7, True), ((3, 5, 7), 129, True),
                                                    ((3, 5, 129), 7, False), ((2, 1, 7), 33, False)])
@pytest.mark.parametrize("no_bias", [False, True])
@pytest.mark.parametrize("out_dtype", [None, "float32"])
def test_fully_connected_matches_numpy(shape, hidden, flatten, no_bias, out_dtype):
    k = int(np.prod(shape[1:])) if flatten else shape[-1]
    x, w, b = _values(*shape), _values(hidden, k), None if no_bias else _values(hidden)
    args = [_bf16(x), _bf16(w)] + ([] if no_bias else [_bf16(b)])
    attrs = dict(num_hidden=hidden, no_bias=no_bias, flatten=flatten)
    if out_dtype:
        attrs["out_dtype"] = out_dtype
    y = mx.nd.amp_fully_connected(*args, **attrs)
    ref, mag, k = _fc_reference(x, w, b, flatten)
    assert y.shape == ref.shape
    assert (y.dtype == np.float32) == (out_dtype == "float32")
    assert_accumulated(_np(y), ref, mag, k, out_dtype or "bfloat16")


@requires_onednn3
@requires_onednn3_bf16
@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("b, m, k, n", [(1, 1, 1, 1), (3, 7, 129, 5), (2, 129, 7, 33)])
def test_batch_dot_matches_numpy(ta, tb, b, m, k, n):
    a = _values(b, k, m) if ta else _values(b, m, k)
    c = _values(b, n, k) if tb else _values(b, k, n)
    y = mx.nd.amp_batch_dot(_bf16(a), _bf16(c), transpose_a=ta, transpose_b=tb, out_dtype="float32")
    la = bf16_round(a).astype(np.float64)
    lc = bf16_round(c).astype(np.float64)
    la, lc = (la.transpose(0, 2, 1) if ta else la), (lc.transpose(0, 2, 1) if tb else lc)
    assert_accumulated(y.asnumpy(), la @ lc, np.abs(la) @ np.abs(lc), k, "float32")
    assert _bf16(a).dtype == mx.nd.amp_batch_dot(_bf16(a), _bf16(c), transpose_a=ta, transpose_b=tb).dtype


@requires_onednn3
@requires_onednn3_bf16
@pytest.mark.parametrize("sa, sb", [((5, 7), (7, 3)), ((2, 1, 5, 7), (3, 7, 4)), ((7,), (3, 7, 4)),
                                    ((2, 3, 5, 7), (7,)), ((1, 5, 129), (4, 129, 1)), ((7,), (7,))])
def test_matmul_broadcasts_like_numpy(sa, sb):
    a, c = _values(*sa), _values(*sb)
    y = mx.nd.amp_matmul(_bf16(a), _bf16(c), out_dtype="float32")
    la, lc = bf16_round(a).astype(np.float64), bf16_round(c).astype(np.float64)
    ref = np.matmul(la, lc)
    assert y.shape == ref.shape
    assert_accumulated(y.asnumpy(), ref, np.matmul(np.abs(la), np.abs(lc)), sa[-1], "float32")


@requires_onednn3
@requires_onednn3_bf16
def test_fused_relu_matches_fully_connected_then_relu():
    x, w, b = _values(7, 129), _values(33, 129), _values(33)
    head = _values(7, 33)
    y, ours = grads_of(mx.nd.amp_fully_connected, [_bf16(x), _bf16(w), _bf16(b)], mx.nd.array(head), num_hidden=33,
                       act_type="relu", out_dtype="float32")
    ref, mag, k = _fc_reference(x, w, b, True)
    assert_accumulated(y.asnumpy(), np.maximum(ref, 0), mag, k, "float32")
    rounded = [mx.nd.array(bf16_round(v)) for v in (x, w, b)]
    for a in rounded:
        a.attach_grad()
    with autograd.record():
        ref_y = mx.nd.relu(mx.nd.FullyConnected(*rounded, num_hidden=33))
    ref_y.backward(mx.nd.array(head))
    for got, want in zip(ours, rounded):
        want = want.grad.asnumpy()
        np.testing.assert_allclose(_np(got), want, rtol=2 ** -7, atol=2 ** -7 * np.abs(want).max())
    with pytest.raises(mx.base.MXNetError, match="act_type must be relu or gelu \\(got 'tanh'\\)"):
        mx.nd.amp_fully_connected(_bf16(x), _bf16(w), num_hidden=33, no_bias=True, act_type="tanh").wait_to_read()


def _gelu(z):
    """GELU (erf), as MXNet's LeakyReLU(act_type='gelu'), in float64."""
    return 0.5 * z * (1 + np.vectorize(math.erf)(z / math.sqrt(2)))


@requires_onednn3
@pytest.mark.parametrize("dtype", ONEDNN3_DTYPES)
@pytest.mark.parametrize("act", [None, "relu", "gelu"])
@pytest.mark.parametrize("k", [1, 129])
def test_fused_residual_sum_and_activation_match_numpy(dtype, act, k):
    """y = act(x w^T + b + addend), the activation on the float32 accumulator before the output's rounding."""
    x, w, b, addend = _values(7, 3, k), _values(33, k), _values(33), _values(7, 3, 33)
    lp = (lambda v: _bf16(v)) if dtype == "bfloat16" else mx.nd.array
    rounded = bf16_round if dtype == "bfloat16" else (lambda v: v)
    attrs = dict(num_hidden=33, flatten=False, with_sum=True, out_dtype="float32",
                 **({"act_type": act} if act else {}))
    y = mx.nd.amp_fully_connected(lp(x), lp(w), lp(b), mx.nd.array(addend), **attrs)
    x2, w2 = rounded(x).reshape(-1, k).astype(np.float64), rounded(w).astype(np.float64)
    z = (x2 @ w2.T + rounded(b) + addend.reshape(-1, 33)).reshape(7, 3, 33)
    ref = {None: z, "relu": np.maximum(z, 0), "gelu": _gelu(z) if act == "gelu" else None}[act]
    magnitude = (np.abs(x2) @ np.abs(w2).T).reshape(7, 3, 33) + np.abs(b) + np.abs(addend)
    assert_accumulated(y.asnumpy(), ref, magnitude, k, "float32")
    with pytest.raises(mx.base.MXNetError, match="the addend has dtype float32; it must have the output's, "
                                                 "bfloat16"):
        mx.nd.amp_fully_connected(_bf16(x), _bf16(w), _bf16(b), mx.nd.array(addend), num_hidden=33, flatten=False,
                                  with_sum=True).wait_to_read()


@requires_onednn3
@requires_onednn3_bf16
@pytest.mark.parametrize("act", [None, "relu"])
def test_fused_residual_sum_bf16_gradients_match_numpy(act):
    """act(x w^T + b + addend) in bfloat16: the gradients of the four inputs against NumPy on the rounded values."""
    x, w, b, addend, head = (bf16_round(_values(*shape)) for shape in ((7, 129), (33, 129), (33,), (7, 33), (7, 33)))
    attrs = dict(num_hidden=33, with_sum=True, **({"act_type": act} if act else {}))
    y, ours = grads_of(mx.nd.amp_fully_connected, [_bf16(v) for v in (x, w, b, addend)], _bf16(head), **attrs)
    z = x.astype(np.float64) @ w.T.astype(np.float64) + b + addend
    g = head.astype(np.float64) * (z > 0 if act else 1)
    for i, (got, want) in enumerate(zip(ours, [g @ w, g.T @ x, g.sum(axis=0), g])):
        assert got.dtype == BFLOAT16
        np.testing.assert_allclose(_np(got), want, rtol=2 ** -7, atol=2 ** -7 * np.abs(want).max(),
                                   err_msg="input %d" % i)


@requires_onednn3
@pytest.mark.parametrize("act", [None, "relu"])
def test_fused_residual_sum_gradients_match_mxnet(act):
    x, w, b, addend, head = _values(5, 9), _values(4, 9), _values(4), _values(5, 4), _values(5, 4)
    attrs = dict(num_hidden=4, with_sum=True, **({"act_type": act} if act else {}))
    _, ours = grads_of(mx.nd.amp_fully_connected, [mx.nd.array(v) for v in (x, w, b, addend)], mx.nd.array(head),
                       **attrs)
    arrays = [mx.nd.array(v) for v in (x, w, b, addend)]
    for a in arrays:
        a.attach_grad()
    with autograd.record():
        y = mx.nd.FullyConnected(*arrays[:3], num_hidden=4) + arrays[3]
        y = mx.nd.relu(y) if act else y
    y.backward(mx.nd.array(head))
    for i, (got, want) in enumerate(zip(ours, arrays)):
        np.testing.assert_allclose(got.asnumpy(), want.grad.asnumpy(), rtol=1e-5, atol=1e-6, err_msg="input %d" % i)


@requires_onednn3
def test_fused_gelu_refuses_a_gradient_with_a_clear_error():
    arrays = [mx.nd.array(_values(5, 9)), mx.nd.array(_values(4, 9))]
    with pytest.raises(mx.base.MXNetError, match="act_type gelu is fused into inference graphs only; it has no "
                                                 "gradient"):
        grads_of(mx.nd.amp_fully_connected, arrays, mx.nd.ones((5, 4)), num_hidden=4, no_bias=True, act_type="gelu")
        arrays[0].grad.wait_to_read()


@requires_onednn3
@pytest.mark.parametrize("op", ["amp_batch_dot", "amp_matmul"])
def test_a_folded_scale_scales_the_product_and_its_gradients(op):
    a, c, head = _values(3, 5, 7), _values(3, 7, 4), _values(3, 5, 4)
    y, ours = grads_of(getattr(mx.nd, op), [mx.nd.array(a), mx.nd.array(c)], mx.nd.array(head), alpha=0.125)
    ref_y, ref = grads_of(lambda x, w: mx.nd.batch_dot(x, w) * 0.125, [mx.nd.array(a), mx.nd.array(c)],
                          mx.nd.array(head))
    for got, want in zip([y] + ours, [ref_y] + ref):
        np.testing.assert_allclose(got.asnumpy(), want.asnumpy(), rtol=1e-5, atol=1e-6)


@requires_onednn3
@requires_onednn3_bf16
def test_offset_views_and_float32_operands():
    big = _values(6, 7, 129)
    view = _bf16(big)[2:5]  # an NDArray view at an offset into its parent's storage
    w = _values(9, 129)
    y = mx.nd.amp_fully_connected(view, _bf16(w), num_hidden=9, no_bias=True, flatten=False, out_dtype="float32")
    ref, mag, k = _fc_reference(big[2:5], w, None, False)
    assert_accumulated(y.asnumpy(), ref, mag, k, "float32")
    # float32 operands: a float32 product (no rounding of the operands)
    y32 = mx.nd.amp_fully_connected(mx.nd.array(big[2:5]), mx.nd.array(w), num_hidden=9, no_bias=True,
                                    flatten=False)
    assert y32.dtype == np.float32
    ref32 = big[2:5].astype(np.float64) @ w.T.astype(np.float64)
    assert_accumulated(y32.asnumpy(), ref32, np.abs(big[2:5]) @ np.abs(w.T), 129, "float32")


@requires_onednn3
@requires_onednn3_bf16
@pytest.mark.parametrize("shape, flatten", [((7, 129), True), ((3, 5, 33), False)])
def test_float32_parameters_are_read_as_they_are(shape, flatten):
    """param_dtype="float32" (training graphs): no bfloat16 copy of the weight is kept and the float32 gradients are
    written directly; the weight gradient is x^T dy of the bfloat16 operands, accumulated in float32."""
    k = shape[-1] if not flatten else int(np.prod(shape[1:]))
    x, w, b, head = _values(*shape), _values(17, k), _values(17), _values(*(shape[:-1] + (17,)))
    _, dw, _ = check_float32_params(mx.nd.amp_fully_connected, x, w, b, head, num_hidden=17, flatten=flatten)
    x2, g2 = bf16_round(x).reshape(-1, k).astype(np.float64), bf16_round(head).reshape(-1, 17).astype(np.float64)
    assert_accumulated(dw.asnumpy(), g2.T @ x2, np.abs(g2).T @ np.abs(x2), x2.shape[0], "float32")
    with pytest.raises(mx.base.MXNetError, match="param_dtype must be float32 or None \\(got 'bfloat16'\\)"):
        mx.nd.amp_fully_connected(_bf16(x), mx.nd.array(w), num_hidden=17, no_bias=True, flatten=flatten,
                                  param_dtype="bfloat16").wait_to_read()
    with pytest.raises(mx.base.MXNetError, match="input 1 has dtype bfloat16; with param_dtype=float32 every "
                                                 "parameter must have it"):
        mx.nd.amp_fully_connected(_bf16(x), _bf16(w), num_hidden=17, no_bias=True, flatten=flatten,
                                  param_dtype="float32").wait_to_read()


@requires_onednn3
def test_invalid_attributes_and_dtypes_are_reported():
    x, w = _bf16(_values(2, 3)), _bf16(_values(4, 3))
    with pytest.raises(mx.base.MXNetError, match="out_dtype must be float32 or bfloat16 \\(got 'float16'\\)"):
        mx.nd.amp_fully_connected(x, w, num_hidden=4, no_bias=True, out_dtype="float16").wait_to_read()
    with pytest.raises(mx.base.MXNetError, match="all inputs must be float32, or all bfloat16"):
        mx.nd.amp_batch_dot(x.reshape((1, 2, 3)), mx.nd.ones((1, 3, 2))).wait_to_read()
    with pytest.raises(mx.base.MXNetError, match="inner dimensions differ \\(3 vs 2\\)"):
        mx.nd.amp_matmul(x, x[:, :2].reshape((2, 2))).wait_to_read()
    with pytest.raises(mx.base.MXNetError, match="batch dimension 0 differs \\(2 vs 3\\)"):
        mx.nd.amp_batch_dot(_bf16(_values(2, 3, 4)), _bf16(_values(3, 4, 5))).wait_to_read()


@requires_onednn3
@pytest.mark.parametrize("case", ["fc", "fc_flat", "batch_dot", "matmul_broadcast"])
def test_gradients_match_finite_differences(case):
    # float32 operands: the op is linear in each input, so central differences are exact up to rounding.
    if case.startswith("fc"):
        flatten = case == "fc_flat"
        shapes, op = [(3, 2, 5), (4, 10 if flatten else 5), (4,)], mx.nd.amp_fully_connected
        attrs = dict(num_hidden=4, flatten=flatten)
    elif case == "batch_dot":
        shapes, op, attrs = [(2, 5, 3), (2, 4, 5)], mx.nd.amp_batch_dot, dict(transpose_a=True, transpose_b=True)
    else:
        shapes, op, attrs = [(2, 1, 3, 5), (4, 5, 2)], mx.nd.amp_matmul, {}
    values = [_values(*s).astype(np.float64) for s in shapes]
    out_shape = op(*[mx.nd.array(v) for v in values], **attrs).shape
    head = _values(*out_shape)
    _, grads = grads_of(op, [mx.nd.array(v) for v in values], mx.nd.array(head), **attrs)

    def loss(vals):
        return float((op(*[mx.nd.array(v) for v in vals], **attrs).asnumpy().astype(np.float64) * head).sum())
    for i in range(len(values)):
        np.testing.assert_allclose(grads[i].asnumpy(), central_differences(loss, values, i, 1.0), rtol=1e-4,
                                   atol=1e-4, err_msg="input %d" % i)


@requires_onednn3
@requires_onednn3_bf16
@pytest.mark.parametrize("flatten", [True, False])
def test_bf16_gradients_match_mxnet_float32_kernels(flatten):
    x, w, b = _values(7, 3, 129), _values(33, 387 if flatten else 129), _values(33)
    head = _values(*((7, 33) if flatten else (7, 3, 33)))
    y, ours = grads_of(mx.nd.amp_fully_connected, [_bf16(x), _bf16(w), _bf16(b)], _bf16(head), num_hidden=33,
                       flatten=flatten)
    rounded = [mx.nd.array(bf16_round(v)) for v in (x, w, b)]
    ref_y, ref = grads_of(mx.nd.FullyConnected, rounded, mx.nd.array(bf16_round(head)), num_hidden=33,
                          flatten=flatten)
    for got, want in zip([y] + ours, [ref_y] + ref):
        assert got.dtype == BFLOAT16
        want = want.asnumpy()
        np.testing.assert_allclose(_np(got), want, rtol=2 ** -7, atol=2 ** -7 * np.abs(want).max())


@requires_onednn3
@requires_onednn3_bf16
def test_batch_dot_gradients_match_mxnet_float32_kernels():
    a, c, head = _values(4, 7, 129), _values(4, 33, 129), _values(4, 7, 33)
    _, ours = grads_of(mx.nd.amp_batch_dot, [_bf16(a), _bf16(c)], mx.nd.array(head), transpose_b=True,
                       out_dtype="float32")
    _, ref = grads_of(mx.nd.batch_dot, [mx.nd.array(bf16_round(a)), mx.nd.array(bf16_round(c))],
                      mx.nd.array(bf16_round(head)), transpose_b=True)
    for got, want in zip(ours, ref):
        want = want.asnumpy()
        np.testing.assert_allclose(_np(got), want, rtol=2 ** -7, atol=2 ** -7 * np.abs(want).max())


# ---- routing -------------------------------------------------------------------------------------------------
def _attention_symbol():
    x = mx.sym.var("data")
    q = mx.sym.FullyConnected(x, num_hidden=8, flatten=False, name="q")
    k = mx.sym.FullyConnected(x, num_hidden=8, flatten=False, no_bias=True, name="k")
    att = mx.sym.softmax(mx.sym.batch_dot(q, k, transpose_b=True, name="qk") / 2.0)
    return mx.sym.batch_dot(att, q, name="av")


def _params(sym, **shapes):
    """Random float32 parameters of ``sym`` for the input ``shapes`` (conversion routes to the library's
    kernels only with parameters: their shapes let the graph bind)."""
    rng = np.random.RandomState(0)
    arg_shapes, _, _ = sym.infer_shape(**shapes)
    return {k: mx.nd.array(rng.uniform(-1, 1, s)) for k, s in zip(sym.list_arguments(), arg_shapes) if k not in shapes}


def _ops(sym):
    return [n["op"] for n in json.loads(sym.tojson(remove_amp_cast=False))["nodes"]]


def test_kernels_choice_is_validated():
    assert KERNELS == ("auto", "mxnet") and make_policy("bfloat16").kernels == "auto"
    with pytest.raises(ValueError, match="kernels must be one of 'auto', 'mxnet', got 'onednn'"):
        make_policy("bfloat16", kernels="onednn")
    with pytest.raises(ValueError, match="kernels must be one of 'auto', 'mxnet'"):
        amp.init("bfloat16", kernels=None)
    with pytest.raises(ValueError, match="kernels must be one of"):
        C.convert(_attention_symbol(), None, None, "bfloat16", kernels="MXNet")


@requires_onednn3
@requires_onednn3_bf16
def test_native_devices_route_matmuls_to_the_library(monkeypatch):
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")  # as on an AVX-512 CPU, whatever this one is
    auto, mxnet = make_policy("bfloat16"), make_policy("bfloat16", kernels="mxnet")
    for op in ("FullyConnected", "batch_dot", "_npx_batch_dot", "_npi_matmul"):
        assert auto.lp16_mode(op, "cpu") == NATIVE and auto.library_kernel(op, "cpu") is not None
        assert mxnet.library_kernel(op, "cpu") is None
    assert mxnet.lp16_mode("batch_dot", "cpu") == FLOAT32
    assert auto.library_kernel("Pooling", "cpu") is None and auto.library_kernel("FullyConnected", "gpu") is None
    low, stats = rewrite_symbol(_attention_symbol(), auto, "cpu")
    ops = _ops(low)
    assert ops.count("amp_fully_connected") == 2 and ops.count("amp_batch_dot") == 2
    assert "FullyConnected" not in ops and "batch_dot" not in ops
    # and the attention's softmax on the library's (tests/python/unittest/test_norm_kernels.py)
    assert dict(stats.kernels) == {"amp_fully_connected": 2, "amp_batch_dot": 2, "amp_softmax": 1}
    assert dict(stats.lp16_modes) == {"native": 4}
    low, stats = rewrite_symbol(_attention_symbol(), mxnet, "cpu")
    assert "amp_batch_dot" not in _ops(low) and not stats.kernels
    # Emulating policies feed no low precision operand to a kernel: bfloat16's products run on the library's
    # float32 kernels between roundings (EMULATION_KERNELS), float16's on MXNet's float32 ones.
    for policy, kernels in ((make_policy("bfloat16", emulate=True), {"amp_fully_connected": 2, "amp_batch_dot": 2}),
                            (make_policy("float16"), {})):
        low, stats = rewrite_symbol(_attention_symbol(), policy, "cpu")
        assert dict(stats.lp16_modes) == {"emulated": 4} and dict(stats.kernels) == kernels
        assert not [n for n in json.loads(low.tojson(remove_amp_cast=False))["nodes"]
                    if n["op"] in ("amp_cast", "amp_multicast") and n["attrs"].get("dtype") in ("bfloat16", "float16")]


@requires_onednn3
def test_emulating_devices_run_the_library_float32_kernels(monkeypatch):
    """Emulation runs the products on the library's float32 kernels (faster than MXNet's float32 ones), on
    bf16-rounded operands: the values of a NumPy float64 reference on the same rounded operands."""
    monkeypatch.setenv("MXNET_AMP_EMULATE", "1")
    policy = make_policy("bfloat16")
    assert policy.library_kernel("FullyConnected", "cpu") is None  # no bfloat16 kernels
    assert policy.emulation_kernel("FullyConnected", "cpu") == "amp_fully_connected"
    sym = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=8, flatten=False, name="q")
    low, stats = rewrite_symbol(sym, policy, "cpu")
    assert dict(stats.kernels) == {"amp_fully_connected": 1} and dict(stats.lp16_modes) == {"emulated": 1}
    mxnet_low, mxnet_stats = rewrite_symbol(sym, make_policy("bfloat16", kernels="mxnet"), "cpu")
    assert not set(_ops(mxnet_low)) & set(library.ONEDNN_OPS) and not mxnet_stats.kernels
    rng = np.random.RandomState(3)
    x, w, b = rng.uniform(-1, 1, (2, 3, 40)), rng.uniform(-1, 1, (8, 40)), rng.uniform(-1, 1, 8)
    feed = {"data": mx.nd.array(x), "q_weight": mx.nd.array(w), "q_bias": mx.nd.array(b)}
    got = low.bind(mx.cpu(), feed).forward()[0]
    assert got.dtype == np.float32
    ref = bf16_round(bf16_round(x).astype(np.float64) @ bf16_round(w).astype(np.float64).T
                     + bf16_round(b).astype(np.float64))
    np.testing.assert_allclose(got.asnumpy(), ref, rtol=1e-2, atol=1e-6)  # bf16 rounding of the output
    assert np.array_equal(got.asnumpy(), bf16_round(got.asnumpy()))  # the output rounded, as emulation does
    theirs = mxnet_low.bind(mx.cpu(), feed).forward()[0].asnumpy()
    assert np.abs(got.asnumpy() - theirs).max() <= 2 ** -7 * np.abs(theirs).max()  # one bf16 ulp at most


@requires_onednn3
@requires_onednn3_bf16
def test_products_read_only_as_float32_write_float32(monkeypatch):
    # Inference: qk feeds softmax (amp_softmax, which takes float32 scores and writes bfloat16) through a division
    # that folds into its alpha, av is the float32 output: both write float32 (no cast); q feeds two bf16 products
    # and stays bf16.
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")
    low, _ = rewrite_symbol(_attention_symbol(), make_policy("bfloat16"), "cpu", inference=True)
    nodes = json.loads(low.tojson(remove_amp_cast=False))["nodes"]
    qk, av, q = (next(n for n in nodes if n["name"] == name) for name in ("qk", "av", "q"))
    assert qk["attrs"]["out_dtype"] == av["attrs"]["out_dtype"] == "float32" and "out_dtype" not in q["attrs"]
    assert qk["attrs"]["alpha"] == "0.5" and "_div_scalar" not in [n["op"] for n in nodes]
    assert "amp_cast" not in {nodes[h[0]]["op"] for h in json.loads(low.tojson(remove_amp_cast=False))["heads"]}
    softmax = next(n for n in nodes if n["op"] == "amp_softmax")
    assert nodes[softmax["inputs"][0][0]] is qk and softmax["attrs"]["dtype"] == "bfloat16"  # no cast between them


@requires_onednn3
@requires_onednn3_bf16
def test_training_graphs_keep_low_precision_outputs_and_fold_the_scale(monkeypatch):
    # Training graphs: backward keeps every library kernel's inputs and outputs, so the products write bfloat16
    # (no float32 scores beside the bfloat16 ones), the division folds into qk's alpha (its gradient carries it)
    # and softmax reads and writes bfloat16; the weights stay float32, read as they are (param_dtype).
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")
    low, _ = rewrite_symbol(_attention_symbol(), make_policy("bfloat16"), "cpu")
    nodes = json.loads(low.tojson(remove_amp_cast=False))["nodes"]
    products = [n for n in nodes if n["op"] in ("amp_batch_dot", "amp_fully_connected")]
    assert len(products) == 4 and all("out_dtype" not in n.get("attrs", {}) for n in products[:-1])
    qk, softmax = next(n for n in nodes if n["name"] == "qk"), next(n for n in nodes if n["op"] == "amp_softmax")
    assert qk["attrs"]["alpha"] == "0.5" and nodes[softmax["inputs"][0][0]] is qk
    assert softmax["attrs"]["dtype"] == "bfloat16"
    for fc in (n for n in nodes if n["op"] == "amp_fully_connected"):
        assert fc["attrs"]["param_dtype"] == "float32"
        assert [nodes[i]["op"] for i, _, _ in fc["inputs"]][1:] == ["null"] * (len(fc["inputs"]) - 1)


@requires_onednn3
@requires_onednn3_bf16
def test_training_graphs_fuse_residual_sums_into_the_product(monkeypatch):
    """A residual sum of two bfloat16 tensors, the sole reader of a product's output, becomes its with_sum input in
    training graphs too: backward keeps the sum (what the next op reads) and not the product's output beside it; the
    gradients are those of the unfused graph."""
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")
    h = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=8, flatten=False, name="fc1")
    sym = mx.sym.FullyConnected(h, num_hidden=8, flatten=False, name="fc2") + h
    low, _ = rewrite_symbol(sym, make_policy("bfloat16"), "cpu")
    nodes = json.loads(low.tojson())["nodes"]
    fc2 = next(n for n in nodes if n["name"] == "fc2")
    addend = nodes[fc2["inputs"][-1][0]]  # fc1's output, read twice: through a copy of amp_fanout's
    assert addend["op"] == "amp_fanout" and nodes[addend["inputs"][0][0]]["name"] == "fc1"
    assert fc2["attrs"]["with_sum"] == "True" and nodes[fc2["inputs"][0][0]] is addend
    assert "elemwise_add" not in [n["op"] for n in nodes] and "_plus" not in [n["op"] for n in nodes]
    rng = np.random.RandomState(2)
    shapes = dict(zip(sym.list_arguments(), sym.infer_shape(data=(3, 5, 6))[0]))
    feed = {k: bf16_round(rng.uniform(-1, 1, s)) for k, s in shapes.items()}
    head = bf16_round(rng.uniform(-1, 1, (3, 5, 8)))
    results = []
    for graph in (sym, low):
        grads = {k: mx.nd.zeros(s) for k, s in shapes.items()}
        exe = graph.bind(mx.cpu(), {k: mx.nd.array(v) for k, v in feed.items()}, args_grad=grads)
        out = exe.forward(is_train=True)[0].asnumpy()
        exe.backward(mx.nd.array(head))
        results.append([out] + [grads[k].asnumpy() for k in sorted(grads)])
    for name, ref, got in zip(["out"] + sorted(shapes), *results):
        np.testing.assert_allclose(got, ref, rtol=2 ** -6, atol=2 ** -6 * np.abs(ref).max(), err_msg=name)


@requires_onednn3
@requires_onednn3_bf16
def test_inference_graphs_fuse_relu_into_the_product(monkeypatch):
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")
    x = mx.sym.var("data")
    h = mx.sym.Activation(mx.sym.FullyConnected(x, num_hidden=8, name="fc1"), act_type="relu", name="relu1")
    sym = mx.sym.FullyConnected(h, num_hidden=4, name="fc2")
    out = C.convert(sym, _params(sym, data=(5, 6)), None, "bfloat16", fuse=False)
    nodes = json.loads(out.symbol.tojson(remove_amp_cast=False))["nodes"]
    assert "Activation" not in [n["op"] for n in nodes]
    assert next(n for n in nodes if n["name"] == "fc1")["attrs"]["act_type"] == "relu"
    train, _ = rewrite_symbol(sym, make_policy("bfloat16"), "cpu")  # amp.init graphs fuse the ReLU too
    assert "Activation" not in _ops(train)
    assert next(n for n in json.loads(train.tojson())["nodes"] if n["name"] == "fc1")["attrs"]["act_type"] == "relu"
    rng = np.random.RandomState(3)
    args = {"data": rng.uniform(-1, 1, (5, 6)), "fc1_weight": rng.uniform(-1, 1, (8, 6)),
            "fc1_bias": rng.uniform(-1, 1, (8,)), "fc2_weight": rng.uniform(-1, 1, (4, 8)),
            "fc2_bias": rng.uniform(-1, 1, (4,))}
    got = out.symbol.eval(ctx=mx.cpu(), **{k: mx.nd.array(v) for k, v in args.items()})[0].asnumpy()
    want = sym.eval(ctx=mx.cpu(), **{k: mx.nd.array(v) for k, v in args.items()})[0].asnumpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=0.03 * np.abs(want).max())


@requires_onednn3
@requires_onednn3_bf16
def test_inference_graphs_fuse_gelu_and_the_residual_sum(monkeypatch):
    """A transformer feed-forward block: Dense -> GELU -> Dense -> + x. Converted, the first product carries the
    GELU and the second the residual sum; amp.init (training) graphs fuse the sum and keep the GELU (the library
    has no GELU gradient)."""
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")
    x = mx.sym.var("data")
    h = mx.sym.LeakyReLU(mx.sym.FullyConnected(x, num_hidden=32, flatten=False, name="ffn1"), act_type="gelu")
    sym = mx.sym.elemwise_add(mx.sym.FullyConnected(h, num_hidden=16, flatten=False, name="ffn2"), x)
    params = _params(sym, data=(5, 3, 16))
    out = C.convert(sym, params, None, "bfloat16", fuse=False)
    nodes = json.loads(out.symbol.tojson(remove_amp_cast=False))["nodes"]
    assert not {"LeakyReLU", "elemwise_add"} & {n["op"] for n in nodes}
    ffn1, ffn2 = (next(n for n in nodes if n["name"] == name) for name in ("ffn1", "ffn2"))
    assert ffn1["attrs"]["act_type"] == "gelu" and ffn2["attrs"]["with_sum"] == "True"
    train, _ = rewrite_symbol(sym, make_policy("bfloat16"), "cpu")
    assert "LeakyReLU" in _ops(train) and "elemwise_add" not in _ops(train)
    assert next(n for n in json.loads(train.tojson())["nodes"] if n["name"] == "ffn2")["attrs"]["with_sum"] == "True"
    data = mx.nd.array(_values(5, 3, 16))
    got = out.symbol.eval(ctx=mx.cpu(), data=data, **params)[0].asnumpy()
    want = sym.eval(ctx=mx.cpu(), data=data, **params)[0].asnumpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=2 ** -6 * np.abs(want).max())


@requires_onednn3
@requires_onednn3_bf16
def test_conversion_summary_names_the_library_kernels(monkeypatch):
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")
    params = _params(_attention_symbol(), data=(2, 3, 6))
    out = C.convert(_attention_symbol(), params, None, "bfloat16", fuse=False)
    kernels = {"amp_batch_dot": 2, "amp_fully_connected": 2, "amp_softmax": 1}
    assert dict(out.summary.kernels) == kernels and out.summary.as_dict()["kernels"] == kernels
    assert ("on this project's oneDNN 3 kernels: amp_batch_dot 2, amp_fully_connected 2, amp_softmax 1"
            in out.summary.format())
    assert not C.convert(_attention_symbol(), params, None, "bfloat16", fuse=False, kernels="mxnet").summary.kernels
    # without parameters the library's ops could not bind from the data shape alone: MXNet's kernels
    assert not C.convert(_attention_symbol(), None, None, "bfloat16", fuse=False).summary.kernels


def test_lists_cli_shows_the_library_kernel():
    out = subprocess.run([sys.executable, "-m", "mxnet.amp", "lists", "--op", "batch_dot", "--dtype", "bfloat16"],
                         capture_output=True, text=True, check=True).stdout
    assert "library kernel on CPU: amp_batch_dot" in out
    policy = make_policy("bfloat16")  # the child sees this environment
    routed, emulating = policy.library_kernel("batch_dot", "cpu"), policy.emulation_kernel("batch_dot", "cpu")
    assert (("used here: " + ONEDNN_INFO) if routed else
            ("used here in float32 (bfloat16 is emulated on this device): " + ONEDNN_INFO) if emulating else
            "not used here: ") in out


def _dense_net():
    mx.random.seed(0)
    net = nn.HybridSequential()
    net.add(nn.Dense(16, flatten=False), nn.Dense(4, flatten=False, use_bias=False))
    net.initialize(mx.init.Xavier())
    return net


@requires_onednn3
@requires_onednn3_bf16
def test_amp_init_training_uses_the_library_kernels(monkeypatch):
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")
    x = mx.nd.array(_values(3, 5, 8))
    ref_net = _dense_net()
    with autograd.record():
        ref = ref_net(x)
    ref.backward()
    ref_grads = [p.grad().asnumpy() for p in ref_net.collect_params().values()]
    amp.init("bfloat16")
    net = _dense_net()
    net.hybridize()
    with autograd.record():
        y = net(x)
    y.backward()
    assert "amp_fully_connected" in _ops(net._cached_graph[1])
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.asnumpy(), ref.asnumpy(), rtol=0, atol=0.03 * np.abs(ref.asnumpy()).max())
    for p, want in zip(net.collect_params().values(), ref_grads):
        assert p.grad().dtype == np.float32
        np.testing.assert_allclose(p.grad().asnumpy(), want, rtol=0, atol=0.03 * np.abs(want).max())


@requires_onednn3
@requires_onednn3_bf16
def test_amp_init_imperative_calls_run_the_library_kernels(monkeypatch):
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")
    a, c = _values(2, 5, 7), _values(2, 7, 3)
    amp.init("bfloat16")
    y = mx.nd.batch_dot(mx.nd.array(a), mx.nd.array(c))
    assert y.dtype == BFLOAT16  # MXNet's batch_dot has no bfloat16 kernel: this is amp_batch_dot
    ref = bf16_round(a).astype(np.float64) @ bf16_round(c).astype(np.float64)
    assert_accumulated(_np(y), ref, np.abs(ref), 7, "bfloat16")
    mx.npx.set_np()
    z = mx.np.matmul(mx.np.array(a), mx.np.array(c[0]))
    assert isinstance(z, mx.np.ndarray) and z.shape == (2, 5, 3)
    assert_accumulated(_np(z.as_nd_ndarray()), bf16_round(a).astype(np.float64) @ bf16_round(c[0]).astype(np.float64),
                       np.abs(ref), 7, "bfloat16")


# ---- run time: loading, OpenMP, fallback ---------------------------------------------------------------------
_CHILD = r"""
import json, logging, os, sys
import mxnet as mx
from mxnet.amp.core import library
from mxnet.amp.inference import convert as C
from mxnet.amp.core.policy import make_policy
from mxnet.amp.graph.rewrite import rewrite_symbol
x = mx.sym.var("data")
sym = mx.sym.batch_dot(mx.sym.FullyConnected(x, num_hidden=4, flatten=False, name="fc"), x, transpose_b=True)
ops = [n["op"] for n in json.loads(C.convert(sym, None, None, "bfloat16", fuse=False).symbol.tojson())["nodes"]]
ops += [n["op"] for n in json.loads(rewrite_symbol(sym, make_policy("bfloat16"), "cpu")[0].tojson())["nodes"]]
try:
    mx.nd.amp_fully_connected(mx.nd.ones((2, 3)), mx.nd.ones((4, 3)), num_hidden=4, no_bias=True).wait_to_read()
    error = None
except mx.base.MXNetError as e:
    error = str(e)
fc = None
if library.onednn()[0]:
    x, w = (mx.nd.array(v) for v in json.loads(os.environ["AMP_TEST_FC"]))
    fc = mx.nd.amp_fully_connected(x, w, num_hidden=w.shape[0], no_bias=True, out_dtype="float32").asnumpy().tolist()
maps = [l.split()[-1] for l in open("/proc/self/maps") if "libgomp" in l or "libdnnl" in l]
print(json.dumps({"onednn": library.onednn(), "ops": ops, "error": error, "libs": sorted(set(maps)), "fc": fc}))
"""


def _child(**env):
    env = dict(os.environ, MXNET_AMP_EMULATE="0", **env)
    # oneDNN 3 must load without a library path of its own: drop the entries holding libdnnl, keep the others
    # (a GPU wheel's CUDA libraries live on LD_LIBRARY_PATH)
    kept = [d for d in env.get("LD_LIBRARY_PATH", "").split(":")
            if d and not any(f.startswith("libdnnl") for f in (os.listdir(d) if os.path.isdir(d) else ()))]
    env["LD_LIBRARY_PATH"] = ":".join(kept)
    env.setdefault("AMP_TEST_FC", "[[[1.0]], [[1.0]]]")
    proc = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_without_onednn3_the_ops_fall_back_to_mxnet_kernels():
    result, stderr = _child(MXNET_AMP_ONEDNN="0")
    assert result["onednn"] == [False, "disabled by MXNET_AMP_ONEDNN=0"]
    assert "FullyConnected" in result["ops"] and "batch_dot" in result["ops"]
    assert not set(result["ops"]) & set(library.ONEDNN_OPS)
    assert "oneDNN 3 kernels unavailable: disabled by MXNET_AMP_ONEDNN=0" in result["error"]
    lines = [line for line in stderr.splitlines() if "matrix-product kernels are unavailable" in line]
    assert len(lines) == 1 and "disabled by MXNET_AMP_ONEDNN=0" in lines[0]  # one clear line, once
    assert not any("libdnnl" in lib for lib in result["libs"])


@requires_onednn3
@requires_onednn3_bf16
def test_onednn3_loads_without_library_path_beside_one_openmp_runtime():
    result, _ = _child()
    assert result["onednn"][0] and result["error"] is None
    assert "amp_fully_connected" in result["ops"]
    # MXNet's and oneDNN 3's OpenMP are one runtime, the system's libgomp.so.1 (scikit-learn, imported by the
    # tests' dependencies, may bring its own renamed copy for itself: libgomp-<hash>.so)
    gomp = [lib for lib in result["libs"] if os.path.basename(lib).startswith("libgomp.so")]
    dnnl = [lib for lib in result["libs"] if "libdnnl" in lib]
    assert len(gomp) == 1, result["libs"]
    assert len(dnnl) == 1 and dnnl[0].endswith(("libdnnl.so.3", "libdnnl.so.3.2")), dnnl


@requires_onednn3
def test_thread_count_setting_gives_the_same_products():
    x, w = _values(16, 65), _values(9, 65)
    ref = x.astype(np.float64) @ w.T.astype(np.float64)
    for threads in ("1", "2"):
        result, _ = _child(MXNET_AMP_ONEDNN_THREADS=threads, AMP_TEST_FC=json.dumps([x.tolist(), w.tolist()]))
        assert_accumulated(np.array(result["fc"]), ref, np.abs(x) @ np.abs(w.T), 65, "float32")
