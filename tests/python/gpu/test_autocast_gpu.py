"""float16 numerics of amp.init on a GPU build of MXNet (real fp16 kernels, no emulation)."""
import sys
import os

import mxnet as mx
import numpy as np
import pytest
from mxnet import amp, autograd, gluon

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "unittest"))
from amp_testing import fp16_round  # noqa: E402

pytestmark = pytest.mark.skipif(mx.context.num_gpus() == 0, reason="needs a GPU build of MXNet and a GPU")


@pytest.fixture(autouse=True)
def clean_amp():
    amp.reset()
    yield
    amp.reset()


def test_fully_connected_runs_in_float16_with_fp32_accumulation():
    rs = np.random.RandomState(0)
    x, w = rs.uniform(-1, 1, (64, 256)).astype(np.float32), rs.uniform(-1, 1, (32, 256)).astype(np.float32)
    amp.init("float16")
    out = mx.nd.FullyConnected(mx.nd.array(x, ctx=mx.gpu()), mx.nd.array(w, ctx=mx.gpu()), num_hidden=32,
                               no_bias=True)
    assert out.dtype == np.float16
    ref = fp16_round((fp16_round(x).astype(np.float64) @ fp16_round(w).astype(np.float64).T).astype(np.float32))
    np.testing.assert_allclose(out.asnumpy().astype(np.float32), ref, rtol=2 ** -10, atol=1e-3)
    assert mx.nd.softmax(out).dtype == np.float32


def test_hybridized_cnn_trains_in_float16():
    amp.init("float16")
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(8, 3, padding=1), gluon.nn.BatchNorm(), gluon.nn.Activation("relu"),
            gluon.nn.MaxPool2D(2), gluon.nn.Dense(10))
    net.initialize(mx.init.Xavier(), ctx=mx.gpu())
    net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01})
    amp.init_trainer(trainer)
    rs = np.random.RandomState(1)
    x = mx.nd.array(rs.uniform(0, 1, (64, 1, 8, 8)), ctx=mx.gpu())
    y = mx.nd.array(rs.randint(0, 10, 64), ctx=mx.gpu())
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    losses = []
    for _ in range(40):
        with autograd.record():
            loss = loss_fn(net(x), y)
            with amp.scale_loss(loss, trainer) as scaled:
                autograd.backward(scaled)
        trainer.step(64)
        losses.append(float(loss.mean().asscalar()))
    assert np.isfinite(losses).all() and losses[-1] < 0.5 * losses[0]
