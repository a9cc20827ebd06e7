"""bf16-true weights (``init_trainer(trainer, weights="bfloat16")``): the compensated and the stochastically rounded
update kernels against NumPy, Kahan and stochastic rounding against plain rounding, training against float32
weights, checkpoints across the weight modes and roundings, the switch's errors and ``amp.reset()``."""
import json
import logging

import numpy as np
import pytest

import mxnet as mx
from mxnet import amp, autograd, gluon
from mxnet.amp.base.dtypes import BFLOAT16
from mxnet.amp.base.patches import PATCHES
from mxnet.amp.core import ops
from mxnet.amp.training import adamw  # noqa: F401  (registers 'adamw')
from mxnet.amp.training.amp_state import state_of
from mxnet.amp.training.bf16_weights import ROUNDINGS, WEIGHT_MODES, use_plain_rounding

pytestmark = pytest.mark.filterwarnings(r"ignore:amp.init\(\) was called after")


def bf16_round(x):
    """float32 -> bfloat16 -> float32, round to nearest even (finite values)."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def to_bf16(x):
    return mx.nd.array(np.asarray(x, np.float32)).astype(BFLOAT16)


def f32(a):
    return a.astype(np.float32).asnumpy()


FLAG = mx.nd.ones((1,))
UNIT = mx.nd.array([1, 0, 0, 0, 0, 0], dtype="float64")
RULES = {"sgd_mom": dict(momentum=0.9), "adam": dict(beta1=0.9, beta2=0.999, epsilon=1e-8),
         "adamw": dict(beta1=0.9, beta2=0.999, epsilon=1e-8)}


def reference_step(rule, x, g, states, lr, wd, eta, rescale):
    """One update in float32 NumPy, the expressions of multi_tensor.h's UpdateSet; returns (x', states')."""
    f = np.float32
    lr, wd, eta, rescale = f(lr), f(wd), f(eta), f(rescale)
    if rule == "sgd_mom":
        m = f(0.9) * states[0] - (lr * wd) * x - (lr * rescale) * g
        return x + m, [m]
    b1, b2, eps = f(0.9), f(0.999), f(1e-8)
    d = rescale * g if rule == "adamw" else g * rescale + x * wd
    mean = b1 * states[0] + (f(1) - b1) * d
    var = b2 * states[1] + (f(1) - b2) * (d * d) if rule == "adamw" else b2 * states[1] + (f(1) - b2) * d * d
    if rule == "adamw":
        return x - eta * (lr * mean / (np.sqrt(var) + eps) + wd * x), [mean, var]
    return x - lr * mean / (np.sqrt(var) + eps), [mean, var]


@pytest.mark.parametrize("rule", sorted(RULES))
def test_kahan_update_matches_numpy(rule):
    rs = np.random.RandomState(0)
    n = 3000
    w = bf16_round(rs.randn(n))
    c = bf16_round(rs.randn(n) * 1e-3 * np.abs(w) / 256)
    g = bf16_round(rs.randn(n))
    states = [bf16_round(rs.rand(n) * 0.1) for _ in range(1 if rule == "sgd_mom" else 2)]
    arrays = [to_bf16(w), to_bf16(g)] + [to_bf16(s) for s in states] + [to_bf16(c)]
    ops.multi_update(rule, [tuple(arrays)], FLAG, UNIT, [0.01], [0.1], [0.5] if rule == "adamw" else None,
                     rescale_grad=0.5, bf16_weights="kahan", **RULES[rule])
    x_new, s_new = reference_step(rule, w + c, g, states, 0.01, 0.1, 0.5, 0.5)
    w_ref = bf16_round(x_new)
    np.testing.assert_array_equal(f32(arrays[0]), w_ref)
    np.testing.assert_array_equal(f32(arrays[-1]), bf16_round(x_new - w_ref))
    for got, want in zip(arrays[2:-1], s_new):
        np.testing.assert_array_equal(f32(got), bf16_round(want))


def test_plain_rounding_update_has_no_compensation_input():
    w, g, m = to_bf16([1.0, 2.0]), to_bf16([1e-3, 1e-3]), to_bf16([0.0, 0.0])
    ops.multi_update("sgd_mom", [(w, g, m)], FLAG, UNIT, [0.1], [0.0], momentum=0.0, bf16_weights="round")
    np.testing.assert_array_equal(f32(w), [1.0, 2.0])  # 1e-4 steps vanish under bfloat16 rounding
    with pytest.raises(ValueError, match="bf16_weights 'sr' is not supported; valid choices: off, kahan, round, "
                                         "stochastic"):
        ops.multi_update("sgd", [(w, g)], FLAG, UNIT, [0.1], [0.0], bf16_weights="sr")
    with pytest.raises(ValueError, match="seeds are needed with bf16_weights='stochastic' and only then"):
        ops.multi_update("sgd", [(w, g)], FLAG, UNIT, [0.1], [0.0], bf16_weights="stochastic")


@pytest.mark.parametrize("rule", sorted(RULES))
def test_kahan_tracks_float64_where_plain_rounding_stalls(rule):
    """1000 tiny updates: the pair (w, c) follows a float64 run closely; plain bfloat16 rounding does not."""
    rs = np.random.RandomState(1)
    n, steps, lr = 512, 1000, 1e-4
    w0 = bf16_round(rs.uniform(0.5, 2.0, n))
    g = bf16_round(rs.uniform(0.5, 1.5, n))
    results = {}
    for mode in ("kahan", "round"):
        w, grad = to_bf16(w0), to_bf16(g)
        states = [mx.nd.zeros((n,), dtype=BFLOAT16) for _ in range(1 if rule == "sgd_mom" else 2)]
        extra = (mx.nd.zeros((n,), dtype=BFLOAT16),) if mode == "kahan" else ()
        for _ in range(steps):
            ops.multi_update(rule, [(w, grad) + tuple(states) + extra], FLAG, UNIT, [lr], [0.0],
                             [1.0] if rule == "adamw" else None, bf16_weights=mode, **RULES[rule])
        results[mode] = f32(w).astype(np.float64) + (f32(extra[0]) if extra else 0)
    # The weights in float64, the states as the kernel keeps them (rounded to bfloat16 each step): what the
    # compensation is for is the weights. (Adam's variance in bfloat16 stalls on its own under these constant
    # gradients, a known limit of bfloat16 states that no weight compensation changes; see docs/training.md.)
    x, s = w0.astype(np.float64), [np.zeros(n, np.float32) for _ in range(1 if rule == "sgd_mom" else 2)]
    f = np.float32
    for _ in range(steps):
        if rule == "sgd_mom":
            s[0] = bf16_round(f(0.9) * s[0] - f(lr) * g)
            x = x + s[0]
        else:
            s[0] = bf16_round(f(0.9) * s[0] + f(0.1) * g)
            s[1] = bf16_round(f(0.999) * s[1] + f(0.001) * g * g)
            x = x - lr * s[0].astype(np.float64) / (np.sqrt(s[1].astype(np.float64)) + 1e-8)
    kahan, plain = np.abs(results["kahan"] - x).max(), np.abs(results["round"] - x).max()
    moved = np.abs(x - w0).max()
    assert kahan < 0.02 * moved, (kahan, moved)
    assert plain > 0.3 * moved, (plain, moved)
    assert kahan < plain / 20, (kahan, plain)


class _Residual(gluon.HybridBlock):
    """``x + dense(x)``: an addition whose cast AMP plans from its inputs' dtypes (the embedding's changes)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.dense = gluon.nn.Dense(16, flatten=False, activation="relu")

    def hybrid_forward(self, F, x):
        return x + self.dense(x)


def _net():
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Embedding(20, 16), _Residual(), gluon.nn.LayerNorm(), gluon.nn.Dense(4, flatten=False))
    net.initialize(mx.init.Xavier(), ctx=mx.cpu())
    net.hybridize()
    return net


def _data():
    rs = np.random.RandomState(0)
    return mx.nd.array(rs.randint(0, 20, (8, 6))), mx.nd.array(rs.randint(0, 4, (8, 6)))


def _train(net, trainer, steps):
    x, y = _data()
    loss_fn, losses = gluon.loss.SoftmaxCrossEntropyLoss(), []
    for _ in range(steps):
        with autograd.record():
            loss = loss_fn(net(x), y).mean()
            with amp.scale_loss(loss, trainer) as scaled:
                autograd.backward(scaled)
        trainer.step(1)
        losses.append(float(loss.astype(np.float32).asscalar()))
    return losses


def _setup(weights, optimizer="adamw", params=None, rounding="kahan"):
    mx.random.seed(0)
    net = _net()
    net(_data()[0])
    if params is not None:
        for param, value in zip(net.collect_params().values(), params):
            param.set_data(value)
    trainer = gluon.Trainer(net.collect_params(), optimizer, {"learning_rate": 0.01})
    amp.init_trainer(trainer, weights=weights, rounding=rounding)
    return net, trainer


@pytest.fixture
def bf16_amp():
    amp.init("bfloat16")
    yield
    amp.reset()


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adamw"])
def test_training_with_bf16_weights_follows_float32_weights(bf16_amp, optimizer):
    net32, tr32 = _setup("float32", optimizer)
    start = [p.data().copy() for p in net32.collect_params().values()]
    net16, tr16 = _setup("bfloat16", optimizer, start)
    dtypes = {k: p.dtype for k, p in net16.collect_params().items()}
    assert [k for k, d in dtypes.items() if d == BFLOAT16] == [
        k for k in dtypes if k.endswith("weight")], dtypes  # embedding and dense weights; biases, norms float32
    l32, l16 = _train(net32, tr32, 30), _train(net16, tr16, 30)
    assert l32[-1] < 0.8 * l32[0]  # it learns
    np.testing.assert_allclose(l16, l32, rtol=0.03)
    for p16, p32 in zip(net16.collect_params().values(), net32.collect_params().values()):
        a, b = f32(p16.data()), p32.data().asnumpy()
        assert np.linalg.norm(a - b) < 0.03 * np.linalg.norm(b), p32.name


def test_bad_weight_mode_is_named_with_the_choices(bf16_amp):
    net, trainer = _setup("float32")
    assert WEIGHT_MODES == ("float32", "bfloat16")
    with pytest.raises(ValueError, match=r"weights='fp16' is not a weight mode; valid choices: 'float32', "
                                         r"'bfloat16'"):
        amp.init_trainer(trainer, weights="fp16")
    with pytest.raises(ValueError, match=r"needs amp.init\('bfloat16'\).*optimizer RMSProp has no fused update"):
        amp.init_trainer(gluon.Trainer(net.collect_params(), "rmsprop"), weights="bfloat16")


def test_bf16_weights_need_amp_init_bfloat16():
    net = _net()
    net(_data()[0])
    with pytest.raises(ValueError, match=r"amp.init\('bfloat16'\) was not called \(target dtype None\)"):
        amp.init_trainer(gluon.Trainer(net.collect_params(), "sgd"), weights="bfloat16")
    assert all(p.dtype != BFLOAT16 for p in net.collect_params().values())


def test_reset_gives_back_float32_parameters_holding_w_plus_c(bf16_amp):
    net, trainer = _setup("bfloat16")
    _train(net, trainer, 5)
    weights = state_of(trainer).bf16_weights
    precise = {i: weights.precise(i)[0].asnumpy() for i in weights.indices}
    assert any(np.abs(v - bf16_round(v)).max() > 0 for v in precise.values())  # compensation at work
    assert PATCHES.holds("bf16_weights")
    amp.reset()
    assert not PATCHES.holds("bf16_weights") and state_of(trainer).bf16_weights is None
    for i, value in precise.items():
        np.testing.assert_array_equal(trainer._params[i].data().asnumpy(), value)
    assert all(np.dtype(p.dtype) == np.float32 for p in net.collect_params().values())
    x, _ = _data()
    assert net(x).dtype == np.float32  # rebuilt without AMP, on float32 parameters
    amp.init("bfloat16")  # the fixture's reset needs an init to undo


def _save(net, trainer, tmp_path, tag):
    net.save_parameters(str(tmp_path / (tag + ".params")))
    trainer.save_states(str(tmp_path / (tag + ".states")))


def _load(weights, tmp_path, tag, rounding="kahan"):
    """Build a float32 net, load a checkpoint's parameters, init_trainer in ``weights`` mode, load its states."""
    mx.random.seed(1)
    net = _net()
    net(_data()[0])
    net.load_parameters(str(tmp_path / (tag + ".params")), cast_dtype=True)
    trainer = gluon.Trainer(net.collect_params(), "adamw", {"learning_rate": 0.01})
    amp.init_trainer(trainer, weights=weights, rounding=rounding)
    trainer.load_states(str(tmp_path / (tag + ".states")))
    return net, trainer


def _states(trainer):
    return {i: [f32(a) for a in s] for i, s in trainer._updaters[0].states.items()}


def test_checkpoints_round_trip_across_weight_modes(bf16_amp, tmp_path):
    net, trainer = _setup("bfloat16")
    _train(net, trainer, 5)
    bf16 = state_of(trainer).bf16_weights
    precise = {i: bf16.precise(i)[0].asnumpy() for i in bf16.indices}
    states = _states(trainer)
    _save(net, trainer, tmp_path, "bf16")
    section = json.loads(json.dumps(amp.state_dict(trainer)))
    assert section["version"] == 3 and section["weights"]["dtype"] == "bfloat16"
    assert section["weights"]["rounding"] == "kahan" and section["weights"]["seed"] is None
    # bfloat16 -> bfloat16: bit for bit, and training goes on exactly as without the checkpoint
    net2, trainer2 = _load("bfloat16", tmp_path, "bf16")
    assert amp.state_dict(trainer2) == section
    for i, value in precise.items():
        np.testing.assert_array_equal(state_of(trainer2).bf16_weights.precise(i)[0].asnumpy(), value)
    assert {i: [s.dtype for s in v] for i, v in trainer2._updaters[0].states.items()} == \
        {i: [s.dtype for s in v] for i, v in trainer._updaters[0].states.items()}
    np.testing.assert_array_equal(_train(net2, trainer2, 3), _train(net, trainer, 3))
    # bfloat16 -> float32: parameters w + c, states widened exactly
    net3, trainer3 = _load("float32", tmp_path, "bf16")
    assert state_of(trainer3).bf16_weights is None
    for i, value in precise.items():
        np.testing.assert_array_equal(trainer3._params[i].data().asnumpy(), value)
    for i, value in _states(trainer3).items():
        for got, want in zip(value, states[i]):
            np.testing.assert_array_equal(got, want)
    # float32 -> bfloat16: w = bf16(v), c = bf16(v - w), states rounded
    _train(net3, trainer3, 2)
    v = {i: trainer3._params[i].data().asnumpy() for i in precise}
    states32 = _states(trainer3)
    _save(net3, trainer3, tmp_path, "f32")
    net4, trainer4 = _load("bfloat16", tmp_path, "f32")
    bf16 = state_of(trainer4).bf16_weights
    for i, value in v.items():
        w = f32(trainer4._params[i].data())
        np.testing.assert_array_equal(w, bf16_round(value))
        np.testing.assert_array_equal(f32(bf16.compensation[(i, 0)]), bf16_round(value - w))
    for i, value in _states(trainer4).items():
        for got, want in zip(value, states32[i]):
            np.testing.assert_array_equal(got, bf16_round(want) if i in bf16.indices else want)


def test_states_file_of_bf16_weights_is_float32_and_loads_into_plain_trainers(bf16_amp, tmp_path, caplog):
    net, trainer = _setup("bfloat16")
    _train(net, trainer, 2)
    _save(net, trainer, tmp_path, "bf16")
    plain = gluon.Trainer(net.collect_params(), "adamw", {"learning_rate": 0.01})
    amp.load_states(plain, str(tmp_path / "bf16.states"))
    assert all(np.dtype(s.dtype) == np.float32 for v in plain._updaters[0].states.values() for s in v)
    section = amp.state_dict(trainer)
    bad = dict(section, weights=dict(section["weights"], compensation={"2": "AAAA"}))
    with pytest.raises(ValueError, match="compensation for parameter '2', which this trainer does not store"):
        amp.load_state_dict(trainer, bad)
    index = state_of(trainer).bf16_weights.indices[0]
    bad = dict(section, weights=dict(section["weights"], compensation={str(index): "AAAA"}))
    with pytest.raises(ValueError, match="is not %d bfloat16 values in base64" % trainer._params[index].data().size):
        amp.load_state_dict(trainer, bad)
    partial = dict(section["weights"]["compensation"])
    partial.pop(str(index))
    with pytest.raises(ValueError, match="a bfloat16 state with compensation for parameters"):
        amp.load_state_dict(trainer, dict(section, weights=dict(section["weights"], compensation=partial)))
    with pytest.raises(ValueError, match=r"expected keys \['compensation', 'dtype', 'rounding', 'seed'\]"):
        amp.load_state_dict(trainer, dict(section, weights={"dtype": "bfloat16"}))
    net32, trainer32 = _setup("float32")  # weights that were not loaded from the bf16 checkpoint: warned, kept
    before = {k: p.data().asnumpy() for k, p in net32.collect_params().items()}
    with caplog.at_level(logging.WARNING, logger="mxnet.amp.trainer"):
        amp.load_state_dict(trainer32, section)
    assert "does not hold bfloat16 values" in caplog.text
    for k, p in net32.collect_params().items():
        np.testing.assert_array_equal(p.data().asnumpy(), before[k])


def test_plain_rounding_control_drops_the_compensation(bf16_amp):
    net, trainer = _setup("bfloat16")
    _train(net, trainer, 2)
    use_plain_rounding(trainer)
    bf16 = state_of(trainer).bf16_weights
    assert bf16.update_mode() == "round" and bf16.compensation_of(bf16.indices[0], 0) is None
    _train(net, trainer, 2)
    assert all(f32(c).max() == 0 for c in bf16.compensation.values())


def test_deferred_parameters_with_known_shapes_are_initialised_then_cast(bf16_amp):
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(8, flatten=False), gluon.nn.Dense(3, flatten=False))
    net.initialize(mx.init.Xavier())
    with pytest.raises(ValueError, match=r"has no known shape yet .*call net.infer_shape\(x\)"):
        amp.init_trainer(gluon.Trainer(net.collect_params(), "sgd"), weights="bfloat16")
    x = mx.nd.ones((2, 5, 4))
    net.infer_shape(x)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    amp.init_trainer(trainer, weights="bfloat16")
    assert all((p.dtype == BFLOAT16) == p.name.endswith("weight") for p in trainer._params)
    assert state_of(trainer).grads is not None  # every shape known: the gradient buffers are laid out now
    with autograd.record():
        loss = net(x).sum()
    loss.backward()
    assert trainer.step(1)


# Stochastic rounding (rounding="stochastic"): no compensation, unbiased rounding of weights and states.

def counter_hash(seed, index):
    """counter_hash.h in NumPy: SplitMix64's finaliser of seed + index * golden ratio (uint64 arithmetic)."""
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + np.asarray(index, np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def sr_round(x, random):
    """stochastic_bf16_bits in NumPy for finite values below the largest bfloat16: add 16 random bits, cut."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + (np.asarray(random, np.uint64) & np.uint64(0xFFFF))) >> np.uint64(16) << np.uint64(16)
    return bits.astype(np.uint32).view(np.float32)


def _sr_sgd(w, g, seed, rule="sgd", states=()):
    """One SGD step x = w - g (lr 1, no weight decay), stochastically rounded with ``seed``; the results."""
    arrays = [to_bf16(w), to_bf16(g)] + [to_bf16(s) for s in states]
    ops.multi_update(rule, [tuple(arrays)], FLAG, UNIT, [1.0], [0.0], momentum=0.0, bf16_weights="stochastic",
                     seeds=[seed])
    return [f32(a) for a in arrays[:1] + arrays[2:]]


@pytest.mark.parametrize("w, fraction", [(1.0, 3 * 2 ** -10), (-1.0, 2 ** -12), (2 ** -9, 5 * 2 ** -13),
                                         (-1e-30, 7 * 2 ** -11)])
def test_stochastic_rounding_is_unbiased_between_the_two_neighbours(w, fraction):
    n = 200000
    w = bf16_round([w])
    d = w * np.float32(fraction)  # bfloat16 too; x = w + d is exact in float32 and lies between two bfloat16
    got = _sr_sgd(np.full(n, w[0]), np.full(n, -d[0]), seed=7)[0]
    below = sr_round(w + d, 0)  # cut towards zero
    above = (below.view(np.uint32) + np.uint32(0x10000)).view(np.float32)  # the next one away from zero
    assert set(np.unique(got)) <= {below[0], above[0]}, np.unique(got)
    exact, below, above = float((w + d)[0]), float(below[0]), float(above[0])
    p = (exact - below) / (above - below)  # the probability of rounding away from zero
    assert 0 < p < 1 and 0 < (got == np.float32(above)).mean() < 1
    tolerance = 5 * abs(above - below) * np.sqrt(p * (1 - p) / n)  # five standard deviations of the mean
    assert abs(got.astype(np.float64).mean() - exact) < tolerance


def test_stochastic_rounding_matches_numpy_and_keeps_special_values():
    rs = np.random.RandomState(2)
    n = 5000
    w, g, m = bf16_round(rs.randn(n)), bf16_round(rs.randn(n) * 1e-3), bf16_round(rs.randn(n) * 1e-2)
    seed = 0xDEADBEEF12345
    got_w, got_m = _sr_sgd(w, g, seed, "sgd_mom", [m])
    r = counter_hash(seed, np.arange(n))
    m_new = np.float32(0.0) * m - np.float32(1.0) * g  # momentum 0, lr 1: m = -g, w = w + m
    np.testing.assert_array_equal(got_w, sr_round(w + m_new, r))
    np.testing.assert_array_equal(got_m, sr_round(m_new, r >> np.uint64(16)))
    big = float(np.frombuffer(np.uint32(0x7F7F0000).tobytes(), np.float32)[0])  # the largest finite bfloat16
    special = np.array([0, 0, 0, big, -big, 0.0], np.float32)
    step = np.array([np.inf, -np.inf, np.nan, big * 2 ** -9, -big * 2 ** -9, 0], np.float32)  # +-big beyond it
    got = _sr_sgd(special, -step, seed)[0]
    np.testing.assert_array_equal(got[:2], [np.inf, -np.inf])
    assert np.isnan(got[2]) and np.all(np.isfinite(got[3:]))
    np.testing.assert_array_equal(got[3:], [big, -big, 0.0])


@pytest.mark.parametrize("rule", ["sgd", "sgd_mom"])
def test_stochastic_rounding_tracks_float64_where_plain_rounding_stalls(rule):
    """1000 updates far below half an ulp: stochastically rounded weights follow float64 in the mean."""
    rs = np.random.RandomState(1)
    n, steps, lr = 2048, 1000, 1e-4
    w0 = bf16_round(rs.uniform(0.5, 2.0, n))
    g = bf16_round(rs.uniform(0.5, 1.5, n))
    results = {}
    for mode in ("stochastic", "round"):
        w, grad = to_bf16(w0), to_bf16(g)
        states = [mx.nd.zeros((n,), dtype=BFLOAT16)] if rule == "sgd_mom" else []
        for step in range(steps):
            ops.multi_update(rule, [(w, grad) + tuple(states)], FLAG, UNIT, [lr], [0.0], momentum=0.5,
                             bf16_weights=mode, seeds=[step] if mode == "stochastic" else None)
        results[mode] = f32(w).astype(np.float64)
    x, m = w0.astype(np.float64), np.zeros(n)
    for _ in range(steps):
        m = (0.5 * m if rule == "sgd_mom" else 0.0) - lr * g.astype(np.float64)
        x = x + m
    moved = np.abs(x - w0).mean()
    sr_error = abs((results["stochastic"] - x).mean())
    plain_error = abs((results["round"] - x).mean())
    assert sr_error < 0.1 * moved, (sr_error, moved)
    assert plain_error > 0.9 * moved, (plain_error, moved)  # every update below half an ulp: no move at all
    assert np.abs(results["stochastic"] - w0).mean() > 0.8 * moved  # the weights moved, not only their mean


def test_stochastic_rounding_allocates_no_compensation(bf16_amp):
    net, trainer = _setup("bfloat16", rounding="stochastic")
    bf16 = state_of(trainer).bf16_weights
    assert bf16.rounding == "stochastic" and bf16.compensation == {} and bf16.indices
    assert bf16.update_mode() == "stochastic" and bf16.compensation_of(bf16.indices[0], 0) is None
    _train(net, trainer, 3)
    assert bf16.compensation == {} and trainer._params[bf16.indices[0]].data().dtype == BFLOAT16
    assert all(s.dtype == BFLOAT16 for i in bf16.indices for s in trainer._updaters[0].states[i])
    w = {i: f32(trainer._params[i].data()) for i in bf16.indices}
    amp.reset()  # float32 parameters holding w
    for i, value in w.items():
        np.testing.assert_array_equal(trainer._params[i].data().asnumpy(), value)
    amp.init("bfloat16")  # the fixture's reset needs an init to undo


def test_stochastic_rounding_is_reproducible_and_draws_anew_each_step(bf16_amp):
    runs = []
    for _ in range(2):
        net, trainer = _setup("bfloat16", rounding="stochastic")
        runs.append((_train(net, trainer, 4), [f32(p.data()) for p in trainer._params], trainer))
    assert runs[0][0] == runs[1][0]
    for a, b in zip(runs[0][1], runs[1][1]):
        np.testing.assert_array_equal(a, b)
    bf16 = state_of(runs[0][2]).bf16_weights
    seeds = [bf16.update_seeds([i], [c])[0] for i in bf16.indices for c in (1, 2, 3)]
    assert len(set(seeds)) == len(seeds)  # per parameter and per step
    mx.random.seed(5)
    other = _net()
    other(_data()[0])
    trainer = gluon.Trainer(other.collect_params(), "adamw", {"learning_rate": 0.01})
    amp.init_trainer(trainer, weights="bfloat16", rounding="stochastic")
    assert state_of(trainer).bf16_weights.seed != bf16.seed
    # one step, one seed: elements round differently (both directions occur), each as the hash says
    w, g = np.ones(4096, np.float32), np.full(4096, -2 ** -9, np.float32)
    first, second = _sr_sgd(w, g, seed=1)[0], _sr_sgd(w, g, seed=2)[0]
    assert 0 < (first > 1).sum() < 4096 and (first != second).any()


def test_stochastic_seeds_after_a_skipped_step_do_not_depend_on_when_the_host_reads_it(bf16_amp):
    """Unread, a skipped step's seeds for the next step are chosen on the device: the same as read at once."""
    x, y = _data()
    loss_fn, runs = gluon.loss.SoftmaxCrossEntropyLoss(), []
    for read_each_step in (True, False):
        net, trainer = _setup("bfloat16", optimizer="adam", rounding="stochastic")
        results = []
        for step in range(5):
            with autograd.record():
                with amp.scale_loss(loss_fn(net(x), y).mean(), trainer) as scaled:
                    autograd.backward(scaled)
            if step in (1, 2):
                trainer._params[-1].grad()[:] = np.inf
            results.append(trainer.step(1))
            if read_each_step:
                bool(results[-1])
        assert [bool(r) for r in results] == [True, False, False, True, True]
        runs.append(([f32(p.data()) for p in trainer._params], dict(trainer._optimizer._index_update_count)))
    for eager, lazy in zip(runs[0][0], runs[1][0]):
        np.testing.assert_array_equal(eager, lazy)
    assert runs[0][1] == runs[1][1] and set(runs[0][1].values()) == {3}


def test_stochastic_rounding_follows_float32_weights_in_training(bf16_amp):
    net32, tr32 = _setup("float32")
    start = [p.data().copy() for p in net32.collect_params().values()]
    net16, tr16 = _setup("bfloat16", params=start, rounding="stochastic")
    l32, l16 = _train(net32, tr32, 30), _train(net16, tr16, 30)
    np.testing.assert_allclose(l16, l32, rtol=0.03)


def test_checkpoints_round_trip_across_roundings(bf16_amp, tmp_path):
    net, trainer = _setup("bfloat16", rounding="stochastic")
    _train(net, trainer, 5)
    bf16 = state_of(trainer).bf16_weights
    w = {i: f32(trainer._params[i].data()) for i in bf16.indices}
    _save(net, trainer, tmp_path, "sr")
    section = json.loads(json.dumps(amp.state_dict(trainer)))
    assert section["version"] == 3 and section["weights"] == {"dtype": "bfloat16", "rounding": "stochastic",
                                                              "seed": bf16.seed, "compensation": {}}
    # stochastic -> stochastic: the seed comes back, training goes on exactly as without the checkpoint
    net2, trainer2 = _load("bfloat16", tmp_path, "sr", rounding="stochastic")
    assert amp.state_dict(trainer2) == section
    np.testing.assert_array_equal(_train(net2, trainer2, 3), _train(net, trainer, 3))
    # stochastic -> Kahan: the weights, with zero compensation; -> float32: the weights
    net3, trainer3 = _load("bfloat16", tmp_path, "sr")
    kahan = state_of(trainer3).bf16_weights
    for i, value in w.items():
        np.testing.assert_array_equal(f32(trainer3._params[i].data()), value)
        assert f32(kahan.compensation[(i, 0)]).max() == 0 and f32(kahan.compensation[(i, 0)]).min() == 0
    net4, trainer4 = _load("float32", tmp_path, "sr")
    for i, value in w.items():
        np.testing.assert_array_equal(trainer4._params[i].data().asnumpy(), value)
    # Kahan -> stochastic: w + c rounded to nearest; float32 -> stochastic: bf16(v)
    _train(net3, trainer3, 3)
    precise = {i: kahan.precise(i)[0].asnumpy() for i in kahan.indices}
    _save(net3, trainer3, tmp_path, "kahan")
    net5, trainer5 = _load("bfloat16", tmp_path, "kahan", rounding="stochastic")
    for i, value in precise.items():
        np.testing.assert_array_equal(f32(trainer5._params[i].data()), bf16_round(value))
    _save(net4, trainer4, tmp_path, "f32")
    net6, trainer6 = _load("bfloat16", tmp_path, "f32", rounding="stochastic")
    for i, value in w.items():
        np.testing.assert_array_equal(f32(trainer6._params[i].data()), bf16_round(value))
    # a version 2 section (before stochastic rounding: no rounding and seed) loads as Kahan
    old = json.loads(json.dumps(amp.state_dict(trainer3)))
    old["version"], old["weights"] = 2, {k: old["weights"][k] for k in ("dtype", "compensation")}
    amp.load_state_dict(trainer3, old)
    for bad in ({"rounding": "sr"}, {"seed": None}, {"seed": -1}, {"compensation": {"0": "AAAA"}}):
        with pytest.raises(ValueError, match="invalid weights state in the given AMP state: rounding"):
            amp.load_state_dict(trainer, dict(section, weights=dict(section["weights"], **bad)))


def test_bad_rounding_is_named_with_the_choices(bf16_amp):
    net, trainer = _setup("float32")
    assert ROUNDINGS == ("kahan", "stochastic")
    with pytest.raises(ValueError, match=r"rounding='sr' is not a rounding mode; valid choices: 'kahan', "
                                         r"'stochastic'"):
        amp.init_trainer(trainer, weights="bfloat16", rounding="sr")
    with pytest.raises(ValueError, match=r"rounding='stochastic' needs weights='bfloat16' \(got weights="
                                         r"'float32'"):
        amp.init_trainer(trainer, rounding="stochastic")
    assert state_of(trainer).bf16_weights is None
    amp.init_trainer(trainer, weights="bfloat16")  # Kahan, then converted to stochastic and back
    v = {i: state_of(trainer).bf16_weights.precise(i)[0].asnumpy() for i in state_of(trainer).bf16_weights.indices}
    amp.init_trainer(trainer, weights="bfloat16", rounding="stochastic")
    assert state_of(trainer).bf16_weights.compensation == {}
    amp.init_trainer(trainer, weights="bfloat16")
    bf16 = state_of(trainer).bf16_weights
    for i, value in v.items():
        np.testing.assert_array_equal(bf16.precise(i)[0].asnumpy(), bf16_round(value))
