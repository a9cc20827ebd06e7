"""A loss scaler's settings, its state and the pure rule that advances it (no MXNet, no device).

:class:`ScalerConfig` and :class:`ScalerState` are frozen. :func:`next_state` computes the state after one
optimizer step from the state before it and whether that step's gradients were finite; it has no side effects.
:func:`state_from_dict` validates a stored state against a config. The host scaler
(:class:`~mxnet.amp.loss_scaler.LossScaler`) and its device copy (:mod:`mxnet.amp.device_scaler`) both build on
this module; it imports neither.
"""
from dataclasses import dataclass, fields
import math
import numbers

import numpy as np

__all__ = ["ScalerConfig", "ScalerState", "next_state", "state_from_dict", "CONFIG_KEYS", "STATE_KEYS"]


def _check_number(key, value, low=None, high=None, low_open=True, high_open=True, integer=False):
    """Return ``value`` as float (or int) after checking type, finiteness and the (open or closed) range."""
    kind = numbers.Integral if integer else numbers.Real
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, kind):
        raise TypeError("%s must be %s, got %r (%s)"
                        % (key, "an int" if integer else "a number", value, type(value).__name__))
    value = int(value) if integer else float(value)
    if not integer and not math.isfinite(value):
        raise ValueError("%s must be finite, got %r" % (key, value))
    if low is not None and (value <= low if low_open else value < low):
        raise ValueError("%s must be %s %r, got %r" % (key, ">" if low_open else ">=", low, value))
    if high is not None and (value >= high if high_open else value > high):
        raise ValueError("%s must be %s %r, got %r" % (key, "<" if high_open else "<=", high, value))
    return value if integer else float(value)


@dataclass(frozen=True)
class ScalerConfig:
    """Settings of a loss scaler; never changes while training (variants via ``dataclasses.replace``).

    Parameters
    ----------
    init_scale : float
        Scale of the first step (> 0; within ``[min_scale, max_scale]`` when dynamic).
    growth_factor : float
        Multiplier applied after ``growth_interval`` finite steps (> 1).
    backoff_factor : float
        Multiplier applied after a non-finite step (strictly between 0 and 1).
    growth_interval : int
        Number of consecutive finite steps before the scale grows (>= 1).
    min_scale, max_scale : float
        Bounds of a dynamic scale (0 < min_scale <= max_scale).
    dynamic : bool
        False keeps ``init_scale`` forever (non-finite steps are still skipped).
    floor_warning_steps : int
        A dynamic scaler that sits at ``min_scale`` for this many consecutive steps logs a warning (>= 1).

    Raises
    ------
    TypeError, ValueError
        For a value of the wrong type or out of range; the message names the argument.
    """

    init_scale: float = 2.0 ** 16
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000
    min_scale: float = 1.0
    max_scale: float = 2.0 ** 24
    dynamic: bool = True
    floor_warning_steps: int = 1000

    def __post_init__(self):
        if not isinstance(self.dynamic, bool):
            raise TypeError("dynamic must be a bool, got %r" % (self.dynamic,))
        checked = {
            "init_scale": _check_number("init_scale", self.init_scale, low=0.0),
            "growth_factor": _check_number("growth_factor", self.growth_factor, low=1.0),
            "backoff_factor": _check_number("backoff_factor", self.backoff_factor, low=0.0, high=1.0),
            "growth_interval": _check_number("growth_interval", self.growth_interval, low=1,
                                             low_open=False, integer=True),
            "min_scale": _check_number("min_scale", self.min_scale, low=0.0),
            "max_scale": _check_number("max_scale", self.max_scale, low=0.0),
            "floor_warning_steps": _check_number("floor_warning_steps", self.floor_warning_steps, low=1,
                                                 low_open=False, integer=True),
        }
        for key, value in checked.items():
            object.__setattr__(self, key, value)
        if self.min_scale > self.max_scale:
            raise ValueError("min_scale (%r) must be <= max_scale (%r)" % (self.min_scale, self.max_scale))
        if self.dynamic and not self.min_scale <= self.init_scale <= self.max_scale:
            raise ValueError("init_scale (%r) must lie within [min_scale, max_scale] = [%r, %r]"
                             % (self.init_scale, self.min_scale, self.max_scale))


@dataclass(frozen=True)
class ScalerState:
    """Everything about a loss scaler that changes while training.

    Parameters
    ----------
    scale : float
        Scale the next loss is multiplied by.
    growth_tracker : int
        Consecutive finite steps since the scale last changed (or since the last overflow).
    steps : int
        Optimizer steps seen (applied and skipped).
    skipped_steps : int
        Steps skipped because a gradient was not finite.
    last_overflow_step : int or None
        1-based number of the last skipped step, None if no step was skipped yet.
    steps_at_floor : int
        Consecutive steps that ended with a dynamic scale at ``min_scale``.
    """

    scale: float
    growth_tracker: int = 0
    steps: int = 0
    skipped_steps: int = 0
    last_overflow_step: object = None
    steps_at_floor: int = 0


def next_state(config, state, finite):
    """Return the scaler state after one optimizer step (a pure function).

    Parameters
    ----------
    config : ScalerConfig
    state : ScalerState
        State before the step.
    finite : bool
        Whether every gradient of the step was finite (if not, the step was skipped).

    Returns
    -------
    ScalerState
        The state to use for the next step.

    Example
    -------
    >>> cfg = ScalerConfig(init_scale=8.0, growth_interval=2)
    >>> next_state(cfg, ScalerState(scale=8.0), finite=False).scale
    4.0
    """
    steps = state.steps + 1
    scale, tracker = state.scale, state.growth_tracker
    if finite:
        skipped, last_overflow = state.skipped_steps, state.last_overflow_step
        if config.dynamic:
            tracker += 1
            if tracker >= config.growth_interval:
                scale, tracker = min(scale * config.growth_factor, config.max_scale), 0
    else:
        skipped, last_overflow = state.skipped_steps + 1, steps
        if config.dynamic:
            scale, tracker = max(scale * config.backoff_factor, config.min_scale), 0
    at_floor = state.steps_at_floor + 1 if config.dynamic and scale <= config.min_scale else 0
    return ScalerState(scale=scale, growth_tracker=tracker, steps=steps, skipped_steps=skipped,
                       last_overflow_step=last_overflow, steps_at_floor=at_floor)


#: Field names of :class:`ScalerConfig` and :class:`ScalerState`, in order (the keys of a stored state).
CONFIG_KEYS = tuple(f.name for f in fields(ScalerConfig))
STATE_KEYS = tuple(f.name for f in fields(ScalerState))


def state_from_dict(config, values):
    """Validate the :class:`ScalerState` fields of a stored state against ``config`` and build the state.

    Parameters
    ----------
    config : ScalerConfig
        The settings the state must be consistent with (scale bounds, growth interval).
    values : dict
        Holds every key of :data:`STATE_KEYS` (other keys are ignored).

    Returns
    -------
    ScalerState

    Raises
    ------
    TypeError, ValueError
        A value of the wrong type, out of range or inconsistent with another field; the message names the key.
    """
    scale = _check_number("scale", values["scale"], low=0.0)
    counters = {key: _check_number(key, values[key], low=0, low_open=False, integer=True)
                for key in ("growth_tracker", "steps", "skipped_steps", "steps_at_floor")}
    last = values["last_overflow_step"]
    if last is not None:
        last = _check_number("last_overflow_step", last, low=1, high=counters["steps"],
                             low_open=False, high_open=False, integer=True)
    if counters["skipped_steps"] > counters["steps"]:
        raise ValueError("skipped_steps (%d) must be <= steps (%d)" % (counters["skipped_steps"], counters["steps"]))
    if (last is None) != (counters["skipped_steps"] == 0):
        raise ValueError("last_overflow_step (%r) must be None exactly when skipped_steps (%d) is 0"
                         % (last, counters["skipped_steps"]))
    if config.dynamic:
        if not config.min_scale <= scale <= config.max_scale:
            raise ValueError("scale (%r) must lie within [min_scale, max_scale] = [%r, %r]"
                             % (scale, config.min_scale, config.max_scale))
        if counters["growth_tracker"] >= config.growth_interval:
            raise ValueError("growth_tracker (%d) must be < growth_interval (%d)"
                             % (counters["growth_tracker"], config.growth_interval))
    return ScalerState(scale=scale, last_overflow_step=last, **counters)
