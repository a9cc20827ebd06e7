"""Loss scaling for mixed precision training: a frozen config, a frozen state and a pure update rule.

The only thing that changes from step to step is the :class:`ScalerState`. :func:`next_state` computes the
state after one optimizer step from the state before it and whether that step's gradients were finite; it has
no side effects and needs no device. :class:`LossScaler` holds one config and the current state, and adds the
JSON-safe :meth:`LossScaler.state_dict` / :meth:`LossScaler.load_state_dict` used by checkpoints.

Dynamic scaling (the float16 default): the scale is multiplied by ``backoff_factor`` (never below
``min_scale``) on every step whose gradients hold an inf or nan, and by ``growth_factor`` (never above
``max_scale``) after ``growth_interval`` consecutive finite steps. A new scale applies from the next step on;
the step that overflowed is skipped, so there is no one-step lag. Static scaling keeps the scale fixed but still
skips non-finite steps; bfloat16 defaults to a static scale of 1 (its exponent range is float32's).

A trainer stepping without host syncs advances the state on the device instead (a
:class:`~mxnet.amp.device_scaler.DeviceMirror`, the same rule in float64); the host copy is brought up to date
the next time anything reads it (``scale``, ``state``, ``state_dict``...), which waits for that step.
"""
from dataclasses import dataclass, fields
import logging
import math
import numbers

import numpy as np

__all__ = ["LossScaler", "ScalerConfig", "ScalerState", "next_state"]

#: Version of the dictionary returned by :meth:`LossScaler.state_dict`.
STATE_VERSION = 1

_LOG = logging.getLogger(__name__)


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


_CONFIG_KEYS = tuple(f.name for f in fields(ScalerConfig))
_STATE_KEYS = tuple(f.name for f in fields(ScalerState))


def _state_from_dict(config, values):
    """Validate the ``ScalerState`` part of a state dict against ``config`` and build it."""
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


class LossScaler:
    """Dynamic or static loss scaler.

    Parameters
    ----------
    init_scale, growth_factor, backoff_factor, growth_interval, min_scale, max_scale, dynamic, floor_warning_steps
        See :class:`ScalerConfig`; the defaults are the float16 defaults (dynamic, starting at 2**16).

    Example
    -------
    The usual loop (see :func:`mxnet.amp.trainer.init_trainer`)::

        scaler = amp.init_trainer(trainer)          # or amp.LossScaler(...) passed as loss_scaler=
        with autograd.record():
            loss = loss_fn(net(x), y)
            with amp.scale_loss(loss, trainer) as scaled:
                autograd.backward(scaled)
        applied = trainer.step(batch_size)          # False: non-finite gradients, update skipped
    """

    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                 min_scale=1.0, max_scale=2.0 ** 24, dynamic=True, floor_warning_steps=1000):
        self._config = ScalerConfig(init_scale=init_scale, growth_factor=growth_factor,
                                    backoff_factor=backoff_factor, growth_interval=growth_interval,
                                    min_scale=min_scale, max_scale=max_scale, dynamic=dynamic,
                                    floor_warning_steps=floor_warning_steps)
        self._state = ScalerState(scale=self._config.init_scale)
        self._mirror = None  # DeviceMirror while the state advances on a device

    @classmethod
    def default_for(cls, dtype):
        """Return the default scaler for a target dtype.

        Parameters
        ----------
        dtype : {'float16', 'bfloat16', None}
            ``'float16'`` and ``None`` (no ``amp.init``, e.g. a model cast to float16 by hand) give a dynamic
            scaler; ``'bfloat16'`` gives a static scale of 1 that still skips non-finite steps.

        Raises
        ------
        ValueError
            For any other dtype.
        """
        if dtype in ("float16", None):
            return cls()
        if dtype == "bfloat16":
            return cls(init_scale=1.0, dynamic=False)
        raise ValueError("no default loss scaler for dtype %r; valid: 'float16', 'bfloat16', None" % (dtype,))

    @property
    def config(self):
        """ScalerConfig: the frozen settings."""
        return self._config

    @property
    def state(self):
        """ScalerState: the current (frozen) state (waits for a step advanced on the device, if any)."""
        self._settle()
        return self._state

    @property
    def scale(self):
        """float: the scale the next loss is multiplied by."""
        return self.state.scale

    @property
    def steps(self):
        """int: optimizer steps seen, applied and skipped."""
        return self.state.steps

    @property
    def skipped_steps(self):
        """int: steps skipped because of non-finite gradients."""
        return self.state.skipped_steps

    @property
    def last_overflow_step(self):
        """int or None: 1-based number of the last skipped step."""
        return self.state.last_overflow_step

    def update(self, finite):
        """Advance the state by one step with :func:`next_state`; warn when stuck at ``min_scale``.

        Parameters
        ----------
        finite : bool
            Whether the step's gradients were all finite.

        Returns
        -------
        bool
            ``finite``, for chaining.
        """
        before = self.state
        self._mirror = None  # the host state is ahead of any device copy now
        self._advance(before, next_state(self._config, before, bool(finite)))
        return bool(finite)

    def device_state(self, ctx):
        """The state as a float64 (6,) NDArray on ``ctx`` (created from the host state on first use).

        Used by fused optimizer updates, which divide the gradients by its element 0 on the device.
        """
        from .device_scaler import DeviceMirror  # lazy: keeps this module free of MXNet
        if self._mirror is None or self._mirror.ctx != ctx:
            self._mirror = DeviceMirror(self._config, self.state, ctx)
        return self._mirror.array

    def update_on_device(self, flag):
        """Advance the state by one step on the device from a float32 (1,) finite flag; no host sync.

        The host state (``scale``, ``state``...) catches up, exactly, the next time it is read.
        """
        self.device_state(flag.context)
        self._mirror.step(flag)

    def loss_scale(self):
        """What a loss is multiplied by: the host scale, or a float32 (1,) NDArray when a step advanced on the
        device has not been read back yet and the scale may have changed (dynamic scaling)."""
        if self._mirror is not None and self._mirror.pending and self._config.dynamic:
            return self._mirror.scale
        return self.state.scale

    def _settle(self):
        if self._mirror is not None and self._mirror.pending:
            self._advance(self._state, self._mirror.read())

    def _advance(self, before, after):
        self._state = after
        floor = self._config.floor_warning_steps
        if before.steps_at_floor < floor <= after.steps_at_floor:
            _LOG.warning("AMP: the loss scale has been at its minimum (%g) for %d steps; the model is probably "
                         "not fp16-safe; consider bfloat16 or adding the offending ops to extra_fp32_ops",
                         self._config.min_scale, after.steps_at_floor)

    def state_dict(self):
        """Return every config and state field as a JSON-safe dict with a ``"version"`` key."""
        out = {"version": STATE_VERSION}
        out.update({key: getattr(self._config, key) for key in _CONFIG_KEYS})
        out.update({key: getattr(self.state, key) for key in _STATE_KEYS})
        return out

    def load_state_dict(self, state_dict):
        """Restore config and state from :meth:`state_dict` output; nothing changes if it is invalid.

        Parameters
        ----------
        state_dict : dict

        Raises
        ------
        TypeError
            ``state_dict`` is not a dict.
        ValueError
            A key is missing or unknown, the version is unsupported, or a value has the wrong type or is out of
            range (negative, zero where not allowed, inf, nan, inconsistent with another field); the message
            names the key.
        """
        if not isinstance(state_dict, dict):
            raise TypeError("loss scaler state must be a dict, got %s" % type(state_dict).__name__)
        expected = {"version"} | set(_CONFIG_KEYS) | set(_STATE_KEYS)
        missing, unknown = sorted(expected - set(state_dict)), sorted(set(state_dict) - expected)
        if missing or unknown:
            raise ValueError("invalid loss scaler state: missing keys %s, unknown keys %s" % (missing, unknown))
        if state_dict["version"] != STATE_VERSION:
            raise ValueError("unsupported loss scaler state version %r; supported: %d"
                             % (state_dict["version"], STATE_VERSION))
        try:
            config = ScalerConfig(**{key: state_dict[key] for key in _CONFIG_KEYS})
            state = _state_from_dict(config, state_dict)
        except TypeError as err:  # a wrongly typed value is an invalid value of that key
            raise ValueError("invalid loss scaler state: %s" % err) from err
        self._config, self._state, self._mirror = config, state, None

    def __repr__(self):
        kind = "dynamic" if self._config.dynamic else "static"
        return "LossScaler(%s, scale=%g, steps=%d, skipped=%d)" % (kind, self.scale, self.steps, self.skipped_steps)

