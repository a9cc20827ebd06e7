"""Tests for mxnet.amp.checkpoint and the AMP trainer's save_states / load_states."""
import json
import logging
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import mxnet as mx
from mxnet import autograd, gluon

from mxnet.amp.autocast import context as autocast
from mxnet.amp.training import checkpoint
from mxnet import amp
from mxnet.amp.training.loss_scaler import LossScaler
from mxnet.amp.training.trainer import get_loss_scaler, init_trainer, scale_loss

RNG = np.random.RandomState(0)
X = RNG.uniform(-1, 1, (5, 4)).astype(np.float32)
T = RNG.uniform(-1, 1, (5, 3)).astype(np.float32)
LOGGER = "mxnet.amp.trainer"


def _net(ctx=None):
    net = gluon.nn.Dense(3, in_units=4)
    net.initialize(mx.init.Constant(0.25), ctx=ctx or [mx.cpu()])
    return net


def _trainer(net, amp=True, scaler=None, **kwargs):
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01}, **kwargs)
    if amp:
        init_trainer(trainer, scaler or LossScaler(init_scale=2.0 ** 10, growth_interval=2))
    return trainer


def _train(net, trainer, steps, poison=()):
    ctx = net.weight.list_ctx()
    for step in range(steps):
        with autograd.record():
            losses = [(net(mx.nd.array(X, ctx=c)) * mx.nd.array(T, ctx=c)).sum() for c in ctx]
            if hasattr(trainer, "_mxnet_amp"):
                with scale_loss(losses, trainer) as scaled:
                    autograd.backward(scaled)
            else:
                autograd.backward(losses)
        if step in poison:
            net.weight.grad()[0] = np.inf
        trainer.step(5)


def _updater_states(trainer):
    updater = trainer._kvstore._updater if trainer._update_on_kvstore else trainer._updaters[0]
    return {k: [s.asnumpy().copy() for s in v] for k, v in updater.states.items()}


_OPTIMIZER_FIELDS = ("lr", "wd", "rescale_grad", "clip_gradient", "beta1", "beta2", "epsilon", "multi_precision",
                     "num_update", "begin_num_update", "_index_update_count", "_all_index_update_counts")


def _optimizer_fields(optimizer):
    """What a resumed optimizer must restore: its type, hyperparameters and update counters."""
    fields = {key: getattr(optimizer, key) for key in _OPTIMIZER_FIELDS}
    fields["type"] = type(optimizer).__name__
    fields["_all_index_update_counts"] = {k: dict(v) for k, v in fields["_all_index_update_counts"].items()}
    fields["_index_update_count"] = dict(fields["_index_update_count"])
    return fields


def _snapshot(net, trainer):
    snap = {"params": [p.data().asnumpy().copy() for p in (net.weight, net.bias)],
            "states": _updater_states(trainer), "num_update": trainer._optimizer.num_update,
            "optimizer": _optimizer_fields(trainer._optimizer)}
    if hasattr(trainer, "_mxnet_amp"):
        snap["amp"] = amp.state_dict(trainer)
    return snap


def _assert_same(got, want):
    assert set(got) == set(want)
    for key in want:
        if key == "params":
            for a, b in zip(got[key], want[key]):
                np.testing.assert_array_equal(a, b)
        elif key == "states":
            assert set(got[key]) == set(want[key])
            for idx in want[key]:
                for a, b in zip(got[key][idx], want[key][idx]):
                    np.testing.assert_array_equal(a, b)
        else:
            assert got[key] == want[key], key


def test_pack_unpack_round_trip():
    section = {"version": 1, "target_dtype": "float16", "loss_scaler": LossScaler().state_dict()}
    opt_bytes = _trainer(_net(), amp=False)._updaters[0].get_states(dump_optimizer=True)
    data = checkpoint.pack(opt_bytes, section)
    assert data.startswith(opt_bytes) and data.endswith(checkpoint.MAGIC)
    assert checkpoint.unpack(data) == (opt_bytes, section)
    assert checkpoint.unpack(opt_bytes) == (opt_bytes, None)


@pytest.mark.parametrize("ctx,update_on_kvstore", [([mx.cpu()], None), ([mx.cpu(0), mx.cpu(1)], True),
                                                   ([mx.cpu(0), mx.cpu(1)], False)])
def test_save_load_round_trips_scaler_and_optimizer(tmp_path, ctx, update_on_kvstore):
    net = _net(ctx)
    trainer = _trainer(net, update_on_kvstore=update_on_kvstore)
    _train(net, trainer, 5, poison={1})
    scaler = get_loss_scaler(trainer)
    assert scaler.state_dict() != LossScaler(init_scale=2.0 ** 10, growth_interval=2).state_dict()
    path = str(tmp_path / "trainer.states")
    trainer.save_states(path)
    want = _snapshot(net, trainer)
    # A new process would build the net again and load its parameters: a second net with a copy of them.
    resumed = _net(ctx)
    for mine, theirs in zip((resumed.weight, resumed.bias), (net.weight, net.bias)):
        mine.set_data(theirs.data().copy())
    fresh = _trainer(resumed, scaler=LossScaler(), update_on_kvstore=update_on_kvstore)
    fresh.load_states(path)
    got = _snapshot(resumed, fresh)
    assert got["amp"] == want["amp"] and got["num_update"] == want["num_update"] == 4
    assert got["optimizer"]["type"] == "Adam" and got["optimizer"]["_index_update_count"]
    _assert_same(got, want)
    section = checkpoint.read_file(path)[1]
    assert section == amp.state_dict(trainer)
    assert set(section) == {"version", "target_dtype", "loss_scaler", "weights"}
    # Resuming is exact: both go on the same way, bit for bit (Adam's moments and counters included).
    _train(net, trainer, 3, poison={1})
    _train(resumed, fresh, 3, poison={1})
    _assert_same(_snapshot(resumed, fresh), _snapshot(net, trainer))


def test_amp_file_loads_into_plain_trainer(tmp_path):
    net = _net()
    trainer = _trainer(net)
    _train(net, trainer, 3)
    path = str(tmp_path / "amp.states")
    trainer.save_states(path)
    plain = _trainer(net, amp=False)
    plain.load_states(path)
    assert plain._optimizer.num_update == 3
    for idx, states in _updater_states(trainer).items():
        for a, b in zip(_updater_states(plain)[idx], states):
            np.testing.assert_array_equal(a, b)


def test_amp_file_loads_into_plain_trainer_updating_on_kvstore(tmp_path):
    net = _net([mx.cpu(0), mx.cpu(1)])
    trainer = _trainer(net, update_on_kvstore=True)
    _train(net, trainer, 2)
    path = str(tmp_path / "amp.states")
    trainer.save_states(path)
    plain = _trainer(net, amp=False, update_on_kvstore=True)
    plain.load_states(path)
    assert plain._optimizer.num_update == 2


def test_plain_file_loads_with_defaults_and_one_warning(tmp_path, caplog):
    net = _net()
    plain = _trainer(net, amp=False)
    _train(net, plain, 2)
    path = str(tmp_path / "plain.states")
    plain.save_states(path)
    trainer = _trainer(net)
    defaults = get_loss_scaler(trainer).state_dict()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        trainer.load_states(path)
    assert len([r for r in caplog.records if r.name == LOGGER]) == 1
    assert "plain gluon.Trainer or mxnet.contrib.amp" in caplog.records[0].getMessage()
    assert get_loss_scaler(trainer).state_dict() == defaults
    assert trainer._optimizer.num_update == 2


_CONTRIB_WRITER = """
import sys
import mxnet as mx
from mxnet import autograd, gluon
from mxnet.contrib import amp
amp.init()
w = gluon.Parameter("w", shape=(4,), init=mx.init.Constant(0.5))
w.initialize()
trainer = gluon.Trainer([w], "sgd", {"learning_rate": 0.1, "momentum": 0.9})
amp.init_trainer(trainer)
with autograd.record():
    loss = (w.data() * mx.nd.array([1, 2, 3, 4])).sum()
    with amp.scale_loss(loss, trainer) as scaled:
        autograd.backward(scaled)
trainer.step(1)
trainer.save_states(sys.argv[1])
"""


def test_contrib_amp_file_loads_with_defaults_and_one_warning(tmp_path, caplog):
    path = str(tmp_path / "contrib.states")
    script = tmp_path / "contrib_writer.py"
    script.write_text(_CONTRIB_WRITER)
    subprocess.run([sys.executable, str(script), path], check=True, timeout=120, capture_output=True)
    w = gluon.Parameter("w", shape=(4,))
    w.initialize()
    trainer = gluon.Trainer([w], "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    scaler = init_trainer(trainer, LossScaler())
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        trainer.load_states(path)
    assert len([r for r in caplog.records if r.name == LOGGER]) == 1
    assert scaler.scale == 2.0 ** 16 and scaler.steps == 0
    assert trainer._optimizer.num_update == 1
    np.testing.assert_allclose(trainer._updaters[0].states[0].asnumpy(), -0.1 * np.arange(1, 5), rtol=1e-6)


@pytest.mark.parametrize("written,loaded", [("float16", "bfloat16"), ("bfloat16", "float16"),
                                            ("float16", None), (None, "float16")])
def test_other_dtype_keeps_current_scaler_with_a_warning(tmp_path, caplog, monkeypatch, written, loaded):
    net = _net()
    monkeypatch.setattr(autocast, "target_dtype", lambda: written)
    trainer = _trainer(net, scaler=LossScaler.default_for(written))
    _train(net, trainer, 3, poison={1})
    path = str(tmp_path / "states")
    trainer.save_states(path)
    monkeypatch.setattr(autocast, "target_dtype", lambda: loaded)
    other = _trainer(net, scaler=LossScaler.default_for(loaded))
    before = get_loss_scaler(other).state_dict()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        other.load_states(path)
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(messages) == 1 and "dropped" in messages[0] and repr(written) in messages[0]
    assert get_loss_scaler(other).state_dict() == before
    assert other._optimizer.num_update == 2  # optimizer state is loaded whatever the dtype
    # and back: the other run's file loads into a run of the first dtype the same way
    other.save_states(path)
    monkeypatch.setattr(autocast, "target_dtype", lambda: written)
    again = _trainer(net, scaler=LossScaler.default_for(written))
    again.load_states(path)
    assert get_loss_scaler(again).scale == LossScaler.default_for(written).scale


def _bad_files(good):
    cut = len(good) // 7
    yield "empty", b""
    for size in sorted({1, 10, cut, 3 * cut, len(good) - 200, len(good) - 30, len(good) - 5, len(good) - 1}):
        yield "truncated to %d" % size, good[:size]
    for pos in sorted({5, cut, 4 * cut, len(good) - 150, len(good) - 40, len(good) - 20, len(good) - 3}):
        flipped = bytearray(good)
        flipped[pos] ^= 0x5A
        yield "byte %d flipped" % pos, bytes(flipped)
    yield "random bytes", np.random.RandomState(3).bytes(300)
    yield "json text", json.dumps({"scale": 1.0}).encode()
    yield "foreign pickle", __import__("pickle").dumps([1, 2, 3])


def test_corrupt_truncated_or_foreign_files_raise_and_change_nothing(tmp_path):
    net = _net()
    trainer = _trainer(net)
    _train(net, trainer, 3, poison={0})
    path = str(tmp_path / "good.states")
    trainer.save_states(path)
    with open(path, "rb") as src:
        good = src.read()
    _train(net, trainer, 2)  # move on so that a partial load would show
    want, optimizer = _snapshot(net, trainer), trainer._optimizer
    params_file = str(tmp_path / "net.params")
    net.save_parameters(params_file)
    with open(params_file, "rb") as src:
        candidates = list(_bad_files(good)) + [("parameters file", src.read())]
    for label, data in candidates:
        bad = str(tmp_path / "bad.states")
        with open(bad, "wb") as out:
            out.write(data)
        with pytest.raises(ValueError, match="bad.states"):
            trainer.load_states(bad)
            pytest.fail("no error for %s" % label)
        _assert_same(_snapshot(net, trainer), want)
        assert trainer._optimizer is optimizer, label


def test_state_dict_round_trips_through_json():
    net = _net()
    trainer = _trainer(net)
    _train(net, trainer, 4, poison={2})
    state = json.loads(json.dumps(amp.state_dict(trainer)))
    fresh = _trainer(net, scaler=LossScaler())
    amp.load_state_dict(fresh, state)
    assert amp.state_dict(fresh) == state
    before = amp.state_dict(fresh)
    with pytest.raises(TypeError, match="NoneType"):
        amp.load_state_dict(fresh, None)
    for bad in ({}, dict(state, version=9), dict(state, extra=1),
                dict(state, loss_scaler=dict(state["loss_scaler"], scale=float("nan")))):
        with pytest.raises(ValueError):
            amp.load_state_dict(fresh, bad)
        assert amp.state_dict(fresh) == before


def test_failed_write_keeps_previous_file(tmp_path, monkeypatch):
    net = _net()
    trainer = _trainer(net)
    path = str(tmp_path / "states")
    trainer.save_states(path)
    with open(path, "rb") as src:
        before = src.read()
    _train(net, trainer, 1)

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        trainer.save_states(path)
    with open(path, "rb") as src:
        assert src.read() == before
    assert os.listdir(str(tmp_path)) == ["states"]  # no temporary file left behind


_SAVER = """
import os, stat, sys, time
import mxnet as mx
from mxnet import autograd, gluon
from mxnet.amp.training.trainer import get_loss_scaler, init_trainer
net = gluon.nn.Dense(512, in_units=1024)
net.initialize()
trainer = gluon.Trainer(net.collect_params(), "adam")
init_trainer(trainer)
with autograd.record():
    net(mx.nd.ones((1, 1024))).sum().backward()
trainer.step(1)
real_fsync = os.fsync
def slow_fsync(fd):  # widen the window between the temporary file's creation and its rename
    if stat.S_ISREG(os.fstat(fd).st_mode):
        time.sleep(0.2)
    real_fsync(fd)
os.fsync = slow_fsync
trainer.save_states(sys.argv[1])
print("ready", flush=True)  # a complete file exists from here on
while True:
    get_loss_scaler(trainer).update(True)
    trainer.save_states(sys.argv[1])
"""


def test_killed_while_saving_leaves_a_loadable_file(tmp_path):
    path = str(tmp_path / "states")
    script = tmp_path / "saver.py"
    script.write_text(_SAVER)
    rng = np.random.RandomState(1)
    mid_write_kills = 0
    for attempt in range(6):
        if attempt >= 2 and mid_write_kills:
            break
        proc = subprocess.Popen([sys.executable, str(script), path], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL)
        try:
            assert proc.stdout.readline().strip() == b"ready"
            time.sleep(0.3 + rng.uniform(0, 0.7))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        leftovers = [name for name in os.listdir(str(tmp_path)) if name.endswith(".tmp")]
        assert len(leftovers) <= 1, leftovers  # the next writer removed the one its killed predecessor left
        mid_write_kills += bool(leftovers)
        optimizer_bytes, section = checkpoint.read_file(path)
        assert len(optimizer_bytes) > 4 * 1024 * 1024  # big enough that a kill lands mid-write
        assert set(section) == {"version", "target_dtype", "loss_scaler", "weights"}  # read_file checked both CRCs
    assert mid_write_kills >= 1  # at least one kill hit a save in progress, and the old file survived it
    net = _net()
    trainer = _trainer(net)
    _train(net, trainer, 1)
    trainer.save_states(str(tmp_path / "other"))  # another path's save leaves this path's temporaries alone
    assert [n for n in os.listdir(str(tmp_path)) if n.endswith(".tmp")] == leftovers
    trainer.save_states(path)  # the next save of the path removes what the last killed writer left
    assert sorted(os.listdir(str(tmp_path))) == ["other", "saver.py", "states"]


_RESUME = """
import json, sys
import numpy as np
import mxnet as mx
from mxnet import autograd, gluon
from mxnet import amp
from mxnet.amp.training.loss_scaler import LossScaler

mode, folder, start, stop = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rng = np.random.RandomState(0)
data = rng.uniform(-1, 1, (8, 5, 4)).astype(np.float32)
target = rng.uniform(-1, 1, (8, 5, 3)).astype(np.float32)
net = gluon.nn.Dense(3, in_units=4)
net.initialize()
net.weight.set_data(mx.nd.array(rng.uniform(-1, 1, (3, 4))))
net.bias.set_data(mx.nd.array(rng.uniform(-1, 1, (3,))))
schedule = mx.lr_scheduler.FactorScheduler(step=2, factor=0.7, base_lr=0.05)
trainer = gluon.Trainer(net.collect_params(), "adam", {"lr_scheduler": schedule})
amp.init_trainer(trainer, LossScaler(init_scale=2.0 ** 8, growth_interval=2))
if mode == "resume":
    net.load_parameters(folder + "/net.params")
    trainer.load_states(folder + "/trainer.states")
for step in range(start, stop):
    with autograd.record():
        loss = (net(mx.nd.array(data[step])) * mx.nd.array(target[step])).sum()
        with amp.scale_loss(loss, trainer) as scaled:
            scaled.backward()
    if step in (2, 5):
        net.bias.grad()[1] = np.nan
    trainer.step(5)
if mode == "save":
    net.save_parameters(folder + "/net.params")
    trainer.save_states(folder + "/trainer.states")
result = {"weight": net.weight.data().asnumpy().tolist(), "bias": net.bias.data().asnumpy().tolist(),
          "amp": amp.state_dict(trainer), "num_update": trainer._optimizer.num_update,
          "lr": trainer.learning_rate}
with open(folder + "/" + mode + ".json", "w") as out:
    json.dump(result, out)
"""


def test_resume_in_fresh_process_is_exact(tmp_path):
    script = tmp_path / "resume.py"
    script.write_text(_RESUME)
    folder = str(tmp_path)
    for args in (("full", 0, 8), ("save", 0, 4), ("resume", 4, 8)):
        subprocess.run([sys.executable, str(script), args[0], folder, str(args[1]), str(args[2])],
                       check=True, timeout=120, capture_output=True)
    with open(os.path.join(folder, "full.json")) as src:
        full = json.load(src)
    with open(os.path.join(folder, "resume.json")) as src:
        resumed = json.load(src)
    assert resumed == full  # bit-exact parameters, scaler state, update counter and learning rate
    assert full["amp"]["loss_scaler"]["skipped_steps"] == 2 and full["num_update"] == 6
