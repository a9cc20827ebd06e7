"""AdamW (Adam with decoupled weight decay) as an ``mx.optimizer.Optimizer``, registered as ``'adamw'``.

MXNet 1.9.1 ships AdamW's kernels (``mx.nd.contrib.adamw_update``, ``mp_adamw_update``) but no optimizer that
uses them; this one does, so ``gluon.Trainer(params, 'adamw', ...)`` works, and
:func:`mxnet.amp.init_trainer` replaces its per-parameter calls by one fused update per device with the same
results bit for bit. At step ``t`` (per parameter), with ``lr`` the scheduled learning rate::

    g = clip(rescale_grad * grad, clip_gradient)
    mean = beta1 * mean + (1 - beta1) * g
    var = beta2 * var + (1 - beta2) * g * g
    w = w - lr * (sqrt(1 - beta2**t) / (1 - beta1**t) * mean / (sqrt(var) + epsilon) + wd * w)

i.e. ``adamw_update`` with ``eta = lr`` and its ``lr`` the bias correction; weight decay is not bias-corrected
and not scaled by the gradient statistics (Loshchilov & Hutter). ``epsilon`` is added to ``sqrt(var)`` as in
MXNet's Adam. Like MXNet's kernel, the plain update scales ``grad`` in place by ``rescale_grad``.
"""
import math

import numpy as np

from mxnet import ndarray as nd
from mxnet.optimizer import Optimizer

__all__ = ["AdamW", "bias_correction"]


def bias_correction(beta1, beta2, t):
    """Adam's learning-rate factor ``sqrt(1 - beta2**t) / (1 - beta1**t)`` at step ``t`` (Python floats)."""
    return math.sqrt(1. - beta2 ** t) / (1. - beta1 ** t)


class AdamW(Optimizer):
    """Adam with decoupled weight decay, on MXNet's ``contrib.adamw_update`` kernels.

    Parameters
    ----------
    learning_rate : float, optional
        Step size (the ``eta`` of MXNet's kernel), scheduled by ``lr_scheduler`` when one is given.
    beta1, beta2 : float, optional
        Decay rates of the first and second moment estimates.
    epsilon : float, optional
        Added to ``sqrt(var)``.
    **kwargs
        What ``mx.optimizer.Optimizer`` takes: ``wd`` (decoupled), ``rescale_grad``, ``clip_gradient``,
        ``lr_scheduler``, ``multi_precision`` (float32 master weights for float16 weights)...
    """

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, **kwargs):
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.beta1 = beta1
        self.beta2 = beta2
        self.epsilon = epsilon

    def create_state(self, index, weight):
        return (nd.zeros(weight.shape, weight.context, dtype=weight.dtype),   # mean
                nd.zeros(weight.shape, weight.context, dtype=weight.dtype))   # var

    def _kwargs(self, index, weight):
        self._update_count(index)
        kwargs = {"lr": bias_correction(self.beta1, self.beta2, self._index_update_count[index]),
                  "eta": self._get_lr(index), "wd": self._get_wd(index), "beta1": self.beta1,
                  "beta2": self.beta2, "epsilon": self.epsilon}
        if self.clip_gradient:
            kwargs["clip_gradient"] = self.clip_gradient
        rescale = nd.full((1,), self.rescale_grad, ctx=weight.context, dtype=np.float32)
        return rescale, kwargs

    def update(self, index, weight, grad, state):
        rescale, kwargs = self._kwargs(index, weight)
        mean, var = state
        nd.contrib.adamw_update(weight, grad, mean, var, rescale, out=weight, **kwargs)

    def update_multi_precision(self, index, weight, grad, state):
        if self.multi_precision and weight.dtype == np.float16:
            rescale, kwargs = self._kwargs(index, weight)
            master, (mean, var) = state
            nd.contrib.mp_adamw_update(weight, grad, mean, var, master, rescale, out=weight, **kwargs)
        else:
            self.update(index, weight, grad, state)


if "adamw" not in Optimizer.opt_registry:
    Optimizer.register(AdamW)
