"""Tests for mxnet.amp.training.updater_states and amp.load_states: state files load without running code.

Every file MXNet 1.9.1's optimizers and this package's trainers write loads exactly (Gluon trainers, plain and
AMP, every registered optimizer, multi-precision, schedulers, numpy mode, the Module API, kvstores); malicious
files are refused with the global they ask for named, and their markers prove that nothing ran (the same files
do run under ``pickle``, in a child process); falsified sizes neither allocate nor hang.
"""
import copy
import copyreg
import logging
import os
import pickle
import pickletools
import struct
import time
import tracemalloc

import numpy as np
import pytest

import mxnet as mx
from mxnet import amp
from mxnet.amp.training import checkpoint, updater_states

from state_files import (PAYLOAD_KINDS, describe, inst_payload, make_config, make_trainer, payloads,
                         protocol0_payload, restored, run_pickle_in_child, saved, snapshot, train, updaters)

#: Optimizers whose states need momentum to be more than None. DCASGD's momentum is broken in MXNet 1.9.1
#: (``if mom:`` on an NDArray), so it runs without.
_MOMENTUM = {"sgd", "nag", "signum", "lbsgd", "lars", "ccsgd"}
_REGISTERED = sorted(name for name, cls in mx.optimizer.Optimizer.opt_registry.items()
                     if cls.__module__.startswith("mxnet."))


@pytest.fixture(autouse=True)
def quiet():
    logging.getLogger("mxnet.amp.trainer").setLevel(logging.ERROR)  # "holds no AMP state" for plain files
    yield
    logging.getLogger("mxnet.amp.trainer").setLevel(logging.NOTSET)


def _write(path, data):
    with open(path, "wb") as out:
        out.write(data)
    return str(path)


def _read(path):
    with open(path, "rb") as src:
        return src.read()


# --- every real file loads ------------------------------------------------------------------------------------

def _optimizer_args(name, multi_precision):
    args = {"learning_rate": 0.01, "multi_precision": multi_precision}
    if name in _MOMENTUM:
        args["momentum"] = 0.9
    return args


@pytest.mark.parametrize("multi_precision", [False, True], ids=["float32", "multi_precision"])
@pytest.mark.parametrize("name", _REGISTERED)
def test_every_registered_optimizer_round_trips(tmp_path, name, multi_precision):
    """Files of plain and AMP trainers load into plain and AMP trainers exactly, and training goes on exactly."""
    dtype = "float16" if multi_precision else "float32"
    args = _optimizer_args(name, multi_precision)
    for writer_amp in (False, True):
        source, params = make_trainer(name, args, dtype, "poly", with_amp=writer_amp)
        train(source, params, 3)
        path = str(tmp_path / ("%s.states" % writer_amp))
        source.save_states(path)
        want = saved(source)
        assert want[0][1], "no states saved"  # the states dict is not empty
        for target_amp in (False, True):
            target, target_params = make_trainer(name, args, dtype, "poly", with_amp=target_amp, value=0.25)
            if target_amp:
                target.load_states(path)
            else:
                amp.load_states(target, path)
            assert restored(target) == want, (writer_amp, target_amp)
            if target_amp == writer_amp:  # the same update path from here on: bit for bit the same
                for mine, theirs in zip(target_params, params):
                    mine.set_data(theirs.data().copy())
                mx.random.seed(7)  # SGLD adds noise
                train(target, target_params, 2, start=3)
                mx.random.seed(7)
                train(source, params, 2, start=3)
                for mine, theirs in zip(target_params, params):
                    assert mine.data().asnumpy().tobytes() == theirs.data().asnumpy().tobytes()
                assert restored(target) == saved(source)


@pytest.mark.parametrize("ctx_count,update_on_kvstore", [(2, False), (2, True)])
def test_plain_trainers_on_several_devices(tmp_path, ctx_count, update_on_kvstore):
    ctx = [mx.cpu(i) for i in range(ctx_count)]
    source, params = make_config("adam", with_amp=False, ctx=ctx, update_on_kvstore=update_on_kvstore)
    train(source, params, 2)
    path = str(tmp_path / "states")
    source.save_states(path)
    target, _ = make_config("adam", with_amp=False, ctx=ctx, update_on_kvstore=update_on_kvstore)
    amp.load_states(target, path)
    assert restored(target) == saved(source)
    arrays = [u.states[0][0] for u in updaters(target)]
    assert len({id(a) for a in arrays}) == len(arrays)  # each updater owns its arrays, as with set_states
    assert all(u.optimizer is target._optimizer for u in updaters(target))
    assert target._optimizer.param_dict[0] is target._params[0]


def test_numpy_mode_files_load(tmp_path):
    """Trained under mx.npx.set_np(), states are pickled in the V3 format; they load in both modes."""
    mx.npx.set_np()
    source, params = make_config("adam", with_amp=False)
    train(source, params, 2)
    path = str(tmp_path / "states")
    source.save_states(path)
    assert b"\xca\xfa\x93\xf9" in _read(path)  # the V3 magic
    want = saved(source)
    target, _ = make_config("adam", with_amp=False)
    amp.load_states(target, path)
    assert restored(target) == want
    mx.npx.reset_np()
    target, _ = make_config("adam", with_amp=False)
    amp.load_states(target, path)
    assert restored(target) == want


def _module(opt, context=mx.cpu(), arg_params=None):
    data = mx.sym.var("data")
    out = mx.sym.FullyConnected(data, num_hidden=3, name="fc")
    mod = mx.mod.Module(out, label_names=None, context=context)
    mod.bind(data_shapes=[("data", (4, 5))])
    mod.init_params(mx.init.Constant(0.5), arg_params=arg_params)
    mod.init_optimizer(kvstore="local", optimizer=opt)
    return mod


def _module_step(mod, seed):
    x = np.random.RandomState(seed).uniform(-1, 1, (4, 5)).astype(np.float32)
    mod.forward(mx.io.DataBatch([mx.nd.array(x)], bucket_key=5, provide_data=[mx.io.DataDesc("data", (4, 5))]),
                is_train=True)
    mod.backward([mx.nd.ones((4, 3))])
    mod.update()


def _module_updater(mod):
    return mod._kvstore._updater if mod._update_on_kvstore else mod._updater


@pytest.mark.parametrize("context", [mx.cpu(), [mx.cpu(0), mx.cpu(1)]], ids=["one_device", "kvstore"])
def test_module_files_load(tmp_path, context):
    source = _module(mx.optimizer.SGD(learning_rate=0.1, momentum=0.9), context)
    for seed in range(2):
        _module_step(source, seed)
    path = str(tmp_path / "module.states")
    source.save_optimizer_states(path)
    target = _module(mx.optimizer.SGD(learning_rate=0.1, momentum=0.9), context, source.get_params()[0])
    optimizer = target._optimizer
    amp.load_states(target, path)
    assert describe(_module_updater(target).states) == describe(_module_updater(source).states)
    assert _module_updater(target).optimizer is optimizer  # a Module file holds no optimizer
    _module_step(source, 5)
    _module_step(target, 5)
    for key, value in source.get_params()[0].items():
        assert target.get_params()[0][key].asnumpy().tobytes() == value.asnumpy().tobytes()


def test_bucketing_module_loads_into_the_updater_its_buckets_share(tmp_path):
    """MXNet 1.9.1's BucketingModule has no load_optimizer_states; amp.load_states loads its shared updater."""
    def sym_gen(key):
        return mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=3, name="fc"), ("data",), ()

    def bucketing():
        mod = mx.mod.BucketingModule(sym_gen, default_bucket_key=5, context=mx.cpu())
        mod.bind(data_shapes=[("data", (4, 5))], label_shapes=None)
        mod.init_params(mx.init.Constant(0.5))
        mod.init_optimizer(optimizer=mx.optimizer.SGD(learning_rate=0.1, momentum=0.9))
        return mod

    source = bucketing()
    _module_step(source, 0)
    path = str(tmp_path / "bucketing.states")
    source._curr_module.save_optimizer_states(path)
    target = bucketing()
    amp.load_states(target, path)
    assert describe(target._curr_module._updater.states) == describe(source._curr_module._updater.states)


def test_module_needs_its_optimizer(tmp_path):
    mod = mx.mod.Module(mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=3), label_names=None)
    with pytest.raises(RuntimeError, match="init_optimizer"):
        amp.load_states(mod, str(tmp_path / "missing"))


def test_bad_arguments():
    with pytest.raises(TypeError, match="expects a gluon.Trainer.*got SGD"):
        amp.load_states(mx.optimizer.SGD(), "f")
    with pytest.raises(TypeError, match="trusted must be True or False"):
        updater_states.loads(b"", trusted="yes")


# --- malicious files ------------------------------------------------------------------------------------------

_PLACES = ("top", "states", "tuple", "optimizer", "scheduler", "after_genuine", "sealed")


def _genuine(tmp_path):
    trainer, params = make_config("adam")
    train(trainer, params, 2)
    path = str(tmp_path / "genuine.states")
    trainer.save_states(path)
    return trainer, _read(path)


def _malicious(place, payload, trainer, genuine):
    """A state file holding ``payload`` at ``place``, otherwise genuine."""
    states = dict(updaters(trainer)[0].states)
    optimizer = copy.copy(trainer._optimizer)
    if place == "top":
        return pickle.dumps(payload)
    if place == "states":
        states[7] = payload
    elif place == "tuple":
        states[0] = (states[0][0], payload)
    elif place == "optimizer":
        optimizer.momentum_schedule = payload
    elif place == "scheduler":
        optimizer.lr_scheduler = copy.copy(optimizer.lr_scheduler)
        optimizer.lr_scheduler.warmup_mode = payload
    elif place == "after_genuine":
        return pickle.dumps(payload) + genuine
    elif place == "sealed":  # a forged AMP section: the CRCs only detect accidents
        return checkpoint.pack(pickle.dumps(({0: (payload,)}, optimizer)), amp.state_dict(trainer))
    return pickle.dumps((states, optimizer))


@pytest.mark.parametrize("place", _PLACES)
@pytest.mark.parametrize("kind", PAYLOAD_KINDS)
def test_malicious_files_are_refused_and_nothing_runs(tmp_path, monkeypatch, kind, place):
    monkeypatch.syspath_prepend(str(tmp_path))
    marker = str(tmp_path / "MARKER")
    payload, name = payloads(marker, str(tmp_path))[kind]
    trainer, genuine = _genuine(tmp_path)
    path = _write(tmp_path / "evil.states", _malicious(place, payload, trainer, genuine))
    before = snapshot(trainer)
    with pytest.raises(ValueError) as info:
        trainer.load_states(path)
    message = str(info.value)
    assert "evil.states" in message and "asks for global %r" % name in message and "trusted=True" in message
    assert not os.path.exists(marker), "the payload ran"
    assert snapshot(trainer) == before


@pytest.mark.parametrize("load", ["plain_trainer", "module", "updater_states"])
def test_malicious_files_are_refused_by_every_loader(tmp_path, monkeypatch, load):
    monkeypatch.syspath_prepend(str(tmp_path))
    marker = str(tmp_path / "MARKER")
    for index, (kind, (payload, name)) in enumerate(sorted(payloads(marker, str(tmp_path), 1).items())):
        path = _write(tmp_path / "evil.states", pickle.dumps({0: (payload,)}))
        with pytest.raises(ValueError, match="asks for global %r" % name):
            if load == "plain_trainer":
                trainer, params = make_config("sgd_momentum", with_amp=False)
                amp.load_states(trainer, path)
            elif load == "module":
                amp.load_states(_module(mx.optimizer.SGD(momentum=0.9)), path)
            else:
                updater_states.loads(_read(path), "evil")
        assert not os.path.exists(marker), kind


def test_hand_written_protocol_0_exploits_are_refused(tmp_path):
    marker = str(tmp_path / "MARKER")
    trainer, _ = make_config("sgd_momentum")
    for data in (protocol0_payload(marker), inst_payload(marker)):
        path = _write(tmp_path / "evil.states", data)
        with pytest.raises(ValueError, match="asks for global 'os.system'"):
            trainer.load_states(path)
        assert not os.path.exists(marker)


def test_the_malicious_files_do_run_under_pickle(tmp_path, monkeypatch):
    """What the tests above refuse is live: ``pickle.load`` (MXNet's loaders) runs every one of them."""
    trainer, genuine = _genuine(tmp_path)
    files, markers = [], []
    index = 0
    for place in _PLACES:
        for kind in PAYLOAD_KINDS:
            marker = str(tmp_path / ("MARKER_%d" % index))
            payload, _ = payloads(marker, str(tmp_path), index)[kind]
            files.append(_write(tmp_path / ("evil_%d.states" % index), _malicious(place, payload, trainer,
                                                                                  genuine)))
            markers.append(marker)
            index += 1
    for data in (protocol0_payload, inst_payload):
        markers.append(str(tmp_path / ("MARKER_%d" % index)))
        files.append(_write(tmp_path / ("evil_%d.states" % index), data(markers[-1])))
        index += 1
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    run_pickle_in_child(files)
    missing = [f for f, m in zip(files, markers) if not os.path.exists(m)]
    assert not missing, "payloads that did not run under pickle: %s" % missing


def _states_pickle(**extra):
    """A small genuine states pickle (protocol 4, as MXNet writes), optionally with more optimizer attributes."""
    trainer, params = make_config("sgd_momentum", with_amp=False)
    train(trainer, params, 1)
    optimizer = copy.copy(trainer._optimizer)
    vars(optimizer).update(extra)
    return pickle.dumps((dict(updaters(trainer)[0].states), optimizer), protocol=4)


def test_other_requests_are_refused_with_what_was_asked():
    calls_init = b"\x80\x04\x8c\x19mxnet.optimizer.optimizer\x8c\x03SGD\x93)R}\x86."  # SGD() runs __init__
    copyreg.add_extension("os", "system", 0xF1)
    try:
        ext = b"\x80\x02\x82\xf1X\x04\x00\x00\x00true\x85R."  # os.system('true') via the extension registry
        cases = [
            (calls_init, "calls class 'mxnet.optimizer.optimizer.SGD'"),
            (ext, "uses pickle opcode EXT1"),
            (b"\x80\x02X\x01\x00\x00\x00aQ.", "uses pickle opcode BINPERSID"),
            (b"\x80\x02cmxnet.optimizer.optimizer\nSGD\n}\x86.",
             "holds the global 'mxnet.optimizer.optimizer.SGD' itself"),
            (b"\x80\x02cnumpy\ndtype\nX\x02\x00\x00\x00O8\x89\x88\x87R.", "calls numpy.dtype"),
            (_states_pickle(extra_state=np.ones(2)), "numpy.core.multiarray._reconstruct"),
            (_states_pickle(extra_state=mx.nd.ones(2).tostype("row_sparse")), "RowSparseNDArray"),
        ]
        for data, match in cases:
            with pytest.raises(ValueError, match=match.replace(".", r"\.")):
                updater_states.loads(data, "f")
        assert pickle.loads(ext) == 0  # the extension opcode is live: pickle calls os.system('true')
    finally:
        copyreg.remove_extension("os", "system", 0xF1)


class _CustomSGD(mx.optimizer.SGD):
    """A user's optimizer: not MXNet's, so its files need trusted=True."""


def test_custom_optimizers_need_trusted(tmp_path):
    mx.optimizer.Optimizer.register(_CustomSGD)
    try:
        trainer, params = make_trainer("_customsgd", {"learning_rate": 0.1, "momentum": 0.9})
        train(trainer, params, 2)
        path = str(tmp_path / "custom.states")
        trainer.save_states(path)
        want = saved(trainer)
        target, _ = make_trainer("_customsgd", {"learning_rate": 0.1, "momentum": 0.9})
        before = snapshot(target)
        name = "%s._CustomSGD" % __name__
        with pytest.raises(ValueError, match=r"asks for global '%s'.*trusted=True" % name):
            target.load_states(path)
        assert snapshot(target) == before
        target.load_states(path, trusted=True)
        assert restored(target) == want
        plain, _ = make_trainer("_customsgd", {"learning_rate": 0.1}, with_amp=False)
        amp.load_states(plain, path, trusted=True)
        assert restored(plain) == want
    finally:
        del mx.optimizer.Optimizer.opt_registry["_customsgd"]


def _rename_module(data, old, new):
    """The pickle ``data`` with the SHORT_BINUNICODE ``old`` (a module name) replaced by ``new``, frame fixed."""
    old_op = b"\x8c" + bytes([len(old)]) + old.encode()
    new_op = b"\x8c" + bytes([len(new)]) + new.encode()
    assert data.count(old_op) == 1 and data[2:3] == b"\x95"
    body = data[11:].replace(old_op, new_op)
    return data[:3] + struct.pack("<Q", len(body)) + body


def test_legacy_class_paths_load(tmp_path, monkeypatch):
    """Files name AdamW by its class path; after it moves, the old path still loads (safe and trusted): the path
    of files written before mxnet.amp moved into subpackages, and one a future move would leave behind."""
    trainer, params = make_config("adamw", with_amp=False)
    train(trainer, params, 2)
    data = updaters(trainer)[0].get_states(dump_optimizer=True)
    assert b"mxnet.amp.training.adamw" in data  # the path files written today name
    before_subpackages = _rename_module(data, "mxnet.amp.training.adamw", "mxnet.amp.adamw")
    assert updater_states.LEGACY_OPTIMIZERS["mxnet.amp.adamw.AdamW"] == "adamw"
    monkeypatch.setitem(updater_states.LEGACY_OPTIMIZERS, "mxnet.amp.an_old_home.AdamW", "adamw")
    moved = _rename_module(data, "mxnet.amp.training.adamw", "mxnet.amp.an_old_home")
    for trusted in (False, True):
        for blob in (data, before_subpackages, moved):
            states, optimizer = updater_states.loads(blob, "f", trusted=trusted).materialize()
            assert type(optimizer) is mx.optimizer.Optimizer.opt_registry["adamw"]
            assert describe((states, optimizer)) == describe((updaters(trainer)[0].states, trainer._optimizer))
    monkeypatch.delitem(updater_states.LEGACY_OPTIMIZERS, "mxnet.amp.an_old_home.AdamW")
    with pytest.raises(ValueError, match="asks for global 'mxnet.amp.an_old_home.AdamW'"):
        updater_states.loads(moved, "f")


# --- sizes, memory and time -----------------------------------------------------------------------------------

def test_falsified_sizes_neither_allocate_nor_hang():
    genuine = _states_pickle()
    assert genuine[11:13] == b"}\x94"  # the states dict, memoized
    body = b"}r\xff\xff\xff\xff" + genuine[13:]  # memoized at 2**32-1 instead: pickle's C memo would take 32 GiB
    huge_memo = genuine[:3] + struct.pack("<Q", len(body)) + body
    # a pair of the previous pair, 60 deep: 2**60 leaves for whatever walks it without noticing the sharing
    laughs = b"\x80\x04N" + b"".join(b"\x94h" + bytes([i]) + b"\x86" for i in range(60)) + b"."
    tracemalloc.start()
    start = time.perf_counter()
    try:
        states, _ = updater_states.loads(huge_memo, "f").materialize()  # a dict memo: nothing allocated
        assert len(states) == 2
        for data, match in [
                (laughs, "deeper than 32"),
                (b"\x80\x04]\x94h\x00a.", "contains itself"),  # a list holding itself
                (b"\x80\x04\x8e" + struct.pack("<Q", 2 ** 62) + b"abc.", "unpickle"),  # BINBYTES8 of 2**62
                (b"\x80\x04\x95" + struct.pack("<Q", 2 ** 40) + b"}.", "frame of 1099511627776 bytes"),
                (b"\x80\x04}K\x00\x85K\x02s.", "tuple is used"),
        ]:
            with pytest.raises(ValueError, match=match):
                updater_states.loads(data, "f")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - start < 10
    assert peak < 16 << 20, "falsified sizes allocated %d bytes" % peak


def test_frames_are_read_as_pickle_reads_them():
    """An opcode crossing its frame's end reads differently in pickle's two readers: refused; a frame that ends
    between opcodes, with the rest unframed, is valid."""
    genuine = _states_pickle()
    assert genuine[2:3] == b"\x95"
    frame = struct.unpack_from("<Q", genuine, 3)[0]
    ops = [pos for _, _, pos in pickletools.genops(genuine)]
    inside = next(pos for pos in ops if pos > 30 and genuine[pos:pos + 1] in (b"\x8c", b"C"))  # has an argument
    crossing = genuine[:3] + struct.pack("<Q", inside + 1 - 11) + genuine[11:]
    with pytest.raises(ValueError, match="crosses the end of its frame"):
        updater_states.loads(crossing, "f")
    aligned = genuine[:3] + struct.pack("<Q", inside - 11) + genuine[11:]
    assert describe(updater_states.loads(aligned, "f").materialize()) == \
        describe(updater_states.loads(genuine, "f").materialize())
    assert describe(pickle.loads(aligned)) == describe(pickle.loads(genuine))
    with pytest.raises(ValueError, match="frame of %d bytes" % (frame + 1)):
        updater_states.loads(genuine[:3] + struct.pack("<Q", frame + 1) + genuine[11:], "f")


def test_a_forged_amp_section_is_refused_by_plain_loaders_too(tmp_path):
    trainer, genuine = _genuine(tmp_path)
    optimizer_bytes = updaters(trainer)[0].get_states(dump_optimizer=True)
    section = amp.state_dict(trainer)
    section["loss_scaler"] = dict(section["loss_scaler"], scale=-1.0)
    path = _write(tmp_path / "forged.states", checkpoint.pack(optimizer_bytes, section))
    plain, _ = make_config("adam", with_amp=False)
    before = snapshot(plain)
    with pytest.raises(ValueError, match="forged.states.*scale"):
        amp.load_states(plain, path)
    assert snapshot(plain) == before
