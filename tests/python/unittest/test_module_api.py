"""Module-API training with ``amp.init_trainer(optimizer)``: loss scaling and exact step skipping in
``Module.update()`` (``mxnet.contrib.amp`` 1.9.1 refuses an optimizer)."""
import numpy as np
import pytest

import mxnet as mx
from mxnet import amp

BATCH = 4


def _module(opt, context=mx.cpu(), kvstore="local"):
    data = mx.sym.var("data")
    h = mx.sym.FullyConnected(data, num_hidden=6, name="fc1")
    out = mx.sym.FullyConnected(mx.sym.Activation(h, act_type="tanh"), num_hidden=3, name="fc2")
    mod = mx.mod.Module(out, label_names=None, context=context)
    mod.bind(data_shapes=[("data", (BATCH, 5))])
    mx.random.seed(0)
    mod.init_params(mx.init.Uniform(0.5))
    mod.init_optimizer(kvstore=kvstore, optimizer=opt)
    return mod


def _batch(seed, bad=False):
    x = np.random.RandomState(seed).uniform(-1, 1, (BATCH, 5)).astype(np.float32)
    if bad:
        x[1, 2] = np.inf
    return mx.io.DataBatch([mx.nd.array(x)], bucket_key=5, provide_data=[mx.io.DataDesc("data", (BATCH, 5))])


def _backward(mod, batch, opt=None):
    """Forward and backward with head gradients 1 (the gradient of sum(outputs)), scaled when ``opt`` is given."""
    mod.forward(batch, is_train=True)
    head = [mx.nd.ones((BATCH, 3))]
    if opt is None:
        mod.backward(head)
    else:
        with amp.scale_loss(head, opt) as scaled:
            mod.backward(scaled)


def _step(mod, batch, opt=None):
    _backward(mod, batch, opt)
    return mod.update()


def _weights(mod):
    return {k: v.asnumpy().copy() for k, v in mod.get_params()[0].items()}


def _states(mod, opt):
    updater = mod._updater if mod._updater is not None else mod._kvstore._updater
    states = {k: [s.asnumpy().copy() for s in (v if isinstance(v, (list, tuple)) else [v])]
              for k, v in updater.states.items()}
    return states, opt.num_update, dict(opt._index_update_count)


def _optimizer(name):
    return mx.optimizer.create(name, learning_rate=0.05, rescale_grad=1.0 / BATCH,
                               **({"momentum": 0.9} if name == "sgd" else {}))


@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_scaled_steps_equal_plain_steps_and_overflow_skips_exactly(name):
    opt, ref_opt = _optimizer(name), _optimizer(name)
    scaler = amp.LossScaler(init_scale=2.0 ** 10, growth_interval=1000)
    assert amp.init_trainer(opt, scaler) is scaler and amp.get_loss_scaler(opt) is scaler
    mod, ref = _module(opt), _module(ref_opt)
    for seed in range(3):
        assert _step(mod, _batch(seed), opt) is True
        _step(ref, _batch(seed))
    for k, v in _weights(ref).items():  # power-of-two scale: unscaling is exact, so bit-identical updates
        np.testing.assert_array_equal(_weights(mod)[k], v)
    weights, states = _weights(mod), _states(mod, opt)
    assert _step(mod, _batch(9, bad=True), opt) is False
    assert scaler.scale == 2.0 ** 9
    after_weights, after_states = _weights(mod), _states(mod, opt)
    for k in weights:
        np.testing.assert_array_equal(after_weights[k], weights[k])
    assert after_states[1:] == states[1:]  # update counters (learning-rate schedules) unchanged
    for k in states[0]:
        for a, b in zip(after_states[0][k], states[0][k]):
            np.testing.assert_array_equal(a, b)
    assert _step(mod, _batch(3), opt) is True  # carries on with the smaller scale
    _step(ref, _batch(3))
    for k, v in _weights(ref).items():
        np.testing.assert_array_equal(_weights(mod)[k], v)


def test_skipping_with_several_devices_and_updates_on_the_kvstore():
    opt = _optimizer("sgd")
    amp.init_trainer(opt, amp.LossScaler(init_scale=8.0))
    mod = _module(opt, context=[mx.cpu(0), mx.cpu(1)], kvstore="local")
    assert mod._update_on_kvstore
    assert _step(mod, _batch(0), opt) is True
    weights = _weights(mod)
    assert _step(mod, _batch(1, bad=True), opt) is False  # the inf is in one device's half of the batch
    for k, v in _weights(mod).items():
        np.testing.assert_array_equal(v, weights[k])
    assert amp.get_loss_scaler(opt).scale == 4.0


def test_unscale_an_optimizer_before_clipping():
    opt = _optimizer("sgd")
    amp.init_trainer(opt, amp.LossScaler(init_scale=64.0))
    mod, ref = _module(opt), _module(_optimizer("sgd"))
    with pytest.raises(RuntimeError, match="no Module using this optimizer has run backward"):
        amp.unscale(opt)
    _backward(mod, _batch(0), opt)
    _backward(ref, _batch(0))
    amp.unscale(opt)
    for g, r in zip(mod._exec_group.grad_arrays, ref._exec_group.grad_arrays):
        np.testing.assert_array_equal(g[0].asnumpy(), r[0].asnumpy())
    with pytest.raises(RuntimeError, match="already been called on this optimizer"):
        amp.unscale(opt)
    assert mod.update() is True
    ref.update()
    for k, v in _weights(ref).items():
        np.testing.assert_array_equal(_weights(mod)[k], v)


def test_bucketing_module_training_uses_the_scaler():
    def sym_gen(length):
        data = mx.sym.var("data")
        return mx.sym.FullyConnected(data, num_hidden=3, name="fc"), ("data",), None
    opt = _optimizer("sgd")
    amp.init_trainer(opt, amp.LossScaler(init_scale=4.0))
    mod = mx.mod.BucketingModule(sym_gen, default_bucket_key=5, context=mx.cpu())
    mod.bind(data_shapes=[("data", (BATCH, 5))], label_shapes=None)
    mod.init_params(mx.init.Uniform(0.5))
    mod.init_optimizer(optimizer=opt)
    before = _weights(mod)
    _step(mod, _batch(0, bad=True), opt)  # BucketingModule.update returns nothing: look at the effects
    for k, v in _weights(mod).items():
        np.testing.assert_array_equal(v, before[k])
    assert amp.get_loss_scaler(opt).scale == 2.0
    _step(mod, _batch(0), opt)
    assert any(np.abs(v - before[k]).max() > 0 for k, v in _weights(mod).items())
    assert amp.get_loss_scaler(opt).skipped_steps == 1


def test_modules_without_amp_are_untouched_and_errors_name_the_fix():
    amp.init_trainer(_optimizer("sgd"))  # wraps Module.update once
    plain_opt = _optimizer("sgd")
    mod = _module(plain_opt)
    assert _step(mod, _batch(0)) is None  # Module.update's own return value
    with pytest.raises(RuntimeError, match=r"amp.init_trainer\(trainer\) first"):
        with amp.scale_loss(mx.nd.ones((1,)), plain_opt):
            pass
    with pytest.raises(TypeError, match="gluon.Trainer or an mx.optimizer.Optimizer"):
        amp.init_trainer("sgd")


def test_bfloat16_module_training_defaults_to_a_static_scale():
    amp.init("bfloat16")
    opt = _optimizer("sgd")
    scaler = amp.init_trainer(opt)
    assert scaler.scale == 1.0 and not scaler.config.dynamic
    mod = _module(opt)
    assert any(n.startswith(("fc1_weight_amp", "data_amp")) for n in mod._exec_group.execs[0]._symbol
               .get_internals().list_outputs())  # the bound graph was rewritten by amp.init
    assert _step(mod, _batch(0), opt) is True
    assert _step(mod, _batch(1, bad=True), opt) is False
    assert scaler.scale == 1.0 and scaler.skipped_steps == 1


def test_module_fit_skips_overflowing_batches():
    """``Module.fit`` never scales the loss: nothing is divided out, and a non-finite batch is skipped."""
    data = np.random.RandomState(7).uniform(-1, 1, (3 * BATCH, 5)).astype(np.float32)
    label = np.random.RandomState(8).uniform(-1, 1, (3 * BATCH, 3)).astype(np.float32)
    bad = data.copy()
    bad[BATCH + 1, 0] = np.nan  # the second batch overflows

    def fit(x, opt):
        net = mx.sym.LinearRegressionOutput(mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=3, name="fc"),
                                            name="lro")
        mod = mx.mod.Module(net, label_names=["lro_label"], context=mx.cpu())
        it = mx.io.NDArrayIter(x, label, BATCH, label_name="lro_label")
        mx.random.seed(0)
        mod.fit(it, num_epoch=1, optimizer=opt, initializer=mx.init.Uniform(0.5))
        return mod

    opt = _optimizer("sgd")
    scaler = amp.init_trainer(opt, amp.LossScaler(init_scale=2.0 ** 10))
    with_amp = fit(bad, opt)
    assert scaler.skipped_steps == 1 and scaler.steps == 3
    clean = np.delete(data, np.s_[BATCH:2 * BATCH], axis=0)  # the same run without the skipped batch
    ref_label = np.delete(label, np.s_[BATCH:2 * BATCH], axis=0)
    net = mx.sym.LinearRegressionOutput(mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=3, name="fc"),
                                        name="lro")
    ref = mx.mod.Module(net, label_names=["lro_label"], context=mx.cpu())
    mx.random.seed(0)
    ref.fit(mx.io.NDArrayIter(clean, ref_label, BATCH, label_name="lro_label"), num_epoch=1,
            optimizer=_optimizer("sgd"), initializer=mx.init.Uniform(0.5))
    for k, v in _weights(ref).items():
        np.testing.assert_array_equal(_weights(with_amp)[k], v)
