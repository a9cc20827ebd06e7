"""The library's broadcast product (amp_broadcast_mul): float32 math on float32 or bfloat16 operands under NumPy
broadcasting, one rounding, forward and backward against NumPy; and where conversion puts it (float32 products that
only casts to bfloat16 read, in inference graphs)."""
import json

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd

from mxnet.amp.base.dtypes import BFLOAT16
from mxnet.amp.core.policy import make_policy
from mxnet.amp.graph.rewrite import rewrite_symbol

from amp_testing import bf16_round, converted_deviation_and_ops

SHAPES = [
    ((4, 24, 7, 9), (4, 24, 1, 1)),     # a squeeze-excitation gate: runs of one value
    ((4, 24, 1, 1), (4, 24, 7, 9)),     # the same, the gate first
    ((3, 1, 5), (4, 5)),                # fewer dimensions, both operands broadcast
    ((2, 1, 3, 1), (1, 4, 1, 5)),       # alternating: every run meets the others in both gradients
    ((5, 33), (5, 33)),                 # no broadcasting, an odd length
    ((1,), (3, 2)),                     # a scalar operand
]


def _operand(values, dtype):
    array = mx.nd.array(values)
    return mx.nd.amp_cast(array, dtype=BFLOAT16) if dtype == "bfloat16" else array


def _np(a):
    return mx.nd.amp_cast(a, dtype="float32").asnumpy()


def _summed_to(values, shape):
    """values summed over the dimensions where shape (aligned at the last) has size 1 or none."""
    lead = values.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + d for d, s in enumerate(shape) if s == 1 and values.shape[lead + d] != 1)
    return values.sum(axis=axes, keepdims=True).reshape(shape)


def _rounded(values, dtype):
    return bf16_round(values) if dtype == "bfloat16" else values.astype(np.float32)


@pytest.mark.parametrize("out_dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("dtypes", [("float32", "float32"), ("bfloat16", "float32"), ("float32", "bfloat16"),
                                    ("bfloat16", "bfloat16")])
@pytest.mark.parametrize("shapes", SHAPES)
def test_forward_and_backward_match_numpy(shapes, dtypes, out_dtype):
    rng = np.random.RandomState(0)
    values = [_rounded(rng.uniform(-3, 3, s), d) for s, d in zip(shapes, dtypes)]
    a, b = (_operand(v, d) for v, d in zip(values, dtypes))
    a.attach_grad()
    b.attach_grad()
    with autograd.record():
        y = mx.nd.amp_broadcast_mul(a, b, dtype=out_dtype)
    product = values[0].astype(np.float64) * values[1]
    assert y.dtype == (np.float32 if out_dtype == "float32" else BFLOAT16) and y.shape == product.shape
    np.testing.assert_array_equal(_np(y), _rounded(product, out_dtype))  # float32 math, rounded once
    head = bf16_round(rng.uniform(-1, 1, product.shape))
    y.backward(_operand(head, out_dtype))
    for k, (grad, dtype) in enumerate(zip((a.grad, b.grad), dtypes)):
        want = _summed_to(head.astype(np.float64) * values[1 - k], shapes[k])
        assert grad.dtype == (np.float32 if dtype == "float32" else BFLOAT16) and grad.shape == shapes[k]
        np.testing.assert_allclose(_np(grad), want, rtol=2 ** -8 if dtype == "bfloat16" else 1e-5, atol=1e-5)


def test_an_empty_product_gives_the_broadcast_operand_a_zero_gradient():
    with mx.util.np_shape(True):  # MXNet's legacy shapes have no size 0
        a, b = mx.nd.ones((0, 3)), mx.nd.amp_cast(mx.nd.ones((1, 3)), dtype=BFLOAT16)
        a.attach_grad()
        b.attach_grad()
        b.grad[:] = 5
        with autograd.record():
            y = mx.nd.amp_broadcast_mul(a, b)
        y.backward(mx.nd.ones((0, 3)))
        assert y.shape == (0, 3) and a.grad.shape == (0, 3)
        np.testing.assert_array_equal(_np(b.grad), np.zeros((1, 3)))


def test_the_default_dtype_is_the_widest_operand_s():
    f32, b16 = mx.nd.ones((2, 3)), mx.nd.amp_cast(mx.nd.ones((2, 1)), dtype=BFLOAT16)
    assert mx.nd.amp_broadcast_mul(f32, b16).dtype == np.float32
    assert mx.nd.amp_broadcast_mul(b16, b16).dtype == BFLOAT16


def test_bad_inputs_are_named():
    f32 = mx.nd.ones((2, 3))
    with pytest.raises(mx.base.MXNetError, match=r"amp_broadcast_mul: operands of shapes \(2, 3\) and \(4,\) do not "
                                                 r"broadcast \(NumPy's rule: from the last dimension, sizes equal "
                                                 r"or 1\)"):
        mx.nd.amp_broadcast_mul(f32, mx.nd.ones((4,))).wait_to_read()
    with pytest.raises(mx.base.MXNetError, match="amp_broadcast_mul: input 1 \\(rhs\\) has dtype float16; operands "
                                                 "must be float32 or bfloat16"):
        mx.nd.amp_broadcast_mul(f32, f32.astype("float16")).wait_to_read()
    with pytest.raises(mx.base.MXNetError, match="amp_broadcast_mul: attribute dtype must be float32, bfloat16 or "
                                                 "None \\(got 'float16'\\)"):
        mx.nd.amp_broadcast_mul(f32, f32, dtype="float16").wait_to_read()


def _gated(read_by_dense=True, side=False):
    """A squeeze-excitation gate times its features; a Dense (bfloat16) reads the product, or it is the output.
    ``side``: a convolution reads the features too (bfloat16), so the product reads them through a cast."""
    x = mx.sym.var("data")
    feat = mx.sym.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=4, name="feat")
    gate = mx.sym.sigmoid(mx.sym.Convolution(mx.sym.mean(feat, axis=(2, 3), keepdims=True), kernel=(1, 1),
                                             num_filter=4, name="squeeze"), name="gate")
    product = mx.sym.broadcast_mul(feat, gate, name="gated")
    if not read_by_dense:
        return product
    out = mx.sym.FullyConnected(product, num_hidden=3, name="fc")
    return out + mx.sym.FullyConnected(mx.sym.Convolution(feat, kernel=(1, 1), num_filter=2), num_hidden=3) \
        if side else out


def test_float32_products_that_only_bfloat16_readers_take_run_on_the_library_kernel(class_c):
    """On a CPU running bfloat16 natively (class (c), mocked), an inference graph's product whose readers all cast
    it to bfloat16 runs on amp_broadcast_mul writing bfloat16, its cast gone; a product that is the graph's output,
    a training graph and emulation keep MXNet's float32 product."""

    def product(sym, inference=True, **kwargs):
        out, _ = rewrite_symbol(sym, make_policy("bfloat16", **kwargs), "cpu", inference=inference)
        nodes = json.loads(out.tojson(remove_amp_cast=False))["nodes"]
        node = next(n for n in nodes if n["name"] == "gated")
        readers = [n for n in nodes if any(nodes[src] is node for src, _, _ in n["inputs"])]
        operands = [nodes[src] for src, _, _ in node["inputs"]]
        return (node["op"], node.get("attrs", {}).get("dtype"), sorted(n["op"] for n in readers),
                [(n["name"], n.get("attrs", {}).get("out_dtype")) for n in operands])
    # the convolution writes float32 where only float32 readers take its output
    assert product(_gated()) == ("amp_broadcast_mul", "bfloat16", ["amp_fully_connected"],
                                 [("feat", "float32"), ("gate", None)])
    # where a bfloat16 reader takes it too, the product reads the bfloat16 output, not the cast to float32 beside it
    assert product(_gated(side=True))[3] == [("feat", None), ("gate", None)]
    assert product(_gated(read_by_dense=False))[0] == "broadcast_mul"  # the graph's output: float32
    assert product(_gated(), inference=False)[0] == "broadcast_mul"
    assert product(_gated(), emulate=True)[0] == "broadcast_mul"


def test_a_converted_squeeze_excitation_block_matches_float32():
    net = mx.gluon.SymbolBlock(_gated(), [mx.sym.var("data")])
    net.initialize(mx.init.Normal(0.3))
    x = mx.nd.array(np.random.RandomState(0).uniform(0, 1, (2, 3, 9, 9)))
    deviation, ops = converted_deviation_and_ops(net, x)
    assert deviation <= 0.02
    assert ("amp_broadcast_mul" in ops) != ("broadcast_mul" in ops)  # the library's where bfloat16 runs natively
