"""The library's concatenation (amp_concat): row copies of float32 or bfloat16 arrays against NumPy, forward and
backward, and where conversion puts it (inference graphs whose Concat reads bfloat16, on CPUs running it natively)."""
import json

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd

from mxnet.amp.base.dtypes import BFLOAT16
from mxnet.amp.core.policy import make_policy
from mxnet.amp.graph.rewrite import rewrite_symbol

from amp_testing import bf16_round, converted_deviation_and_ops


def _arrays(shapes, dtype, seed=0):
    rng = np.random.RandomState(seed)
    values = [bf16_round(rng.uniform(-3, 3, s)) for s in shapes]
    arrays = [mx.nd.array(v) for v in values]
    return values, [mx.nd.amp_cast(a, dtype=BFLOAT16) for a in arrays] if dtype == "bfloat16" else arrays


def _np(a):
    return mx.nd.amp_cast(a, dtype="float32").asnumpy()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("shapes,dim", [
    ([(2, 3, 5, 7), (2, 1, 5, 7), (2, 4, 5, 7)], 1),     # DenseNet's: channels
    ([(1, 64, 55, 55), (1, 64, 55, 55)], 1),             # SqueezeNet's expand branches, rows of 193 KB in pieces
    ([(3, 4, 2), (3, 4, 5)], -1),                        # the last axis, counted from the end
    ([(2, 3), (4, 3), (1, 3)], 0),                       # the first: one row
])
def test_forward_and_backward_match_numpy(dtype, shapes, dim):
    values, arrays = _arrays(shapes, dtype)
    for a in arrays:
        a.attach_grad()
    with autograd.record():
        y = mx.nd.amp_concat(*arrays, num_args=len(arrays), dim=dim)
    want = np.concatenate(values, axis=dim)
    assert y.dtype == arrays[0].dtype and y.shape == want.shape
    np.testing.assert_array_equal(_np(y), want)
    head = bf16_round(np.random.RandomState(1).uniform(-1, 1, want.shape))
    y.backward(mx.nd.amp_cast(mx.nd.array(head), dtype=y.dtype))
    for a, part in zip(arrays, np.split(head, np.cumsum([s[dim] for s in shapes])[:-1], axis=dim)):
        np.testing.assert_array_equal(_np(a.grad), part)


def test_bad_inputs_are_named():
    f32, b16 = mx.nd.ones((2, 3)), mx.nd.amp_cast(mx.nd.ones((2, 3)), dtype=BFLOAT16)
    with pytest.raises(mx.base.MXNetError, match="amp_concat: input 1 has dtype bfloat16; every input must have one "
                                                 "dtype, float32 or bfloat16 \\(input 0: float32\\)"):
        mx.nd.amp_concat(f32, b16, num_args=2).wait_to_read()
    with pytest.raises(mx.base.MXNetError, match=r"amp_concat: input 1 has shape \(2, 4\); it must match input 0's "
                                                 r"\(2, 3\) but along dim 0"):
        mx.nd.amp_concat(f32, mx.nd.ones((2, 4)), num_args=2, dim=0).wait_to_read()
    with pytest.raises(mx.base.MXNetError, match="amp_concat: dim 2 is out of range for arrays of 2 dimensions"):
        mx.nd.amp_concat(f32, f32, num_args=2, dim=2).wait_to_read()
    with pytest.raises(mx.base.MXNetError, match="amp_concat: attribute dim must be an integer \\(got 'x'\\)"):
        mx.nd.amp_concat(f32, f32, num_args=2, dim="x").wait_to_read()
    with pytest.raises(mx.base.MXNetError, match="input 0 \\(data\\) must be float32 or bfloat16 \\(got float16\\)"):
        mx.nd.amp_concat(f32.astype("float16"), f32.astype("float16"), num_args=2).wait_to_read()


def _graph():
    x = mx.sym.var("data")
    a = mx.sym.Convolution(x, kernel=(1, 1), num_filter=4, name="a")
    b = mx.sym.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=2, name="b")
    return mx.sym.Concat(a, b, x, dim=1, name="cat"), a, b


def test_inference_graphs_concatenate_bfloat16_on_the_library_kernel(class_c):
    """On a CPU running bfloat16 natively (class (c), mocked), an inference graph's Concat of bfloat16 inputs runs
    on amp_concat; a Concat reading float32 (the model's input among its inputs), a training graph, emulation and
    kernels="mxnet" keep MXNet's."""
    sym, a, b = _graph()
    low_inputs = mx.sym.Concat(a, b, dim=1, name="cat")

    def cat_op(graph_sym, **kwargs):
        policy = make_policy("bfloat16", **kwargs)
        out, _ = rewrite_symbol(graph_sym, policy, "cpu", inference=kwargs.pop("inference", True))
        return next(n["op"] for n in json.loads(out.tojson(remove_amp_cast=False))["nodes"] if n["name"] == "cat")
    assert cat_op(low_inputs) == "amp_concat"
    assert cat_op(sym) == "Concat"  # float32 data among its inputs: the widest type is float32
    assert cat_op(low_inputs, emulate=True) == "Concat"
    assert cat_op(low_inputs, kernels="mxnet") == "Concat"
    train, _ = rewrite_symbol(low_inputs, make_policy("bfloat16"), "cpu")
    assert [n["op"] for n in json.loads(train.tojson())["nodes"] if n["name"] == "cat"] == ["Concat"]


def test_a_converted_block_with_concatenations_matches_float32():
    net = mx.gluon.model_zoo.vision.squeezenet1_1(classes=10)
    net.initialize(mx.init.Xavier())
    x = mx.nd.array(np.random.RandomState(0).uniform(0, 1, (1, 3, 224, 224)))
    deviation, ops = converted_deviation_and_ops(net, x)
    assert deviation <= 0.03
    assert ("amp_concat" in ops) != ("Concat" in ops)  # the library's where bfloat16 runs natively, else MXNet's
