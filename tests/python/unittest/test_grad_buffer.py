"""Contiguous gradients: views of one buffer per (device, dtype), same training results, re-laid out when needed."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

from mxnet.amp.training.grad_buffer import GradBuffers
from mxnet.amp.training.loss_scaler import LossScaler
from mxnet.amp.training.trainer import init_trainer, scale_loss


def _net(ctx, numpy_mode=False):
    mx.random.seed(3)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(5, in_units=4, activation="relu"), gluon.nn.Dense(3, in_units=5))
    net.initialize(mx.init.Xavier(), ctx=ctx)
    return net


def _deferred_net(hybridize=None):
    """Dense(5, relu) -> Dense(3) with deferred shapes; ``hybridize(net)`` hybridizes it (or part of it)."""
    mx.random.seed(3)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(5, activation="relu"), gluon.nn.Dense(3))
    net.initialize(mx.init.Xavier())
    if hybridize is not None:
        hybridize(net)
    return net


def _train(net, ctx, use_amp, steps=3):
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    if use_amp:
        init_trainer(trainer, LossScaler(init_scale=8.0, dynamic=False))
    rs = np.random.RandomState(0)
    for _ in range(steps):
        with autograd.record():
            losses = [net(mx.nd.array(rs.uniform(-1, 1, (2, 4)), ctx=c)).square().sum() for c in ctx]
            if use_amp:
                with scale_loss(losses, trainer) as scaled:
                    autograd.backward(scaled)
            else:
                autograd.backward(losses)
        trainer.step(2 * len(ctx))
    return trainer


@pytest.mark.parametrize("ctx", [[mx.cpu(0)], [mx.cpu(0), mx.cpu(1)]])
def test_gradients_become_views_and_training_is_unchanged(ctx):
    plain, amp_net = _net(ctx), _net(ctx)
    _train(plain, ctx, False)
    trainer = _train(amp_net, ctx, True)
    for p, q in zip(amp_net.collect_params().values(), plain.collect_params().values()):
        np.testing.assert_allclose(p.data(ctx[-1]).asnumpy(), q.data(ctx[-1]).asnumpy(), rtol=1e-5, atol=1e-6)
    buffers = trainer._mxnet_amp.grads.per_device()
    assert [len(b) for b in buffers] == [1] * len(ctx)  # one float32 buffer per device
    flat = buffers[-1][0]
    assert flat.size == sum(p.data().size for p in amp_net.collect_params().values())
    flat[:] = 7.0  # the parameters' gradients are views of it
    assert all((p.grad(ctx[-1]).asnumpy() == 7.0).all() for p in amp_net.collect_params().values())


def test_replaced_gradients_are_laid_out_again():
    net = _net([mx.cpu()])
    trainer = _train(net, [mx.cpu()], True, steps=1)
    first = trainer._mxnet_amp.grads
    list(net.collect_params().values())[1]._init_grad()  # new gradient arrays, as Parameter.cast makes
    with autograd.record():
        loss = net(mx.nd.ones((2, 4))).sum()
        with scale_loss(loss, trainer) as scaled:
            scaled.backward()
    assert bool(trainer.step(2)) is True
    assert trainer._mxnet_amp.grads is not first
    assert trainer._mxnet_amp.grads.current([p for p in trainer._params if p.grad_req != "null"])


def test_numpy_mode_parameters():
    mx.npx.set_np()
    try:
        net = _net([mx.cpu()])
        params = list(net.collect_params().values())
        net(mx.np.ones((1, 4)))
        with autograd.record():
            net(mx.np.ones((2, 4))).sum().backward()
        before = [p.grad().asnumpy().copy() for p in params]
        buffers = GradBuffers(params)
        assert all(isinstance(p.grad(), mx.np.ndarray) for p in params)
        for p, b in zip(params, before):
            np.testing.assert_array_equal(p.grad().asnumpy(), b)  # values kept
        with autograd.record():
            (2 * net(mx.np.ones((2, 4))).sum()).backward()
        for p, b in zip(params, before):
            np.testing.assert_allclose(p.grad().asnumpy(), 2 * b, rtol=1e-6)  # backward writes into the views
        assert buffers.current(params)
    finally:
        mx.npx.reset_np()


def test_buffers_are_laid_out_before_the_first_backward_when_shapes_are_known():
    """Laid out at init_trainer, the separate gradients are freed before backward allocates its activations
    (which reuse that memory); laid out after a step, they stayed in RSS. Deferred shapes wait for the step."""
    net = _net([mx.cpu()])
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    init_trainer(trainer)
    at_init = trainer._mxnet_amp.grads
    assert at_init is not None and at_init.current(trainer._params)  # the trainer's order (by name)
    with autograd.record():
        loss = net(mx.nd.ones((2, 4))).sum()
        with scale_loss(loss, trainer) as scaled:
            scaled.backward()
    trainer.step(2)
    assert trainer._mxnet_amp.grads is at_init  # the same buffer: nothing laid out twice
    for hybridized in (True, False):
        deferred = gluon.nn.HybridSequential()
        deferred.add(gluon.nn.Dense(3), gluon.nn.Dense(2))
        deferred.initialize()
        if hybridized:
            deferred.hybridize(static_alloc=True, static_shape=True)
        trainer = gluon.Trainer(deferred.collect_params(), "sgd", {"learning_rate": 0.1})
        init_trainer(trainer)
        assert trainer._mxnet_amp.grads is None
        with autograd.record():
            loss = deferred(mx.nd.ones((2, 4))).sum()
            # hybridized: in the first forward, as the shapes became known, before the CachedOp ran; imperative:
            # the first Dense ran (recorded with its old gradient arrays) before the second knew its shapes
            laid_out = trainer._mxnet_amp.grads
            assert (laid_out is not None and laid_out.current(trainer._params)) is hybridized
            assert all("_finish_deferred_init" not in vars(p) for p in trainer._params)  # the hooks are gone
            with scale_loss(loss, trainer) as scaled:
                scaled.backward()
        trainer.step(2)
        assert trainer._mxnet_amp.grads.current(trainer._params)
        assert trainer._mxnet_amp.grads is laid_out or not hybridized


@pytest.mark.parametrize("when", ["deferred shapes", "after a backward"])
def test_static_graphs_train_on_the_laid_out_gradients(when):
    """hybridize(static_alloc=True, static_shape=True): the CachedOp keeps the gradient arrays of its first
    backward. Laid out inside the first call (deferred shapes: before that CachedOp first runs, kept) or after a
    backward (one before init_trainer: the CachedOp dropped), the buffers must receive every step's gradients:
    training matches plain Gluon's."""
    def net_of():
        net = _deferred_net(lambda n: n.hybridize(static_alloc=True, static_shape=True))
        if when == "after a backward":
            with autograd.record():
                net(mx.nd.ones((2, 4))).sum().backward()
        return net

    plain = net_of()
    mx.random.seed(4)  # deferred shapes: the weights are drawn at the first call, in _train
    _train(plain, [mx.cpu()], False, steps=4)
    amp_net = net_of()
    mx.random.seed(4)
    _train(amp_net, [mx.cpu()], True, steps=4)
    for p, q in zip(amp_net.collect_params().values(), plain.collect_params().values()):
        np.testing.assert_allclose(p.data().asnumpy(), q.data().asnumpy(), rtol=1e-5, atol=1e-6, err_msg=p.name)


@pytest.mark.parametrize("static", [False, True])
def test_deferred_shapes_are_laid_out_inside_the_first_hybridized_call(static):
    """Deferred shapes in a hybridized block: the block's first call lays the gradients out after it finishes the
    parameters and before it builds its CachedOp, so the first backward already writes into the buffer (nothing
    laid out, no CachedOp dropped, at the step) and training matches plain Gluon's."""
    def net_of():
        return _deferred_net(lambda n: n.hybridize(static_alloc=static, static_shape=static))

    plain, amp_net = net_of(), net_of()
    mx.random.seed(4)
    _train(plain, [mx.cpu()], False, steps=3)
    trainer = gluon.Trainer(amp_net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    init_trainer(trainer, LossScaler(init_scale=8.0, dynamic=False))
    assert trainer._mxnet_amp.grads is None  # the shapes are not known yet
    mx.random.seed(4)
    rs = np.random.RandomState(0)
    for step in range(3):
        with autograd.record():
            loss = amp_net(mx.nd.array(rs.uniform(-1, 1, (2, 4)))).square().sum()
            if step == 0:
                buffers = trainer._mxnet_amp.grads  # laid out by the forward, before any backward
                assert buffers is not None and buffers.current(trainer._params)
                cached = amp_net._cached_op
            with scale_loss(loss, trainer) as scaled:
                autograd.backward(scaled)
        trainer.step(2)
    assert trainer._mxnet_amp.grads is buffers and amp_net._cached_op is cached  # nothing laid out or rebuilt again
    assert all("_finish_deferred_init" not in vars(p) for p in amp_net.collect_params().values())  # hooks removed
    for p, q in zip(amp_net.collect_params().values(), plain.collect_params().values()):
        np.testing.assert_allclose(p.data().asnumpy(), q.data().asnumpy(), rtol=1e-5, atol=1e-6, err_msg=p.name)


def test_deferred_shapes_finished_block_by_block_wait_for_the_step():
    """A block called imperatively finishes its children's parameters one block at a time, recording ops on the
    first before the last exists: those gradients must not be moved under the recorded graph. The first step lays
    them out, and training matches plain Gluon's."""
    def net_of():  # the last parameters are finished inside a hybridized call, the first ones are not
        return _deferred_net(lambda n: n[1].hybridize())

    plain, amp_net = net_of(), net_of()
    mx.random.seed(4)
    _train(plain, [mx.cpu()], False, steps=3)
    mx.random.seed(4)
    trainer = _train(amp_net, [mx.cpu()], True, steps=3)
    assert trainer._mxnet_amp.grads.current(trainer._params)
    for p, q in zip(amp_net.collect_params().values(), plain.collect_params().values()):
        np.testing.assert_allclose(p.data().asnumpy(), q.data().asnumpy(), rtol=1e-5, atol=1e-6, err_msg=p.name)
