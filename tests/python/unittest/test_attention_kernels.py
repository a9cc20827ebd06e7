"""The library's interleaved attention products (amp_selfatt_qk, amp_selfatt_valatt, amp_encdec_qk,
amp_encdec_valatt) and their routing in place of MXNet's ``_contrib_interleaved_matmul_*`` ops.

Forward values against NumPy float64 references on the (bfloat16-rounded) operands; gradients against MXNet's
own float32 contrib kernels, exactly up to float32 rounding on float32 operands and within bfloat16 rounding on
bfloat16 ones; the parts of a projection gradient an op does not use are exactly zero. Routing: a GluonNLP-style
attention block converted to bfloat16 and trained under ``amp.init`` runs on these kernels and agrees with
float32.
"""
import json

import numpy as np
import pytest

import mxnet as mx
from mxnet import amp, autograd, gluon
from mxnet.amp.base.dtypes import BFLOAT16
from mxnet.amp.core.policy import make_policy
from mxnet.amp.graph.rewrite import rewrite_symbol

from amp_testing import (ONEDNN3_DTYPES, assert_accumulated, bf16_round, grads_of, requires_onednn3,
                         requires_onednn3_bf16)

RNG = np.random.RandomState(0)

#: op -> the MXNet contrib op it replaces.
CONTRIB = {"amp_selfatt_qk": mx.nd.contrib.interleaved_matmul_selfatt_qk,
           "amp_selfatt_valatt": mx.nd.contrib.interleaved_matmul_selfatt_valatt,
           "amp_encdec_qk": mx.nd.contrib.interleaved_matmul_encdec_qk,
           "amp_encdec_valatt": mx.nd.contrib.interleaved_matmul_encdec_valatt}

#: (T_query, T_key, batch, heads, head size): one of each size 1, odd sizes, a 64-wide head.
SIZES = [(1, 1, 1, 1, 1), (5, 5, 3, 2, 7), (4, 9, 2, 3, 5), (33, 33, 2, 4, 64)]


def _values(*shape):
    return RNG.uniform(-1, 1, shape).astype(np.float32)


def _parts(x, heads, parts):
    """(T, B, heads * parts * d) -> (parts, B, heads, T, d), float64."""
    t, b, width = x.shape
    d = width // (heads * parts)
    return x.astype(np.float64).reshape(t, b, heads, parts, d).transpose(3, 1, 2, 0, 4)


def _inputs(op, tq, tk, b, heads, d):
    """Float32 inputs of ``op`` for these sizes (self-attention: tk == tq)."""
    if op == "amp_selfatt_qk":
        return [_values(tq, b, heads * 3 * d)]
    if op == "amp_selfatt_valatt":
        return [_values(tq, b, heads * 3 * d), _values(b * heads, tq, tq)]
    if op == "amp_encdec_qk":
        return [_values(tq, b, heads * d), _values(tk, b, heads * 2 * d)]
    return [_values(tk, b, heads * 2 * d), _values(b * heads, tq, tk)]


def _reference(op, inputs, heads):
    """NumPy float64 (value, magnitude, accumulation length) of ``op`` on ``inputs``."""
    if op.endswith("_qk"):
        if op == "amp_selfatt_qk":
            q, k = _parts(inputs[0], heads, 3)[:2]
        else:
            q, k = _parts(inputs[0], heads, 1)[0], _parts(inputs[1], heads, 2)[0]
        scale = 1 / np.sqrt(q.shape[-1])
        value, magnitude = (q * scale) @ k.swapaxes(-1, -2), np.abs(q * scale) @ np.abs(k).swapaxes(-1, -2)
        b, h, tq, tk = value.shape
        return value.reshape(b * h, tq, tk), magnitude.reshape(b * h, tq, tk), q.shape[-1]
    v = _parts(inputs[0], heads, 3)[2] if op == "amp_selfatt_valatt" else _parts(inputs[0], heads, 2)[1]
    b, h, tk, d = v.shape
    att = inputs[1].astype(np.float64).reshape(b, h, -1, tk)
    value, magnitude = att @ v, np.abs(att) @ np.abs(v)

    def layout(y):  # (B, heads, Tq, d) -> (Tq, B, heads * d)
        return y.transpose(2, 0, 1, 3).reshape(y.shape[2], b, h * d)
    return layout(value), layout(magnitude), tk


def _as(values, dtype):
    arr = mx.nd.array(values)
    return mx.nd.amp_cast(arr, dtype=BFLOAT16) if dtype == "bfloat16" else arr


def _np(arr):
    return mx.nd.amp_cast(arr, dtype=np.float32).asnumpy()


# ---- kernels -------------------------------------------------------------------------------------------------
@requires_onednn3
@pytest.mark.parametrize("op", sorted(CONTRIB))
@pytest.mark.parametrize("sizes", SIZES)
@pytest.mark.parametrize("dtype", ONEDNN3_DTYPES)
@pytest.mark.parametrize("out_dtype", [None, "float32"])
def test_forward_matches_numpy(op, sizes, dtype, out_dtype):
    tq, tk, b, heads, d = sizes
    if op.startswith("amp_selfatt"):
        tk = tq
    inputs = _inputs(op, tq, tk, b, heads, d)
    rounded = [bf16_round(x) if dtype == "bfloat16" else x for x in inputs]
    attrs = dict(heads=heads, **({"out_dtype": out_dtype} if out_dtype else {}))
    y = getattr(mx.nd, op)(*[_as(x, dtype) for x in inputs], **attrs)
    ref, magnitude, k = _reference(op, rounded, heads)
    assert y.shape == ref.shape
    assert y.dtype == (np.float32 if (out_dtype or dtype) == "float32" else BFLOAT16)
    assert_accumulated(_np(y), ref, magnitude, k, out_dtype or dtype)


@requires_onednn3
@pytest.mark.parametrize("op", sorted(CONTRIB))
def test_float32_gradients_match_mxnet_contrib_kernels(op):
    tq, tk, b, heads, d = 6, 4, 2, 3, 5
    if op.startswith("amp_selfatt"):
        tk = tq
    inputs = _inputs(op, tq, tk, b, heads, d)
    ref_y, ref = grads_of(CONTRIB[op], [mx.nd.array(x) for x in inputs], None, heads=heads)
    head = _values(*ref_y.shape)
    ref_y, ref = grads_of(CONTRIB[op], [mx.nd.array(x) for x in inputs], mx.nd.array(head), heads=heads)
    y, ours = grads_of(getattr(mx.nd, op), [mx.nd.array(x) for x in inputs], mx.nd.array(head), heads=heads)
    np.testing.assert_allclose(y.asnumpy(), ref_y.asnumpy(), rtol=1e-5, atol=1e-6)
    for i, (got, want) in enumerate(zip(ours, ref)):
        np.testing.assert_allclose(got.asnumpy(), want.asnumpy(), rtol=1e-5, atol=1e-6, err_msg="input %d" % i)


@requires_onednn3
@pytest.mark.parametrize("op, part_of", [("amp_selfatt_qk", {0: (3, (2,))}), ("amp_selfatt_valatt", {0: (3, (0, 1))}),
                                         ("amp_encdec_qk", {1: (2, (1,))}), ("amp_encdec_valatt", {0: (2, (0,))})])
def test_unused_parts_of_a_projection_gradient_are_zero(op, part_of):
    """MXNet sums the gradients of the ops that read one projection (query, key and value products): each op
    writes zeros where it reads nothing, over whatever the buffer held."""
    heads, d = 2, 3
    inputs = _inputs(op, 4, 5, 2, heads, d)
    arrays = [mx.nd.array(x) for x in inputs]
    for a in arrays:
        a.attach_grad()
        a.grad[:] = np.nan  # stale values a careless kernel would leave
    with autograd.record():
        y = getattr(mx.nd, op)(*arrays, heads=heads)
    y.backward(mx.nd.ones(y.shape))
    for index, (parts, unused) in part_of.items():
        grad = arrays[index].grad.asnumpy().reshape(arrays[index].shape[:2] + (heads, parts, d))
        assert not np.isnan(grad).any()
        for p in range(parts):
            assert (grad[..., p, :] == 0).all() == (p in unused), "part %d" % p


@requires_onednn3
@requires_onednn3_bf16
@pytest.mark.parametrize("op", sorted(CONTRIB))
def test_bf16_gradients_match_mxnet_float32_kernels(op):
    tq, tk, b, heads, d = 7, 5, 2, 2, 64
    if op.startswith("amp_selfatt"):
        tk = tq
    inputs = _inputs(op, tq, tk, b, heads, d)
    rounded = [mx.nd.array(bf16_round(x)) for x in inputs]
    shape = CONTRIB[op](*rounded, heads=heads).shape
    head = bf16_round(_values(*shape))
    ref_y, ref = grads_of(CONTRIB[op], rounded, mx.nd.array(head), heads=heads)
    y, ours = grads_of(getattr(mx.nd, op), [_as(x, "bfloat16") for x in inputs], _as(head, "bfloat16"), heads=heads)
    for got, want in zip([y] + ours, [ref_y] + ref):
        assert got.dtype == BFLOAT16
        want = want.asnumpy()
        np.testing.assert_allclose(_np(got), want, rtol=2 ** -7, atol=2 ** -7 * np.abs(want).max())


def _unparts(parts, t, b, heads):
    """(parts, B, heads, T, d) -> (T, B, heads * parts * d): the inverse of _parts."""
    return parts.transpose(3, 1, 2, 0, 4).reshape(t, b, -1)


def _referencegrads_of(op, inputs, head, heads):
    """NumPy float64 gradients of each input of ``op`` for the output gradient ``head``."""
    x = inputs[0].astype(np.float64)
    t, b = x.shape[:2]
    if op.endswith("_qk"):
        self_att = op == "amp_selfatt_qk"
        px = _parts(x, heads, 3 if self_att else 1)
        pk = px if self_att else _parts(inputs[1], heads, 2)
        q, k = px[0], pk[1 if self_att else 0]
        scale = 1 / np.sqrt(q.shape[-1])
        ds = head.astype(np.float64).reshape(q.shape[:2] + (q.shape[2], k.shape[2]))
        dq, dk = scale * ds @ k, scale * ds.swapaxes(-1, -2) @ q
        if self_att:
            return [_unparts(np.stack([dq, dk, np.zeros_like(dq)]), t, b, heads)]
        tk = inputs[1].shape[0]
        return [_unparts(dq[None], t, b, heads), _unparts(np.stack([dk, np.zeros_like(dk)]), tk, b, heads)]
    parts = 3 if op == "amp_selfatt_valatt" else 2
    px = _parts(x, heads, parts)
    v = px[parts - 1]
    bb, h, tk, d = v.shape
    att = inputs[1].astype(np.float64).reshape(bb, h, -1, tk)
    dout = head.astype(np.float64).reshape(-1, bb, h, d).transpose(1, 2, 0, 3)  # (Tq, B, h d) -> (B, h, Tq, d)
    datt, dv = dout @ v.swapaxes(-1, -2), att.swapaxes(-1, -2) @ dout
    grads = [np.zeros_like(px[0])] * (parts - 1) + [dv]
    return [_unparts(np.stack(grads), t, b, heads), datt.reshape(inputs[1].shape)]


@requires_onednn3
@requires_onednn3_bf16
@pytest.mark.parametrize("op", sorted(CONTRIB))
@pytest.mark.parametrize("sizes", [(5, 5, 3, 2, 7), (4, 9, 2, 3, 5), (33, 17, 2, 4, 64)])
def test_bf16_gradients_match_numpy(op, sizes):
    tq, tk, b, heads, d = sizes
    if op.startswith("amp_selfatt"):
        tk = tq
    inputs = [bf16_round(x) for x in _inputs(op, tq, tk, b, heads, d)]
    out_shape = _reference(op, inputs, heads)[0].shape
    head = bf16_round(_values(*out_shape))
    _, grads = grads_of(getattr(mx.nd, op), [_as(x, "bfloat16") for x in inputs], _as(head, "bfloat16"), heads=heads)
    for i, (got, want) in enumerate(zip(grads, _referencegrads_of(op, inputs, head, heads))):
        assert got.dtype == BFLOAT16 and got.shape == want.shape
        np.testing.assert_allclose(_np(got), want, rtol=2 ** -7, atol=2 ** -7 * np.abs(want).max(),
                                   err_msg="input %d" % i)


@requires_onednn3
@pytest.mark.parametrize("op, shapes, attrs, message", [
    ("amp_selfatt_qk", [(4, 2, 10)], {"heads": 2},
     "amp_selfatt_qk: input 0's last dimension \\(10\\) must be a multiple of heads \\* 3 = 6"),
    ("amp_selfatt_qk", [(4, 2, 12)], {"heads": 0}, "amp_selfatt_qk: attribute heads must be an integer >= 1 "
                                                   "\\(got '0'\\)"),
    ("amp_selfatt_qk", [(4, 12)], {"heads": 2}, "amp_selfatt_qk: input 0 must have 3 dimensions"),
    ("amp_selfatt_valatt", [(4, 2, 12), (4, 4, 5)], {"heads": 2},
     "amp_selfatt_valatt: the attention must have shape \\(4, Tq, 4\\)"),
    ("amp_encdec_qk", [(4, 2, 4), (5, 2, 6)], {"heads": 2},
     "amp_encdec_qk: input 1 must have shape \\(Tk, 2, 8\\) for queries of this shape"),
    ("amp_encdec_valatt", [(5, 2, 8), (4, 3, 5)], {"heads": 2, "out_dtype": "float16"},
     "amp_encdec_valatt: attribute out_dtype must be float32 or bfloat16 \\(got 'float16'\\)"),
])
def test_bad_shapes_and_attributes_name_the_op_and_the_value(op, shapes, attrs, message):
    with pytest.raises(mx.base.MXNetError, match=message):
        getattr(mx.nd, op)(*[mx.nd.ones(s) for s in shapes], **attrs).wait_to_read()


# ---- routing ---------------------------------------------------------------------------------------------------
class _SelfAttention(gluon.HybridBlock):
    """GluonNLP's BERT attention: one interleaved projection, scores, softmax, attended values, projection."""

    def __init__(self, units=64, heads=4, **kwargs):
        super().__init__(**kwargs)
        self.heads = heads
        with self.name_scope():
            self.qkv = gluon.nn.Dense(3 * units, flatten=False)
            self.proj = gluon.nn.Dense(units, flatten=False)

    def hybrid_forward(self, F, x):  # pylint: disable=arguments-differ
        qkv = self.qkv(x)
        att = F.softmax(F.contrib.interleaved_matmul_selfatt_qk(qkv, heads=self.heads), axis=-1)
        return self.proj(F.contrib.interleaved_matmul_selfatt_valatt(qkv, att, heads=self.heads))


def _ops(sym):
    return [n["op"] for n in json.loads(sym.tojson(remove_amp_cast=False))["nodes"]]


@requires_onednn3
@requires_onednn3_bf16
def test_converted_attention_runs_on_the_library_kernels(monkeypatch, tmp_path):
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")  # as on an AVX-512 CPU, whatever this one is
    net = _SelfAttention()
    net.initialize(mx.init.Xavier())
    net.hybridize()
    x = mx.nd.array(_values(9, 2, 64))
    ref = net(x).asnumpy()
    converted = amp.convert_hybrid_block(net, x, target_dtype="bfloat16")
    got = converted(x)
    converted.export(str(tmp_path / "att"))
    ops = _ops(mx.sym.load(str(tmp_path / "att-symbol.json")))
    assert ops.count("amp_selfatt_qk") == 1 and ops.count("amp_selfatt_valatt") == 1
    assert not [op for op in ops if op.startswith("_contrib_interleaved")]
    assert got.dtype == np.float32
    assert np.abs(got.asnumpy() - ref).max() <= 2 ** -6 * np.abs(ref).max()
    mxnet_low, stats = rewrite_symbol(mx.sym.contrib.interleaved_matmul_selfatt_qk(mx.sym.var("x"), heads=2),
                                      make_policy("bfloat16", kernels="mxnet"), "cpu")
    assert "amp_selfatt_qk" not in _ops(mxnet_low) and not stats.kernels


@requires_onednn3
@requires_onednn3_bf16
@pytest.mark.filterwarnings("ignore:amp.init\\(\\) was called after")
def test_training_under_amp_init_runs_the_kernels_backward(monkeypatch):
    """A hybridized step under amp.init: gradients within bfloat16 rounding of float32 training's."""
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")
    x = mx.nd.array(_values(9, 2, 64))
    grads = {}
    for mode in ("float32", "bfloat16"):
        if mode == "bfloat16":
            amp.init("bfloat16")
        try:
            mx.random.seed(0)
            net = _SelfAttention(prefix="att_")
            net.initialize(mx.init.Xavier())
            net.hybridize()
            with autograd.record():
                loss = (net(x) ** 2).mean()
            loss.backward()
            grads[mode] = {k: p.grad().asnumpy() for k, p in net.collect_params().items()}
            if mode == "bfloat16":
                graph = net._cached_graph[1]  # pylint: disable=protected-access
                ops = _ops(graph)
        finally:
            amp.reset()
    assert "amp_selfatt_qk" in ops and "amp_selfatt_valatt" in ops, sorted(set(ops))
    for name, want in grads["float32"].items():
        got = grads["bfloat16"][name]
        assert np.abs(got - want).max() <= 2 ** -4 * np.abs(want).max(), name
