"""Loss scaling for mixed precision training: :class:`LossScaler`, the scaler trainers hold.

A :class:`LossScaler` holds one frozen :class:`~mxnet.amp.scaler_state.ScalerConfig` and the current frozen
:class:`~mxnet.amp.scaler_state.ScalerState`; the only thing that changes from step to step is that state, and
:func:`~mxnet.amp.scaler_state.next_state` (a pure function, no device) computes it. The scaler adds the
JSON-safe :meth:`LossScaler.state_dict` / :meth:`LossScaler.load_state_dict` used by checkpoints.
``ScalerConfig``, ``ScalerState`` and ``next_state`` are re-exported here.

Dynamic scaling (the float16 default): the scale is multiplied by ``backoff_factor`` (never below
``min_scale``) on every step whose gradients hold an inf or nan, and by ``growth_factor`` (never above
``max_scale``) after ``growth_interval`` consecutive finite steps. A new scale applies from the next step on;
the step that overflowed is skipped, so there is no one-step lag. Static scaling keeps the scale fixed but still
skips non-finite steps; bfloat16 defaults to a static scale of 1 (its exponent range is float32's).

A trainer stepping without host syncs advances a dynamic state on the device instead (a
:class:`~mxnet.amp.device_scaler.DeviceMirror`, the same rule in float64); the host copy is brought up to date
the next time anything reads it (``scale``, ``state``, ``state_dict``...), which waits for that step. A static
scale never changes, so nothing runs on the device for it: the steps' finite flags are kept and counted on the host
when the state is read (or every :data:`FLAG_BATCH` steps).
"""
import logging
from typing import Any, Dict, Optional, Union

import mxnet as mx

from .device_scaler import DeviceMirror
from .scaler_state import CONFIG_KEYS, STATE_KEYS, ScalerConfig, ScalerState, next_state, state_from_dict

__all__ = ["LossScaler", "ScalerConfig", "ScalerState", "next_state"]

#: Version of the dictionary returned by :meth:`LossScaler.state_dict`.
STATE_VERSION = 1
#: A static scaler counts the finite flags of its device steps once this many wait (one host sync).
FLAG_BATCH = 64

_LOG = logging.getLogger("mxnet.amp.loss_scaler")  # the logger name of mxnet.amp 0.1, which users filter by


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

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, min_scale: float = 1.0, max_scale: float = 2.0 ** 24,
                 dynamic: bool = True, floor_warning_steps: int = 1000):
        self._config = ScalerConfig(init_scale=init_scale, growth_factor=growth_factor,
                                    backoff_factor=backoff_factor, growth_interval=growth_interval,
                                    min_scale=min_scale, max_scale=max_scale, dynamic=dynamic,
                                    floor_warning_steps=floor_warning_steps)
        self._state = ScalerState(scale=self._config.init_scale)
        self._mirror = None  # DeviceMirror while a dynamic state advances on a device
        self._flags = []  # float32 (1,) finite flags of a static scaler's device steps, not counted yet

    @classmethod
    def default_for(cls, dtype: Optional[str]) -> "LossScaler":
        """Return the default scaler for a target dtype.

        Parameters
        ----------
        dtype : {'float16', 'bfloat16', 'float32', None}
            ``'float16'`` and ``None`` (no ``amp.init``, e.g. a model cast to float16 by hand) give a dynamic
            scaler; ``'bfloat16'`` and ``'float32'`` (``amp.init("auto")`` chose no low precision) give a
            static scale of 1 that still skips non-finite steps.

        Raises
        ------
        ValueError
            For any other dtype.
        """
        if dtype in ("float16", None):
            return cls()
        if dtype in ("bfloat16", "float32"):
            return cls(init_scale=1.0, dynamic=False)
        raise ValueError("no default loss scaler for dtype %r; valid: 'float16', 'bfloat16', 'float32', None"
                         % (dtype,))

    @property
    def config(self) -> ScalerConfig:
        """ScalerConfig: the frozen settings."""
        return self._config

    @property
    def state(self) -> ScalerState:
        """ScalerState: the current (frozen) state (waits for a step advanced on the device, if any)."""
        self._settle()
        return self._state

    @property
    def scale(self) -> float:
        """float: the scale the next loss is multiplied by."""
        return self.state.scale

    @property
    def steps(self) -> int:
        """int: optimizer steps seen, applied and skipped."""
        return self.state.steps

    @property
    def skipped_steps(self) -> int:
        """int: steps skipped because of non-finite gradients."""
        return self.state.skipped_steps

    @property
    def last_overflow_step(self) -> Optional[int]:
        """int or None: 1-based number of the last skipped step."""
        return self.state.last_overflow_step

    def update(self, finite: bool) -> None:
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

    def device_state(self, ctx: mx.Context) -> mx.nd.NDArray:
        """The state as a float64 (6,) NDArray on ``ctx`` (created from the host state on first use).

        Used by fused optimizer updates, which divide the gradients by its element 0 on the device.
        """
        if self._mirror is None or self._mirror.ctx != ctx:
            self._mirror = DeviceMirror(self._config, self.state, ctx)
        return self._mirror.array

    def update_on_device(self, flag: mx.nd.NDArray) -> None:
        """Advance the state by one step from a float32 (1,) device finite flag; no host sync.

        The host state (``scale``, ``state``...) catches up, exactly, the next time it is read. A dynamic state
        advances on the device; a static one keeps the flag (its scale cannot change) and counts it then.
        """
        if not self._config.dynamic:
            self._flags.append(flag)
            if len(self._flags) >= FLAG_BATCH:
                self._settle()
            return
        self.device_state(flag.context)
        self._mirror.step(flag)

    def loss_scale(self) -> Union[float, mx.nd.NDArray]:
        """What a loss is multiplied by: the host scale, or a float32 (1,) NDArray when a step advanced on the
        device has not been read back yet and the scale may have changed (dynamic scaling). A static scale is
        read without waiting for the device's steps (no host sync)."""
        if not self._config.dynamic:  # steps never change a static scale: no need to wait for them
            return self._state.scale
        if self._mirror is not None and self._mirror.pending:
            return self._mirror.scale
        return self.state.scale

    def _settle(self):
        flags, self._flags = self._flags, []
        if len(flags) > 1 and len({flag.context for flag in flags}) == 1:
            flags = [mx.nd.concat(*(flag.as_nd_ndarray() for flag in flags), dim=0)]  # one read for them all
        for finite in (value for flag in flags for value in flag.asnumpy()):
            self._advance(self._state, next_state(self._config, self._state, bool(finite)))
        if self._mirror is not None and self._mirror.pending:
            self._advance(self._state, self._mirror.read())

    def _advance(self, before, after):
        self._state = after
        floor = self._config.floor_warning_steps
        if before.steps_at_floor < floor <= after.steps_at_floor:
            _LOG.warning("AMP: the loss scale has been at its minimum (%g) for %d steps; the model is probably "
                         "not fp16-safe; consider bfloat16 or adding the offending ops to extra_fp32_ops",
                         self._config.min_scale, after.steps_at_floor)

    def state_dict(self) -> Dict[str, Any]:
        """Return every config and state field as a JSON-safe dict with a ``"version"`` key."""
        out = {"version": STATE_VERSION}
        out.update({key: getattr(self._config, key) for key in CONFIG_KEYS})
        out.update({key: getattr(self.state, key) for key in STATE_KEYS})
        return out

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
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
        expected = {"version"} | set(CONFIG_KEYS) | set(STATE_KEYS)
        missing, unknown = sorted(expected - set(state_dict)), sorted(set(state_dict) - expected)
        if missing or unknown:
            raise ValueError("invalid loss scaler state: missing keys %s, unknown keys %s" % (missing, unknown))
        if state_dict["version"] != STATE_VERSION:
            raise ValueError("unsupported loss scaler state version %r; supported: %d"
                             % (state_dict["version"], STATE_VERSION))
        try:
            config = ScalerConfig(**{key: state_dict[key] for key in CONFIG_KEYS})
            state = state_from_dict(config, state_dict)
        except TypeError as err:  # a wrongly typed value is an invalid value of that key
            raise ValueError("invalid loss scaler state: %s" % err) from err
        self._config, self._state, self._mirror, self._flags = config, state, None, []

    def __repr__(self):
        kind = "dynamic" if self._config.dynamic else "static"
        return "LossScaler(%s, scale=%g, steps=%d, skipped=%d)" % (kind, self.scale, self.steps, self.skipped_steps)
