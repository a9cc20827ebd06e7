"""Loss scaling for ``gluon.Trainer``: init_trainer, scale_loss, unscale, get_loss_scaler.

:func:`init_trainer` attaches a :class:`~mxnet.amp.LossScaler` to one trainer *instance* and wraps
that instance's ``step``, ``update``, ``allreduce_grads``, ``save_states`` and ``load_states`` (the class is
never patched). The wrapped ``step``:

1. all-reduces gradients (unless the parameters are updated on the kvstore, or ``amp.unscale`` already did),
2. checks every gradient on every device for inf/nan in one fused pass (a float32 flag on the device),
3. updates with ``1/scale`` folded into the gradient multiplier (no extra pass over the gradients, no one-step
   lag) if all are finite; otherwise skips the update entirely (parameters, optimizer states and the
   optimizer's update counters stay as they were, so learning-rate schedules do not advance),
4. advances the scaler and returns a :class:`~mxnet.amp.training.fused_update.StepResult`: true if the update was
   applied, false if it was skipped.

With SGD (momentum, weight decay), Adam or :class:`~mxnet.amp.adamw.AdamW` on CPU parameters (float32, or
float16 with ``multi_precision``), steps 2 to 4 are queued on MXNet's engine and the step does not wait for its
gradients: one fused library update per device reads the flag and the scaler's device state, and the scaler
advances on the device (see :mod:`.step`, :mod:`.fused_update` and :mod:`.device_scaler`). The host learns
whether a step was skipped lazily; reading the ``StepResult`` (``if trainer.step(n):``), the scaler's
``scale``/``state`` or saving states waits for it (a documented sync). Other optimizers (and
``init_trainer(..., fused=False)``) read the flag on the host once per step and call MXNet's own update.

With a distributed kvstore, gradients are summed across workers before the check, so an overflow on any worker
makes every worker skip and all scalers stay equal; this needs ``update_on_kvstore=False`` (chosen automatically
when left to the default; an explicit True, async or sparse distributed training raise at :func:`init_trainer`).

Checkpoints: the wrapped ``save_states`` writes the optimizer states exactly as a plain trainer does, followed by
a versioned AMP section (:mod:`.states`, :mod:`.checkpoint`), atomically. ``load_states`` reads AMP files, plain
``gluon.Trainer`` files and ``mxnet.contrib.amp`` files (the latter two keep the current scaler and log one
warning). A file written for another target dtype (float16 vs bfloat16 vs no ``amp.init``) loads its optimizer
states but keeps the current loss scaler, with a warning: a float16 scale means nothing to a bfloat16 run.
Loading never runs code a file names: the optimizer states are read by the allow-listed reader of
:mod:`.updater_states` (``load_states(fname, trusted=True)`` hands them to ``pickle``, for files of custom
optimizers).
"""
from contextlib import contextmanager
import types
from typing import Iterator, List, Optional, Sequence, Union

from mxnet import nd
from mxnet import numpy as _mx_np
from mxnet.gluon import Trainer
from mxnet.optimizer import Optimizer

from ..autocast.context import training_dtype
from . import module_api, states, step
from .amp_state import AmpState, Stage, attach, attached, replace_scaler, state_of
from .bf16_weights import Bf16Weights, check_mode
from .fused_update import FUSED_OPTIMIZERS, RuleCache
from .kvstore import check_kvstore_config, ensure_kvstore
from .loss_scaler import LossScaler

__all__ = ["init_trainer", "scale_loss", "unscale", "get_loss_scaler"]

#: The trainer methods ``init_trainer`` wraps, on the instance, and what each becomes.
WRAPPED = {"step": step.step, "update": step.update, "allreduce_grads": step.allreduce_grads,
           "save_states": states.save_states, "load_states": states.load_states}


def init_trainer(trainer: Union[Trainer, Optimizer], loss_scaler: Optional[LossScaler] = None,
                 fused: bool = True, weights: str = "float32", rounding: str = "kahan") -> LossScaler:
    """Attach loss scaling to one ``gluon.Trainer`` instance (or ``mx.optimizer.Optimizer``: Module API).

    Parameters
    ----------
    trainer : gluon.Trainer or mx.optimizer.Optimizer
        An optimizer is what Module-API code passes to ``Module.init_optimizer``: ``Module.update`` then
        checks, unscales and skips exactly as ``trainer.step`` does (see :mod:`mxnet.amp.module_api`).
    loss_scaler : LossScaler, optional
        Defaults to ``LossScaler.default_for(dtype)`` for the dtype given to ``amp.init`` (dynamic for float16,
        static scale 1 for bfloat16); without ``amp.init`` (e.g. a network cast to float16 by hand) the float16
        default. Pass the same scaler to several trainers that get gradients from one scaled loss: they then
        use one scale, which advances once all of them stepped.
    fused : bool, optional
        Whether SGD, Adam and AdamW take the fused update that never waits for the step's flag (see the module
        docstring). False keeps MXNet's own update and one host sync per step, for every optimizer.
    weights : {'float32', 'bfloat16'}, optional
        ``'float32'`` (default): float32 master weights. ``'bfloat16'`` (bf16-true; needs ``amp.init('bfloat16')``,
        SGD/Adam/AdamW, ``fused=True``, initialised CPU parameters): parameters of two or more dimensions, their
        gradients and optimizer states become bfloat16, with a bfloat16 Kahan compensation per weight (see
        :mod:`mxnet.amp.training.bf16_weights`); biases and norm parameters stay float32. Calling again with the
        other mode converts; ``amp.reset()`` returns to float32.
    rounding : {'kahan', 'stochastic'}, optional
        How bf16-true weights (only) keep tiny updates: ``'kahan'`` (default), a bfloat16 Kahan compensation per
        weight (2 bytes each); ``'stochastic'``, unbiased stochastic rounding of weights and optimizer states, no
        buffer (seeds from MXNet's random state: ``mx.random.seed`` makes runs reproducible). Calling again with
        the other rounding converts.

    Returns
    -------
    LossScaler
        The scaler now attached. Calling ``init_trainer`` again on the same trainer replaces the scaler when
        one is given and otherwise keeps the attached one; the methods are wrapped only once.

    Raises
    ------
    TypeError
        ``trainer`` is not a ``gluon.Trainer`` or ``loss_scaler`` not a ``LossScaler``.
    ValueError
        Sparse parameters, an async kvstore, or ``update_on_kvstore=True`` with a distributed kvstore: setups
        where a skipped step cannot leave every worker's parameters and optimizer states unchanged. A ``weights``
        mode or ``rounding`` that is unknown or cannot run here, or ``rounding='stochastic'`` with float32
        weights (the message says why).

    Example
    -------
    >>> trainer = gluon.Trainer(net.collect_params(), 'adam', {'learning_rate': 1e-3})
    >>> amp.init_trainer(trainer)
    >>> with autograd.record():
    ...     loss = loss_fn(net(x), y)
    ...     with amp.scale_loss(loss, trainer) as scaled:
    ...         autograd.backward(scaled)
    >>> applied = trainer.step(x.shape[0])   # no host sync; bool(applied) waits: False if skipped
    """
    if loss_scaler is not None and not isinstance(loss_scaler, LossScaler):
        raise TypeError("loss_scaler must be an amp.LossScaler or None, got %s" % type(loss_scaler).__name__)
    if not isinstance(fused, bool):
        raise TypeError("fused must be True or False, got %r" % (fused,))
    if check_mode(weights, rounding) != "float32" and isinstance(trainer, Optimizer):
        raise ValueError("init_trainer: weights=%r needs a gluon.Trainer (the Module API keeps float32)" % weights)
    if isinstance(trainer, Optimizer):
        current = attached(trainer)
        scaler = loss_scaler or (current.scaler if current else LossScaler.default_for(training_dtype()))
        return module_api.init_optimizer(trainer, scaler, training_dtype())
    if not isinstance(trainer, Trainer):
        raise TypeError("init_trainer expects a gluon.Trainer or an mx.optimizer.Optimizer, got %s"
                        % type(trainer).__name__)
    return _attach(trainer, loss_scaler, fused, weights, rounding)


def _attach(trainer, loss_scaler, fused, weights, rounding):
    """:func:`init_trainer` for a ``gluon.Trainer`` (arguments checked); returns the scaler attached."""
    check_kvstore_config(trainer)
    amp_state = attached(trainer)
    if amp_state is None:
        dtype = training_dtype()
        amp_state = AmpState(loss_scaler or LossScaler.default_for(dtype), dtype, fused)
        amp_state.rules = RuleCache()  # fused_rule, recomputed only when the optimizer or parameter arrays change
        _set_weights(trainer, amp_state, weights, rounding)
        amp_state.grads = step.initial_grad_buffers(trainer)
        attach(trainer, amp_state)
        for name, method in WRAPPED.items():  # on the instance: the class is never patched
            setattr(trainer, name, types.MethodType(method, trainer))
    else:
        step.settle(trainer)
        amp_state.fused = fused
        _set_weights(trainer, amp_state, weights, rounding)
        if loss_scaler is not None:
            replace_scaler(trainer, loss_scaler)
    return amp_state.scaler


def _set_weights(trainer, amp_state, weights, rounding):
    """Switch ``trainer`` to weight mode ``weights`` with ``rounding`` (no change when it runs them already)."""
    current = amp_state.bf16_weights
    if current is not None and (weights == "float32" or current.rounding != rounding):
        current.to_float32()
    if weights == "float32" or amp_state.bf16_weights is not None:
        return
    reasons = []
    if amp_state.target_dtype != "bfloat16":
        reasons.append("amp.init('bfloat16') was not called (target dtype %r)" % amp_state.target_dtype)
    if not amp_state.fused:
        reasons.append("fused=False")
    if type(trainer._optimizer) not in FUSED_OPTIMIZERS:
        reasons.append("optimizer %s has no fused update" % type(trainer._optimizer).__name__)
    if any(ctx.device_type != "cpu" for ctx in trainer._contexts):
        reasons.append("bf16-true updates run on CPU only")
    if reasons:
        raise ValueError("init_trainer(weights='bfloat16') needs amp.init('bfloat16'), fused=True, SGD/Adam/AdamW "
                         "and CPU parameters: %s" % "; ".join(reasons))
    amp_state.bf16_weights = Bf16Weights(trainer, rounding)


def get_loss_scaler(trainer: Union[Trainer, Optimizer]) -> LossScaler:
    """Return the LossScaler attached to ``trainer`` (RuntimeError if ``init_trainer`` was not called)."""
    return state_of(trainer).scaler


@contextmanager
def scale_loss(loss_or_losses: Union[nd.NDArray, Sequence[nd.NDArray]], trainer: Union[Trainer, Optimizer]
               ) -> Iterator[Union[nd.NDArray, List[nd.NDArray]]]:
    """Context manager yielding the loss (or list of losses) multiplied by the trainer's current scale.

    Parameters
    ----------
    loss_or_losses : NDArray or list/tuple of NDArray
    trainer : gluon.Trainer or mx.optimizer.Optimizer
        A trainer (or optimizer) passed to :func:`init_trainer`; its ``step`` (``Module.update``) divides the
        scale back out.

    Yields
    ------
    NDArray or list of NDArray
        Scaled loss(es) to call ``backward`` on. No host sync: while the scaler advances on the device, the
        loss is multiplied by the device's scale.
    """
    if isinstance(trainer, Optimizer):
        amp_state = module_api.active_state(trainer)
        scale = amp_state.loss_scale = amp_state.scaler.scale  # what Module.update divides out
    else:
        amp_state = state_of(trainer)
        scale = amp_state.scaler.loss_scale()
    if isinstance(loss_or_losses, (list, tuple)):
        yield [_times(loss, scale) for loss in loss_or_losses]
    else:
        yield _times(loss_or_losses, scale)


def _times(loss, scale):
    """``loss * scale`` for a host float or a float32 (1,) device scale (cast to the loss's dtype); the loss itself
    for a scale of 1 (bfloat16's static default): no op, no node in the backward graph."""
    if isinstance(scale, float):
        return loss if scale == 1.0 else loss * scale
    scale = scale.as_in_context(loss.context).astype(loss.dtype, copy=False)
    if isinstance(loss, _mx_np.ndarray):
        return loss * scale.as_np_ndarray().reshape(())
    return nd.broadcast_mul(loss, scale.reshape((1,) * loss.ndim))


def unscale(trainer: Union[Trainer, Optimizer]) -> None:
    """Unscale the trainer's gradients in place (e.g. before gradient clipping); call once per step.

    All-reduces the gradients first when the trainer would (multi-device without updates on the kvstore), so
    call it after ``backward`` and before ``trainer.step`` / ``trainer.update``, which then reuse its
    finiteness check. Reads the current scale on the host: waits for the previous step's scaler update (not for
    this step's gradients).

    With an ``mx.optimizer.Optimizer`` (Module API), the gradients of the Module that ran ``backward`` last
    are unscaled; call it between ``Module.backward()`` and ``Module.update()``.

    Raises
    ------
    RuntimeError
        Called twice in the same step, or on a trainer without :func:`init_trainer`.
    """
    if isinstance(trainer, Optimizer):
        return module_api.unscale_optimizer(trainer)
    amp_state = state_of(trainer)
    if amp_state.stage is Stage.UNSCALED:
        raise RuntimeError("amp.unscale() has already been called on this trainer since the last step()")
    ensure_kvstore(trainer)
    if amp_state.stage is Stage.READY and trainer._kvstore and not trainer._update_on_kvstore:
        trainer._allreduce_grads()
    with_grads = [(i, p) for i, p in enumerate(trainer._params) if p.grad_req != "null"]
    amp_state.flag = step.check_grads(trainer, 1.0 / amp_state.scaler.scale, with_grads, len(with_grads))
    amp_state.stage = Stage.UNSCALED
