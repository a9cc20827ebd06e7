"""Tests for mxnet.amp.trainer: scaling, exact step skipping, unscale, kvstore modes, several losses/trainers."""
import numpy as np
import pytest

import mxnet as mx
from mxnet import autograd, gluon

from mxnet.amp.autocast import context as autocast
from mxnet import amp
from mxnet.amp.training.loss_scaler import LossScaler
from mxnet.amp.training.trainer import get_loss_scaler, init_trainer, scale_loss, unscale

RNG = np.random.RandomState(0)
X = RNG.uniform(-1, 1, (5, 4)).astype(np.float32)
T = RNG.uniform(-1, 1, (5, 3)).astype(np.float32)
W0 = RNG.uniform(-1, 1, (3, 4)).astype(np.float32)
B0 = RNG.uniform(-1, 1, (3,)).astype(np.float32)


def _net(ctx=None):
    ctx = ctx or [mx.cpu()]
    net = gluon.nn.Dense(3, in_units=4)
    net.initialize(ctx=ctx)
    net.weight.set_data(mx.nd.array(W0))
    net.bias.set_data(mx.nd.array(B0))
    return net


def _params(net):
    return [p.data(mx.cpu(0)).asnumpy().copy() for p in (net.weight, net.bias)]


def _backward(net, trainer=None, scale_into=None, ctx=mx.cpu()):
    """loss = sum((W x + b) * t); scaled through scale_loss when a trainer is given."""
    with autograd.record():
        loss = (net(mx.nd.array(X, ctx=ctx)) * mx.nd.array(T, ctx=ctx)).sum()
        if trainer is None:
            loss.backward()
        else:
            with scale_loss(loss, trainer) as scaled:
                scaled.backward()


def _poison(param, value=np.inf, ctx_index=0):
    grad = param.list_grad()[ctx_index]
    grad[0] = value


def _sgd_reference(steps, lr=0.1, momentum=0.9, batch=5):
    """NumPy SGD with momentum on the linear model, `steps` finite updates."""
    w, b = W0.copy(), B0.copy()
    mw, mb = np.zeros_like(w), np.zeros_like(b)
    gw, gb = T.T @ X / batch, T.sum(0) / batch
    for _ in range(steps):
        mw, mb = momentum * mw - lr * gw, momentum * mb - lr * gb
        w, b = w + mw, b + mb
    return [w, b]


def test_scaled_steps_match_numpy_and_no_lag():
    net = _net()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    init_trainer(trainer, LossScaler(init_scale=2.0 ** 12, growth_interval=1))
    for step in range(3):
        _backward(net, trainer)
        assert bool(trainer.step(5)) is True
        assert get_loss_scaler(trainer).scale == 2.0 ** (13 + step)  # grows every step: new scale used at once
        for got, want in zip(_params(net), _sgd_reference(step + 1)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_skip_leaves_params_states_and_counters_unchanged(bad):
    schedule = mx.lr_scheduler.FactorScheduler(step=1, factor=0.5, base_lr=0.1)
    net = _net()
    trainer = gluon.Trainer(net.collect_params(), "adam", {"lr_scheduler": schedule})
    init_trainer(trainer, LossScaler(init_scale=2.0 ** 10))
    for _ in range(2):
        _backward(net, trainer)
        trainer.step(5)
    opt = trainer._optimizer
    before = (_params(net), opt.num_update, dict(opt._index_update_count), opt.learning_rate,
              {k: [s.asnumpy().copy() for s in v] for k, v in trainer._updaters[0].states.items()})
    _backward(net, trainer)
    _poison(net.bias, bad)
    assert bool(trainer.step(5)) is False
    after = (_params(net), opt.num_update, dict(opt._index_update_count), opt.learning_rate,
             {k: [s.asnumpy() for s in v] for k, v in trainer._updaters[0].states.items()})
    for got, want in zip(after[0], before[0]):
        np.testing.assert_array_equal(got, want)
    assert after[1:4] == before[1:4]
    for key, states in before[4].items():
        for got, want in zip(after[4][key], states):
            np.testing.assert_array_equal(got, want)
    scaler = get_loss_scaler(trainer)
    assert (scaler.scale, scaler.skipped_steps, scaler.last_overflow_step) == (2.0 ** 9, 1, 3)


def _run(poisoned_steps, steps, ctx, kvstore="device", update_on_kvstore=None, poison_ctx=0):
    net = _net(ctx)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9},
                            kvstore=kvstore, update_on_kvstore=update_on_kvstore)
    init_trainer(trainer, LossScaler(init_scale=2.0 ** 8, growth_interval=2))
    applied = []
    for step in range(steps):
        with autograd.record():
            losses = [(net(mx.nd.array(X, ctx=c)) * mx.nd.array(T, ctx=c)).sum() for c in ctx]
            with scale_loss(losses, trainer) as scaled:
                autograd.backward(scaled)
        if step in poisoned_steps:
            _poison(net.weight, np.nan, poison_ctx)
        applied.append(trainer.step(5 * len(ctx)))
    return net, trainer, applied


def test_skipped_step_is_exactly_absent():
    net, _, applied = _run({1, 3}, 6, [mx.cpu()])
    ref, _, ref_applied = _run(set(), 4, [mx.cpu()])
    assert applied == [True, False, True, False, True, True] and all(ref_applied)
    for got, want in zip(_params(net), _params(ref)):
        np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("update_on_kvstore", [False, True])
def test_overflow_on_second_device_skips_every_device(update_on_kvstore):
    ctx = [mx.cpu(0), mx.cpu(1)]
    net, trainer, applied = _run({1}, 4, ctx, update_on_kvstore=update_on_kvstore, poison_ctx=1)
    assert trainer._update_on_kvstore is update_on_kvstore
    ref, _, _ = _run(set(), 3, ctx, update_on_kvstore=update_on_kvstore)
    assert applied == [True, False, True, True]
    for param, ref_param in zip((net.weight, net.bias), (ref.weight, ref.bias)):
        for got in param.list_data():
            np.testing.assert_allclose(got.asnumpy(), ref_param.data(mx.cpu(0)).asnumpy(), rtol=1e-6)
            assert np.isfinite(got.asnumpy()).all()
    # single-device reference: two devices with the same batch each equal one device (rescale 1/(5*2))
    single, _, _ = _run(set(), 3, [mx.cpu()])
    np.testing.assert_allclose(_params(net)[0], _params(single)[0], rtol=1e-5)


def test_unscale_gives_true_gradients_and_step_does_not_unscale_again():
    net = _net()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    init_trainer(trainer, LossScaler(init_scale=2.0 ** 10))
    _backward(net, trainer)
    unscale(trainer)
    np.testing.assert_allclose(net.weight.grad().asnumpy(), T.T @ X, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(net.bias.grad().asnumpy(), T.sum(0), rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeError, match="unscale\\(\\) has already been called"):
        unscale(trainer)
    assert bool(trainer.step(5)) is True
    for got, want in zip(_params(net), _sgd_reference(1)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    _backward(net, trainer)
    unscale(trainer)  # allowed again after the step


@pytest.mark.parametrize("update_on_kvstore", [False, True])
def test_unscale_on_two_devices(update_on_kvstore):
    ctx = [mx.cpu(0), mx.cpu(1)]
    net = _net(ctx)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9},
                            update_on_kvstore=update_on_kvstore)
    init_trainer(trainer, LossScaler(init_scale=2.0 ** 10))
    with autograd.record():
        losses = [(net(mx.nd.array(X, ctx=c)) * mx.nd.array(T, ctx=c)).sum() for c in ctx]
        with scale_loss(losses, trainer) as scaled:
            autograd.backward(scaled)
    unscale(trainer)
    per_device = 1 if update_on_kvstore else 2  # without updates on the kvstore, unscale all-reduces first
    for grad in net.weight.list_grad():
        np.testing.assert_allclose(grad.asnumpy(), per_device * T.T @ X, rtol=1e-5, atol=1e-6)
    assert bool(trainer.step(10)) is True
    for param, want in zip((net.weight, net.bias), _sgd_reference(1)):
        for got in param.list_data():
            np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-5, atol=1e-6)


def test_unscale_then_clip_then_overflow_skips():
    net = _net()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    init_trainer(trainer, LossScaler(init_scale=2.0 ** 10))
    before = _params(net)
    _backward(net, trainer)
    _poison(net.weight)
    unscale(trainer)
    gluon.utils.clip_global_norm([p.grad() for p in (net.weight, net.bias)], 1.0)
    assert bool(trainer.step(5)) is False
    for got, want in zip(_params(net), before):
        np.testing.assert_array_equal(got, want)


def test_allreduce_grads_then_update():
    ctx = [mx.cpu(0), mx.cpu(1)]
    net = _net(ctx)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9},
                            update_on_kvstore=False)
    init_trainer(trainer, LossScaler(init_scale=2.0 ** 6))
    with autograd.record():
        losses = [(net(mx.nd.array(X, ctx=c)) * mx.nd.array(T, ctx=c)).sum() for c in ctx]
        with scale_loss(losses, trainer) as scaled:
            autograd.backward(scaled)
    trainer.allreduce_grads()
    with pytest.raises(RuntimeError, match="allreduce_grads\\(\\) called after allreduce_grads\\(\\)"):
        trainer.allreduce_grads()
    assert bool(trainer.update(10)) is True
    for got, want in zip(_params(net), _sgd_reference(1)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_several_losses():
    net = _net()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    init_trainer(trainer, LossScaler(init_scale=2.0 ** 5))
    with autograd.record():
        out = net(mx.nd.array(X))
        half = (out * mx.nd.array(T) * 0.5).sum()
        with scale_loss((half, half * 1.0), trainer) as scaled:
            assert isinstance(scaled, list) and len(scaled) == 2
            np.testing.assert_allclose(scaled[0].asnumpy(), half.asnumpy() * 32, rtol=1e-6)
            autograd.backward(scaled)
    trainer.step(5)
    for got, want in zip(_params(net), _sgd_reference(1)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_two_trainers_sharing_a_scaler_back_off_once():
    net = _net()
    trainer_w = gluon.Trainer([net.weight], "sgd", {"learning_rate": 0.1})
    trainer_b = gluon.Trainer([net.bias], "sgd", {"learning_rate": 0.1})
    shared = LossScaler(init_scale=2.0 ** 10)
    assert init_trainer(trainer_w, shared) is init_trainer(trainer_b, shared)
    bias_before = net.bias.data().asnumpy().copy()
    weight_before = net.weight.data().asnumpy().copy()
    _backward(net, trainer_w)
    _poison(net.bias)
    assert bool(trainer_w.step(5)) is True
    assert shared.steps == 0  # waits for the other trainer of the group
    assert bool(trainer_b.step(5)) is False
    assert (shared.steps, shared.skipped_steps, shared.scale) == (1, 1, 2.0 ** 9)
    np.testing.assert_array_equal(net.bias.data().asnumpy(), bias_before)
    np.testing.assert_allclose(net.weight.data().asnumpy(), weight_before - 0.1 * T.T @ X / 5, rtol=1e-5)


def test_independent_trainers_keep_their_own_scalers():
    net_a, net_b = _net(), _net()
    trainer_a = gluon.Trainer(net_a.collect_params(), "sgd", {"learning_rate": 0.1})
    trainer_b = gluon.Trainer(net_b.collect_params(), "sgd", {"learning_rate": 0.1})
    init_trainer(trainer_a, LossScaler(init_scale=8.0))
    init_trainer(trainer_b, LossScaler(init_scale=8.0))
    _backward(net_a, trainer_a)
    _backward(net_b, trainer_b)
    _poison(net_a.weight)
    assert (trainer_a.step(5), trainer_b.step(5)) == (False, True)
    assert (get_loss_scaler(trainer_a).scale, get_loss_scaler(trainer_b).scale) == (4.0, 8.0)


class _Elementwise(gluon.Block):
    """loss = sum(w * x): float16 friendly on CPU (no FullyConnected)."""

    def __init__(self, dtype):
        super().__init__()
        self.w = self.params.get("w", shape=(8,), dtype=dtype, init=mx.init.Constant(0.5))

    def forward(self, x):
        return (self.w.data(x.context) * x).sum()


def test_multi_precision_float16_skip_and_step():
    net = _Elementwise("float16")
    net.initialize()
    trainer = gluon.Trainer(net.collect_params(), "sgd",
                            {"learning_rate": 0.5, "momentum": 0.9, "multi_precision": True})
    init_trainer(trainer, LossScaler(init_scale=2.0 ** 4))
    x = mx.nd.array(np.linspace(-1, 1, 8), dtype="float16")
    for poisoned in (False, True, False):
        with autograd.record():
            loss = net(x)
            with scale_loss(loss, trainer) as scaled:
                scaled.backward()
        assert net.w.grad().dtype == np.float16
        if poisoned:
            master = [s.asnumpy().copy() for s in trainer._updaters[0].states[0]]
            weight = net.w.data().asnumpy().copy()
            net.w.grad()[3] = np.inf
        assert bool(trainer.step(1)) is (not poisoned)
        if poisoned:
            np.testing.assert_array_equal(net.w.data().asnumpy(), weight)
            for got, want in zip(trainer._updaters[0].states[0], master):
                np.testing.assert_array_equal(got.asnumpy(), want)
    # two applied steps of momentum SGD on grad = x
    grad = np.linspace(-1, 1, 8).astype(np.float16).astype(np.float32)
    mom = -0.5 * grad
    mom = 0.9 * mom - 0.5 * grad
    want = 0.5 - 0.5 * grad + mom
    np.testing.assert_allclose(net.w.data().asnumpy().astype(np.float32), want, rtol=2e-3, atol=2e-3)


def test_overflow_storm_ends_finite_with_scale_in_bounds():
    rng = np.random.RandomState(7)
    net = _net()
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 1e-3})
    scaler = init_trainer(trainer, LossScaler(init_scale=2.0 ** 10, growth_interval=3, min_scale=1.0,
                                              max_scale=2.0 ** 14, floor_warning_steps=10 ** 6))
    injected = 0
    for _ in range(3000):
        _backward(net, trainer)
        if rng.rand() < 0.4:
            injected += 1
            param = net.weight if rng.rand() < 0.5 else net.bias
            param.grad()[0] = rng.choice([np.inf, -np.inf, np.nan])
        trainer.step(5)
    assert scaler.skipped_steps == injected and scaler.steps == 3000
    assert 1.0 <= scaler.scale <= 2.0 ** 14
    for value in _params(net):
        assert np.isfinite(value).all()


def test_at_most_one_host_read_per_step(monkeypatch):
    net = _net()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    init_trainer(trainer)
    _backward(net, trainer)
    trainer.step(5)  # warm-up: kvstore and optimizer states created
    calls = []
    original = mx.nd.NDArray.asnumpy
    monkeypatch.setattr(mx.nd.NDArray, "asnumpy", lambda self: calls.append(1) or original(self))
    reads = []
    for poisoned in (False, True, False):
        _backward(net, trainer)
        if poisoned:
            _poison(net.bias)
        calls.clear()
        trainer.step(5)
        reads.append(len(calls))
    assert reads == [0, 1, 1]  # the flag of the step two before, from the third step on


def test_default_scaler_follows_amp_init_dtype(monkeypatch):
    monkeypatch.setattr(autocast, "target_dtype", lambda: "bfloat16")
    net = _net()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    scaler = init_trainer(trainer)
    assert (scaler.scale, scaler.config.dynamic) == (1.0, False)
    before = _params(net)
    _backward(net, trainer)
    _poison(net.weight, np.nan)
    assert bool(trainer.step(5)) is False  # bf16: no scaling, but non-finite steps are still skipped
    np.testing.assert_array_equal(_params(net)[0], before[0])
    assert amp.state_dict(trainer)["target_dtype"] == "bfloat16"
    monkeypatch.setattr(autocast, "target_dtype", lambda: None)
    plain = gluon.Trainer(_net().collect_params(), "sgd")
    assert init_trainer(plain).scale == 2.0 ** 16


def test_init_trainer_twice_and_bad_arguments():
    trainer = gluon.Trainer(_net().collect_params(), "sgd")
    first = init_trainer(trainer)
    step = trainer.step
    assert init_trainer(trainer) is first and trainer.step == step
    other = LossScaler(init_scale=4.0)
    assert init_trainer(trainer, other) is other and get_loss_scaler(trainer) is other
    with pytest.raises(TypeError, match="gluon.Trainer or an mx.optimizer.Optimizer, got str"):
        init_trainer("sgd")  # an Optimizer is accepted: Module-API training, see test_module_api.py
    with pytest.raises(TypeError, match="loss_scaler must be an amp.LossScaler or None, got float"):
        init_trainer(trainer, 2.0)


def test_plain_trainer_methods_are_untouched():
    trainer = gluon.Trainer(_net().collect_params(), "sgd")
    init_trainer(trainer)
    other = gluon.Trainer(_net().collect_params(), "sgd")
    assert "step" not in vars(other) and gluon.Trainer.step.__module__ == "mxnet.gluon.trainer"


def test_functions_need_init_trainer():
    trainer = gluon.Trainer(_net().collect_params(), "sgd")
    with pytest.raises(RuntimeError, match="amp.init_trainer"):
        with scale_loss(mx.nd.ones((1,)), trainer):
            pass
    with pytest.raises(RuntimeError, match="amp.init_trainer"):
        unscale(trainer)


@pytest.mark.parametrize("kvstore,update_on_kvstore,match", [
    ("dist_sync", True, "update_on_kvstore=False"),
    ("dist_async", None, "asynchronous"),
])
def test_distributed_configs_that_cannot_skip_raise(kvstore, update_on_kvstore, match):
    trainer = gluon.Trainer(_net().collect_params(), "sgd", kvstore=kvstore, update_on_kvstore=update_on_kvstore)
    with pytest.raises(ValueError, match=match):
        init_trainer(trainer)


def test_dist_sync_defaults_to_update_on_workers():
    trainer = gluon.Trainer(_net().collect_params(), "sgd", kvstore="dist_sync")
    init_trainer(trainer)
    assert trainer._kvstore_params["update_on_kvstore"] is False


def test_sparse_gradients_are_refused():
    emb = gluon.nn.Embedding(10, 4, sparse_grad=True)
    emb.initialize()
    with pytest.raises(ValueError, match="sparse"):
        init_trainer(gluon.Trainer(emb.collect_params(), "sgd"))


@mx.util.use_np
def test_numpy_mode_arrays():
    net = gluon.nn.Dense(3, in_units=4)
    net.initialize()
    net.weight.set_data(mx.np.array(W0))
    net.bias.set_data(mx.np.array(B0))
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    init_trainer(trainer, LossScaler(init_scale=2.0 ** 10))
    for poisoned in (False, True):
        with autograd.record():
            loss = (net(mx.np.array(X)) * mx.np.array(T)).sum()
            with scale_loss(loss, trainer) as scaled:
                scaled.backward()
        assert isinstance(net.weight.grad(), mx.np.ndarray)
        if poisoned:
            net.bias.grad()[0] = np.nan
        assert bool(trainer.step(5)) is not poisoned
    for got, want in zip((net.weight.data().asnumpy(), net.bias.data().asnumpy()), _sgd_reference(1)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_stale_overflowed_gradient_does_not_skip_later_steps():
    a, b = gluon.nn.Dense(2, in_units=2), gluon.nn.Dense(2, in_units=2)
    a.initialize()
    b.initialize()
    params = a.collect_params()
    params.update(b.collect_params())
    trainer = gluon.Trainer(params, "sgd", {"learning_rate": 0.1})
    init_trainer(trainer, LossScaler(dynamic=False, init_scale=1.0))
    x = mx.nd.ones((1, 2))
    with autograd.record():
        loss = (a(x) * float("inf")).sum()  # branch a overflows once, then is never used again
        with scale_loss(loss, trainer) as scaled:
            scaled.backward()
    assert bool(trainer.step(1, ignore_stale_grad=True)) is False
    for _ in range(2):
        with autograd.record():
            loss = b(x).sum()
            with scale_loss(loss, trainer) as scaled:
                scaled.backward()
        before = b.weight.data().asnumpy()
        assert bool(trainer.step(1, ignore_stale_grad=True)) is True
        np.testing.assert_allclose(b.weight.data().asnumpy(), before - 0.1 * np.ones((2, 2)), rtol=1e-6)
