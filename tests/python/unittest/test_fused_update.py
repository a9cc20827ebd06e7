"""Tests for the fused optimizer update (amp_multi_update), the device-side loss scaler and sync-free steps.

Every comparison with MXNet is bit for bit: the fused kernels repeat MXNet 1.9.1's float32 expressions.
"""
import logging

import numpy as np
import pytest

import mxnet as mx
from mxnet import autograd, gluon

from mxnet.amp.core import ops

from mxnet.amp.training import amp_state
from mxnet.amp.training.adamw import AdamW, bias_correction
from mxnet.amp.training.device_scaler import decode, encode
from mxnet.amp.training.fused_update import StepResult, fused_rule
from mxnet.amp.training.loss_scaler import LossScaler, ScalerConfig, ScalerState, next_state
from mxnet.amp.training.trainer import get_loss_scaler, init_trainer, scale_loss

SHAPES = [(30, 7), (1000,), (5, 5, 3, 3), (70001,)]  # the last one spans two chunks of the CPU launcher
LRS, WDS = [0.1, 0.05, 0.1, 0.01], [1e-4, 0.0, 1e-4, 5e-4]


def _arrays(rng, dtype=np.float32, scale=1.0):
    return [mx.nd.array((rng.randn(*s) * scale).astype(dtype), dtype=dtype) for s in SHAPES]


def _bits(a):
    a = a.asnumpy()
    return a.view(np.uint32 if a.dtype == np.float32 else np.uint16)


def _assert_same(got, want):
    for g, w in zip(got, want):
        np.testing.assert_array_equal(_bits(g), _bits(w))


def _state(scale=1.0):
    return mx.nd.array([scale, 0, 0, 0, 0, 0], dtype=np.float64)


ONE = mx.nd.ones((1,))


@pytest.mark.parametrize("clip", [None, 0.5])
@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_sgd_matches_multi_sgd_bit_for_bit(clip, momentum):
    rng = np.random.RandomState(1)
    ours, theirs = _arrays(rng), None
    theirs = [w.copy() for w in ours]
    mom_ours, mom_theirs = [mx.nd.zeros(s) for s in SHAPES], [mx.nd.zeros(s) for s in SHAPES]
    kwargs = {"clip_gradient": clip} if clip else {}
    for _ in range(4):
        grads = _arrays(rng)
        if momentum:
            mx.nd.multi_sgd_mom_update(*[a for t in zip(theirs, grads, mom_theirs) for a in t], out=theirs,
                                       num_weights=4, lrs=LRS, wds=WDS, momentum=momentum, rescale_grad=1 / 128,
                                       **kwargs)
            params = list(zip(ours, grads, mom_ours))
        else:
            mx.nd.multi_sgd_update(*[a for t in zip(theirs, grads) for a in t], out=theirs, num_weights=4,
                                   lrs=LRS, wds=WDS, rescale_grad=1 / 128, **kwargs)
            params = list(zip(ours, grads))
        applied = ops.multi_update("sgd_mom" if momentum else "sgd", params, ONE, _state(4.0), LRS, WDS,
                                   rescale_grad=1 / 32, clip_gradient=clip, momentum=momentum)
        assert applied.asnumpy()[0] == 1.0
    _assert_same(ours, theirs)
    if momentum:
        _assert_same(mom_ours, mom_theirs)


@pytest.mark.parametrize("clip", [None, 0.5])
def test_adam_matches_adam_update_bit_for_bit(clip):
    rng = np.random.RandomState(2)
    ours = _arrays(rng)
    theirs = [w.copy() for w in ours]
    states = [[mx.nd.zeros(s) for s in SHAPES] for _ in range(4)]  # mean, var: ours, then MXNet's
    kwargs = {"clip_gradient": clip} if clip else {}
    for t in range(1, 5):
        grads = _arrays(rng)
        lr = 1e-3 * bias_correction(0.9, 0.999, t)
        for i in range(len(SHAPES)):
            mx.nd.adam_update(theirs[i], grads[i], states[2][i], states[3][i], out=theirs[i], lr=lr, wd=WDS[i],
                              rescale_grad=0.25, **kwargs)
        ops.multi_update("adam", list(zip(ours, grads, states[0], states[1])), ONE, _state(2.0), [lr] * 4, WDS,
                         rescale_grad=0.5, clip_gradient=clip)
    _assert_same(ours + states[0] + states[1], theirs + states[2] + states[3])


@pytest.mark.parametrize("clip", [None, 0.5])
def test_adamw_matches_contrib_adamw_update_bit_for_bit(clip):
    rng = np.random.RandomState(3)
    ours = _arrays(rng)
    theirs = [w.copy() for w in ours]
    states = [[mx.nd.zeros(s) for s in SHAPES] for _ in range(4)]
    kwargs = {"clip_gradient": clip} if clip else {}
    for t in range(1, 5):
        grads = _arrays(rng)
        correction = bias_correction(0.9, 0.999, t)
        for i in range(len(SHAPES)):
            mx.nd.contrib.adamw_update(theirs[i], grads[i].copy(), states[2][i], states[3][i],
                                       mx.nd.array([0.25]), out=theirs[i], lr=correction, eta=1e-3, wd=WDS[i],
                                       **kwargs)
        ops.multi_update("adamw", list(zip(ours, grads, states[0], states[1])), ONE, _state(1.0),
                         [correction] * 4, WDS, etas=[1e-3] * 4, rescale_grad=0.25, clip_gradient=clip)
    _assert_same(ours + states[0] + states[1], theirs + states[2] + states[3])


def test_float16_master_weights_match_multi_mp_sgd_mom_update():
    rng = np.random.RandomState(4)
    w16 = _arrays(rng, np.float16)
    w16_ref = [w.copy() for w in w16]
    master, master_ref = [w.astype(np.float32) for w in w16], [w.astype(np.float32) for w in w16]
    mom, mom_ref = [mx.nd.zeros(s) for s in SHAPES], [mx.nd.zeros(s) for s in SHAPES]
    for _ in range(3):
        grads = _arrays(rng, np.float16)
        mx.nd.multi_mp_sgd_mom_update(*[a for t in zip(w16_ref, grads, mom_ref, master_ref) for a in t],
                                      out=w16_ref, num_weights=4, lrs=LRS, wds=WDS, momentum=0.9, rescale_grad=0.5)
        ops.multi_update("sgd_mom", list(zip(w16, grads, mom, master)), ONE, _state(1.0), LRS, WDS,
                         rescale_grad=0.5, momentum=0.9, multi_precision=True)
    _assert_same(w16 + master + mom, w16_ref + master_ref + mom_ref)


def test_bfloat16_master_weights_are_the_float32_update_rounded():
    rng = np.random.RandomState(5)
    master = _arrays(rng)
    master_f32 = [w.copy() for w in master]
    w_bf16 = ops.multi_cast(master, "bfloat16")
    mean = [[mx.nd.zeros(s) for s in SHAPES] for _ in range(4)]
    for t in range(1, 4):
        grads32 = _arrays(rng)
        grads = ops.multi_cast(grads32, "bfloat16")
        exact = ops.multi_cast(grads, "float32")  # what the bfloat16 gradients hold
        lr = 1e-3 * bias_correction(0.9, 0.999, t)
        ops.multi_update("adam", list(zip(w_bf16, grads, mean[0], mean[1], master)), ONE, _state(), [lr] * 4,
                         WDS, multi_precision=True)
        ops.multi_update("adam", list(zip(master_f32, exact, mean[2], mean[3])), ONE, _state(), [lr] * 4, WDS)
    _assert_same(master, master_f32)
    _assert_same(ops.multi_cast(w_bf16, "float32"),
                 ops.multi_cast(ops.multi_cast(master_f32, "bfloat16"), "float32"))


@pytest.mark.parametrize("rule", sorted(ops.UPDATE_RULES))
def test_a_zero_flag_writes_nothing(rule):
    rng = np.random.RandomState(6)
    weights = _arrays(rng)
    states = [tuple(mx.nd.array(rng.rand(*s)) for _ in ops.UPDATE_RULES[rule]) for s in SHAPES]
    before = [a.asnumpy() for a in weights + [x for s in states for x in s]]
    applied = ops.multi_update(rule, [(w, g) + s for w, g, s in zip(weights, _arrays(rng), states)],
                               mx.nd.zeros((1,)), _state(), LRS, WDS, etas=LRS, momentum=0.9)
    assert applied.asnumpy()[0] == 0.0
    for got, want in zip(weights + [x for s in states for x in s], before):
        np.testing.assert_array_equal(got.asnumpy(), want)


@pytest.mark.parametrize("previous", [0.0, 1.0])
def test_the_previous_steps_flag_picks_the_lists_on_the_device(previous):
    """AdamW with alternatives: a skipped previous step takes the *_if_skipped lrs and etas, else the plain ones."""
    rng = np.random.RandomState(4)
    start, grads = _arrays(rng), _arrays(rng)
    got, want = [w.copy() for w in start], [w.copy() for w in start]
    states = [[mx.nd.zeros(s) for s in SHAPES] for _ in range(4)]
    picked = ([0.5] * 4, [1e-3] * 4) if previous == 0.0 else ([0.25] * 4, [2e-3] * 4)
    ops.multi_update("adamw", list(zip(got, grads, states[0], states[1])), ONE, _state(), [0.25] * 4, WDS,
                     etas=[2e-3] * 4, previous_applied=mx.nd.array([previous]),
                     if_previous_skipped={"lrs": [0.5] * 4, "etas": [1e-3] * 4})
    ops.multi_update("adamw", list(zip(want, grads, states[2], states[3])), ONE, _state(), picked[0], WDS,
                     etas=picked[1])
    _assert_same(got + states[0] + states[1], want + states[2] + states[3])
    assert not all((a == b).asnumpy().all() for a, b in zip(got, start))


@pytest.mark.parametrize("finite", [True, False])
def test_without_a_flag_the_update_checks_its_gradients_itself(finite):
    """flag=None: the check of unscale_and_check in the same call; its outcome is the output."""
    rng = np.random.RandomState(5)
    start, grads = _arrays(rng), _arrays(rng)
    if not finite:
        grads[3][70000] = np.nan  # the last element of the second chunk of the largest parameter
    got, want = [w.copy() for w in start], [w.copy() for w in start]
    moms = [[mx.nd.zeros(s) for s in SHAPES] for _ in range(2)]
    applied = ops.multi_update("sgd_mom", list(zip(got, grads, moms[0])), None, _state(2.0), LRS, WDS,
                               momentum=0.9)
    flag = ops.unscale_and_check(grads, 1.0)
    ops.multi_update("sgd_mom", list(zip(want, grads, moms[1])), flag, _state(2.0), LRS, WDS, momentum=0.9)
    assert applied.asnumpy().tolist() == flag.asnumpy().tolist() == [1.0 if finite else 0.0]
    _assert_same(got + moms[0], want + moms[1])
    if not finite:
        _assert_same(got, start)


def test_multi_update_rejects_bad_input_with_clear_errors():
    w, g, m = mx.nd.ones((3,)), mx.nd.ones((3,)), mx.nd.zeros((3,))
    with pytest.raises(ValueError, match="rule 'lamb' is not supported; valid choices: adam, adamw, sgd, sgd_mom"):
        ops.multi_update("lamb", [(w, g)], ONE, _state(), [0.1], [0.0])
    with pytest.raises(ValueError, match=r"params\[0\] has 2 arrays; rule 'sgd_mom' needs 3 \(weight, grad, "
                                         r"momentum\)"):
        ops.multi_update("sgd_mom", [(w, g)], ONE, _state(), [0.1], [0.0])
    with pytest.raises(ValueError, match="lrs has 2 values for 1 parameters"):
        ops.multi_update("sgd", [(w, g)], ONE, _state(), [0.1, 0.2], [0.0])
    with pytest.raises(mx.MXNetError, match="parameter 0: momentum has dtype float16, expected float32"):
        ops.multi_update("sgd_mom", [(w, g, m.astype(np.float16))], ONE, _state(), [0.1], [0.0]).wait_to_read()
    w16 = w.astype(np.float16)
    with pytest.raises(mx.MXNetError, match="parameter 0 is float16; low-precision weights need "
                                            "multi_precision=True"):
        ops.multi_update("sgd", [(w16, w16)], ONE, _state(), [0.1], [0.0]).wait_to_read()
    with pytest.raises(mx.MXNetError, match="must be dense with 3 elements like its weight"):
        ops.multi_update("sgd_mom", [(w, g, mx.nd.zeros((4,)))], ONE, _state(), [0.1], [0.0]).wait_to_read()
    with pytest.raises(ValueError, match="previous_applied and if_previous_skipped go together "
                                         r"\(got if_previous_skipped alone\)"):
        ops.multi_update("sgd", [(w, g)], ONE, _state(), [0.1], [0.0], if_previous_skipped={"lrs": [0.2]})
    with pytest.raises(ValueError, match=r"if_previous_skipped has keys \['lrs'\]; this call needs \['etas', 'lrs'\]"):
        ops.multi_update("adamw", [(w, g, m, m.copy())], ONE, _state(), [0.1], [0.0], etas=[1.0],
                         previous_applied=ONE, if_previous_skipped={"lrs": [0.2]})
    with pytest.raises(ValueError, match="lrs_if_skipped has 2 values for 1 parameters"):
        ops.multi_update("sgd", [(w, g)], ONE, _state(), [0.1], [0.0], previous_applied=ONE,
                         if_previous_skipped={"lrs": [0.2, 0.3]})
    with pytest.raises(mx.MXNetError, match="the previous step's output has dtype float64; the flag and the previous "
                                            "step's output must be float32"):
        ops.multi_update("sgd", [(w, g)], ONE, _state(), [0.1], [0.0], previous_applied=ONE.astype(np.float64),
                         if_previous_skipped={"lrs": [0.2]}).wait_to_read()


# ---- the device-side loss scaler -----------------------------------------------------------------------------

def test_device_scaler_follows_next_state_exactly():
    config = ScalerConfig(init_scale=8.0, growth_interval=2, min_scale=2.0, max_scale=32.0)
    host = ScalerState(scale=8.0)
    device = mx.nd.array(encode(host), dtype=np.float64)
    for finite in [True, True, True, True, True, False, False, False, True, False]:
        scale = ops.scaler_update(device, mx.nd.array([float(finite)]), config)
        host = next_state(config, host, finite)
        assert decode(device.asnumpy()) == host
        assert scale.asnumpy()[0] == host.scale


def test_loss_scaler_reads_its_device_state_lazily_and_warns_at_the_floor(caplog):
    scaler = LossScaler(init_scale=4.0, min_scale=1.0, growth_interval=100, floor_warning_steps=3)
    reference = LossScaler(init_scale=4.0, min_scale=1.0, growth_interval=100, floor_warning_steps=3)
    zero = mx.nd.zeros((1,))
    with caplog.at_level(logging.WARNING, logger="mxnet.amp.loss_scaler"):
        for _ in range(6):
            scaler.update_on_device(zero)
            reference.update(False)
    assert isinstance(scaler.loss_scale(), mx.nd.NDArray)  # pending: the device scale multiplies the loss
    assert scaler.state_dict() == reference.state_dict()
    assert scaler.loss_scale() == 1.0  # read back: the host float again
    assert sum("at its minimum" in r.getMessage() for r in caplog.records) == 2  # once per scaler


# ---- trainers ------------------------------------------------------------------------------------------------

class _Elementwise(gluon.HybridBlock):
    """tanh(x * a + b): float16 runs on CPUs (MXNet 1.9.1 has no float16 CPU FullyConnected)."""

    def __init__(self):
        super().__init__()
        self.a = self.params.get("a", shape=(8,))
        self.b = self.params.get("b", shape=(8,))

    def hybrid_forward(self, F, x, a, b):
        return F.tanh(F.broadcast_add(F.broadcast_mul(x, a), b))


def _model(dtype="float32"):
    mx.random.seed(7)
    net = gluon.nn.HybridSequential()
    if dtype == "float32":
        net.add(gluon.nn.Dense(16, activation="relu", in_units=8), gluon.nn.Dense(4, in_units=16))
    else:
        net.add(_Elementwise(), _Elementwise())
    net.initialize(mx.init.Uniform())
    net.cast(dtype)
    return net


DATA = np.random.RandomState(8).randn(6, 8, 8).astype(np.float32)


def _train(optimizer, opts, amp=True, poisoned=(), dtype="float32", steps=6, save_at=None, init_scale=2.0 ** 4):
    """Train the small model; with amp, steps in `poisoned` get an inf gradient (the reference skips them)."""
    net = _model(dtype)
    trainer = gluon.Trainer(net.collect_params(), optimizer, dict(opts))
    if amp:
        init_trainer(trainer, LossScaler(init_scale=init_scale, growth_interval=2, dynamic=init_scale != 1.0))
    results = []
    for step in range(steps):
        if not amp and step in poisoned:
            continue
        x = mx.nd.array(DATA[step], dtype=dtype)
        with autograd.record():
            loss = (net(x) ** 2).sum()
            if amp:
                with scale_loss(loss, trainer) as scaled:
                    scaled.backward()
            else:
                loss.backward()
        if amp and step in poisoned:
            list(net.collect_params().values())[0].grad()[0] = np.inf
        results.append(trainer.step(6))
        if save_at == step:
            return net, trainer
    return net, trainer, results


def _weights(net):
    return [p.data().astype(np.float32).asnumpy() for p in net.collect_params().values()]


OPTIMIZERS = [
    ("sgd", {"learning_rate": 0.05, "momentum": 0.9, "wd": 1e-3}),
    ("sgd", {"learning_rate": 0.05, "wd": 1e-3, "clip_gradient": 0.1}),
    ("adam", {"learning_rate": 1e-2, "wd": 1e-3,
              "lr_scheduler": mx.lr_scheduler.FactorScheduler(step=2, factor=0.5, base_lr=1e-2)}),
    ("adamw", {"learning_rate": 1e-2, "wd": 1e-2,
               "lr_scheduler": mx.lr_scheduler.MultiFactorScheduler(step=[2, 4], factor=0.5, base_lr=1e-2)}),
]


@pytest.mark.parametrize("optimizer,opts", OPTIMIZERS, ids=["sgd_mom_wd", "sgd_clip", "adam_sched", "adamw_sched"])
def test_fused_training_matches_a_plain_trainer_bit_for_bit_with_skipped_steps(optimizer, opts):
    import copy
    net, trainer, results = _train(optimizer, copy.deepcopy(opts), poisoned={2, 3})
    assert amp_state.state_of(trainer).updater is not None, fused_rule(trainer)[1]
    ref, ref_trainer, _ = _train(optimizer, copy.deepcopy(opts), amp=False, poisoned={2, 3})
    assert [bool(r) for r in results] == [True, True, False, False, True, True]
    for got, want in zip(_weights(net), _weights(ref)):
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    opt, ref_opt = trainer._optimizer, ref_trainer._optimizer
    assert (opt.num_update, opt._index_update_count) == (ref_opt.num_update, ref_opt._index_update_count)
    assert opt.learning_rate == ref_opt.learning_rate
    scaler = get_loss_scaler(trainer)
    assert (scaler.steps, scaler.skipped_steps, scaler.last_overflow_step, scaler.scale) == (6, 2, 4, 16.0)


def test_float16_multi_precision_training_matches_a_plain_trainer():
    opts = {"learning_rate": 0.05, "momentum": 0.9, "multi_precision": True}
    # static scale 1: the float16 gradients are the plain run's bit for bit (a larger scale keeps more bits of the
    # subnormal ones, which is what loss scaling is for, but then they differ)
    net, trainer, _ = _train("sgd", opts, dtype="float16", poisoned={1}, init_scale=1.0)
    ref, ref_trainer, _ = _train("sgd", opts, amp=False, dtype="float16", poisoned={1})
    assert amp_state.state_of(trainer).updater is not None
    for got, want in zip(_weights(net), _weights(ref)):
        np.testing.assert_array_equal(got, want)
    states, ref_states = trainer._updaters[0].states, ref_trainer._updaters[0].states
    assert sorted(states) == sorted(ref_states)
    for key, (momentum, master) in ref_states.items():
        np.testing.assert_array_equal(states[key][0].asnumpy(), momentum.asnumpy())
        np.testing.assert_array_equal(states[key][1].asnumpy(), master.asnumpy())


def test_a_step_issues_no_host_sync_and_reads_only_the_flag_of_two_steps_before(monkeypatch):
    net = _model()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.05, "momentum": 0.9})
    init_trainer(trainer, LossScaler(init_scale=2.0 ** 4))
    reads = []
    original = mx.nd.NDArray.asnumpy

    def asnumpy(self):
        reads.append(self)
        return original(self)

    def backward(step):
        with autograd.record():
            loss = (net(mx.nd.array(DATA[step])) ** 2).sum()
            with scale_loss(loss, trainer) as scaled:
                scaled.backward()

    backward(0)
    results = [trainer.step(6)]  # warm-up: kvstore, optimizer states, gradient buffers
    for step in (1, 2, 3):
        backward(step)
        monkeypatch.setattr(mx.nd.NDArray, "asnumpy", asnumpy)
        monkeypatch.setattr(mx.nd, "waitall", lambda: reads.append("waitall"))
        results.append(trainer.step(6))
        monkeypatch.undo()
        assert repr(results[-1]) == "StepResult(pending)"
        # the applied flag of the step two before (its update ran before the step between could start)
        assert reads == ([] if step == 1 else [results[step - 2]._applied])
        reads[:] = []
    assert bool(results[-1]) is True and repr(results[-1]) == "StepResult(applied=True)"


def test_step_result_behaves_like_a_bool():
    assert StepResult(True) == True and StepResult(False) == False  # noqa: E712
    assert bool(StepResult(mx.nd.zeros((1,)))) is False
    assert [StepResult(mx.nd.ones((1,))), StepResult(False)] == [True, False]
    with pytest.raises(TypeError):
        hash(StepResult(True))


def test_reading_a_skipped_result_restores_the_counters_at_once():
    net, trainer, results = _train("adam", {"learning_rate": 1e-2}, poisoned={5})
    assert trainer._optimizer.num_update == 6  # issued optimistically
    assert bool(results[-1]) is False
    assert trainer._optimizer.num_update == 5


def test_checkpoint_of_a_pending_skipped_step_resumes_exactly(tmp_path):
    opts = {"learning_rate": 1e-2, "wd": 1e-3}
    net, trainer = _train("adamw", opts, poisoned={3}, save_at=3)
    net.save_parameters(str(tmp_path / "p"))
    trainer.save_states(str(tmp_path / "s"))  # step 3 (skipped) still pending: saving learns it
    assert trainer._optimizer.num_update == 3
    resumed = _model()
    resumed.load_parameters(str(tmp_path / "p"))
    trainer2 = gluon.Trainer(resumed.collect_params(), "adamw", dict(opts))
    init_trainer(trainer2)
    trainer2.load_states(str(tmp_path / "s"))
    for step in (4, 5):
        for n, t in ((net, trainer), (resumed, trainer2)):
            with autograd.record():
                loss = (n(mx.nd.array(DATA[step])) ** 2).sum()
                with scale_loss(loss, t) as scaled:
                    scaled.backward()
            t.step(6)
    for got, want in zip(_weights(resumed), _weights(net)):
        np.testing.assert_array_equal(got, want)
    assert get_loss_scaler(trainer2).state_dict() == get_loss_scaler(trainer).state_dict()


def test_other_optimizers_and_fused_false_use_mxnets_update_with_one_sync():
    net, trainer, results = _train("rmsprop", {"learning_rate": 1e-3}, poisoned={1}, steps=3)
    assert amp_state.state_of(trainer).updater is None
    assert fused_rule(trainer) == (None, "optimizer RMSProp has no fused update (fused: SGD, Adam, AdamW)")
    assert [repr(r) for r in results] == ["StepResult(applied=True)", "StepResult(applied=False)",
                                          "StepResult(applied=True)"]
    net = _model()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    init_trainer(trainer, fused=False)
    with autograd.record():
        loss = (net(mx.nd.array(DATA[0])) ** 2).sum()
        with scale_loss(loss, trainer) as scaled:
            scaled.backward()
    assert repr(trainer.step(6)) == "StepResult(applied=True)"
    assert amp_state.state_of(trainer).updater is None
    with pytest.raises(TypeError, match="fused must be True or False, got 'yes'"):
        init_trainer(trainer, fused="yes")


def test_ignore_stale_grad_updates_only_fresh_parameters():
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(4, in_units=8), gluon.nn.Dense(4, in_units=8))
    net.initialize()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    init_trainer(trainer)
    before = _weights(net)
    with autograd.record():
        loss = net[0](mx.nd.array(DATA[0])).sum()
        with scale_loss(loss, trainer) as scaled:
            scaled.backward()
    with pytest.raises(UserWarning, match="has not been updated by backward since last `step`"):
        trainer.step(6)
    assert bool(trainer.step(6, ignore_stale_grad=True)) is True
    after = _weights(net)
    assert not np.array_equal(after[0], before[0]) and np.array_equal(after[2], before[2])


def test_adamw_optimizer_is_registered_and_decouples_weight_decay():
    assert isinstance(mx.optimizer.create("adamw"), AdamW)
    w = mx.nd.array([1.0, -2.0])
    opt = AdamW(learning_rate=0.1, wd=0.5)
    state = opt.create_state(0, w)
    opt.update(0, w, mx.nd.array([0.5, 0.5]), state)
    g = np.array([0.5, 0.5])
    mean, var = 0.1 * g, 0.001 * g * g
    want = np.array([1.0, -2.0]) - 0.1 * (bias_correction(0.9, 0.999, 1) * mean / (np.sqrt(var) + 1e-8)
                                          + 0.5 * np.array([1.0, -2.0]))
    np.testing.assert_allclose(w.asnumpy(), want, rtol=1e-6)
