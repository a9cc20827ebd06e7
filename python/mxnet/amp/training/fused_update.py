"""Fused optimizer steps for AMP trainers: SGD (momentum, weight decay), Adam and AdamW in one library call
per device, applied or skipped on the device.

MXNet's ``Updater`` calls one op per parameter (Adam) or per four parameters (SGD) and the skip decision needs
the finite flag on the host. :class:`FusedUpdater` instead issues ``amp_multi_update`` once per device and
dtype group, with the step's finite flag and the loss scaler's device state as inputs: the library divides the
gradients by the scale and leaves everything untouched when the flag is 0. Results are MXNet's bit for bit (the
kernels repeat MXNet 1.9.1's float32 expressions); the optimizer states are the ``Updater``'s own arrays, so
checkpoints are unchanged.

The host-side counters (``optimizer.num_update``, per-parameter counts: learning-rate schedules, Adam's bias
correction) advance when a step is issued and are rolled back when the step turns out to be skipped. That is
learnt lazily: at the next step (its flag has long been computed by then), or at once when the step's result
is read (:class:`StepResult`), or before the trainer saves or loads states.
"""
import numpy as np

from mxnet import optimizer as _opt
from ..base.dtypes import BFLOAT16
from ..core import library, ops
from .adamw import AdamW, bias_correction
from .amp_state import attached

__all__ = ["FUSED_OPTIMIZERS", "FusedUpdater", "RuleCache", "StepResult", "fused_rule"]

_RULES = {_opt.SGD: "sgd", _opt.Adam: "adam", AdamW: "adamw"}

#: The optimizer classes with a fused update.
FUSED_OPTIMIZERS = tuple(_RULES)


def fused_rule(trainer):
    """The ``amp_multi_update`` rule for ``trainer``'s optimizer and parameters, or None (with the reason).

    Returns
    -------
    (str or None, str)
        The rule, or None and why MXNet's own update is used instead.
    """
    optimizer = trainer._optimizer
    rule = _RULES.get(type(optimizer))
    if rule is None:
        return None, "optimizer %s has no fused update (fused: SGD, Adam, AdamW)" % type(optimizer).__name__
    if rule == "sgd" and optimizer.momentum > 0:
        rule = "sgd_mom"
    if trainer._kvstore and trainer._update_on_kvstore:
        return None, "parameters are updated on the kvstore"
    amp_state = attached(trainer)
    bf16 = amp_state.bf16_weights if amp_state is not None else None
    for index, param in enumerate(trainer._params):
        if param.grad_req == "null" or (bf16 is not None and bf16.holds(index)):
            continue
        for data in param.list_data():
            if data.context.device_type != "cpu" and not library.cuda_kernels():
                return None, ("parameter %s is on %s and libmxnet_amp was built without CUDA kernels"
                              % (param.name, data.context))
        dtype = np.dtype(param.dtype)
        if dtype != np.float32 and not (dtype == np.float16 and optimizer.multi_precision):
            return None, ("parameter %s is %s (fused: float32, or float16 with multi_precision=True)"
                          % (param.name, dtype.name))
    return rule, ""


class RuleCache:
    """:func:`fused_rule` of one trainer, recomputed only when what it depends on may have changed.

    That is: the optimizer object or its momentum / multi_precision, updates on the kvstore, or any parameter's
    list of arrays (``Parameter.cast`` and ``reset_ctx`` replace it), so a step does not inspect every array.
    """

    def __init__(self):
        self._key = None
        self._rule = None

    def rule(self, trainer):
        """The rule for ``trainer`` now, or None."""
        optimizer = trainer._optimizer
        key = (optimizer, getattr(optimizer, "momentum", None), optimizer.multi_precision,
               trainer._update_on_kvstore, [param._data for param in trainer._params])
        cached = self._key
        if (cached is None or cached[0] is not optimizer or cached[1:4] != key[1:4] or len(cached[4]) != len(key[4])
                or any(a is not b for a, b in zip(cached[4], key[4]))):
            self._key, self._rule = key, fused_rule(trainer)[0]
        return self._rule


def _counters(optimizer):
    """What issuing a step changes on the host: update counts and the (stateful) learning-rate scheduler."""
    scheduler = optimizer.lr_scheduler
    return ({device: dict(counts) for device, counts in optimizer._all_index_update_counts.items()},
            optimizer.num_update, dict(vars(scheduler)) if scheduler is not None else None)


def _restore(optimizer, saved):
    counts, num_update, scheduler = saved
    if scheduler is not None:  # MXNet's schedulers advance their own base_lr/count when called
        vars(optimizer.lr_scheduler).update(scheduler)
    for device in list(optimizer._all_index_update_counts):
        if device not in counts:
            del optimizer._all_index_update_counts[device]
    for device, values in counts.items():
        current = optimizer._all_index_update_counts.setdefault(device, {})
        current.clear()
        current.update(values)
    optimizer.num_update = num_update  # the dicts kept their identity: _index_update_count still points in


class StepResult:
    """What an AMP ``trainer.step`` returns: whether the update was applied, learnt when asked.

    ``bool(result)`` (``if trainer.step(n): ...``) waits for the step's finite check: a host sync, and the only
    one. Compares equal to True or False accordingly.
    """

    def __init__(self, applied, settle=None):
        self._applied = applied  # bool, or float32 (1,) NDArray
        self._settle = settle

    def __bool__(self):
        if not isinstance(self._applied, bool):
            self._applied = bool(self._applied.asnumpy()[0])
            if self._settle is not None:
                self._settle()
        return self._applied

    def __eq__(self, other):
        return bool(self) == other if isinstance(other, (bool, np.bool_, StepResult)) else NotImplemented

    __hash__ = None

    def __repr__(self):
        if isinstance(self._applied, bool):
            return "StepResult(applied=%s)" % self._applied
        return "StepResult(pending)"


class FusedUpdater:
    """Issues a trainer's fused updates and rolls its optimizer's counters back after a skipped step.

    Parameters
    ----------
    trainer : gluon.Trainer
    rule : str
        From :func:`fused_rule`.
    bf16_weights : Bf16Weights, optional
        The trainer's bf16-true parameters (:mod:`.bf16_weights`), updated with their compensation (or rounded
        stochastically, with seeds from their update counts).
    """

    def __init__(self, trainer, rule, bf16_weights=None):
        self.trainer = trainer
        self.rule = rule
        self.bf16_weights = bf16_weights
        self._pending = None  # (applied flag, counters before the step) of the last step not yet settled

    def settle(self):
        """Learn whether the last issued step was applied; roll the counters back if it was skipped."""
        pending, self._pending = self._pending, None
        if pending is not None and not pending[0].asnumpy()[0]:
            _restore(self.trainer._optimizer, pending[1])

    def step(self, params, flag, scaler_state):
        """Update ``params`` (fresh parameters with gradients) unless ``flag`` is 0; returns a StepResult.

        Parameters
        ----------
        params : list of (int, Parameter)
            Index in the trainer and parameter.
        flag : NDArray
            float32 (1,) finite flag of the step (all devices).
        scaler_state : NDArray
            The loss scaler's float64 (6,) device state (element 0: the scale to divide out).
        """
        self.settle()
        trainer, optimizer = self.trainer, self.trainer._optimizer
        saved = _counters(optimizer)
        applied = flag
        bf16 = self.bf16_weights
        for device, updater in enumerate(trainer._updaters):
            groups = {}  # "master" (float16 + float32 master), "bf16" (bf16-true) or "plain" -> [(index, w, g)]
            for index, param in params:
                weight, grad = param.list_data()[device], param.list_grad()[device]
                if bf16 is not None and bf16.holds(index) and weight.dtype == BFLOAT16:
                    kind = "bf16"
                elif optimizer.multi_precision and np.dtype(weight.dtype) == np.float16:
                    kind = "master"
                else:
                    kind = "plain"
                groups.setdefault(kind, []).append((index, weight, grad))
            for kind, members in groups.items():
                applied = self._issue(updater, members, kind, device, flag, scaler_state)
        self._pending = (applied, saved)
        return StepResult(applied, self.settle)

    def _issue(self, updater, members, kind, device, flag, scaler_state):
        optimizer = updater.optimizer
        master = kind == "master"
        indices = [index for index, _, _ in members]
        ctx = members[0][1].context
        for index, weight, _ in members:
            if index not in updater.states:
                updater.states[index] = optimizer.create_state_multi_precision(index, weight.as_nd_ndarray())
                updater.states_synced[index] = True
            elif not updater.states_synced[index]:
                updater.states[index] = updater.sync_state_context(updater.states[index], ctx)
                updater.states_synced[index] = True
        optimizer._set_current_context(ctx.device_id)
        optimizer._update_count(indices)
        lrs, wds, etas = optimizer._get_lrs(indices), optimizer._get_wds(indices), None
        if self.rule in ("adam", "adamw"):
            corrections = [bias_correction(optimizer.beta1, optimizer.beta2, optimizer._index_update_count[i])
                           for i in indices]
            if self.rule == "adam":
                lrs = [lr * c for lr, c in zip(lrs, corrections)]
            else:
                lrs, etas = corrections, lrs
        arrays = [(weight, grad) + self._states(updater.states[index], master)
                  for index, weight, grad in members]
        mode = "off" if kind != "bf16" else self.bf16_weights.update_mode()
        if mode == "kahan":
            arrays = [group + (self.bf16_weights.compensation_of(index, device),)
                      for group, (index, _, _) in zip(arrays, members)]
        seeds = (self.bf16_weights.update_seeds(indices, [optimizer._index_update_count[i] for i in indices])
                 if mode == "stochastic" else None)
        if flag.context != ctx:
            flag, scaler_state = flag.as_in_context(ctx), scaler_state.as_in_context(ctx)
        return ops.multi_update(self.rule, arrays, flag, scaler_state, lrs, wds, etas,
                                rescale_grad=optimizer.rescale_grad, clip_gradient=optimizer.clip_gradient,
                                momentum=getattr(optimizer, "momentum", 0.0),
                                beta1=getattr(optimizer, "beta1", 0.9), beta2=getattr(optimizer, "beta2", 0.999),
                                epsilon=getattr(optimizer, "epsilon", 1e-8), multi_precision=master,
                                bf16_weights=mode, seeds=seeds)

    def _states(self, state, master):
        """The state arrays of one parameter in ``amp_multi_update`` order (master weights last)."""
        if self.rule == "sgd":
            return (state[1],) if master else ()
        if self.rule == "sgd_mom":
            return (state[0], state[1]) if master else (state,)
        if master:
            return tuple(state[1]) + (state[0],)
        return tuple(state)
