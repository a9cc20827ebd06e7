"""An AMP trainer's checkpoints: the wrapped ``save_states`` / ``load_states``, and its AMP state as a dict.

``save_states`` writes the optimizer states exactly as a plain trainer does, followed by a versioned AMP section
(:mod:`.checkpoint`), atomically. ``load_states`` reads AMP files, plain ``gluon.Trainer`` files and
``mxnet.contrib.amp`` files (the latter two keep the current scaler and log one warning). A file written for
another target dtype (float16 vs bfloat16 vs no ``amp.init``) loads its optimizer states but keeps the current
loss scaler, with a warning: a float16 scale means nothing to a bfloat16 run. Everything is read and validated
before the trainer changes.
"""
import logging
from typing import Any, Dict

from mxnet.gluon import Trainer

from ..base.files import atomic_write
from . import checkpoint
from .amp_state import state_of
from .kvstore import ensure_kvstore
from .loss_scaler import LossScaler
from .step import settle

__all__ = ["save_states", "load_states", "state_dict", "load_state_dict"]

_LOG = logging.getLogger("mxnet.amp.trainer")  # the logger name of mxnet.amp 0.1, which users filter by


def _optimizer_bytes(trainer):
    ensure_kvstore(trainer)
    settle(trainer)
    if trainer._update_on_kvstore:
        return trainer._kvstore._updater.get_states(dump_optimizer=True)
    return trainer._updaters[0].get_states(dump_optimizer=True)


def save_states(trainer: Trainer, fname: str) -> None:
    """AMP version of ``Trainer.save_states``: optimizer states plus the AMP section, written atomically."""
    atomic_write(fname, checkpoint.pack(_optimizer_bytes(trainer), state_dict(trainer)))


def load_states(trainer: Trainer, fname: str) -> None:
    """AMP version of ``Trainer.load_states``: reads AMP, plain and ``mxnet.contrib.amp`` files.

    Everything is read and validated before the trainer changes: a bad file raises ValueError and leaves the
    trainer exactly as it was.
    """
    optimizer_bytes, amp_section = checkpoint.read_file(fname)
    apply_amp = _prepare_amp_section(trainer, amp_section, source=repr(fname))
    ensure_kvstore(trainer)
    settle(trainer)
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


def state_dict(trainer: Any) -> Dict[str, Any]:
    """Return the trainer's AMP state as a JSON-safe dict (for users with their own checkpoint format).

    Returns
    -------
    dict
        ``{"version": 1, "target_dtype": str or None, "loss_scaler": LossScaler.state_dict()}``.
    """
    amp_state = state_of(trainer)
    return {"version": checkpoint.AMP_SECTION_VERSION, "target_dtype": amp_state.target_dtype,
            "loss_scaler": amp_state.scaler.state_dict()}


def load_state_dict(trainer: Any, state: Dict[str, Any]) -> None:
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
