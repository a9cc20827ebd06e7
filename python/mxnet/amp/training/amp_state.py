"""The AMP state that ``init_trainer`` attaches to a ``gluon.Trainer`` or an ``mx.optimizer.Optimizer``.

:mod:`mxnet.amp.training.trainer` (Gluon) and :mod:`mxnet.amp.training.module_api` (Module API) both keep one
:class:`AmpState` per trainer or optimizer, under the attribute :data:`ATTR`, and both move it through the same
:class:`Stage`\\ s. Trainers that share one :class:`~mxnet.amp.LossScaler` form a :class:`Group`: the scaler
advances once every trainer of the group has reported its step (:func:`report_step`), and any overflow among them
backs it off.
"""
import enum
from typing import Any, Union
import weakref

import mxnet as mx

from .checks import all_finite

__all__ = ["Stage", "AmpState", "Group", "attach", "state_of", "attached", "replace_scaler", "report_step"]

#: Name of the attribute that holds a trainer's (or optimizer's) :class:`AmpState`.
ATTR = "_mxnet_amp"


class Stage(enum.Enum):
    """Where a trainer is between two steps; misuse (a second ``amp.unscale``) is refused by it."""

    READY = "ready"          # nothing done since the last step
    REDUCED = "reduced"      # allreduce_grads() was called
    UNSCALED = "unscaled"    # amp.unscale() was called: gradients reduced, unscaled and checked


class AmpState:
    """What :func:`~mxnet.amp.init_trainer` attaches to a trainer or an optimizer.

    Parameters
    ----------
    scaler : LossScaler
    target_dtype : str or None
        The dtype given to ``amp.init`` when the trainer was initialised (None without ``amp.init``).
    fused : bool
        Whether supported optimizers take the fused, sync-free update (Gluon trainers only).
    """

    def __init__(self, scaler, target_dtype, fused=True):
        self.scaler = scaler
        self.target_dtype = target_dtype
        self.fused = fused
        self.stage = Stage.READY
        self.flag = None  # the float32 (1,) finite flag of amp.unscale's check, until the step uses it
        self.grads = None  # GradBuffers: a trainer's gradients as views of one buffer per device and dtype
        self.updater = None  # FusedUpdater while a trainer's optimizer and parameters allow one
        self.rules = None  # RuleCache of a Gluon trainer
        self.bf16_weights = None  # Bf16Weights while the trainer runs bf16-true weights (init_trainer's weights)
        self.module = None  # Module API: weakref to the Module that ran backward last (what unscale unscales)
        self.loss_scale = None  # Module API: the scale scale_loss applied since the last update (None: unscaled)


class Group:
    """Trainers sharing one LossScaler, and the reports of the current step so far."""

    def __init__(self):
        self.trainers = weakref.WeakSet()
        self.flags = []  # bool (read on the host) or float32 (1,) device flag, one per trainer that stepped


_GROUPS = weakref.WeakKeyDictionary()  # LossScaler -> Group


def attach(owner, state):
    """Attach ``state`` to ``owner`` (a trainer or optimizer) and put ``owner`` in its scaler's group."""
    setattr(owner, ATTR, state)
    join_group(owner)
    return state


def attached(owner):
    """The :class:`AmpState` of ``owner``, or None when ``init_trainer`` was not called on it."""
    return getattr(owner, ATTR, None)


def state_of(owner):
    """The :class:`AmpState` of ``owner``.

    Raises
    ------
    RuntimeError
        ``init_trainer`` was not called on ``owner``.
    """
    state = attached(owner)
    if state is None:
        raise RuntimeError("trainer is not initialised for AMP; call amp.init_trainer(trainer) first")
    return state


def join_group(owner):
    """Add ``owner`` to the group of the scaler its state holds now."""
    _GROUPS.setdefault(state_of(owner).scaler, Group()).trainers.add(owner)


def replace_scaler(owner, scaler):
    """Move ``owner`` from its scaler's group to ``scaler``'s (nothing changes when it is the same scaler)."""
    state = state_of(owner)
    if scaler is state.scaler:
        return
    group = _GROUPS.get(state.scaler)
    if group is not None:
        group.trainers.discard(owner)
    state.scaler = scaler
    join_group(owner)


def report_step(scaler: Any, finite: Union[bool, mx.nd.NDArray]) -> None:
    """Report one trainer's step to ``scaler``'s group; the last report of a step advances the scaler.

    Parameters
    ----------
    scaler : LossScaler
    finite : bool or NDArray
        Whether the step's gradients were finite: a host bool, or a float32 (1,) device flag (1: finite), in
        which case the scaler advances on the device without a host sync.
    """
    group = _GROUPS[scaler]
    group.flags.append(finite)
    if len(group.flags) < len(group.trainers):
        return
    flags, group.flags = group.flags, []
    devices = [f for f in flags if not isinstance(f, bool)]
    if not devices:
        scaler.update(all(flags))
        return
    combined = all_finite(devices)
    scaler.update_on_device(combined * 0 if any(f is False for f in flags) else combined)
