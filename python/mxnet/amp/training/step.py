"""The step of an AMP trainer: what the wrapped ``step``, ``update`` and ``allreduce_grads`` do.

1. all-reduce gradients (unless the parameters are updated on the kvstore, or ``amp.unscale`` already did),
2. check every gradient on every device for inf/nan in one fused pass (a float32 flag on the device),
3. update with ``1/scale`` folded into the gradient multiplier if all are finite, else skip the update entirely
   (parameters, optimizer states and the optimizer's update counters stay as they were),
4. advance the scaler and return a :class:`~mxnet.amp.training.fused_update.StepResult`.

SGD, Adam and AdamW take the fused path (:mod:`.fused_update`): steps 2 to 4 are queued on MXNet's engine and
the step does not wait; other optimizers read the flag on the host once and call MXNet's own update.
"""
from typing import List, Tuple
import weakref

from mxnet import nd
from mxnet.gluon import Parameter, Trainer
from mxnet.gluon.parameter import DeferredInitializationError

from ..core.heap import trim_between_steps
from .amp_state import Stage, attached, report_step, state_of
from .checks import check_gradients
from .fused_update import FusedUpdater, StepResult, fused_rule
from .grad_buffer import GradBuffers, block_building, blocks_reading
from .kvstore import ensure_kvstore, on_kvstore

__all__ = ["check_grads", "initial_grad_buffers", "settle", "step", "update", "allreduce_grads"]


def fresh_params(trainer: Trainer, ignore_stale_grad: bool) -> Tuple[List[Tuple[int, Parameter]], int]:
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


def _laid_out(trainer, params):
    """The trainer's gradient buffers over ``params`` (every parameter with a gradient), laid out again if a
    gradient array was replaced since."""
    amp_state = state_of(trainer)
    if amp_state.grads is None or not amp_state.grads.current(params):
        amp_state.grads = GradBuffers(params)
    return amp_state.grads


def check_grads(trainer: Trainer, inv_scale: float, fresh: List[Tuple[int, Parameter]], total: int) -> nd.NDArray:
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
        per_device = _laid_out(trainer, params).per_device()
    else:
        per_device = [list(grads) for grads in zip(*(param.list_grad() for param in params))]
    return check_gradients(per_device, inv_scale)


def initial_grad_buffers(trainer: Trainer):
    """The contiguous gradient buffers of ``trainer``'s parameters, laid out now, or None while one of them is
    not initialised yet (deferred shapes).

    Now, before the first backward, the separate gradient arrays are freed before the activations are
    allocated, which then reuse their memory; laid out after a step, the freed arrays stayed in the process's
    RSS (ResNet-18 at batch 128: +43 MB, one gradient's worth). With deferred shapes the buffers are laid out
    as the last of the parameters finishes its initialisation, in the first forward, before any CachedOp runs
    (:func:`_lay_out_when_initialised`); laid out at the first step instead, the old and new gradients and two
    sets of static CachedOp arrays coexisted (+54 MB at the peak of ResNet-18 at batch 128, +101 MB for the
    4-layer encoder of bench/bench_memory.py).
    """
    params = [param for param in trainer._params if param.grad_req != "null"]
    try:
        for param in params:
            param.list_grad()
    except DeferredInitializationError:
        _lay_out_when_initialised(trainer, params)
        return None
    return GradBuffers(params) if params else None


def _lay_out_when_initialised(trainer, params):
    """Lay out ``trainer``'s gradient buffers when the last of ``params`` finishes its deferred initialisation.

    A hook on each waiting parameter instance (removed once called) does it if that happens inside the first
    call of a hybridized block that reads every one of ``params``: its CachedOp is not built yet (any other
    block's is dropped), and nothing has been recorded with the old gradient arrays. Otherwise (an
    imperative model, whose blocks ran one by one with the old arrays; or a CachedOp reading the parameters
    exists already and may have run a backward) the first step lays them out, as before.
    """
    if blocks_reading(params):
        return

    trainer = weakref.ref(trainer)  # a parameter's hook must not keep its trainer alive

    def hooked(param, finish):
        def finish_then_lay_out():
            del param._finish_deferred_init  # the class's method again
            finish()
            amp_state = None if trainer() is None else attached(trainer())
            if (amp_state is None or amp_state.grads is not None
                    or any(p._data is None or p._deferred_init for p in params)):
                return
            if block_building(params) is not None:
                amp_state.grads = GradBuffers(params)  # drops other blocks' CachedOps, not the one being built
        return finish_then_lay_out

    for param in params:
        if param._deferred_init:
            param._finish_deferred_init = hooked(param, param._finish_deferred_init)


def _fused_updater(trainer):
    """The trainer's FusedUpdater, or None when its optimizer or parameters need MXNet's own update."""
    amp_state = state_of(trainer)
    rule = amp_state.rules.rule(trainer) if amp_state.fused else None
    bf16 = amp_state.bf16_weights
    if rule is None:
        if bf16 is not None:
            raise RuntimeError("bf16-true weights (init_trainer(weights='bfloat16')) need the fused update, but "
                               "it is not available: %s" % fused_rule(trainer)[1])
        settle(trainer)
        amp_state.updater = None
    elif amp_state.updater is None or amp_state.updater.rule != rule or amp_state.updater.bf16_weights is not bf16:
        settle(trainer)
        amp_state.updater = FusedUpdater(trainer, rule, bf16)
    return amp_state.updater


def settle(trainer: Trainer) -> None:
    """Learn the outcome of the trainer's last fused step (restores its counters if it was skipped)."""
    amp_state = attached(trainer)
    if amp_state is not None and amp_state.updater is not None:
        amp_state.updater.settle()


def _apply(trainer, batch_size, ignore_stale_grad):
    """Check (or reuse amp.unscale's check), then update or skip; advance the scaler. Returns a StepResult."""
    amp_state = state_of(trainer)
    unscaled = amp_state.stage is Stage.UNSCALED
    fresh, total = fresh_params(trainer, ignore_stale_grad)
    updater = None if on_kvstore(trainer) else _fused_updater(trainer)
    if updater is not None and fresh:
        flag = amp_state.flag if unscaled else None  # the update checks the gradients (in its own call if it can)
        if len(fresh) == total:
            _laid_out(trainer, [param for _, param in fresh])
        amp_state.stage, amp_state.flag = Stage.READY, None
        trainer._optimizer.rescale_grad = trainer._scale / batch_size
        ctx = fresh[0][1].list_data()[0].context
        scaler_state = _unit_state(ctx) if unscaled else amp_state.scaler.device_state(ctx)
        result = updater.step(fresh, flag, scaler_state, lambda: check_grads(trainer, 1.0, fresh, total))
        for _, param in fresh:
            for data in param._data:
                data._fresh_grad = False
        report_step(amp_state.scaler, result.flag)
        trim_between_steps()
        return result
    flag = amp_state.flag if unscaled else check_grads(trainer, 1.0, fresh, total)
    amp_state.stage, amp_state.flag = Stage.READY, None
    inv_scale = 1.0 if unscaled else 1.0 / amp_state.scaler.scale
    finite = bool(flag.asnumpy()[0])  # the step's single host sync
    if finite:
        trainer._optimizer.rescale_grad = trainer._scale / batch_size * inv_scale
        if on_kvstore(trainer):
            trainer._allreduce_grads()  # push gradients, the kvstore updates, pull weights
        trainer._update(ignore_stale_grad)
    else:
        for param in trainer._params:
            if param.grad_req != "null":
                for data in param.list_data():
                    data._fresh_grad = False
    report_step(amp_state.scaler, finite)
    trim_between_steps()
    return StepResult(finite)


_UNIT_STATES = {}  # Context -> float64 (6,) scaler state with scale 1 (gradients amp.unscale already unscaled)


def _unit_state(ctx):
    if ctx not in _UNIT_STATES:
        _UNIT_STATES[ctx] = nd.array([1.0, 0, 0, 0, 0, 0], ctx=ctx, dtype="float64")
    return _UNIT_STATES[ctx]


def step(trainer: Trainer, batch_size: int, ignore_stale_grad: bool = False) -> StepResult:
    """AMP version of ``Trainer.step``: returns a StepResult, true if the update was applied (reading it syncs)."""
    trainer._check_and_rescale_grad(trainer._scale / batch_size)
    ensure_kvstore(trainer)
    if state_of(trainer).stage is Stage.READY and not on_kvstore(trainer):
        trainer._allreduce_grads()
    return _apply(trainer, batch_size, ignore_stale_grad)


def update(trainer: Trainer, batch_size: int, ignore_stale_grad: bool = False) -> StepResult:
    """AMP version of ``Trainer.update`` (after ``allreduce_grads``): returns a StepResult, as ``step`` does."""
    ensure_kvstore(trainer)
    if on_kvstore(trainer):
        raise RuntimeError("update() is not supported when parameters are updated on the kvstore; create the "
                           "trainer with update_on_kvstore=False or call step()")
    trainer._check_and_rescale_grad(trainer._scale / batch_size)
    return _apply(trainer, batch_size, ignore_stale_grad)


def allreduce_grads(trainer: Trainer) -> None:
    """AMP version of ``Trainer.allreduce_grads``: refuses to reduce the same gradients twice."""
    amp_state = state_of(trainer)
    if amp_state.stage is not Stage.READY:
        raise RuntimeError("allreduce_grads() called after %s since the last step(); gradients are reduced "
                           "once per step" % ("allreduce_grads()" if amp_state.stage is Stage.REDUCED
                                              else "amp.unscale()"))
    Trainer.allreduce_grads(trainer)
    amp_state.stage = Stage.REDUCED
