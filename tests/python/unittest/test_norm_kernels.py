"""The library's last-axis normalisations (amp_layer_norm, amp_softmax, amp_log_softmax) and their place in
bfloat16 graphs.

Kernel tests compare with NumPy float64 references on the bfloat16-rounded inputs (tolerances: float32 math plus
the rounding of a bfloat16 output) and with MXNet's own float32 LayerNorm / softmax and their gradients, forward
and backward, through the imperative ops, autograd and a hybridized graph. bfloat16 cells need oneDNN 3's bfloat16
kernels (CPU classes (b) to (d)) and skip with the reason elsewhere; amp_layer_norm needs oneDNN 3 at all.
Routing tests check where the rewrite puts the kernels (native bfloat16 classes with kernels="auto", training and
inference graphs) and where it keeps MXNet's ops.
"""
import json
import sys

import mxnet as mx
import numpy as np
import pytest

from mxnet import amp, autograd, gluon
from mxnet.amp.base.dtypes import BFLOAT16
from mxnet.amp.core.policy import make_policy
from mxnet.amp.graph.plan import plan_node
from mxnet.amp.graph.rewrite import rewrite_symbol
from mxnet.amp.graph.symbol_json import to_graph

from amp_testing import ONEDNN3_DTYPES, bf16_round, requires_onednn3, requires_onednn3_bf16

RNG = np.random.RandomState(0)
U = 2.0 ** -8  # one bfloat16 rounding, relative (round to nearest: half of it, with a margin)
COLS = (1, 7, 33, 768, 1000)
LEADING = ((), (3,), (2, 5))


@pytest.fixture(autouse=True)
def _seeded():
    """Every test draws the same values whichever tests ran before it."""
    RNG.seed(0)


def _as(values, dtype):
    arr = mx.nd.array(values)
    return mx.nd.amp_cast(arr, dtype=BFLOAT16) if dtype == "bfloat16" else arr


def _np(arr):
    return mx.nd.amp_cast(arr, dtype=np.float32).asnumpy().astype(np.float64)


def _rounded(values, dtype):
    return (bf16_round(values) if dtype == "bfloat16" else np.float32(values)).astype(np.float64)


def _within(got, ref, scale, dtype, what, extra=0.0):
    """|got - ref| <= 2e-5 * scale (float32 math) + U * |ref| where the result is bfloat16 (+ extra)."""
    tol = 2e-5 * scale + 1e-30 + (U * np.abs(ref) if dtype == "bfloat16" else 0.0) + extra
    err = np.abs(got - ref)
    assert (err <= tol).all(), "%s: max error %.3g where the tolerance is %.3g" % (what, err.max(), tol.max())


def _grads(func, arrays, head):
    """func(*arrays) and the gradients of every array under head gradient ``head``."""
    arrays = [a.copy() for a in arrays]
    for a in arrays:
        a.attach_grad()
    with autograd.record():
        out = func(*arrays)
    out.backward(head)
    return out, [a.grad for a in arrays]


# ---- amp_layer_norm ---------------------------------------------------------------------------------------------
def _ln_reference(x, g, b, dy, eps):
    """y, dx, dgamma, dbeta, each with the scale of its float32 rounding errors: those of the terms, and of x - mean
    where |x| >> its spread (float32 holds x to 2^-24 |x|)."""
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    rstd = 1.0 / np.sqrt(var + eps)
    xhat = (x - mean) * rstd
    xs = np.abs(xhat) + rstd * np.abs(x)  # the scale of xhat's errors
    gdy = g * dy
    dx = rstd * (gdy - gdy.mean(-1, keepdims=True) - xhat * (gdy * xhat).mean(-1, keepdims=True))
    dx_scale = rstd * (np.abs(gdy) + np.abs(gdy).mean(-1, keepdims=True)
                       + xs * np.abs(gdy * xs).mean(-1, keepdims=True))
    rows = (-1, x.shape[-1])
    return (xhat * g + b, xs * np.abs(g) + np.abs(b) + np.abs(g), dx, dx_scale,
            (dy * xhat).reshape(rows).sum(0), np.abs(dy * xs).reshape(rows).sum(0),
            dy.reshape(rows).sum(0), np.abs(dy).reshape(rows).sum(0))


@requires_onednn3
@pytest.mark.parametrize("dtype", ONEDNN3_DTYPES)
@pytest.mark.parametrize("cols", COLS)
@pytest.mark.parametrize("leading", LEADING)
def test_layer_norm_forward_and_backward_match_numpy(dtype, cols, leading):
    shape, eps = leading + (cols,), 1e-5
    offset = 100.0 if cols == 33 else 0.0  # a mean far from zero: statistics without cancellation
    x, dy = RNG.uniform(-2, 2, shape) + offset, RNG.uniform(-1, 1, shape)
    g, b = RNG.uniform(0.5, 1.5, cols), RNG.uniform(-1, 1, cols)
    X, DY = _as(x, dtype), _as(dy, dtype)
    y, (dx, dg, db) = _grads(lambda a, c, d: mx.nd.amp_layer_norm(a, c, d, eps=eps),
                             [X, mx.nd.array(g), mx.nd.array(b)], DY)
    assert y.dtype == X.dtype and dx.dtype == X.dtype and dg.dtype == db.dtype == np.float32 and y.shape == shape
    ref, scale, dx_ref, dx_scale, dg_ref, dg_scale, db_ref, db_scale = _ln_reference(
        _rounded(x, dtype), np.float32(g), np.float32(b), _rounded(dy, dtype), eps)
    _within(_np(y), ref, scale, dtype, "y")
    _within(_np(dx), dx_ref, dx_scale, dtype, "dx")
    _within(_np(dg), dg_ref, dg_scale, "float32", "dgamma")
    _within(_np(db), db_ref, db_scale, "float32", "dbeta")
    # MXNet's float32 LayerNorm on the same (rounded) values: the same function and gradients
    theirs, (tdx, tdg, tdb) = _grads(lambda a, c, d: mx.nd.LayerNorm(a, c, d, eps=eps),
                                     [mx.nd.array(_rounded(x, dtype)), mx.nd.array(g), mx.nd.array(b)],
                                     mx.nd.array(_rounded(dy, dtype)))
    _within(_np(y), _np(theirs), scale, dtype, "y vs MXNet")
    _within(_np(dx), _np(tdx), dx_scale, dtype, "dx vs MXNet")
    _within(_np(dg), _np(tdg), dg_scale, "float32", "dgamma vs MXNet")
    _within(_np(db), _np(tdb), db_scale, "float32", "dbeta vs MXNet")


@requires_onednn3
@requires_onednn3_bf16
@pytest.mark.parametrize("data, out", [("float32", "bfloat16"), ("bfloat16", "float32")])
def test_layer_norm_output_dtype_attribute(data, out):
    x = RNG.uniform(-3, 3, (4, 6, 40))
    g, b = mx.nd.array(RNG.uniform(0.5, 1.5, 40)), mx.nd.array(RNG.uniform(-1, 1, 40))
    y, (dx,) = _grads(lambda a: mx.nd.amp_layer_norm(a, g, b, dtype=out), [_as(x, data)], _as(np.ones(x.shape), out))
    assert y.dtype == _as(x, out).dtype and dx.dtype == _as(x, data).dtype
    ref = _ln_reference(_rounded(x, data), g.asnumpy(), b.asnumpy(), np.ones(x.shape), 1e-5)
    _within(_np(y), ref[0], ref[1], out, "y")
    _within(_np(dx), ref[2], ref[3], data, "dx")


# ---- amp_softmax, amp_log_softmax --------------------------------------------------------------------------------
def _softmax_reference(x, temperature, lengths, log):
    z = x / temperature
    valid = np.arange(x.shape[-1]) < (x.shape[-1] if lengths is None else lengths[..., None])
    zm = np.where(valid, z, -np.inf)
    m = zm.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.where(valid, np.exp(zm - m), 0.0)
    s = e.sum(-1, keepdims=True)
    if log:
        return np.where(valid, z - m - np.log(s), 0.0), np.abs(z) + np.abs(m) + np.abs(np.log(s)), valid
    return np.where(s > 0, e / np.where(s > 0, s, 1), 0.0), np.ones_like(z), valid


def _softmax_grad_reference(y, dy, temperature, valid, log):
    """The gradient from the output the kernel stored (as MXNet's backward reads it) and its float32 scale."""
    if log:
        total = (dy * valid).sum(-1, keepdims=True)
        dx = (dy - np.exp(y) * total) / temperature
        scale = (np.abs(dy) + np.exp(y) * np.abs(dy * valid).sum(-1, keepdims=True)) / abs(temperature)
    else:
        dot = (dy * y).sum(-1, keepdims=True)
        dx = y * (dy - dot) / temperature
        scale = y * (np.abs(dy) + np.abs(dy * y).sum(-1, keepdims=True)) / abs(temperature)
    return np.where(valid, dx, 0.0), scale


def _lengths(leading, cols):
    """Lengths of every row: 0, full and random ones in between (int32)."""
    lengths = RNG.randint(0, cols + 1, leading).astype(np.int32)
    flat = lengths.reshape(-1)
    flat[0] = 0
    flat[-1] = cols
    return lengths


def _run_softmax(op, x_dtype, x, dy, temperature=None, lengths=None, out=None):
    kwargs = {} if temperature is None else {"temperature": temperature}
    if out is not None:
        kwargs["dtype"] = out
    extra = [] if lengths is None else [mx.nd.array(lengths, dtype=lengths.dtype)]
    if lengths is not None:
        kwargs["use_length"] = True
    head = _as(dy, out or x_dtype)
    y, grads = _grads(lambda a: getattr(mx.nd, op)(a, *extra, **kwargs), [_as(x, x_dtype)], head)
    return y, grads[0], _np(head)


def _check_softmax(op, x_dtype, x, dy, temperature=None, lengths=None, out=None):
    log = op == "amp_log_softmax"
    y, dx, head = _run_softmax(op, x_dtype, x, dy, temperature, lengths, out)
    assert y.dtype == _as(x, out or x_dtype).dtype and dx.dtype == _as(x, x_dtype).dtype
    t = 1.0 if temperature is None else temperature
    ref, scale, valid = _softmax_reference(_rounded(x, x_dtype), t, lengths, log)
    _within(_np(y), ref, scale, out or x_dtype, "y")
    dx_ref, dx_scale = _softmax_grad_reference(_np(y), head, t, valid, log)
    _within(_np(dx), dx_ref, dx_scale, x_dtype, "dx")
    # MXNet's float32 softmax on the rounded values: the same function, and the gradient within the output's
    # rounding (MXNet's backward reads its own, unrounded output)
    theirs, (tdx,) = _grads(lambda a: getattr(mx.nd, op[4:])(a, *([] if lengths is None else [
        mx.nd.array(lengths, dtype=lengths.dtype)]), **({} if temperature is None else {"temperature": temperature}),
        **({} if lengths is None else {"use_length": True})), [mx.nd.array(_rounded(x, x_dtype))], mx.nd.array(head))
    _within(_np(y), _np(theirs), scale, out or x_dtype, "y vs MXNet")
    rounded_y = 2 * U * dx_scale if "bfloat16" in (x_dtype, out) else 0.0
    _within(_np(dx), _np(tdx), dx_scale, x_dtype, "dx vs MXNet", rounded_y)


@pytest.mark.parametrize("dtype", ONEDNN3_DTYPES)
@pytest.mark.parametrize("cols", COLS)
@pytest.mark.parametrize("leading", LEADING)
def test_softmax_matches_numpy(dtype, cols, leading):
    x, dy = RNG.uniform(-6, 6, leading + (cols,)), RNG.uniform(-1, 1, leading + (cols,))
    _check_softmax("amp_softmax", dtype, x, dy)  # oneDNN 3 where loaded
    if leading:  # lengths have the data's shape without its last axis
        _check_softmax("amp_softmax", dtype, x, dy, lengths=_lengths(leading, cols))


@pytest.mark.parametrize("dtype", ONEDNN3_DTYPES)
@pytest.mark.parametrize("temperature", [0.5, 3.0, -2.0])
@pytest.mark.parametrize("cols", [7, 768])
def test_softmax_temperature_and_lengths(dtype, temperature, cols):
    x, dy = RNG.uniform(-6, 6, (2, 5, cols)), RNG.uniform(-1, 1, (2, 5, cols))
    lengths = _lengths((2, 5), cols).astype(np.int64)
    _check_softmax("amp_softmax", dtype, x, dy, temperature=temperature)
    _check_softmax("amp_softmax", dtype, x, dy, temperature=temperature, lengths=lengths)
    _check_softmax("amp_log_softmax", dtype, x, dy, temperature=temperature)


@pytest.mark.parametrize("dtype", ONEDNN3_DTYPES)
@pytest.mark.parametrize("cols", [1, 33, 1000])
def test_log_softmax_matches_numpy(dtype, cols):
    _check_softmax("amp_log_softmax", dtype, RNG.uniform(-6, 6, (3, cols)), RNG.uniform(-1, 1, (3, cols)))


@pytest.mark.parametrize("op", ["amp_softmax", "amp_log_softmax"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_softmax_written_over_its_input_is_the_same(op, dtype):
    """MXNet's memory plan may give the output its input's storage (nnvm/inplace.cc): every row is read before it
    is written, so the result is the one of a separate output, bit for bit."""
    values = RNG.uniform(-6, 6, (37, 1000)).astype(np.float32)
    x = mx.nd.array(values) if dtype == "float32" else mx.nd.amp_cast(mx.nd.array(values), dtype=BFLOAT16)
    apart = getattr(mx.nd, op)(x)
    same = x.copy()
    getattr(mx.nd, op)(same, out=same)
    np.testing.assert_array_equal(_np(same), _np(apart))
    assert not np.array_equal(_np(apart), _np(x))


@pytest.mark.parametrize("dtype", ONEDNN3_DTYPES)
@pytest.mark.parametrize("lengths", [False, True])
def test_softmax_is_stable_for_large_magnitudes(dtype, lengths):
    x = RNG.uniform(-1, 1, (4, 33)) * 3e4
    lens = _lengths((4,), 33) if lengths else None
    y, dx, _ = _run_softmax("amp_softmax", dtype, x, np.ones(x.shape), lengths=lens)
    assert np.isfinite(_np(y)).all() and np.isfinite(_np(dx)).all()
    _check_softmax("amp_softmax", dtype, x, RNG.uniform(-1, 1, x.shape), lengths=lens)
    _check_softmax("amp_log_softmax", dtype, x, RNG.uniform(-1, 1, x.shape))


@requires_onednn3_bf16
@pytest.mark.parametrize("data, out", [("float32", "bfloat16"), ("bfloat16", "float32")])
@pytest.mark.parametrize("lengths", [False, True])
def test_softmax_output_dtype_attribute(data, out, lengths):
    x, dy = RNG.uniform(-6, 6, (3, 4, 33)), RNG.uniform(-1, 1, (3, 4, 33))
    _check_softmax("amp_softmax", data, x, dy, out=out, lengths=_lengths((3, 4), 33) if lengths else None)
    _check_softmax("amp_log_softmax", data, x, dy, out=out)


@requires_onednn3
@pytest.mark.parametrize("call, message", [
    (lambda x, g: mx.nd.amp_layer_norm(x, g, g, axis=0), "amp_layer_norm: attribute axis must be -1 or 1"),
    (lambda x, g: mx.nd.amp_layer_norm(x, g, g, output_mean_var=True), "output_mean_var=True is not supported"),
    (lambda x, g: mx.nd.amp_layer_norm(x, g[:3], g), r"input 1 \(gamma\) must have shape \(4,\)"),
    (lambda x, g: mx.nd.amp_layer_norm(x, g, g, dtype="float16"), "attribute dtype must be float32, bfloat16"),
    (lambda x, g: mx.nd.amp_softmax(x, axis=0), "amp_softmax: attribute axis must be -1 or 1"),
    (lambda x, g: mx.nd.amp_softmax(x, temperature=0), "temperature must be a finite non-zero number"),
    (lambda x, g: mx.nd.amp_softmax(x, g[:3], use_length=True), r"input 1 \(length\) must be int32 or int64"),
    (lambda x, g: mx.nd.amp_log_softmax(x, x, use_length=True), "use_length=True is not supported"),
    (lambda x, g: mx.nd.amp_softmax(x.astype("float64")), r"input 0 \(data\) must be float32 or bfloat16"),
])
def test_invalid_attributes_and_inputs_are_reported(call, message):
    with pytest.raises(mx.base.MXNetError, match=message):
        call(mx.nd.ones((3, 4)), mx.nd.ones(4)).wait_to_read()


class _Block(gluon.HybridBlock):
    """LayerNorm then a masked softmax, on the library's ops (mxnet=False) or MXNet's."""

    def __init__(self, mxnet, **kwargs):
        super().__init__(**kwargs)
        self._mxnet = mxnet

    def hybrid_forward(self, F, x, lengths, gamma, beta):
        layer_norm, softmax = (F.LayerNorm, F.softmax) if self._mxnet else (F.amp_layer_norm, F.amp_softmax)
        return softmax(layer_norm(x, gamma, beta, eps=1e-5), lengths, use_length=True, temperature=2.0)


@requires_onednn3
@pytest.mark.parametrize("dtype", ONEDNN3_DTYPES)
def test_hybridized_graph_matches_mxnet_forward_and_backward(dtype):
    x, dy = RNG.uniform(-2, 2, (2, 7, 33)), RNG.uniform(-1, 1, (2, 7, 33))
    lengths = mx.nd.array(_lengths((2, 7), 33), dtype="int32")
    g, b = mx.nd.array(RNG.uniform(0.5, 1.5, 33)), mx.nd.array(RNG.uniform(-1, 1, 33))
    outs = []
    for block, data_dtype in ((_Block(False), dtype), (_Block(True), "float32")):
        block.hybridize()
        data = mx.nd.array(_rounded(x, dtype)) if data_dtype == "float32" else _as(x, dtype)
        y, (dx, dg, db) = _grads(lambda a, c, d: block(a, lengths, c, d), [data, g, b],
                                 _as(_rounded(dy, dtype), data_dtype))
        outs.append([_np(t) for t in (y, dx, dg, db)])
    # bfloat16: the normalised values' rounding (one ulp of up to |h| / 2 in the exponent) and the gradient's
    for ours, theirs, name in zip(*outs, ("y", "dx", "dgamma", "dbeta")):
        scale = np.abs(theirs).max() + 1e-6
        assert np.abs(ours - theirs).max() <= (8 * U if dtype == "bfloat16" else 1e-4) * scale, name


# ---- graph integration ------------------------------------------------------------------------------------------
_ROUTED = {"LayerNorm": "amp_layer_norm", "_npx_layer_norm": "amp_layer_norm", "softmax": "amp_softmax",
           "_npx_softmax": "amp_softmax", "log_softmax": "amp_log_softmax", "_npx_log_softmax": "amp_log_softmax"}


def _plain_node(op, **attrs):
    inputs = 3 if "layer_norm" in op or op == "LayerNorm" else 1
    return {"op": op, "name": "n", "attrs": {k: str(v) for k, v in attrs.items()}, "inputs": [[0, 0, 0]] * inputs}


@requires_onednn3
@requires_onednn3_bf16
@pytest.mark.parametrize("op", sorted(_ROUTED))
def test_plans_put_the_kernels_in_training_and_inference_graphs(monkeypatch, op):
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")  # as on an AVX-512 CPU
    policy = make_policy("bfloat16")
    for inference in (False, True):
        for data in ("bfloat16", "float32"):
            plan = plan_node(_plain_node(op, axis=-1), policy, "cpu", inference, [data, "float32", "float32"],
                             data == "bfloat16")
            # log-probabilities feed losses: float32; training graphs keep no float32 copy for backward
            out = "float32" if "log" in op else data if inference else "bfloat16"
            assert (plan.op, plan.attrs, plan.stats_kernel) == (_ROUTED[op], {"dtype": out}, True)
    for attrs, data in (({"axis": 1}, "bfloat16"), ({}, "float16"), ({}, None), ({"output_mean_var": True}, "bfloat16"),
                        ({"dtype": "float64"}, "bfloat16")):
        plan = plan_node(_plain_node(op, **attrs), policy, "cpu", False, [data, "float32", "float32"], True)
        assert plan.op == op and not plan.stats_kernel, attrs
    own = plan_node(_plain_node(op, dtype="float32"), policy, "cpu", False, ["bfloat16"] * 3, True)
    assert own.attrs == {"dtype": "float32"} and own.stats_kernel


def _block_symbol():
    """data -> FullyConnected -> LayerNorm -> FullyConnected -> masked softmax (scores float32 into it)."""
    x, lengths = mx.sym.var("data"), mx.sym.var("lengths", dtype="int32")
    h = mx.sym.LayerNorm(mx.sym.FullyConnected(x, num_hidden=16, flatten=False, name="fc1"), name="ln")
    s = mx.sym.FullyConnected(h, num_hidden=12, flatten=False, name="fc2")
    return mx.sym.softmax(s, lengths, use_length=True, axis=-1, name="sm")


def _nodes(sym):
    return json.loads(sym.tojson(remove_amp_cast=False))["nodes"]


@requires_onednn3
@requires_onednn3_bf16
@pytest.mark.parametrize("inference", [False, True])
def test_rewrite_keeps_the_data_low_precision_and_computes_the_same(monkeypatch, inference):
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")
    sym = _block_symbol()
    low, stats = rewrite_symbol(sym, make_policy("bfloat16"), "cpu", {"lengths": np.int32}, inference=inference)
    nodes = _nodes(low)
    by_name = {n["name"]: n for n in nodes}
    ln, sm = by_name["ln"], by_name["sm"]
    assert (ln["op"], ln["attrs"]["dtype"], sm["op"], sm["attrs"]["dtype"]) == (  # sm: the output, read as float32
        "amp_layer_norm", "bfloat16", "amp_softmax", "float32")
    assert stats.kernels["amp_layer_norm"] == stats.kernels["amp_softmax"] == 1
    assert nodes[ln["inputs"][0][0]]["name"] == "fc1"  # bfloat16 straight from the product: no cast
    assert [nodes[i]["op"] for i, _, _ in ln["inputs"][1:]] == ["null", "null"]  # gamma, beta: float32 as stored
    assert [nodes[i]["name"] for i, _, _ in sm["inputs"]] == ["fc2", "lengths"]  # the lengths as they are
    # inference: the scores reach the softmax in float32; training keeps the bfloat16 scores only
    assert by_name["fc2"].get("attrs", {}).get("out_dtype") == ("float32" if inference else None)
    assert nodes[by_name["fc2"]["inputs"][0][0]]["name"] == "ln"  # the normalised data, bfloat16, uncast
    rng = np.random.RandomState(1)
    shapes = {"data": (2, 5, 8), "lengths": (2, 5)}
    arg_shapes, _, _ = sym.infer_shape(**shapes)
    feed = {k: mx.nd.array(rng.uniform(-1, 1, s)) for k, s in zip(sym.list_arguments(), arg_shapes)}
    feed["lengths"] = mx.nd.array(rng.randint(0, 13, (2, 5)), dtype="int32")
    head, results = mx.nd.array(rng.uniform(-1, 1, (2, 5, 12))), []
    for graph in (sym, low):
        grads = {k: mx.nd.zeros_like(v) for k, v in feed.items() if k != "lengths"}
        exe = graph.bind(mx.cpu(), {k: v.copy() for k, v in feed.items()}, args_grad=grads)
        out = exe.forward(is_train=True)[0].asnumpy()
        exe.backward(head)
        results.append((out, {k: g.asnumpy() for k, g in grads.items()}))
    (ref, ref_grads), (got, got_grads) = results
    # bfloat16 roundings of the products' operands, the normalised data and the probabilities; measured at most
    # 0.9 U (output) and 2.3 U (gradients) of the largest value
    assert got.dtype == np.float32 and np.abs(got - ref).max() <= 4 * U * np.abs(ref).max()
    for k in ref_grads:
        assert np.abs(got_grads[k] - ref_grads[k]).max() <= 8 * U * np.abs(ref_grads[k]).max(), k


@requires_onednn3
@requires_onednn3_bf16
def test_a_softmax_read_only_as_float32_writes_float32(monkeypatch):
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")
    x = mx.sym.var("data")
    head = mx.sym.softmax(mx.sym.FullyConnected(x, num_hidden=4, flatten=False, name="fc"), name="sm")
    low, _ = rewrite_symbol(mx.sym.Group([head, mx.sym.LayerNorm(x, name="ln")]), make_policy("bfloat16"), "cpu")
    nodes = _nodes(low)
    heads = [nodes[h[0]] for h in json.loads(low.tojson(remove_amp_cast=False))["heads"]]
    want = [("amp_softmax", "float32"), ("amp_layer_norm", "float32")]
    assert [(n["op"], n["attrs"]["dtype"]) for n in heads] == want  # the graph's outputs: float32, no cast
    # a training graph: the product before the softmax writes bfloat16 (its output is kept for backward)
    assert "out_dtype" not in next(n for n in nodes if n["name"] == "fc")["attrs"]
    low, _ = rewrite_symbol(head, make_policy("bfloat16"), "cpu", inference=True)
    assert next(n for n in _nodes(low) if n["name"] == "fc")["attrs"]["out_dtype"] == "float32"  # no bf16 at all


@pytest.mark.parametrize("policy", [dict(emulate=True), dict(kernels="mxnet"), dict(target_dtype="float16")])
def test_other_policies_keep_mxnet_layer_norm_and_softmax(monkeypatch, policy):
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")
    low, stats = rewrite_symbol(_block_symbol(), make_policy(**dict({"target_dtype": "bfloat16"}, **policy)), "cpu",
                                {"lengths": np.int32})
    ops = {n["name"]: n["op"] for n in _nodes(low)}
    assert (ops["ln"], ops["sm"]) == ("LayerNorm", "softmax")
    assert not {"amp_layer_norm", "amp_softmax"} & set(stats.kernels)


@requires_onednn3
@requires_onednn3_bf16
def test_converted_transformer_block_runs_the_kernels_within_5e_3(monkeypatch):
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3] / "bench"))
    from bench_inference import _encoder
    mx.random.seed(0)
    net = _encoder()
    net.initialize(mx.init.Xavier())
    net.hybridize()
    x = mx.nd.array(np.random.RandomState(0).uniform(-1, 1, (2, 128, 512)))
    ref = net(x).asnumpy()
    low = amp.convert_hybrid_block(net, "bfloat16")
    got = _np(low(x))
    ops = [n["op"] for n in _nodes(low._cached_graph[1])]
    assert ops.count("amp_layer_norm") == 2 and ops.count("amp_softmax") == 1
    assert "LayerNorm" not in ops and "softmax" not in ops
    assert np.abs(got - ref).max() <= 5e-3 * np.abs(ref).max()  # measured: 2.3e-3


class _Attention(gluon.HybridBlock):
    """Dense, LayerNorm, masked single-head self-attention, residual LayerNorm (numpy=False: legacy ops)."""

    def __init__(self, **kwargs):
        super().__init__(prefix="att_", **kwargs)
        with self.name_scope():
            self.inp = gluon.nn.Dense(16, flatten=False, in_units=8)
            self.ln1, self.ln2 = gluon.nn.LayerNorm(in_channels=16), gluon.nn.LayerNorm(in_channels=16)
            self.out = gluon.nn.Dense(4, flatten=False, in_units=16)

    def hybrid_forward(self, F, x, lengths):
        h = self.ln1(self.inp(x))
        scores = F.batch_dot(h, h, transpose_b=True) / 4.0
        att = F.softmax(scores, F.broadcast_like(F.expand_dims(lengths, -1), scores, lhs_axes=(1,), rhs_axes=(1,)),
                        use_length=True, axis=-1)
        return self.out(self.ln2(h + F.batch_dot(att, h)))


@requires_onednn3
@requires_onednn3_bf16
def test_amp_init_training_runs_the_kernels_and_follows_float32(monkeypatch):
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")
    rng = np.random.RandomState(2)
    x = mx.nd.array(rng.uniform(-1, 1, (3, 6, 8)))
    lengths = mx.nd.array([6, 3, 1], dtype="int32")
    runs = []
    for use_amp in (False, True):
        if use_amp:
            amp.init("bfloat16")
        mx.random.seed(0)
        net = _Attention()
        net.initialize(mx.init.Xavier())
        net.hybridize()
        with autograd.record():
            loss = (net(x, lengths) ** 2).mean()
        loss.backward()
        runs.append((net, loss.asscalar(), {k: p.grad().asnumpy() for k, p in net.collect_params().items()}))
    (_, ref_loss, ref_grads), (net, loss, grads) = runs
    ops = [n["op"] for n in _nodes(net._cached_graph[1])]
    assert ops.count("amp_layer_norm") == 2 and ops.count("amp_softmax") == 1 and "LayerNorm" not in ops
    assert abs(loss - ref_loss) <= 4 * U * abs(ref_loss)  # measured: 0.16 U
    for k, want in ref_grads.items():
        assert grads[k].dtype == np.float32
        assert np.abs(grads[k] - want).max() <= 8 * U * np.abs(want).max(), k  # measured: 1.4 U
