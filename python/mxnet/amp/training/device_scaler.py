"""A loss scaler's state on a device: the step rule runs there, so a training step never waits for its flag.

:class:`DeviceMirror` holds a :class:`~mxnet.amp.scaler_state.ScalerState` as a float64 (6,) NDArray (scale,
growth_tracker, steps, skipped_steps, last_overflow_step with 0 for none, steps_at_floor; float64 holds every
counter exactly up to 2**53) and advances it with the library's ``amp_scaler_update`` op, queued on MXNet's
engine after the step's finite check. :class:`~mxnet.amp.loss_scaler.LossScaler` reads it back lazily.
"""
import numpy as np

from mxnet import ndarray as nd
from ..core import ops
from .scaler_state import ScalerState

__all__ = ["DeviceMirror", "encode", "decode"]


def encode(state):
    """The six float64 values of a ScalerState, in the device layout."""
    return [state.scale, state.growth_tracker, state.steps, state.skipped_steps, state.last_overflow_step or 0,
            state.steps_at_floor]


def decode(values):
    """The ScalerState of six device values (inverse of :func:`encode`)."""
    scale, tracker, steps, skipped, last, at_floor = (float(v) for v in values)
    return ScalerState(scale=scale, growth_tracker=int(tracker), steps=int(steps), skipped_steps=int(skipped),
                       last_overflow_step=int(last) or None, steps_at_floor=int(at_floor))


class DeviceMirror:
    """A scaler state on ``ctx``, advanced on the device.

    Parameters
    ----------
    config : ScalerConfig
    state : ScalerState
        The host state to start from.
    ctx : Context
    """

    def __init__(self, config, state, ctx):
        self.config = config
        self.ctx = ctx
        self.array = nd.array(np.array(encode(state), dtype=np.float64), ctx=ctx, dtype=np.float64)
        self.scale = None    # float32 (1,) NDArray: the scale after the last device step
        self.pending = False  # a device step has not been read back yet

    def step(self, flag):
        """Queue one step of the scaler rule with ``flag`` (float32 (1,), 1: finite)."""
        self.scale = ops.scaler_update(self.array, flag.as_in_context(self.ctx), self.config)
        self.pending = True

    def read(self):
        """Wait for the queued steps and return the state (a host sync)."""
        self.pending = False
        return decode(self.array.asnumpy())
