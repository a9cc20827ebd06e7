"""The finite check of a step's gradients across devices, and how device flags combine.

One fused library call per device (``amp_multi_unscale_check``) leaves a float32 (1,) flag there, 1 when every
value is finite; the flags of several devices (or several trainers sharing a loss scaler) combine into one by
their product. Neither waits for the device.
"""
from typing import Sequence

from mxnet import autograd
import mxnet as mx

from ..core.ops import unscale_and_check

__all__ = ["check_gradients", "all_finite"]


def all_finite(flags: Sequence[mx.nd.NDArray]) -> mx.nd.NDArray:
    """The product of float32 (1,) finite flags, on the first flag's device: 1 when each of them is 1."""
    flag = flags[0]
    for other in flags[1:]:
        flag = flag * other.as_in_context(flag.context)
    return flag


def check_gradients(per_device: Sequence[Sequence[mx.nd.NDArray]], inv_scale: float) -> mx.nd.NDArray:
    """Unscale (when ``inv_scale != 1``) and check the gradients of each device in one fused call per device.

    Parameters
    ----------
    per_device : sequence of sequence of NDArray
        The gradients, one list per device (each gradient once; they are scaled in place).
    inv_scale : float
        1 / loss scale; 1.0 checks without writing.

    Returns
    -------
    NDArray
        float32 (1,) on the first device: 1.0 when every gradient is finite. No host sync.
    """
    with autograd.pause():
        return all_finite([unscale_and_check(list(grads), inv_scale) for grads in per_device])
