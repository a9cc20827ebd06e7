"""GPU checks for mxnet.amp.trainer: float16 training with loss scaling, overflow on the last GPU skips all."""
import numpy as np
import pytest

import mxnet as mx
from mxnet import autograd, gluon

from mxnet.amp.training.loss_scaler import LossScaler
from mxnet.amp.training.trainer import get_loss_scaler, init_trainer, scale_loss

NUM_GPUS = mx.context.num_gpus()
pytestmark = pytest.mark.skipif(NUM_GPUS == 0, reason="needs a GPU build of MXNet and a GPU")


def _fp16_net(ctx):
    net = gluon.nn.Dense(16, in_units=32)
    net.initialize(mx.init.Xavier(), ctx=ctx)
    net.cast("float16")
    return net


def _scaled_backward(net, trainer, ctx, rng):
    with autograd.record():
        losses = [net(mx.nd.array(rng.uniform(-1, 1, (8, 32)), ctx=c, dtype="float16"))
                  .astype("float32").square().sum() for c in ctx]
        with scale_loss(losses, trainer) as scaled:
            autograd.backward(scaled)


@pytest.mark.parametrize("update_on_kvstore", [False, True])
def test_float16_overflow_on_last_gpu_skips_everywhere(update_on_kvstore):
    ctx = [mx.gpu(i) for i in range(min(NUM_GPUS, 2))]
    net = _fp16_net(ctx)
    trainer = gluon.Trainer(net.collect_params(), "sgd",
                            {"learning_rate": 0.01, "momentum": 0.9, "multi_precision": True},
                            update_on_kvstore=update_on_kvstore)
    scaler = init_trainer(trainer, LossScaler(init_scale=2.0 ** 10))
    rng = np.random.RandomState(0)
    _scaled_backward(net, trainer, ctx, rng)
    assert trainer.step(8 * len(ctx)) is True
    before = [d.asnumpy().copy() for d in net.weight.list_data()]
    _scaled_backward(net, trainer, ctx, rng)
    net.weight.list_grad()[-1][0, 0] = np.inf
    assert trainer.step(8 * len(ctx)) is False
    for got, want in zip(net.weight.list_data(), before):
        np.testing.assert_array_equal(got.asnumpy(), want)
    assert (scaler.scale, scaler.skipped_steps) == (2.0 ** 9, 1)


def test_float16_scale_overflow_backs_off_until_finite():
    ctx = [mx.gpu(0)]
    net = _fp16_net(ctx)
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 1e-3, "multi_precision": True})
    init_trainer(trainer, LossScaler(init_scale=2.0 ** 24, max_scale=2.0 ** 24))
    rng = np.random.RandomState(1)
    applied = []
    for _ in range(30):
        _scaled_backward(net, trainer, ctx, rng)
        applied.append(trainer.step(8))
    assert not applied[0]  # 2**24 overflows float16 gradients
    assert applied[-1] and get_loss_scaler(trainer).scale < 2.0 ** 24
    assert np.isfinite(net.weight.data().asnumpy().astype(np.float32)).all()
