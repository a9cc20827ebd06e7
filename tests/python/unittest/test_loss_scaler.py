"""Tests for mxnet.amp.loss_scaler: config validation, the pure update rule, state_dict round trips."""
import json
import logging
import math

import pytest

from mxnet.amp.training.loss_scaler import LossScaler, ScalerConfig, ScalerState, next_state


def _reference_scales(finite_seq, init, growth, backoff, interval, lo, hi):
    """Plain re-statement of the dynamic rule, written independently of next_state."""
    scale, good, out = init, 0, []
    for finite in finite_seq:
        if finite:
            good += 1
            if good == interval:
                scale, good = min(scale * growth, hi), 0
        else:
            scale, good = max(scale * backoff, lo), 0
        out.append(scale)
    return out


def test_defaults_match_the_issue():
    cfg = LossScaler().config
    assert (cfg.init_scale, cfg.growth_factor, cfg.backoff_factor, cfg.growth_interval, cfg.min_scale,
            cfg.max_scale, cfg.dynamic) == (2.0 ** 16, 2.0, 0.5, 2000, 1.0, 2.0 ** 24, True)


@pytest.mark.parametrize("dtype,scale,dynamic", [("float16", 2.0 ** 16, True), (None, 2.0 ** 16, True),
                                                 ("bfloat16", 1.0, False)])
def test_default_for_dtype(dtype, scale, dynamic):
    scaler = LossScaler.default_for(dtype)
    assert scaler.scale == scale and scaler.config.dynamic is dynamic


def test_default_for_rejects_unknown_dtype():
    with pytest.raises(ValueError, match="'int8'.*'float16', 'bfloat16', 'float32', None"):
        LossScaler.default_for("int8")
    # float32: what amp.init("auto") chose where low precision does not pay; static 1, still skipping
    assert LossScaler.default_for("float32").state_dict() == LossScaler.default_for("bfloat16").state_dict()


@pytest.mark.parametrize("kwargs,match", [
    ({"growth_factor": 1.0}, "growth_factor must be > 1"),
    ({"growth_factor": 0.5}, "growth_factor"),
    ({"backoff_factor": 1.0}, "backoff_factor must be < 1"),
    ({"backoff_factor": 0.0}, "backoff_factor must be > 0"),
    ({"growth_interval": 0}, "growth_interval must be >= 1"),
    ({"init_scale": 0.0}, "init_scale must be > 0"),
    ({"init_scale": -4.0}, "init_scale"),
    ({"init_scale": math.inf}, "init_scale must be finite"),
    ({"init_scale": math.nan}, "init_scale must be finite"),
    ({"min_scale": 0.0}, "min_scale"),
    ({"min_scale": 8.0, "max_scale": 4.0, "init_scale": 4.0}, "min_scale .* <= max_scale"),
    ({"init_scale": 2.0 ** 30}, r"init_scale .* within \[min_scale, max_scale\]"),
    ({"floor_warning_steps": 0}, "floor_warning_steps"),
])
def test_invalid_arguments_raise_value_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LossScaler(**kwargs)


@pytest.mark.parametrize("kwargs", [{"growth_interval": 2.5}, {"growth_interval": True},
                                    {"init_scale": "1024"}, {"dynamic": 1}])
def test_wrong_types_raise_type_error(kwargs):
    with pytest.raises(TypeError, match=next(iter(kwargs))):
        LossScaler(**kwargs)


def test_static_scale_outside_dynamic_bounds_is_allowed():
    assert LossScaler(init_scale=0.25, dynamic=False).scale == 0.25


def test_config_is_frozen():
    with pytest.raises(AttributeError):
        LossScaler().config.init_scale = 2.0


def test_next_state_is_pure_and_matches_reference():
    cfg = ScalerConfig(init_scale=2.0 ** 4, growth_interval=3, min_scale=2.0, max_scale=2.0 ** 6)
    pattern = [True] * 7 + [False] * 6 + [True] * 10 + [False, True, True, True, False]
    expected = _reference_scales(pattern, 16.0, 2.0, 0.5, 3, 2.0, 64.0)
    state = ScalerState(scale=cfg.init_scale)
    before = state
    got = []
    for finite in pattern:
        state = next_state(cfg, state, finite)
        got.append(state.scale)
    assert before == ScalerState(scale=16.0)  # the input state was not mutated
    assert got == expected
    assert state.steps == len(pattern)
    assert state.skipped_steps == pattern.count(False)
    assert state.last_overflow_step == len(pattern)
    assert max(got) == 64.0 and min(got) == 2.0  # both bounds were hit and held


def test_next_state_growth_tracker_resets_on_overflow():
    cfg = ScalerConfig(init_scale=8.0, growth_interval=2)
    state = next_state(cfg, ScalerState(scale=8.0), True)
    assert state.growth_tracker == 1
    state = next_state(cfg, state, False)
    assert (state.scale, state.growth_tracker, state.last_overflow_step) == (4.0, 0, 2)
    state = next_state(cfg, next_state(cfg, state, True), True)
    assert (state.scale, state.growth_tracker) == (8.0, 0)


def test_static_scaler_keeps_scale_but_counts_skips():
    scaler = LossScaler(init_scale=128.0, dynamic=False)
    for finite in [True, False, False, True]:
        scaler.update(finite)
    assert scaler.scale == 128.0
    assert (scaler.steps, scaler.skipped_steps, scaler.last_overflow_step) == (4, 2, 3)


def test_floor_warning_logged_once(caplog):
    scaler = LossScaler(init_scale=2.0, min_scale=1.0, floor_warning_steps=5)
    with caplog.at_level(logging.WARNING, logger="mxnet.amp.loss_scaler"):
        for _ in range(12):
            scaler.update(False)
    warnings = [r for r in caplog.records if "not fp16-safe" in r.getMessage()]
    assert len(warnings) == 1
    assert "bfloat16" in warnings[0].getMessage()
    assert scaler.state.steps_at_floor == 12


def _non_default_scaler():
    scaler = LossScaler(init_scale=512.0, growth_factor=4.0, backoff_factor=0.25, growth_interval=7,
                        min_scale=2.0, max_scale=2.0 ** 20, floor_warning_steps=33)
    for finite in [True, True, False, True, True, True]:
        scaler.update(finite)
    return scaler


def test_state_dict_round_trips_every_field_through_json():
    scaler = _non_default_scaler()
    original = scaler.state_dict()
    fields_ = set(ScalerConfig.__dataclass_fields__) | set(ScalerState.__dataclass_fields__) | {"version"}
    assert set(original) == fields_  # no field can be silently lost
    restored = LossScaler()
    restored.load_state_dict(json.loads(json.dumps(original)))
    assert restored.state_dict() == original
    assert restored.config == scaler.config and restored.state == scaler.state
    # and the restored scaler evolves exactly like the original
    for finite in [False, True, True, True, True, True, True, True]:
        scaler.update(finite)
        restored.update(finite)
    assert restored.state_dict() == scaler.state_dict()


def test_state_dict_values_are_plain_python():
    for value in _non_default_scaler().state_dict().values():
        assert value is None or type(value) in (int, float, bool)


@pytest.mark.parametrize("key", ["scale", "init_scale", "min_scale", "max_scale", "growth_factor",
                                 "backoff_factor", "growth_interval", "floor_warning_steps"])
@pytest.mark.parametrize("bad", [0, -1.0, math.inf, math.nan])
def test_load_state_dict_rejects_bad_values_naming_the_key(key, bad):
    scaler = _non_default_scaler()
    before = scaler.state_dict()
    state = dict(before, **{key: bad})
    with pytest.raises(ValueError, match=key):
        scaler.load_state_dict(state)
    assert scaler.state_dict() == before


@pytest.mark.parametrize("key", ["steps", "skipped_steps", "growth_tracker", "steps_at_floor",
                                 "last_overflow_step"])
@pytest.mark.parametrize("bad", [-1, math.inf, math.nan])
def test_load_state_dict_rejects_bad_counters(key, bad):
    state = dict(_non_default_scaler().state_dict(), **{key: bad})
    with pytest.raises(ValueError, match=key):
        LossScaler().load_state_dict(state)


def test_load_state_dict_rejects_missing_and_unknown_keys():
    state = _non_default_scaler().state_dict()
    missing = dict(state)
    del missing["growth_tracker"]
    with pytest.raises(ValueError, match="missing keys \\['growth_tracker'\\]"):
        LossScaler().load_state_dict(missing)
    with pytest.raises(ValueError, match="unknown keys \\['_scale'\\]"):
        LossScaler().load_state_dict(dict(state, _scale=1.0))
    with pytest.raises(ValueError, match="missing keys"):
        LossScaler().load_state_dict({})


def test_load_state_dict_rejects_other_versions_and_non_dicts():
    with pytest.raises(ValueError, match="version 2"):
        LossScaler().load_state_dict(dict(_non_default_scaler().state_dict(), version=2))
    with pytest.raises(TypeError, match="list"):
        LossScaler().load_state_dict([])


@pytest.mark.parametrize("changes,match", [
    ({"scale": 2.0 ** 30}, "scale"),
    ({"growth_tracker": 7}, "growth_tracker"),
    ({"skipped_steps": 99}, "skipped_steps"),
    ({"last_overflow_step": None}, "last_overflow_step"),
    ({"last_overflow_step": 100}, "last_overflow_step"),
    ({"steps": 2.0}, "steps"),
])
def test_load_state_dict_rejects_inconsistent_fields(changes, match):
    with pytest.raises(ValueError, match=match):
        LossScaler().load_state_dict(dict(_non_default_scaler().state_dict(), **changes))


def test_numpy_scalars_are_accepted():
    import numpy as np
    scaler = LossScaler(init_scale=np.float32(1024), growth_interval=np.int64(100))
    assert scaler.scale == 1024.0 and scaler.config.growth_interval == 100
    assert type(scaler.config.growth_interval) is int and type(scaler.scale) is float
    with pytest.raises(TypeError, match="growth_interval must be an int"):
        LossScaler(growth_interval=np.float64(100.0))


def test_a_static_scaler_counts_its_device_flags_on_the_host_without_device_steps(monkeypatch):
    """bfloat16's static scale: no amp_scaler_update per step; the flags are counted when the state is read, or
    every FLAG_BATCH steps, and the state is the host rule's, exactly."""
    import mxnet as mx
    from mxnet.amp.core import ops
    from mxnet.amp.training import loss_scaler as module
    monkeypatch.setattr(ops, "scaler_update", lambda *a, **k: pytest.fail("a static scale ran a device step"))
    scaler, reference = LossScaler.default_for("bfloat16"), ScalerState(scale=1.0)
    finite = [True] * (module.FLAG_BATCH + 5)
    finite[3] = finite[module.FLAG_BATCH + 2] = False
    for step, ok in enumerate(finite, 1):
        scaler.update_on_device(mx.nd.array([1.0 if ok else 0.0]))
        reference = next_state(scaler.config, reference, ok)
        assert len(scaler._flags) == step % module.FLAG_BATCH  # folded once FLAG_BATCH wait
    assert scaler.loss_scale() == 1.0
    assert scaler.state == reference
    assert (scaler.steps, scaler.skipped_steps, scaler.last_overflow_step) == (len(finite), 2, module.FLAG_BATCH + 3)
    scaler.update_on_device(mx.nd.array([0.0]))
    scaler.load_state_dict(LossScaler.default_for("bfloat16").state_dict())  # pending flags go with the old state
    assert scaler.steps == 0 and scaler.skipped_steps == 0
