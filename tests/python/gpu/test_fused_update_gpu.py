"""The fused optimizer update and the device-side loss scaler on a GPU (cuda_update.cu).

Needs a GPU build of MXNet 1.9.1 and libmxnet_amp built with -DMXNET_AMP_CUDA=ON; skipped otherwise. nvcc
contracts multiply-adds as it compiles MXNet's own kernels, so results are compared with MXNet's GPU optimizers
to within a few float32 ulps, and skipping and the scaler's state exactly.
"""
import numpy as np
import pytest

import mxnet as mx
from mxnet import autograd, gluon

from mxnet.amp.core import library, ops
from mxnet.amp.training.adamw import bias_correction
from mxnet.amp.training.device_scaler import decode, encode
from mxnet.amp.training.loss_scaler import LossScaler, ScalerConfig, ScalerState, next_state
from mxnet.amp.training.trainer import get_loss_scaler, init_trainer, scale_loss

pytestmark = pytest.mark.skipif(mx.context.num_gpus() == 0 or not library.cuda_kernels(),
                                reason="needs a GPU build of MXNet and libmxnet_amp built with -DMXNET_AMP_CUDA=ON")

SHAPES = [(30, 7), (1000,), (300001,)]  # the last one spans several chunks and launches


def _arrays(rng, ctx):
    return [mx.nd.array(rng.randn(*s).astype(np.float32), ctx=ctx) for s in SHAPES]


def _state(ctx, scale=1.0):
    return mx.nd.array([scale, 0, 0, 0, 0, 0], ctx=ctx, dtype=np.float64)


@pytest.mark.parametrize("rule", ["sgd_mom", "adam"])
def test_fused_update_on_gpu_matches_mxnets_gpu_optimizers(rule):
    ctx, rng = mx.gpu(0), np.random.RandomState(0)
    ours = _arrays(rng, ctx)
    theirs = [w.copy() for w in ours]
    states = [[mx.nd.zeros(s, ctx=ctx) for s in SHAPES] for _ in range(4)]
    lrs, wds = [0.1, 0.05, 0.01], [1e-4, 0.0, 1e-3]
    for t in range(1, 4):
        grads = _arrays(rng, ctx)
        if rule == "sgd_mom":
            mx.nd.multi_sgd_mom_update(*[a for x in zip(theirs, grads, states[2]) for a in x], out=theirs,
                                       num_weights=3, lrs=lrs, wds=wds, momentum=0.9, rescale_grad=0.125)
            params, step_lrs = list(zip(ours, grads, states[0])), lrs
        else:
            step_lrs = [lr * bias_correction(0.9, 0.999, t) for lr in lrs]
            for i in range(3):
                mx.nd.adam_update(theirs[i], grads[i], states[2][i], states[3][i], out=theirs[i], lr=step_lrs[i],
                                  wd=wds[i], rescale_grad=0.125)
            params = list(zip(ours, grads, states[0], states[1]))
        applied = ops.multi_update(rule, params, mx.nd.ones((1,), ctx=ctx), _state(ctx, 2.0), step_lrs, wds,
                                   rescale_grad=0.25, momentum=0.9)
        assert applied.asnumpy()[0] == 1.0
    for got, want in zip(ours, theirs):
        np.testing.assert_allclose(got.asnumpy(), want.asnumpy(), rtol=1e-6, atol=1e-7)
    before = [w.asnumpy() for w in ours]
    applied = ops.multi_update(rule, params, mx.nd.zeros((1,), ctx=ctx), _state(ctx), step_lrs, wds, momentum=0.9)
    assert applied.asnumpy()[0] == 0.0
    for got, want in zip(ours, before):
        np.testing.assert_array_equal(got.asnumpy(), want)


def test_scaler_state_on_gpu_follows_next_state_exactly():
    config = ScalerConfig(init_scale=8.0, growth_interval=2, min_scale=2.0)
    host, device = ScalerState(scale=8.0), mx.nd.array(encode(ScalerState(scale=8.0)), ctx=mx.gpu(0),
                                                       dtype=np.float64)
    for finite in [True, True, False, False, False, True]:
        scale = ops.scaler_update(device, mx.nd.array([float(finite)], ctx=mx.gpu(0)), config)
        host = next_state(config, host, finite)
        assert decode(device.asnumpy()) == host and scale.asnumpy()[0] == host.scale


def test_gpu_trainer_skips_on_the_device():
    ctx = mx.gpu(0)
    net = gluon.nn.Dense(4, in_units=8)
    net.initialize(ctx=ctx)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    init_trainer(trainer, LossScaler(init_scale=2.0 ** 8))
    for step, poison in enumerate([False, True, False]):
        with autograd.record():
            loss = net(mx.nd.ones((2, 8), ctx=ctx)).sum()
            with scale_loss(loss, trainer) as scaled:
                scaled.backward()
        if poison:
            net.weight.grad()[0, 0] = np.inf
        before = net.weight.data().asnumpy()
        assert bool(trainer.step(2)) is not poison
        assert np.array_equal(net.weight.data().asnumpy(), before) is poison
    scaler = get_loss_scaler(trainer)
    assert (scaler.steps, scaler.skipped_steps, scaler.scale) == (3, 1, 2.0 ** 7)
