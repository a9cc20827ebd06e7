"""bf16-true weights: ``amp.init_trainer(trainer, weights="bfloat16")`` keeps the large parameters, their gradients
and their optimizer states in bfloat16, with a bfloat16 Kahan compensation per weight (``rounding="kahan"``, the
default) or rounded stochastically, without compensation (``rounding="stochastic"``).

Which parameters: the float32 ones of two or more dimensions, the weights of ``Dense``, ``Conv*``, ``Embedding``
and attention projections. One-dimensional ones (biases, norm scale and shift) stay float32 with float32 states:
they are small, and a norm's scale near 1 is where bfloat16's 8 bits hurt most.

The update (SGD, SGD with momentum, Adam, AdamW; always the fused one) runs in float32 on the precise weight
``x = w + c`` and the widened states, then stores ``w = bf16(x')``, ``c = bf16(x' - w)`` and the states rounded
to bfloat16 (``compensated_store`` in ``src/operator/amp/kernels/update_rules.h``). ``w + c`` carries about 16
significant bits, so updates far below half a bfloat16 ulp of ``w`` accumulate in ``c`` instead of vanishing, the
classic stall of plain bfloat16 weights. :func:`use_plain_rounding` turns the compensation off (test and
benchmark control only: it shows that stall).

``rounding="stochastic"`` stores ``w = sr(x')`` and the states ``sr(m')``, ``sr(v')``, where ``sr`` rounds up
(in magnitude) with probability (the 16 bits bfloat16 drops) / 2^16: unbiased, so tiny updates move ``w`` in
expectation instead of vanishing, with no buffer (2 bytes per weight less than Kahan). The random bits are a
hash of a per-update seed and the element's index (``stochastic_bf16_bits`` in ``update_rules.h``); the seed of
a parameter's update is a hash of a base seed (drawn from MXNet's random state, so ``mx.random.seed`` makes runs
reproducible; kept in checkpoints), the parameter's index and its update count: each step, parameter and element
draws anew, every device alike.

Turning the mode on casts each chosen parameter's float32 value ``v`` to ``w = bf16(v)``, ``c = bf16(v - w)``
(stochastic rounding: ``w`` only, rounded to nearest); turning it off (``init_trainer(trainer, weights="float32")``
or ``amp.reset()``) gives back float32 parameters holding ``w + c`` (``w``), with float32 states; changing the
rounding goes through float32. Compiled blocks reading the parameters rebuild their CachedOp.
"""
import base64
import gc
import logging
from typing import Dict, List, Optional
import weakref

import numpy as np

from mxnet import autograd
from mxnet import ndarray as nd
from mxnet.gluon import HybridBlock

from ..base.dtypes import BFLOAT16, dtype_name
from ..base.patches import PATCHES
from .amp_state import attached, state_of
from ..autocast.graphs import forget_rewrite
from ..core import ops

__all__ = ["WEIGHT_MODES", "ROUNDINGS", "Bf16Weights", "check_mode", "use_plain_rounding", "weights_state",
           "prepare_weights_state"]

#: The values of ``init_trainer``'s ``weights``: float32 (master) weights, or bf16-true weights.
WEIGHT_MODES = ("float32", "bfloat16")
#: The values of ``init_trainer``'s ``rounding``: how bf16-true weights are stored (the first is the default).
ROUNDINGS = ("kahan", "stochastic")
_MASK64 = (1 << 64) - 1

_PATCH_GROUP = "bf16_weights"
_LOG = logging.getLogger("mxnet.amp.trainer")
_LIVE = weakref.WeakSet()  # Bf16Weights that amp.reset() turns back to float32


def check_mode(weights, rounding="kahan") -> str:
    """``weights`` if it is one of :data:`WEIGHT_MODES` and ``rounding`` one of :data:`ROUNDINGS`, the default
    unless ``weights`` is ``'bfloat16'``; otherwise ValueError naming the bad value and the choices."""
    if not isinstance(weights, str) or weights not in WEIGHT_MODES:
        raise ValueError("init_trainer: weights=%r is not a weight mode; valid choices: %s"
                         % (weights, ", ".join(repr(m) for m in WEIGHT_MODES)))
    if not isinstance(rounding, str) or rounding not in ROUNDINGS:
        raise ValueError("init_trainer: rounding=%r is not a rounding mode; valid choices: %s"
                         % (rounding, ", ".join(repr(m) for m in ROUNDINGS)))
    if rounding != ROUNDINGS[0] and weights != "bfloat16":
        raise ValueError("init_trainer: rounding=%r needs weights='bfloat16' (got weights=%r, which is not "
                         "rounded)" % (rounding, weights))
    return weights


def _mix(z):
    """SplitMix64 of ``z`` (an int): 64 well-mixed bits (``counter_hash`` in counter_hash.h, with i = 1)."""
    z = (z + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def _draw_seed() -> int:
    """A 62-bit base seed from MXNet's CPU random state (``mx.random.seed`` makes it reproducible)."""
    return int(nd.random.randint(0, 1 << 62, shape=(1,), dtype="int64").asnumpy()[0])


def _eligible(param) -> bool:
    """Whether bf16-true mode stores ``param`` in bfloat16: float32, two or more dimensions, with a gradient."""
    return (param.grad_req != "null" and dtype_name(param.dtype) in ("float32", "bfloat16")
            and len(param.shape) >= 2)


def _map_arrays(state, fn):
    """``state`` (an updater state: NDArray, None, or nested tuples/lists of them) with ``fn`` applied to arrays."""
    if isinstance(state, (list, tuple)):
        return type(state)(_map_arrays(s, fn) for s in state)
    return fn(state) if isinstance(state, nd.NDArray) else state


def _cast(array, dtype):
    """``array`` cast to ``dtype``, rounding to nearest even (MXNet's ``astype`` truncates to bfloat16)."""
    return ops.multi_cast([array], dtype)[0]


def _cast_states(trainer, indices, dtype):
    """Cast the existing optimizer states of parameters ``indices`` (every device) to ``dtype``, in place."""
    for updater in trainer._updaters:
        for index in indices:
            if index in updater.states:
                updater.states[index] = _map_arrays(updater.states[index], lambda a: _cast(a, dtype))


class Bf16Weights:
    """The bf16-true parameters of one trainer and their Kahan compensation (or stochastic rounding's seed).

    Parameters
    ----------
    trainer : gluon.Trainer
        Its eligible parameters (:func:`_eligible`) are cast to bfloat16 now, one at a time. A parameter whose
        initialisation is deferred but whose shape is known (``net.infer_shape(x)``, no forward pass) is
        initialised here, just before its cast: the float32 copies of the whole model never exist at once (the
        other parameters with known shapes are initialised too).
    rounding : {'kahan', 'stochastic'}, optional
        How the updates store the weights (see the module docstring); 'stochastic' allocates no compensation.

    Raises
    ------
    ValueError
        A parameter whose shape is not known yet (the message says how to fix it).
    """

    def __init__(self, trainer, rounding="kahan"):
        self._trainer = weakref.ref(trainer)
        self.rounding = rounding
        self.plain = False  # use_plain_rounding: round to nearest, whatever the rounding
        self.seed = _draw_seed() if rounding == "stochastic" else None
        params = trainer._params
        self.indices = [i for i, p in enumerate(params) if _eligible(p)]
        for i in self.indices:
            if params[i]._data is None and (not params[i]._deferred_init or not all(params[i].shape)):
                raise ValueError("init_trainer(weights='bfloat16'): parameter %s has no known shape yet (%s); "
                                 "call net.infer_shape(x) or run one forward pass first, after net.initialize()"
                                 % (params[i].name, params[i].shape))
        self.compensation = {}  # (index, device) -> bfloat16 NDArray; empty with stochastic rounding
        with autograd.pause():
            for i in self.indices:
                param = params[i]
                if param._data is None:
                    param._finish_deferred_init()
                pairs = [self._split(data) for data in param.list_data()]
                param.cast(BFLOAT16)
                for device, ((w, comp), data) in enumerate(zip(pairs, param.list_data())):
                    w.copyto(data.as_nd_ndarray())
                    if rounding == "kahan":
                        self.compensation[(i, device)] = comp
        for param in params:  # the rest too, so that the gradient buffers are laid out now (see step.py)
            if param._data is None and param._deferred_init and all(param.shape):
                param._finish_deferred_init()
        _cast_states(trainer, self.indices, BFLOAT16)
        _retrace([params[i] for i in self.indices])
        _LIVE.add(self)
        if not PATCHES.holds(_PATCH_GROUP):
            PATCHES.call_on_restore(_restore_all, _PATCH_GROUP)

    @staticmethod
    def _split(data):
        """``(w, c)`` of a float32 array ``v``: ``w = bf16(v)`` and ``c = bf16(v - w)``, what its rounding loses."""
        v = data.as_nd_ndarray()
        w = _cast(v, BFLOAT16)
        return w, _cast(v - w.astype(np.float32), BFLOAT16)

    def holds(self, index: int) -> bool:
        """Whether the trainer's parameter ``index`` is stored in bfloat16 by this mode."""
        return index in self.indices

    def update_mode(self) -> str:
        """The ``bf16_weights`` attribute of the fused update: ``'kahan'``, ``'round'`` or ``'stochastic'``."""
        return "round" if self.plain else self.rounding

    def update_seeds(self, indices, counts) -> List[int]:
        """The stochastic rounding seeds of parameters ``indices`` at their update counts ``counts``."""
        return [_mix(_mix(self.seed ^ index) ^ count) for index, count in zip(indices, counts)]

    def compensation_of(self, index: int, device: int) -> Optional[nd.NDArray]:
        """The compensation array of parameter ``index`` on device ``device`` (None with plain rounding)."""
        return self.compensation[(index, device)] if self.update_mode() == "kahan" else None

    def precise(self, index: int) -> List[nd.NDArray]:
        """Float32 values ``w + c`` (stochastic rounding: ``w``) of parameter ``index``, one per device (new)."""
        param = self._trainer()._params[index]
        if not self.compensation:
            return [data.as_nd_ndarray().astype(np.float32) for data in param.list_data()]
        return [data.as_nd_ndarray().astype(np.float32) + self.compensation[(index, d)].astype(np.float32)
                for d, data in enumerate(param.list_data())]

    def to_float32(self) -> None:
        """Give the trainer float32 parameters holding ``w + c`` and float32 states; this object is then spent."""
        trainer = self._trainer()
        _LIVE.discard(self)
        if trainer is None:
            return
        amp_state = attached(trainer)
        if amp_state is not None and amp_state.bf16_weights is self:
            amp_state.bf16_weights = None
        params = trainer._params
        with autograd.pause():
            for i in self.indices:
                values = self.precise(i)
                params[i].cast(np.float32)
                for data, value in zip(params[i].list_data(), values):
                    value.copyto(data.as_nd_ndarray())
        _cast_states(trainer, self.indices, np.float32)
        _retrace([params[i] for i in self.indices])
        self.indices, self.compensation = [], {}

    def cast_states(self, dtype) -> None:
        """Cast the optimizer states of the bf16-true parameters to ``dtype`` (bfloat16 for the update; float32
        while they are saved, so that state files are the same in both modes)."""
        _cast_states(self._trainer(), self.indices, dtype)

    def compensation_state(self) -> Dict[str, str]:
        """The compensation of device 0 as JSON-safe text: parameter index -> base64 of its bfloat16 bytes
        (empty with stochastic rounding)."""
        encoded = {}
        for i in self.indices if self.compensation else ():
            bits = self.compensation[(i, 0)].astype(np.float32).asnumpy().view(np.uint32) >> 16
            encoded[str(i)] = base64.b64encode(bits.astype("<u2").tobytes()).decode("ascii")
        return encoded

    def load_compensation(self, encoded: Dict[str, str]) -> None:
        """Set every device's compensation from :meth:`compensation_state` output (checked by the caller); an
        empty one (a stochastic rounding file: its weights are exact) sets it to zero. With stochastic rounding,
        a file's compensation is added to the weights, rounded to nearest."""
        if not self.compensation:
            with autograd.pause():
                for key in encoded:
                    for data in self._trainer()._params[int(key)].list_data():
                        value = data.as_nd_ndarray().astype(np.float32) + _decode(encoded[key], data.shape, data)
                        _cast(value, BFLOAT16).copyto(data.as_nd_ndarray())
            return
        for (i, _), comp in self.compensation.items():
            value = _decode(encoded[str(i)], comp.shape, comp) if encoded else nd.zeros(comp.shape, comp.context)
            value.astype(BFLOAT16).copyto(comp)


def _decode(text, shape, like):
    """The float32 NDArray (on ``like``'s context) of base64 bfloat16 bits ``text``."""
    bits = np.frombuffer(base64.b64decode(text), dtype="<u2").astype(np.uint32) << 16
    return nd.array(bits.view(np.float32).reshape(shape), ctx=like.context, dtype=np.float32)


def _retrace(params):
    """Make every built HybridBlock that reads one of ``params`` trace and rewrite its graph anew on its next call:
    AMP's rewrite planned the casts for the parameters' old dtypes."""
    ids = {id(param) for param in params}
    for obj in gc.get_objects():
        if (isinstance(obj, HybridBlock) and (obj._cached_graph or obj._cached_op is not None)
                and any(id(param) in ids for param in obj.collect_params().values())):
            forget_rewrite(obj)


def use_plain_rounding(trainer) -> None:
    """Test and benchmark control: store bf16-true weights plainly rounded, without compensation.

    The update then rounds ``w' = bf16(w + step)`` each step and updates below half a bfloat16 ulp of ``w`` are
    lost: the drift that Kahan compensation and stochastic rounding prevent (``bench/bench_bf16_weights.py``
    shows them all).
    The compensation already accumulated is dropped (set to zero).
    """
    weights = state_of(trainer).bf16_weights
    if weights is None:
        raise RuntimeError("use_plain_rounding: the trainer runs float32 weights; call "
                           "amp.init_trainer(trainer, weights='bfloat16') first")
    weights.plain = True
    for comp in weights.compensation.values():
        comp[:] = 0


def weights_state(trainer) -> dict:
    """The weight mode of ``trainer`` as the JSON-safe ``"weights"`` entry of its AMP state (section version 3).

    ``{"dtype": "float32", "rounding": None, "seed": None, "compensation": {}}``, or ``{"dtype": "bfloat16",
    "rounding": "kahan", "seed": None, "compensation": {index: base64}}``: per bf16-true parameter (its index in
    the trainer), the little-endian bfloat16 bits of its compensation; or ``{"dtype": "bfloat16", "rounding":
    "stochastic", "seed": int, "compensation": {}}``: the base seed of the stochastic rounding.
    """
    weights = attached(trainer).bf16_weights
    if weights is None:
        return {"dtype": "float32", "rounding": None, "seed": None, "compensation": {}}
    return {"dtype": "bfloat16", "rounding": weights.rounding, "seed": weights.seed,
            "compensation": weights.compensation_state()}


def _decoded_size(text):
    try:
        return len(base64.b64decode(text.encode("ascii"), validate=True))
    except (ValueError, UnicodeEncodeError):
        return None


#: The keys of a ``"weights"`` entry by AMP section version (2: before stochastic rounding, always Kahan).
_ENTRY_KEYS = {2: {"dtype", "compensation"}, 3: {"dtype", "rounding", "seed", "compensation"}}


def _checked_entry(state, source, version):
    """A ``"weights"`` entry of section ``version``, checked on its own, in version 3's form."""
    keys = _ENTRY_KEYS.get(version, _ENTRY_KEYS[3])
    if not isinstance(state, dict) or set(state) != keys:
        raise ValueError("invalid weights state in %s: expected keys %s, got %r"
                         % (source, sorted(keys), sorted(state) if isinstance(state, dict) else state))
    if version == 2:
        state = dict(state, rounding="kahan" if state["dtype"] == "bfloat16" else None, seed=None)
    if state["dtype"] not in WEIGHT_MODES or not isinstance(state["compensation"], dict):
        raise ValueError("invalid weights state in %s: dtype %r (valid: %s) with compensation %s"
                         % (source, state["dtype"], ", ".join(WEIGHT_MODES), type(state["compensation"]).__name__))
    rounding, seed = state["rounding"], state["seed"]
    valid = (None,) if state["dtype"] == "float32" else ROUNDINGS
    if rounding not in valid:
        raise ValueError("invalid weights state in %s: rounding %r with dtype %r; valid: %s"
                         % (source, rounding, state["dtype"], ", ".join(map(repr, valid))))
    stochastic = rounding == "stochastic"
    seed_ok = (isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed <= _MASK64) if stochastic \
        else seed is None
    if not seed_ok or (stochastic and state["compensation"]):
        raise ValueError("invalid weights state in %s: rounding %r with seed %r and %d compensation entries; "
                         "stochastic rounding has an unsigned 64-bit seed and no compensation, the other modes "
                         "no seed" % (source, rounding, seed, len(state["compensation"])))
    return state


def prepare_weights_state(trainer, state, source, version=3):
    """Validate a ``"weights"`` entry (:func:`weights_state`) for ``trainer``; return a function applying it.

    Applying it: into bf16-true mode with Kahan compensation, a Kahan file's compensation replaces the current
    one, a stochastic rounding file's sets it to zero (its weights are exact; a float32 file's weights were split
    into ``w`` and ``c`` when the mode was turned on); into stochastic rounding, a Kahan file's compensation is
    added to the weights (rounded to nearest) and a stochastic file's seed replaces the current one; into float32
    mode, a Kahan file's compensation is added to the parameters, so that they hold ``w + c`` again (parameters
    loaded from that checkpoint's ``save_parameters`` file hold ``w``; others are left as they are, with a
    warning). ``version`` is the AMP section's (2: no rounding and seed, Kahan in bfloat16).

    Raises
    ------
    ValueError
        Keys other than the version's, an unknown dtype or rounding, a bad seed, or a compensation for a
        parameter that is not bf16-true here or of the wrong size (the message names it and ``source``).
    """
    state = _checked_entry(state, source, version)
    params = trainer._params
    current = attached(trainer).bf16_weights
    for key, text in state["compensation"].items():
        index = int(key) if isinstance(key, str) and key.isdigit() else -1
        if not 0 <= index < len(params) or not _eligible(params[index]) or \
                (current is not None and not current.holds(index)):
            raise ValueError("invalid weights state in %s: compensation for parameter %r, which this trainer "
                             "does not store in bfloat16" % (source, key))
        size = int(np.prod(params[index].shape))
        if not isinstance(text, str) or _decoded_size(text) != 2 * size:
            raise ValueError("invalid weights state in %s: the compensation of parameter %s (%s) is not %d "
                             "bfloat16 values in base64" % (source, key, params[index].name, size))
    encoded = state["compensation"]
    kahan_file = state["rounding"] == "kahan"
    expected = {str(i) for i in current.indices} if current is not None and kahan_file else set()
    if (not kahan_file and encoded) or (expected and set(encoded) != expected):
        raise ValueError("invalid weights state in %s: a %s state with compensation for parameters %s; expected %s"
                         % (source, state["dtype"], sorted(encoded, key=int), sorted(expected, key=int)))
    if current is None:
        return lambda: _add_compensation(trainer, encoded, source)
    return lambda: _apply_entry(current, state)


def _apply_entry(current, state):
    """Apply a checked ``"weights"`` entry to bf16-true weights ``current`` (see :func:`prepare_weights_state`)."""
    if current.rounding == "stochastic" and state["seed"] is not None:
        current.seed = state["seed"]
    if state["dtype"] == "bfloat16":
        current.load_compensation(state["compensation"])


def _add_compensation(trainer, encoded, source):
    """float32 mode, bfloat16 file: parameters holding bfloat16 values ``w`` become ``w + c``."""
    for key, text in encoded.items():
        param = trainer._params[int(key)]
        bits = np.frombuffer(base64.b64decode(text), dtype="<u2").astype(np.uint32) << 16
        comp = bits.view(np.float32).reshape(param.shape)
        for data in param.list_data():
            value = data.as_nd_ndarray()
            if dtype_name(value.dtype) != "float32" or (value.astype(BFLOAT16).astype(np.float32) != value).sum():
                _LOG.warning("AMP: %s holds the compensation of bfloat16 weights, but parameter %s does not "
                             "hold bfloat16 values (not loaded from that checkpoint?); left as it is",
                             source, param.name)
                break
            value += nd.array(comp, ctx=value.context, dtype=np.float32)


def _restore_all():
    """``amp.reset()``: every live bf16-true trainer back to float32 parameters and states."""
    for weights in list(_LIVE):
        weights.to_float32()
