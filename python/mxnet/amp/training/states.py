"""An AMP trainer's checkpoints: the wrapped ``save_states`` / ``load_states``, and its AMP state as a dict.

``save_states`` writes the optimizer states exactly as a plain trainer does, followed by a versioned AMP section
(:mod:`.checkpoint`), atomically. ``load_states`` reads AMP files, plain ``gluon.Trainer`` files and
``mxnet.contrib.amp`` files (the latter two keep the current scaler and log one warning). A file written for
another target dtype (float16 vs bfloat16 vs no ``amp.init``) loads its optimizer states but keeps the current
loss scaler, with a warning: a float16 scale means nothing to a bfloat16 run. Everything is read and validated
before the trainer changes.

Loading never runs code a file names: the optimizer states are read by the allow-listed reader of
:mod:`.updater_states` (``load_states(fname, trusted=True)`` hands them to ``pickle``, for files of custom
optimizers). :func:`load_states` is also the API's ``amp.load_states``, which does the same for plain trainers and
Module-API modules.
"""
import logging
from typing import Any, Dict

import numpy as np

from mxnet.gluon import Trainer

from ..base.dtypes import BFLOAT16
from ..base.files import atomic_write
from . import checkpoint, module_api, updater_states
from .amp_state import attached, state_of
from .bf16_weights import prepare_weights_state, weights_state
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
    bf16 = state_of(trainer).bf16_weights
    if bf16 is None:
        return trainer._updaters[0].get_states(dump_optimizer=True)
    bf16.cast_states(np.float32)  # the same file in both weight modes: float32 states (exact)
    try:
        return trainer._updaters[0].get_states(dump_optimizer=True)
    finally:
        bf16.cast_states(BFLOAT16)


def save_states(trainer: Trainer, fname: str) -> None:
    """AMP version of ``Trainer.save_states``: optimizer states plus the AMP section, written atomically."""
    atomic_write(fname, checkpoint.pack(_optimizer_bytes(trainer), state_dict(trainer)))


def load_states(trainer: Any, fname: str, trusted: bool = False) -> None:
    """Load a trainer state file into a ``gluon.Trainer`` or an ``mx.mod.Module`` without running its code.

    ``pickle`` (which MXNet's ``Trainer.load_states`` and ``Module.load_optimizer_states`` use) runs whatever a
    file names; this reads the optimizer states with the allow-listed reader of :mod:`.updater_states` instead:
    NDArray states, the optimizers of ``mx.optimizer`` and their learning-rate schedulers, numpy scalars and
    plain containers. Anything else is refused before it is built. It is ``amp.load_states``, and the
    ``load_states`` method of a trainer given to ``amp.init_trainer``.

    Parameters
    ----------
    trainer : gluon.Trainer or mx.mod.Module or mx.mod.BucketingModule
        A trainer given to ``amp.init_trainer`` loads its optimizer states and its loss scaler (AMP, plain and
        ``mxnet.contrib.amp`` files; see the module docstring). A plain trainer or a module loads the optimizer
        states, and ignores the AMP section of a file an AMP trainer wrote once it is checked. A module needs
        ``init_optimizer`` first.
    fname : str
        A file of ``Trainer.save_states`` (plain or AMP), ``Module.save_optimizer_states`` or
        ``mxnet.contrib.amp``.
    trusted : bool, optional
        Read the optimizer states with ``pickle`` itself, which runs whatever the file names: only for files
        you trust that hold something else (a custom optimizer, sparse states).

    Raises
    ------
    TypeError
        ``trainer`` is none of the above, or ``trusted`` not a bool.
    ValueError
        The file is truncated, corrupt or foreign, or its optimizer states ask for something a state file never
        holds (the message names the global, e.g. ``'posix.system'``); the trainer or module is unchanged.
    RuntimeError
        A module whose optimizer is not initialised.

    Example
    -------
    >>> trainer = gluon.Trainer(net.collect_params(), 'adam')      # no amp.init_trainer needed
    >>> amp.load_states(trainer, 'downloaded.states')
    """
    if isinstance(trainer, Trainer) and attached(trainer) is not None:
        loaded = checkpoint.read(fname, trusted=trusted)
        apply_amp = _prepare_amp_section(trainer, loaded.amp, source=repr(fname))
        _install_states(trainer, loaded.updater_states)
        if state_of(trainer).bf16_weights is not None:
            state_of(trainer).bf16_weights.cast_states(BFLOAT16)
        apply_amp()
        return
    if isinstance(trainer, Trainer):
        updater = None
    elif module_api.is_module(trainer):
        updater = module_api.module_updater(trainer)
    else:
        raise TypeError("load_states expects a gluon.Trainer, an mx.mod.Module or an mx.mod.BucketingModule, got %s"
                        % type(trainer).__name__)
    loaded = checkpoint.read(fname, trusted=trusted)
    if loaded.amp is not None:
        _section_scaler(loaded.amp, repr(fname))  # not used here, but a file with a broken section is broken
    if updater is None:
        _install_states(trainer, loaded.updater_states)
    else:
        updater_states.install([updater], loaded.updater_states)


def _install_states(trainer: Trainer, loaded: updater_states.UpdaterStates) -> None:
    """What ``Trainer.load_states`` does after unpickling, with states already read and checked."""
    ensure_kvstore(trainer)
    settle(trainer)
    if trainer._update_on_kvstore:
        updaters = [trainer._kvstore._updater]
        if updaters[0] is None:
            raise ValueError("this trainer's optimizer states live on the servers of its distributed kvstore "
                             "(%r, update_on_kvstore=True); load states into a trainer created with "
                             "update_on_kvstore=False" % trainer._kvstore.type)
    else:
        updaters = trainer._updaters
    updater_states.install(updaters, loaded)
    for updater in updaters:
        updater.optimizer = updaters[0].optimizer
    trainer._optimizer = updaters[0].optimizer
    trainer._optimizer.param_dict = dict(enumerate(trainer._params))


#: The keys of an AMP section, by version (version 1, before bf16-true weights, had no "weights"; version 2's
#: "weights" had no "rounding" and "seed", see bf16_weights.prepare_weights_state).
SECTION_KEYS = {1: {"version", "target_dtype", "loss_scaler"}, 2: {"version", "target_dtype", "loss_scaler", "weights"},
                3: {"version", "target_dtype", "loss_scaler", "weights"}}


def _section_scaler(section, source):
    """The LossScaler an AMP section holds; ValueError names what is wrong with the section and where it is."""
    version = section.get("version") if isinstance(section, dict) else None
    if isinstance(section, dict) and (isinstance(version, bool) or version not in SECTION_KEYS):
        raise ValueError("unsupported AMP state version %r in %s; supported: %s"
                         % (version, source, ", ".join(map(str, sorted(SECTION_KEYS)))))
    if not isinstance(section, dict) or set(section) != SECTION_KEYS[version]:
        raise ValueError("invalid AMP state in %s: expected keys %r, got %r"
                         % (source, sorted(SECTION_KEYS[version] if isinstance(section, dict) else SECTION_KEYS[3]),
                            sorted(section) if isinstance(section, dict) else section))
    candidate = LossScaler()
    try:
        candidate.load_state_dict(section["loss_scaler"])
    except (TypeError, ValueError) as err:
        raise ValueError("invalid AMP state in %s: %s" % (source, err)) from err
    return candidate


def _prepare_amp_section(trainer, section, source):
    """Validate an AMP section and return a function that applies it (so validation precedes any change)."""
    amp_state = state_of(trainer)
    if section is None:
        _LOG.warning("AMP: %s holds no AMP state (written by a plain gluon.Trainer or mxnet.contrib.amp); "
                     "keeping the current loss scaler (scale %g)", source, amp_state.scaler.scale)
        return lambda: None
    candidate = _section_scaler(section, source)
    apply_weights = (prepare_weights_state(trainer, section["weights"], source, section["version"])
                     if "weights" in section else lambda: None)
    if section["target_dtype"] != amp_state.target_dtype:
        _LOG.warning("AMP: %s was written for target dtype %r but this trainer runs %r; its loss scaler state "
                     "is dropped and the current one (scale %g) kept", source, section["target_dtype"],
                     amp_state.target_dtype, amp_state.scaler.scale)
        return apply_weights

    def apply():
        amp_state.scaler.load_state_dict(candidate.state_dict())
        apply_weights()
    return apply


def state_dict(trainer: Any) -> Dict[str, Any]:
    """Return the trainer's AMP state as a JSON-safe dict (for users with their own checkpoint format).

    Returns
    -------
    dict
        ``{"version": 3, "target_dtype": str or None, "loss_scaler": LossScaler.state_dict(),
        "weights": {"dtype": "float32" or "bfloat16", "rounding": None, "kahan" or "stochastic", "seed": int or
        None, "compensation": {...}}}`` (the weight mode of ``init_trainer`` and, in bfloat16 mode, its rounding
        with the Kahan compensation of each bf16-true parameter, base64, or stochastic rounding's base seed).
        Versions 1 (no ``"weights"``: float32) and 2 (no ``"rounding"`` and ``"seed"``: Kahan) still load.
    """
    amp_state = state_of(trainer)
    return {"version": checkpoint.AMP_SECTION_VERSION, "target_dtype": amp_state.target_dtype,
            "loss_scaler": amp_state.scaler.state_dict(), "weights": weights_state(trainer)}


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
