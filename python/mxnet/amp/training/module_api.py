"""Loss scaling for the Module API: ``init_trainer``, ``scale_loss`` and ``unscale`` given an optimizer.

``mxnet.contrib.amp`` 1.9.1 refuses an optimizer ("AMP is currently only compatible with Gluon Trainer"); here
the optimizer given to ``Module.init_optimizer`` gets the same loss scaler and exact step skipping as a
``gluon.Trainer``:

>>> opt = mx.optimizer.SGD(learning_rate=0.1, momentum=0.9)
>>> amp.init_trainer(opt)
>>> mod.init_optimizer(optimizer=opt)
>>> mod.forward(batch, is_train=True)
>>> with amp.scale_loss(head_grads, opt) as scaled:     # the gradients of the outputs, e.g. ones
...     mod.backward(scaled)
>>> mod.update()                                       # skipped when a gradient is inf/nan

``Module.update`` (so ``BucketingModule.update`` too) checks the module's gradients on every device for inf/nan in
one fused pass and one host sync before anything changes: when all are finite it updates with ``1/scale`` folded
into the optimizer's ``rescale_grad`` (the scale ``scale_loss`` applied since the last update; none when it was not
called, as in ``Module.fit``); otherwise it skips the update completely (weights, optimizer states and the
optimizer's update counters stay as they were). ``Module.update`` and ``Module.backward`` are wrapped on the first
``init_trainer(optimizer)`` (recorded in :data:`~mxnet.amp.base.patches.PATCHES`); modules whose optimizer has no
AMP state run exactly as before. ``amp.reset()`` puts both methods back: an optimizer initialised before the reset
then needs ``init_trainer`` again, and ``scale_loss`` / ``unscale`` refuse it until then (its gradients would
otherwise stay scaled). Loss heads whose backward ignores the head gradient (``SoftmaxOutput``, ``MakeLoss``...)
cannot be scaled this way: train them with a static ``LossScaler(init_scale=1)`` (bfloat16's default), which keeps
the skipping.

``amp.load_states(mod, fname)`` is ``Module.load_optimizer_states(fname)`` without ``pickle``: the states, read by
the allow-listed reader of :mod:`.updater_states`, go to :func:`module_updater`.
"""
from typing import Any, Optional
import weakref

from mxnet import module as _module
from mxnet.optimizer import Optimizer

from ..base.patches import PATCHES
from .amp_state import AmpState, Stage, attach, attached, replace_scaler, report_step, state_of
from .checks import check_gradients

__all__ = ["init_optimizer", "active_state", "unscale_optimizer", "is_module", "module_updater"]

#: The group of :data:`~mxnet.amp.base.patches.PATCHES` that ``init_trainer(optimizer)`` records.
GROUP = "init_trainer(optimizer)"


def init_optimizer(optimizer: Optimizer, scaler: Any, target_dtype: Optional[str]) -> Any:
    """Attach ``scaler`` to ``optimizer`` (an ``mx.optimizer.Optimizer``) for Module-API training; returns the
    scaler attached."""
    state = attached(optimizer)
    if state is None:
        state = attach(optimizer, AmpState(scaler, target_dtype))
    else:
        replace_scaler(optimizer, scaler)
    if not PATCHES.holds(GROUP):
        PATCHES.wrap(_module.Module, "update", _update, GROUP)
        PATCHES.wrap(_module.Module, "backward", _backward, GROUP)
    return state.scaler


def active_state(optimizer: Optimizer) -> AmpState:
    """The AMP state of ``optimizer`` while ``Module.update`` applies it.

    Raises
    ------
    RuntimeError
        ``init_trainer`` was not called on ``optimizer``, or ``amp.reset()`` ran since.
    """
    state = state_of(optimizer)
    if not PATCHES.holds(GROUP):
        raise RuntimeError("amp.reset() put Module.update back since amp.init_trainer(optimizer): its gradients "
                           "would not be unscaled; call amp.init_trainer(optimizer) again")
    return state


def _optimizer_state(mod):
    return attached(mod._optimizer) if mod.optimizer_initialized else None


def _backward(original):
    def backward(self, out_grads=None):
        state = _optimizer_state(self)
        if state is not None:
            state.module = weakref.ref(self)
        return original(self, out_grads)
    backward.__doc__ = original.__doc__
    backward.__wrapped__ = original
    return backward


def _check(mod, inv_scale):
    """Unscale (when ``inv_scale != 1``) and check ``mod``'s gradients: one fused call per device."""
    kv = mod._kvstore
    if kv is not None and "dist" in kv.type and mod._update_on_kvstore:
        raise ValueError("AMP cannot skip steps exactly with update_on_kvstore and a distributed kvstore (%r): "
                         "the servers apply every worker's update; use Module.init_optimizer(kvstore=...) with "
                         "MXNET_UPDATE_ON_KVSTORE=0" % kv.type)
    grads = [g for g in mod._exec_group.grad_arrays if g is not None and g[0] is not None]
    if not grads:
        raise RuntimeError("the module has no parameter with a gradient (all grad_req='null')")
    return check_gradients(list(zip(*grads)), inv_scale)


def _update(original):
    def update(self):
        state = _optimizer_state(self)
        if state is None:
            return original(self)
        if state.stage is Stage.UNSCALED:
            flag, inv_scale = state.flag, 1.0
        else:
            flag, inv_scale = _check(self, 1.0), 1.0 / (state.loss_scale or 1.0)
        finite = bool(flag.asnumpy()[0])  # the step's single host sync
        state.stage, state.flag, state.loss_scale = Stage.READY, None, None
        if finite:
            optimizer = self._optimizer
            base = optimizer.rescale_grad
            optimizer.rescale_grad = base * inv_scale
            try:
                original(self)
            finally:
                optimizer.rescale_grad = base
        report_step(state.scaler, finite)
        return finite
    update.__doc__ = original.__doc__
    update.__wrapped__ = original
    return update


def unscale_optimizer(optimizer: Optimizer) -> None:
    """``amp.unscale`` for an optimizer: unscale the gradients of the Module that ran ``backward`` last."""
    state = active_state(optimizer)
    if state.stage is Stage.UNSCALED:
        raise RuntimeError("amp.unscale() has already been called on this optimizer since the last update()")
    mod = state.module() if state.module is not None else None
    if mod is None:
        raise RuntimeError("amp.unscale(optimizer): no Module using this optimizer has run backward() since "
                           "amp.init_trainer(optimizer); call it between Module.backward() and Module.update()")
    state.flag = _check(mod, 1.0 / (state.loss_scale or 1.0))
    state.stage = Stage.UNSCALED


def is_module(obj: Any) -> bool:
    """Whether ``obj`` is a ``Module`` or ``BucketingModule`` (what :func:`module_updater` takes)."""
    return isinstance(obj, (_module.Module, _module.BucketingModule))


def module_updater(mod: Any) -> Any:
    """The ``Updater`` whose states ``Module.load_optimizer_states`` would set (``amp.load_states`` sets them).

    Parameters
    ----------
    mod : mx.mod.Module or mx.mod.BucketingModule
        With its optimizer initialised. A BucketingModule's buckets share one updater: its current bucket's.

    Returns
    -------
    mx.optimizer.Updater

    Raises
    ------
    RuntimeError
        ``init_optimizer`` was not called.
    ValueError
        The module updates on the servers of a distributed kvstore, which hold its states.
    """
    if not mod.optimizer_initialized:
        raise RuntimeError("load the optimizer states after Module.init_optimizer(); this module has no "
                           "optimizer yet")
    if isinstance(mod, _module.BucketingModule):
        mod = mod._curr_module
    if not mod._update_on_kvstore:
        return mod._updater
    if mod._kvstore._updater is None:
        raise ValueError("this module's optimizer states live on the servers of its distributed kvstore (%r); "
                         "MXNet cannot load them either" % mod._kvstore.type)
    return mod._kvstore._updater
