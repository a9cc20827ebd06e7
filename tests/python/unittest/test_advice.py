"""``target_dtype="auto"``, the warning where bfloat16 is slow, and the measured ratios behind both
(mxnet.amp.advice), for every CPU class through mocked cpuinfo files.

Mocking a class changes what the policy believes, never what the CPU runs: tests that mock a class above this
machine's only rewrite graphs and read reports; they run no bfloat16 kernel.
"""
import json
import logging
import warnings

import mxnet as mx
import numpy as np
import pytest
from mxnet import amp, autograd, gluon

from mxnet.amp import lists

from mxnet.amp.autocast import context as autocast

from mxnet.amp.core import advice, cpu
from mxnet.amp.inference import convert as C
from mxnet.amp.core.policy import EMULATED, FLOAT32, NATIVE, make_policy

from amp_testing import CPUS, cpuinfo_of_class, hardware_report_of_class

CLASSES = sorted(CPUS)


@pytest.fixture
def on_class(tmp_path, monkeypatch):
    """Mock the CPU class; no GPUs; the once-per-process warning forgotten."""
    monkeypatch.delenv("MXNET_AMP_EMULATE", raising=False)
    monkeypatch.setattr(advice, "_WARNED", set())
    monkeypatch.setattr(advice, "gpu_count", lambda: 0)

    def use(cls):
        monkeypatch.setenv(cpu.CPUINFO_ENV, cpuinfo_of_class(tmp_path, cls))
    return use


def _slow_warnings(record):
    return [w for w in record if issubclass(w.category, advice.SlowBfloat16Warning)]


@pytest.mark.parametrize("cls,want", [("a", None), ("b", None), ("c", "bfloat16"), ("d", "bfloat16")])
def test_auto_per_class(on_class, cls, want):
    on_class(cls)
    dtype, why = advice.resolve("auto")
    assert dtype == want
    assert ("CPU class (%s)" % cls) in why
    if want is None:
        assert "no low precision" in why and "the AMP calls keep working" in why
    assert advice.resolve("auto", "gpu")[0] == "float16"
    assert advice.resolve("float16") == ("float16", "given") and advice.resolve("bfloat16")[0] == "bfloat16"


def test_auto_is_float16_where_mxnet_sees_gpus(on_class, monkeypatch):
    on_class("d")
    monkeypatch.setattr(advice, "gpu_count", lambda: 2)
    assert advice.resolve("auto") == ("float16", "target_dtype='auto': float16 on CUDA GPUs")
    assert advice.resolve("auto", "cpu")[0] == "bfloat16"  # a conversion for a CPU context


@pytest.mark.parametrize("cls", CLASSES)
def test_bfloat16_warns_once_on_slow_classes_only(on_class, cls):
    on_class(cls)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        first = advice.warn_if_slow("bfloat16", "cpu")
        second = advice.warn_if_slow("bfloat16", "cpu")
        assert not advice.warn_if_slow("float16", "cpu") and not advice.warn_if_slow("bfloat16", "gpu")
    slow = _slow_warnings(record)
    if cls in ("c", "d"):
        assert not first and not slow
        return
    assert first and not second and len(slow) == 1  # once per process
    text = str(slow[0].message)
    klass = next(c for c in cpu.CLASSES if c.name == cls)
    assert text.startswith("mxnet.amp: this CPU is class (%s) %s: bfloat16 is %s here" % (cls, klass.title,
                                                                                          klass.bf16))
    assert "target_dtype='auto'" in text
    assert "warnings.filterwarnings('ignore', category=mxnet.amp.SlowBfloat16Warning)" in text
    assert "AMP's default plan emulates it (float32 kernels on bf16-rounded values, bf16 numerics)" in text
    # class (a) trains on its own plan: bfloat16 tensors on the library's float32 arithmetic
    assert ("hybridized training graphs: storage (no AVX-512: bfloat16 tensors, float32 arithmetic in the library's "
            "kernels)" in text) == (cls == "a")
    assert ("emulate=False" in text) == (cls == "b")  # class (a) has no bf16 kernels to choose
    assert "emulate=True" not in text  # what the default does already
    if cls == "b":  # the measured figures of cpu_ratios.json, quoted with their dates and CPUs
        assert "measured " + advice.ratio_summary("b") in text and "Ice Lake" in text
        assert "emulate=False (oneDNN's bfloat16 kernels: measured %s" % advice.ratio_summary("b", "native") in text
        emulated = [r for r in advice.ratios("b") if r["variant"] == "emulated"]
        assert all(r["date"] in text and r["workload"] in text for r in emulated) and emulated


def test_the_warning_can_be_silenced_with_a_filter(on_class):
    on_class("b")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=amp.SlowBfloat16Warning)
        advice.warn_if_slow("bfloat16", "cpu")
    assert not _slow_warnings(record)


@pytest.mark.parametrize("cls", CLASSES)
def test_amp_init_warns_and_plans_per_class(on_class, cls):
    on_class(cls)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        amp.init("bfloat16")
    assert len(_slow_warnings(record)) == (cls in ("a", "b"))
    policy = amp.current_policy()
    # the plan: emulated on (a) and (b), bf16 kernels on (c) and (d); what the user asks for stays
    want = EMULATED if cls in ("a", "b") else NATIVE
    assert [policy.lp16_mode(op, "cpu") for op in ("Convolution", "FullyConnected")] == [want] * 2
    # batch_dot: emulated, or on (c) and (d) the library's bf16 kernel (float32 where its oneDNN cannot run bf16)
    assert policy.lp16_mode("batch_dot", "cpu") in ((EMULATED,) if want == EMULATED else (NATIVE, FLOAT32))
    assert make_policy("bfloat16", emulate=True).lp16_mode("Convolution", "cpu") == EMULATED
    assert make_policy("bfloat16", emulate=False).lp16_mode("Convolution", "cpu") == NATIVE
    amp.reset()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        amp.init("bfloat16", emulate=True)  # an explicit choice of emulation: nothing to warn about
    assert not _slow_warnings(record)


@pytest.mark.parametrize("cls", ["a", "b"])
def test_auto_on_slow_classes_trains_in_float32_with_the_amp_calls(on_class, caplog, cls, tmp_path):
    on_class(cls)
    with caplog.at_level(logging.INFO, logger="mxnet.amp"):
        amp.init("auto")
        amp.init("auto")  # idempotent: one info line
    lines = [r.getMessage() for r in caplog.records if "target_dtype='auto'" in r.getMessage()]
    assert len(lines) == 1 and "no low precision on CPU class (%s)" % cls in lines[0]
    assert amp.target_dtype() is None and not amp.is_enabled() and autocast.training_dtype() == "float32"
    net = gluon.nn.Dense(3, in_units=4)
    net.initialize(mx.init.Constant(0.5))
    net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    scaler = amp.init_trainer(trainer)
    assert scaler.state_dict()["dynamic"] is False and scaler.scale == 1.0
    x = mx.nd.array(np.arange(8, dtype=np.float32).reshape(2, 4))
    for poison in (False, True):
        with autograd.record():
            y = net(x)
            with amp.scale_loss(y.sum(), trainer) as scaled:
                autograd.backward(scaled)
        if poison:
            net.weight.grad()[0, 0] = np.inf
        assert bool(trainer.step(2)) is not poison  # a non-finite step is still skipped
    assert y.dtype == np.float32 and scaler.steps == 2 and scaler.skipped_steps == 1
    want = np.full((3, 4), 0.5, np.float32) - 0.1 / 2 * x.asnumpy().sum(0)
    np.testing.assert_allclose(net.weight.data().asnumpy(), want, rtol=1e-6)
    path = str(tmp_path / "t.states")
    trainer.save_states(path)
    trainer.load_states(path)
    assert amp.state_dict(trainer)["target_dtype"] == "float32"
    with pytest.raises(RuntimeError, match="chose float32 on this machine; call mxnet.amp.reset"):
        amp.init("bfloat16")


@pytest.mark.parametrize("cls", ["c", "d"])
def test_auto_on_fast_classes_is_bfloat16(on_class, caplog, cls):
    on_class(cls)
    with caplog.at_level(logging.INFO, logger="mxnet.amp"):
        amp.init("auto")
    assert amp.target_dtype() == "bfloat16"
    assert any("bfloat16 on CPU class (%s)" % cls in r.getMessage() for r in caplog.records)


def _block():
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(8, activation="relu"), gluon.nn.Dense(3))
    net.initialize(mx.init.Xavier())
    return net, mx.nd.array(np.random.RandomState(0).uniform(-1, 1, (2, 5)).astype(np.float32))


@pytest.mark.parametrize("cls", ["a", "b"])
def test_conversion_auto_keeps_the_float32_model_on_slow_classes(on_class, cls):
    on_class(cls)
    net, x = _block()
    low = amp.convert_hybrid_block(net, x, target_dtype="auto")
    np.testing.assert_array_equal(low(x).asnumpy(), net(x).asnumpy())
    assert {p.dtype for p in low.collect_params().values()} == {np.float32}
    sym = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=3, name="fc")
    out = C.convert(sym, {"fc_weight": mx.nd.ones((3, 5)), "fc_bias": mx.nd.zeros(3)}, {}, "auto")
    assert out.symbol.tojson() == sym.tojson() and out.summary.target_dtype == "float32"
    assert out.summary.casts == 0 and out.summary.param_bytes_before == out.summary.param_bytes_after == 72


@pytest.mark.parametrize("cls", CLASSES)
def test_conversion_to_bfloat16_warns_on_slow_classes(on_class, cls):
    on_class(cls)
    sym = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=3, name="fc")
    params = {"fc_weight": mx.nd.ones((3, 5)), "fc_bias": mx.nd.zeros(3)}
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        C.convert(sym, params, {}, "bfloat16")  # graph rewriting only: no kernel runs
        C.convert(sym, params, {}, "bfloat16")
    assert len(_slow_warnings(record)) == (cls in ("a", "b"))
    assert C.convert(sym, params, {}, "auto", ctx=mx.gpu(0)).summary.target_dtype == "float16"


def test_the_ratios_file_is_plain_versioned_data():
    with open(advice.RATIOS_FILE) as f:
        data = json.load(f)
    assert data["version"] == 1 and set(data["classes"]) == {c.name for c in cpu.CLASSES}
    keys = {"workload", "variant", "ratio", "date", "cpu", "command", "source"}
    for rows in data["classes"].values():
        for row in rows:
            assert set(row) == keys and row["variant"] in ("native", "emulated"), row
            low, high = row["ratio"]
            assert 0 < low <= high
    assert not any(r["variant"] == "native" for r in data["classes"]["a"])  # no bf16 kernels there
    for plan in ("emulated", "native"):  # class (b)'s default plan is emulated: its summary is of those rows
        rows = [r for r in data["classes"]["b"] if r["variant"] == plan]
        span = (min(r["ratio"][0] for r in rows), max(r["ratio"][1] for r in rows))
        want = "%.2f×" % span[0] if span[0] == span[1] else "%.2f–%.2f×" % span
        assert advice.ratio_summary("b", None if plan == "emulated" else plan).startswith(want + " float32 (")
    assert advice.ratio_summary("d", "emulated") is None


def test_each_class_plan_is_the_faster_for_every_op_measured_there():
    """The plans are chosen by the per-op evidence (bench/bench_plan.py --record): one plan per class holds only
    while no op measured on that class runs faster the other way."""
    data = lists.cpu_op_evidence()
    assert data["version"] == 1 and set(data["classes"]) == {c.name for c in cpu.CLASSES}
    measured = {name: entry for name, entry in data["classes"].items() if entry is not None}
    assert {"a", "b", "c"} <= set(measured)  # recorded on a class (c) CPU and its stand-ins
    for name, entry in measured.items():
        assert set(entry) == {"date", "cpu", "command", "ops"} and entry["ops"], name
        plan = lists.cpu_class_plan("bfloat16", name)[0]
        for row in entry["ops"]:
            assert row["emulated_ms"] > 0, row
            if name == "a":
                assert "native_ms" not in row  # no bfloat16 kernels: nothing to choose
                continue
            faster = NATIVE if row["native_ms"] < row["emulated_ms"] else EMULATED
            assert faster == plan, "class (%s) plans %s, but %s ran faster %s: %s" % (name, plan, row["label"],
                                                                                      faster, row)


@pytest.mark.parametrize("cls", ["b", "d"])
def test_hardware_report_says_what_bfloat16_does_here(tmp_path, cls):
    text = hardware_report_of_class(tmp_path, cls)
    klass = next(c for c in cpu.CLASSES if c.name == cls)
    plan, why = lists.cpu_class_plan("bfloat16", cls)
    assert ("bfloat16 on this CPU class: %s; the default plan: %s (%s); measured: %s"
            % (klass.bf16, plan, why, advice.ratio_summary(cls))) in text
    assert ("bfloat16 on CPU: emulated by default: MXNet's kernels exist but have no bf16 arithmetic here"
            in text) == (cls == "b")
    assert ("bfloat16 on CPU: native kernels" in text) == (cls == "d")
    assert ("with emulate=False (native): %s" % advice.ratio_summary("b", "native") in text) == (cls == "b")
    assert ("float16 hardware on this CPU: avx512_fp16" in text) == (cls == "d")


def _conv_fc_symbol():
    data = mx.sym.var("data")
    conv = mx.sym.Convolution(data, kernel=(3, 3), num_filter=4, pad=(1, 1), name="conv")
    fc = mx.sym.FullyConnected(mx.sym.relu(conv), num_hidden=3, name="fc")
    params = {"conv_weight": mx.nd.ones((4, 2, 3, 3)), "conv_bias": mx.nd.zeros(4),
              "fc_weight": mx.nd.ones((3, 4 * 5 * 5)), "fc_bias": mx.nd.zeros(3)}
    return fc, params


@pytest.mark.parametrize("cls", CLASSES)
def test_the_plan_chosen_per_class_in_a_converted_graph(on_class, cls, monkeypatch):
    """The default plan of each class in the graph the conversion builds (rewriting only: no kernel runs)."""
    on_class(cls)
    sym, params = _conv_fc_symbol()
    want = lists.cpu_class_plan("bfloat16", cls)[0]
    assert want == ("emulated" if cls in ("a", "b") else "native")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = C.convert(sym, params, {}, "bfloat16", fuse=False, kernels="mxnet")
        forced = C.convert(sym, params, {}, "bfloat16", fuse=False, kernels="mxnet", emulate=cls in ("c", "d"))
        monkeypatch.setenv("MXNET_AMP_EMULATE", "0")  # the override plans native on any CPU
        override = C.convert(sym, params, {}, "bfloat16", fuse=False, kernels="mxnet")
    modes = dict(out.summary.lp16_modes)
    assert modes == {want: 2}, modes
    ops = [n["op"] for n in json.loads(out.symbol.tojson())["nodes"]]
    assert ("amp_round" in ops) == (want == "emulated")  # emulation rounds around float32 kernels
    other = "native" if want == "emulated" else "emulated"
    assert dict(forced.summary.lp16_modes) == {other: 2}  # emulate= decides, whatever the class
    assert dict(override.summary.lp16_modes) == {"native": 2}


def test_the_plans_are_data_with_reasons():
    for dtype in lists.DTYPES:
        for klass in cpu.CLASSES:
            mode, why = lists.cpu_class_plan(dtype, klass.name)
            assert mode in (NATIVE, EMULATED) and len(why) > 20
    assert {c.name for c in cpu.CLASSES if lists.cpu_class_plan("float16", c.name)[0] == NATIVE} == set()
    assert "faster emulated" in lists.cpu_class_plan("bfloat16", "b")[1]
    with pytest.raises(ValueError, match=r"Unknown CPU class 'e': expected one of 'a', 'b', 'c', 'd'"):
        lists.cpu_class_plan("bfloat16", "e")
