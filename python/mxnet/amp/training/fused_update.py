"""Fused optimizer steps for AMP trainers: SGD (momentum, weight decay), Adam and AdamW in one library call
per device, applied or skipped on the device.

MXNet's ``Updater`` calls one op per parameter (Adam) or per four parameters (SGD) and the skip decision needs
the finite flag on the host. :class:`FusedUpdater` instead issues ``amp_multi_update`` once per device and
dtype group, with the step's finite flag and the loss scaler's device state as inputs: the library divides the
gradients by the scale and leaves everything untouched when the flag is 0. Results are MXNet's bit for bit (the
kernels repeat MXNet 1.9.1's float32 expressions); the optimizer states are the ``Updater``'s own arrays, so
checkpoints are unchanged.

The host-side counters (``optimizer.num_update``, per-parameter counts: learning-rate schedules, Adam's bias
correction) advance when a step is issued and are rolled back when the step turns out to be skipped. The host
learns that lazily, two steps later (the update that wrote the flag ran before the step in between could start,
so reading it does not wait), or at once when a step's result is read (:class:`StepResult`), or before the
trainer saves or loads states. What depends on the counts of the step in between (learning rates, bias
corrections, rounding seeds) is therefore issued twice, for the previous step applied and skipped, and the
update picks one from that step's flag on the device.
"""
import collections

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

    @property
    def flag(self):
        """The outcome without waiting: a float32 (1,) NDArray (1: applied) until read, then a bool."""
        return self._applied

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


class _Issued:
    """A step whose outcome the host has not read: its applied flag and the counters before and after it.

    ``if_previous_skipped`` holds (before, after) for the case that the previous step, also unread when this
    one was issued, turns out skipped; None once that is settled (or when nothing was pending).
    """

    __slots__ = ("applied", "before", "after", "if_previous_skipped")

    def __init__(self, applied, before, after, if_previous_skipped):
        self.applied, self.before, self.after = applied, before, after
        self.if_previous_skipped = if_previous_skipped


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
        self._pending = collections.deque()  # _Issued steps, oldest first: at most two

    def settle(self):
        """Learn whether the issued steps were applied; leave the counters as the applied ones make them."""
        while self._pending:
            self._settle_oldest()

    def _settle_oldest(self):
        oldest = self._pending.popleft()
        applied = bool(oldest.applied.asnumpy()[0])
        if not self._pending:
            if not applied:
                _restore(self.trainer._optimizer, oldest.before)
            return
        latest = self._pending[0]  # the optimizer's counters are its `after` (previous step applied)
        if not applied:
            latest.before, latest.after = latest.if_previous_skipped
            _restore(self.trainer._optimizer, latest.after)
        latest.if_previous_skipped = None

    def step(self, params, flag, scaler_state, check):
        """Update ``params`` (fresh parameters with gradients) unless ``flag`` is 0; returns a StepResult.

        Parameters
        ----------
        params : list of (int, Parameter)
            Index in the trainer and parameter.
        flag : NDArray or None
            float32 (1,) finite flag of the step (all devices), or None when ``params`` are all the step checks:
            then a step in one call checks them in that call, and otherwise ``check()`` gives the flag.
        scaler_state : NDArray
            The loss scaler's float64 (6,) device state (element 0: the scale to divide out).
        check : callable
            Returns the finite flag of ``params``' gradients (one op per device).
        """
        while len(self._pending) > 1:  # written two steps ago: done by now
            self._settle_oldest()
        optimizer = self.trainer._optimizer
        previous = self._pending[0] if self._pending else None
        before = _counters(optimizer)
        launches = self._prepare(params)
        after = _counters(optimizer)
        alternatives, if_previous_skipped = [None] * len(launches), None
        if previous is not None:
            _restore(optimizer, previous.before)
            alternatives = [self._counted(optimizer, launch["indices"], launch["ctx"], launch["mode"])
                            for launch in launches]
            if_previous_skipped = (previous.before, _counters(optimizer))
            _restore(optimizer, after)
        if flag is None and len(launches) > 1:
            flag = check()
        applied = flag
        for launch, alternative in zip(launches, alternatives):
            applied = self._launch(launch, alternative, flag, scaler_state, previous)
        self._pending.append(_Issued(applied, before, after, if_previous_skipped))
        return StepResult(applied, self.settle)

    def _prepare(self, params):
        """Advance the counters for a step over ``params``; its launches (one per device and kind)."""
        trainer, optimizer = self.trainer, self.trainer._optimizer
        bf16 = self.bf16_weights
        launches = []
        for device, updater in enumerate(trainer._updaters):
            groups = {}  # "master" (float16 + float32 master), "bf16" (bf16-true) or "plain" -> [(index, w, g)]
            for index, param in params:
                weight, grad = param._data[device], param._grad[device]  # initialised: they have gradients
                if bf16 is not None and bf16.holds(index) and weight.dtype == BFLOAT16:
                    kind = "bf16"
                elif optimizer.multi_precision and np.dtype(weight.dtype) == np.float16:
                    kind = "master"
                else:
                    kind = "plain"
                groups.setdefault(kind, []).append((index, weight, grad))
            launches.extend(self._arguments(updater, members, kind, device) for kind, members in groups.items())
        return launches

    def _arguments(self, updater, members, kind, device):
        """The arguments of one ``amp_multi_update`` (advances the members' counts)."""
        optimizer = updater.optimizer
        indices = [index for index, _, _ in members]
        ctx = members[0][1].context
        for index, weight, _ in members:
            if index not in updater.states:
                updater.states[index] = optimizer.create_state_multi_precision(index, weight.as_nd_ndarray())
                updater.states_synced[index] = True
            elif not updater.states_synced[index]:
                updater.states[index] = updater.sync_state_context(updater.states[index], ctx)
                updater.states_synced[index] = True
        master = kind == "master"
        arrays = [(weight, grad) + self._states(updater.states[index], master) for index, weight, grad in members]
        mode = "off" if kind != "bf16" else self.bf16_weights.update_mode()
        if mode == "kahan":
            arrays = [group + (self.bf16_weights.compensation_of(index, device),)
                      for group, (index, _, _) in zip(arrays, members)]
        return dict(self._counted(optimizer, indices, ctx, mode), arrays=arrays, ctx=ctx, indices=indices,
                    master=master, mode=mode)

    def _counted(self, optimizer, indices, ctx, mode):
        """Advance the counts of ``indices``; what depends on them: ``lrs``, ``wds``, ``etas``, ``seeds``."""
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
        seeds = (self.bf16_weights.update_seeds(indices, [optimizer._index_update_count[i] for i in indices])
                 if mode == "stochastic" else None)
        return dict(lrs=lrs, wds=wds, etas=etas, seeds=seeds)

    def _launch(self, launch, alternative, flag, scaler_state, previous):
        """Issue one ``amp_multi_update``; with the values for a skipped previous step where they differ."""
        optimizer, ctx = self.trainer._optimizer, launch["ctx"]
        counted = ("lrs", "etas", "seeds")
        choice = {}
        if alternative is not None and any(launch[key] != alternative[key] for key in counted):
            choice = dict(previous_applied=previous.applied.as_in_context(ctx),
                          if_previous_skipped={key: alternative[key] for key in counted
                                               if alternative[key] is not None})
        if scaler_state.context != ctx:
            flag = flag.as_in_context(ctx) if flag is not None else None
            scaler_state = scaler_state.as_in_context(ctx)
        return ops.multi_update(self.rule, launch["arrays"], flag, scaler_state, launch["lrs"], launch["wds"],
                                launch["etas"], rescale_grad=optimizer.rescale_grad,
                                clip_gradient=optimizer.clip_gradient, momentum=getattr(optimizer, "momentum", 0.0),
                                beta1=getattr(optimizer, "beta1", 0.9), beta2=getattr(optimizer, "beta2", 0.999),
                                epsilon=getattr(optimizer, "epsilon", 1e-8), multi_precision=launch["master"],
                                bf16_weights=launch["mode"], seeds=launch["seeds"], **choice)

    def _states(self, state, master):
        """The state arrays of one parameter in ``amp_multi_update`` order (master weights last)."""
        if self.rule == "sgd":
            return (state[1],) if master else ()
        if self.rule == "sgd_mom":
            return (state[0], state[1]) if master else (state,)
        if master:
            return tuple(state[1]) + (state[0],)
        return tuple(state)
