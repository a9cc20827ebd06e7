"""float16 inference conversion numerics on a GPU (MXNet's CPU float16 kernels are incomplete)."""
import sys
import os

import numpy as np
import pytest

import mxnet as mx
from mxnet.gluon import nn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "unittest"))
from amp_testing import fp16_round  # noqa: E402

pytestmark = pytest.mark.skipif(mx.context.num_gpus() == 0, reason="needs a GPU build of MXNet and a GPU")


def _mlp():
    net = nn.HybridSequential()
    net.add(nn.Dense(16, activation="relu", in_units=8), nn.Dense(4, in_units=16))
    net.initialize(mx.init.Xavier(), ctx=mx.gpu(0))
    return net


def test_float16_mlp_matches_numpy_reference():
    from mxnet.amp.inference.blocks import convert_hybrid_block
    net = _mlp()
    x = mx.nd.array(np.random.RandomState(0).uniform(-1, 1, (3, 8)), ctx=mx.gpu(0))
    low = convert_hybrid_block(net, x, "float16", cast_params_offline=True, ctx=mx.gpu(0))
    params = {k: p.dtype for k, p in low.collect_params().items()}
    assert set(params.values()) == {np.float16}
    y = low(x)
    assert y.dtype == np.float16
    names = sorted(net.collect_params())  # dense0_bias, dense0_weight, dense1_bias, dense1_weight
    arrays = {n: fp16_round(net.collect_params()[n].data().asnumpy()) for n in names}
    d0, d1 = (n.rsplit("_", 1)[0] for n in names[::2])
    h = fp16_round(fp16_round(x.asnumpy()) @ arrays[d0 + "_weight"].T + arrays[d0 + "_bias"])
    h = np.maximum(h, 0)
    ref = fp16_round(h @ arrays[d1 + "_weight"].T + arrays[d1 + "_bias"])
    np.testing.assert_allclose(y.astype("float32").asnumpy(), ref, rtol=1e-2, atol=1e-3)


def test_float16_cnn_with_batchnorm_close_to_fp32():
    from mxnet.amp.inference.blocks import convert_hybrid_block
    net = nn.HybridSequential()
    net.add(nn.Conv2D(8, 3, padding=1), nn.BatchNorm(), nn.Activation("relu"), nn.GlobalAvgPool2D(), nn.Dense(5))
    net.initialize(mx.init.Xavier(), ctx=mx.gpu(0))
    x = mx.nd.array(np.random.RandomState(1).uniform(-1, 1, (2, 3, 16, 16)), ctx=mx.gpu(0))
    ref = net(x).asnumpy()
    low = convert_hybrid_block(net, x, "float16", cast_params_offline=True, ctx=mx.gpu(0))
    bn = {k: p.dtype for k, p in low.collect_params().items() if "batchnorm" in k}
    assert set(bn.values()) == {np.float32}
    np.testing.assert_allclose(low(x).astype("float32").asnumpy(), ref, atol=1e-2 * np.abs(ref).max())
