"""Loss scaling for ``gluon.Trainer``: init_trainer, scale_loss, unscale, exact step skipping, checkpoints.

:func:`init_trainer` attaches a :class:`~mxnet.amp.loss_scaler.LossScaler` to one trainer *instance* and wraps
that instance's ``step``, ``update``, ``allreduce_grads``, ``save_states`` and ``load_states`` (the class is
never patched). The wrapped ``step``:

1. all-reduces gradients (unless the parameters are updated on the kvstore, or ``amp.unscale`` already did),
2. checks every gradient on every device for inf/nan in one fused pass (a float32 flag on the device),
3. updates with ``1/scale`` folded into the gradient multiplier (no extra pass over the gradients, no one-step
   lag) if all are finite; otherwise skips the update entirely (parameters, optimizer states and the
   optimizer's update counters stay as they were, so learning-rate schedules do not advance),
4. advances the scaler and returns a :class:`~mxnet.amp.fused_update.StepResult`: true if the update was
   applied, false if it was skipped.

With SGD (momentum, weight decay), Adam or :class:`~mxnet.amp.adamw.AdamW` on CPU parameters (float32, or
float16 with ``multi_precision``), steps 2 to 4 are queued on MXNet's engine and the step does not wait for its
gradients: one fused library update per device reads the flag and the scaler's device state, and the scaler
advances on the device (see :mod:`mxnet.amp.fused_update` and :mod:`mxnet.amp.device_scaler`). The host learns
whether a step was skipped lazily; reading the ``StepResult`` (``if trainer.step(n):``), the scaler's
``scale``/``state`` or saving states waits for it (a documented sync). Other optimizers (and
``init_trainer(..., fused=False)``) read the flag on the host once per step and call MXNet's own update.

With a distributed kvstore, gradients are summed across workers before the check, so an overflow on any worker
makes every worker skip and all scalers stay equal; this needs ``update_on_kvstore=False`` (chosen automatically
when left to the default; an explicit True, async or sparse distributed training raise at :func:`init_trainer`).

Checkpoints: the wrapped ``save_states`` writes the optimizer states exactly as a plain trainer does, followed by
a versioned AMP section (see :mod:`mxnet.amp.checkpoint`), atomically. ``load_states`` reads AMP files, plain
``gluon.Trainer`` files and ``mxnet.contrib.amp`` files (the latter two keep the current scaler and log one
warning). A file written for another target dtype (float16 vs bfloat16 vs no ``amp.init``) loads its optimizer
states but keeps the current loss scaler, with a warning: a float16 scale means nothing to a bfloat16 run.
"""
from contextlib import contextmanager
import logging
import types

from ..gluon import Trainer
from ..optimizer import Optimizer
from .. import autograd
from .. import ndarray as nd
from .. import numpy as _mx_np
from . import _ext, checkpoint, module_api
from .amp_state import AmpState, Stage, attach, attached, replace_scaler, report, state_of
from .fused_update import FusedUpdater, RuleCache, StepResult
from .grad_buffer import GradBuffers
from .loss_scaler import LossScaler

__all__ = ["init_trainer", "scale_loss", "unscale", "get_loss_scaler", "state_dict", "load_state_dict"]

_LOG = logging.getLogger(__name__)
_WRAPPED = ("step", "update", "allreduce_grads", "save_states", "load_states")


def _target_dtype():
    from . import autocast  # lazy: autocast hooks the front ends and imports more of mxnet
    return autocast.training_dtype()


def _fresh(trainer, ignore_stale_grad):
    """The ``(index, parameter)`` pairs whose gradients this step uses, and how many have gradients at all.

    Raises MXNet's own stale-gradient error (``Trainer._update``'s) before anything changes, unless
    ``ignore_stale_grad``: then parameters whose gradient was not recomputed since the last step are left out.
    """
    fresh, total = [], 0
    for index, param in enumerate(trainer._params):
        if param.grad_req == "null":
            continue
        total += 1
        stale = next((data for data in param.list_data() if not data._fresh_grad), None)
        if stale is None:
            fresh.append((index, param))
        elif not ignore_stale_grad:
            raise UserWarning(
                "Gradient of Parameter `%s` on context %s has not been updated by backward since last `step`. "
                "This could mean a bug in your model that made it only use a subset of the Parameters (Blocks) "
                "for this iteration. If you are intentionally only using a subset, call step with "
                "ignore_stale_grad=True to suppress this warning and skip updating of Parameters with stale "
                "gradient" % (param.name, str(stale.context)))
    return fresh, total


def _check_grads(trainer, inv_scale, fresh, total):
    """Unscale (when ``inv_scale != 1``) and check the gradients of ``fresh`` on every device; returns a flag.

    One fused call per device (a Trainer's parameters all live on the same device list, in the same order),
    over the contiguous gradient buffers when every parameter with a gradient is in ``fresh``. Stale gradients
    left out by ``ignore_stale_grad`` are not checked, as the update leaves them out: an old inf there must not
    skip every later step.
    """
    if not fresh:
        if total:
            return nd.ones((1,))  # every gradient is stale: nothing to check, the update skips them all
        raise RuntimeError("trainer has no parameter with a gradient (all grad_req='null')")
    params = [param for _, param in fresh]
    if len(fresh) == total:  # the common case: one call per device over the contiguous buffers
        amp_state = state_of(trainer)
        if amp_state.grads is None or not amp_state.grads.current(params):
            amp_state.grads = GradBuffers(params)
        per_device = amp_state.grads.per_device()
    else:
        per_device = [list(grads) for grads in zip(*(param.list_grad() for param in params))]
    with autograd.pause():
        flags = [_ext.unscale_and_check(grads, inv_scale) for grads in per_device]
        flag = flags[0]
        for other in flags[1:]:
            flag = flag * other.as_in_context(flag.context)
    return flag


def _initial_grad_buffers(trainer):
    """The contiguous gradient buffers of ``trainer``'s parameters, laid out now, or None while one of them is
    not initialised yet (deferred shapes: the first step lays them out).

    Now, before the first backward, the separate gradient arrays are freed before the activations are
    allocated, which then reuse their memory; laid out after a step, the freed arrays stayed in the process's
    RSS (ResNet-18 at batch 128: +43 MB, one gradient's worth).
    """
    from ..gluon.parameter import DeferredInitializationError
    params = [param for param in trainer._params if param.grad_req != "null"]
    try:
        for param in params:
            param.list_grad()
    except DeferredInitializationError:
        return None
    return GradBuffers(params) if params else None


def _ensure_kvstore(trainer):
    if not trainer._kv_initialized:
        trainer._init_kvstore()
    if trainer._params_to_init:
        trainer._init_params()
        if trainer._distributed:
            # MXNet race (seen with dist_sync on CPU): the first gradient push can reach the servers before
            # another worker's pull of the initial weights, which then receives the gradient sum. Waiting for
            # the pulls once, when parameters are first initialised, orders them.
            nd.waitall()


def _on_kvstore(trainer):
    return bool(trainer._kvstore and trainer._update_on_kvstore)


def _fused_updater(trainer):
    """The trainer's FusedUpdater, or None when its optimizer or parameters need MXNet's own update."""
    amp_state = state_of(trainer)
    rule = amp_state.rules.rule(trainer) if amp_state.fused else None
    if rule is None:
        _settle(trainer)
        amp_state.updater = None
    elif amp_state.updater is None or amp_state.updater.rule != rule:
        _settle(trainer)
        amp_state.updater = FusedUpdater(trainer, rule)
    return amp_state.updater


def _settle(trainer):
    """Learn the outcome of the trainer's last fused step (restores its counters if it was skipped)."""
    amp_state = attached(trainer)
    if amp_state is not None and amp_state.updater is not None:
        amp_state.updater.settle()


def _apply(trainer, batch_size, ignore_stale_grad):
    """Check (or reuse amp.unscale's check), then update or skip; advance the scaler. Returns a StepResult."""
    amp_state = state_of(trainer)
    unscaled = amp_state.stage is Stage.UNSCALED
    fresh, total = _fresh(trainer, ignore_stale_grad)
    flag = amp_state.flag if unscaled else _check_grads(trainer, 1.0, fresh, total)
    amp_state.stage, amp_state.flag = Stage.READY, None
    updater = None if _on_kvstore(trainer) else _fused_updater(trainer)
    if updater is not None:
        trainer._optimizer.rescale_grad = trainer._scale / batch_size
        scaler_state = (_unit_state(flag.context) if unscaled
                        else amp_state.scaler.device_state(flag.context))
        result = updater.step(fresh, flag, scaler_state) if fresh else StepResult(True)
        for _, param in fresh:
            for data in param.list_data():
                data._fresh_grad = False
        report(amp_state.scaler, flag)
        return result
    inv_scale = 1.0 if unscaled else 1.0 / amp_state.scaler.scale
    finite = bool(flag.asnumpy()[0])  # the step's single host sync
    if finite:
        trainer._optimizer.rescale_grad = trainer._scale / batch_size * inv_scale
        if _on_kvstore(trainer):
            trainer._allreduce_grads()  # push gradients, the kvstore updates, pull weights
        trainer._update(ignore_stale_grad)
    else:
        for param in trainer._params:
            if param.grad_req != "null":
                for data in param.list_data():
                    data._fresh_grad = False
    report(amp_state.scaler, finite)
    return StepResult(finite)


_UNIT_STATES = {}  # Context -> float64 (6,) scaler state with scale 1 (gradients amp.unscale already unscaled)


def _unit_state(ctx):
    if ctx not in _UNIT_STATES:
        _UNIT_STATES[ctx] = nd.array([1.0, 0, 0, 0, 0, 0], ctx=ctx, dtype="float64")
    return _UNIT_STATES[ctx]


def _step(trainer, batch_size, ignore_stale_grad=False):
    """AMP version of ``Trainer.step``: returns a StepResult, true if the update was applied (reading it syncs)."""
    trainer._check_and_rescale_grad(trainer._scale / batch_size)
    _ensure_kvstore(trainer)
    if state_of(trainer).stage is Stage.READY and not _on_kvstore(trainer):
        trainer._allreduce_grads()
    return _apply(trainer, batch_size, ignore_stale_grad)


def _update(trainer, batch_size, ignore_stale_grad=False):
    """AMP version of ``Trainer.update`` (after ``allreduce_grads``): returns a StepResult, as ``step`` does."""
    _ensure_kvstore(trainer)
    if _on_kvstore(trainer):
        raise RuntimeError("update() is not supported when parameters are updated on the kvstore; create the "
                           "trainer with update_on_kvstore=False or call step()")
    trainer._check_and_rescale_grad(trainer._scale / batch_size)
    return _apply(trainer, batch_size, ignore_stale_grad)


def _allreduce_grads(trainer):
    """AMP version of ``Trainer.allreduce_grads``: refuses to reduce the same gradients twice."""
    amp_state = state_of(trainer)
    if amp_state.stage is not Stage.READY:
        raise RuntimeError("allreduce_grads() called after %s since the last step(); gradients are reduced "
                           "once per step" % ("allreduce_grads()" if amp_state.stage is Stage.REDUCED
                                              else "amp.unscale()"))
    Trainer.allreduce_grads(trainer)
    amp_state.stage = Stage.REDUCED


def _optimizer_bytes(trainer):
    _ensure_kvstore(trainer)
    _settle(trainer)
    if trainer._update_on_kvstore:
        return trainer._kvstore._updater.get_states(dump_optimizer=True)
    return trainer._updaters[0].get_states(dump_optimizer=True)


def _save_states(trainer, fname):
    """AMP version of ``Trainer.save_states``: optimizer states plus the AMP section, written atomically."""
    checkpoint.atomic_write(fname, checkpoint.pack(_optimizer_bytes(trainer), state_dict(trainer)))


def _load_states(trainer, fname):
    """AMP version of ``Trainer.load_states``: reads AMP, plain and ``mxnet.contrib.amp`` files.

    Everything is read and validated before the trainer changes: a bad file raises ValueError and leaves the
    trainer exactly as it was.
    """
    optimizer_bytes, amp_section = checkpoint.read_file(fname)
    apply_amp = _prepare_amp_section(trainer, amp_section, source=repr(fname))
    _ensure_kvstore(trainer)
    _settle(trainer)
    if trainer._update_on_kvstore:
        trainer._kvstore._updater.set_states(optimizer_bytes)
        trainer._optimizer = trainer._kvstore._updater.optimizer
    else:
        for updater in trainer._updaters:
            updater.set_states(optimizer_bytes)
            updater.optimizer = trainer._updaters[0].optimizer
        trainer._optimizer = trainer._updaters[0].optimizer
    trainer._optimizer.param_dict = dict(enumerate(trainer._params))
    apply_amp()


def _prepare_amp_section(trainer, section, source):
    """Validate an AMP section and return a function that applies it (so validation precedes any change)."""
    amp_state = state_of(trainer)
    if section is None:
        _LOG.warning("AMP: %s holds no AMP state (written by a plain gluon.Trainer or mxnet.contrib.amp); "
                     "keeping the current loss scaler (scale %g)", source, amp_state.scaler.scale)
        return lambda: None
    if not isinstance(section, dict) or set(section) != {"version", "target_dtype", "loss_scaler"}:
        raise ValueError("invalid AMP state in %s: expected keys ['loss_scaler', 'target_dtype', 'version'], "
                         "got %r" % (source, sorted(section) if isinstance(section, dict) else section))
    if section["version"] != checkpoint.AMP_SECTION_VERSION:
        raise ValueError("unsupported AMP state version %r in %s; supported: %d"
                         % (section["version"], source, checkpoint.AMP_SECTION_VERSION))
    candidate = LossScaler()
    candidate.load_state_dict(section["loss_scaler"])
    if section["target_dtype"] != amp_state.target_dtype:
        _LOG.warning("AMP: %s was written for target dtype %r but this trainer runs %r; its loss scaler state "
                     "is dropped and the current one (scale %g) kept", source, section["target_dtype"],
                     amp_state.target_dtype, amp_state.scaler.scale)
        return lambda: None
    return lambda: amp_state.scaler.load_state_dict(candidate.state_dict())


def _check_kvstore_config(trainer):
    """Refuse kvstore setups where a skipped step cannot be exact; pick update_on_kvstore=False for dist."""
    if trainer._contains_sparse_weight or trainer._contains_sparse_grad:
        raise ValueError("AMP loss scaling does not support sparse weights or gradients (row_sparse parameter "
                         "found); use dense parameters")
    if trainer._kv_initialized:
        distributed, on_kvstore = trainer._distributed, _on_kvstore(trainer)
    else:
        config = trainer._kvstore_params
        kvstore = config["kvstore"]
        kv_type = kvstore if isinstance(kvstore, str) else getattr(kvstore, "type", "")
        distributed, on_kvstore = "dist" in kv_type, config["update_on_kvstore"]
        if distributed and "async" in kv_type:
            raise ValueError("AMP cannot skip steps exactly with an asynchronous kvstore (%r): the servers apply "
                             "each worker's update on arrival; use 'dist_sync'" % kv_type)
        if distributed and on_kvstore is None:
            config["update_on_kvstore"] = on_kvstore = False
    if distributed and on_kvstore:
        raise ValueError("AMP needs update_on_kvstore=False with a distributed kvstore: with updates on the "
                         "servers, a worker cannot skip a step the others take; create the Trainer with "
                         "update_on_kvstore=False (or leave it unset before amp.init_trainer)")


def init_trainer(trainer, loss_scaler=None, fused=True):
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
        where a skipped step cannot leave every worker's parameters and optimizer states unchanged.

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
    if isinstance(trainer, Optimizer):
        current = attached(trainer)
        scaler = loss_scaler or (current.scaler if current else LossScaler.default_for(_target_dtype()))
        return module_api.init_optimizer(trainer, scaler, _target_dtype())
    if not isinstance(trainer, Trainer):
        raise TypeError("init_trainer expects a gluon.Trainer or an mx.optimizer.Optimizer, got %s"
                        % type(trainer).__name__)
    _check_kvstore_config(trainer)
    amp_state = attached(trainer)
    if amp_state is None:
        dtype = _target_dtype()
        amp_state = AmpState(loss_scaler or LossScaler.default_for(dtype), dtype, fused)
        amp_state.rules = RuleCache()  # fused_rule, recomputed only when the optimizer or parameter arrays change
        amp_state.grads = _initial_grad_buffers(trainer)
        attach(trainer, amp_state)
        for name in _WRAPPED:
            setattr(trainer, name, types.MethodType(globals()["_" + name], trainer))
    else:
        _settle(trainer)
        amp_state.fused = fused
        if loss_scaler is not None:
            replace_scaler(trainer, loss_scaler)
    return amp_state.scaler


def get_loss_scaler(trainer):
    """Return the LossScaler attached to ``trainer`` (RuntimeError if ``init_trainer`` was not called)."""
    return state_of(trainer).scaler


@contextmanager
def scale_loss(loss_or_losses, trainer):
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
    amp_state = state_of(trainer)
    if isinstance(trainer, Optimizer):
        scale = amp_state.loss_scale = amp_state.scaler.scale  # what Module.update divides out
    else:
        scale = amp_state.scaler.loss_scale()
    if isinstance(loss_or_losses, (list, tuple)):
        yield [_times(loss, scale) for loss in loss_or_losses]
    else:
        yield _times(loss_or_losses, scale)


def _times(loss, scale):
    """``loss * scale`` for a host float or a float32 (1,) device scale (cast to the loss's dtype)."""
    if isinstance(scale, float):
        return loss * scale
    scale = scale.as_in_context(loss.context).astype(loss.dtype, copy=False)
    if isinstance(loss, _mx_np.ndarray):
        return loss * scale.as_np_ndarray().reshape(())
    return nd.broadcast_mul(loss, scale.reshape((1,) * loss.ndim))


def unscale(trainer):
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
    _ensure_kvstore(trainer)
    if amp_state.stage is Stage.READY and trainer._kvstore and not trainer._update_on_kvstore:
        trainer._allreduce_grads()
    with_grads = [(i, p) for i, p in enumerate(trainer._params) if p.grad_req != "null"]
    amp_state.flag = _check_grads(trainer, 1.0 / amp_state.scaler.scale, with_grads, len(with_grads))
    amp_state.stage = Stage.UNSCALED


def state_dict(trainer):
    """Return the trainer's AMP state as a JSON-safe dict (for users with their own checkpoint format).

    Returns
    -------
    dict
        ``{"version": 1, "target_dtype": str or None, "loss_scaler": LossScaler.state_dict()}``.
    """
    amp_state = state_of(trainer)
    return {"version": checkpoint.AMP_SECTION_VERSION, "target_dtype": amp_state.target_dtype,
            "loss_scaler": amp_state.scaler.state_dict()}


def load_state_dict(trainer, state):
    """Restore what :func:`state_dict` returned; invalid input raises ValueError and changes nothing.

    A state written for another target dtype (e.g. float16 into a bfloat16 run) keeps the current scaler and
    logs a warning.

    Raises
    ------
    TypeError
        ``state`` is not a dict.
    ValueError
        Missing, unknown or invalid keys (the message names them) or an unsupported version.
    """
    if not isinstance(state, dict):
        raise TypeError("AMP state must be a dict (from amp.state_dict), got %s" % type(state).__name__)
    _prepare_amp_section(trainer, state, source="the given AMP state")()
