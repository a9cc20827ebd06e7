"""bf16-true weights: ``amp.init_trainer(trainer, weights="bfloat16")`` keeps the large parameters, their gradients
and their optimizer states in bfloat16, with a bfloat16 Kahan compensation per weight.

Which parameters: the float32 ones of two or more dimensions, the weights of ``Dense``, ``Conv*``, ``Embedding``
and attention projections. One-dimensional ones (biases, norm scale and shift) stay float32 with float32 states:
they are small, and a norm's scale near 1 is where bfloat16's 8 bits hurt most.

The update (SGD, SGD with momentum, Adam, AdamW; always the fused one) runs in float32 on the precise weight
``x = w + c`` and the widened states, then stores ``w = bf16(x')``, ``c = bf16(x' - w)`` and the states rounded
to bfloat16 (``compensated_store`` in ``src/operator/amp/kernels/update_rules.h``). ``w + c`` carries about 16
significant bits, so updates far below half a bfloat16 ulp of ``w`` accumulate in ``c`` instead of vanishing, the
classic stall of plain bfloat16 weights. :func:`use_plain_rounding` turns the compensation off (test and
benchmark control only: it shows that stall).

Turning the mode on casts each chosen parameter's float32 value ``v`` to ``w = bf16(v)``, ``c = bf16(v - w)``;
turning it off (``init_trainer(trainer, weights="float32")`` or ``amp.reset()``) gives back float32 parameters
holding ``w + c``, with float32 states. Compiled blocks reading the parameters rebuild their CachedOp.
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

__all__ = ["WEIGHT_MODES", "Bf16Weights", "check_mode", "use_plain_rounding", "weights_state",
           "prepare_weights_state"]

#: The values of ``init_trainer``'s ``weights``: float32 (master) weights, or bf16-true weights.
WEIGHT_MODES = ("float32", "bfloat16")

_PATCH_GROUP = "bf16_weights"
_LOG = logging.getLogger("mxnet.amp.trainer")
_LIVE = weakref.WeakSet()  # Bf16Weights that amp.reset() turns back to float32


def check_mode(weights) -> str:
    """``weights`` if it is one of :data:`WEIGHT_MODES`; otherwise ValueError naming it and the choices."""
    if not isinstance(weights, str) or weights not in WEIGHT_MODES:
        raise ValueError("init_trainer: weights=%r is not a weight mode; valid choices: %s"
                         % (weights, ", ".join(repr(m) for m in WEIGHT_MODES)))
    return weights


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
    """The bf16-true parameters of one trainer and their Kahan compensation.

    Parameters
    ----------
    trainer : gluon.Trainer
        Its eligible parameters (:func:`_eligible`) are cast to bfloat16 now, one at a time. A parameter whose
        initialisation is deferred but whose shape is known (``net.infer_shape(x)``, no forward pass) is
        initialised here, just before its cast: the float32 copies of the whole model never exist at once (the
        other parameters with known shapes are initialised too).

    Raises
    ------
    ValueError
        A parameter whose shape is not known yet (the message says how to fix it).
    """

    def __init__(self, trainer):
        self._trainer = weakref.ref(trainer)
        self.kahan = True
        params = trainer._params
        self.indices = [i for i, p in enumerate(params) if _eligible(p)]
        for i in self.indices:
            if params[i]._data is None and (not params[i]._deferred_init or not all(params[i].shape)):
                raise ValueError("init_trainer(weights='bfloat16'): parameter %s has no known shape yet (%s); "
                                 "call net.infer_shape(x) or run one forward pass first, after net.initialize()"
                                 % (params[i].name, params[i].shape))
        self.compensation = {}  # (index, device) -> bfloat16 NDArray
        with autograd.pause():
            for i in self.indices:
                param = params[i]
                if param._data is None:
                    param._finish_deferred_init()
                pairs = [self._split(data) for data in param.list_data()]
                param.cast(BFLOAT16)
                for device, ((w, comp), data) in enumerate(zip(pairs, param.list_data())):
                    w.copyto(data.as_nd_ndarray())
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
        """The ``bf16_weights`` attribute of the fused update: ``'kahan'`` or ``'round'``."""
        return "kahan" if self.kahan else "round"

    def compensation_of(self, index: int, device: int) -> Optional[nd.NDArray]:
        """The compensation array of parameter ``index`` on device ``device`` (None with plain rounding)."""
        return self.compensation[(index, device)] if self.kahan else None

    def precise(self, index: int) -> List[nd.NDArray]:
        """Float32 values ``w + c`` of parameter ``index``, one per device (new arrays)."""
        param = self._trainer()._params[index]
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
        """The compensation of device 0 as JSON-safe text: parameter index -> base64 of its bfloat16 bytes."""
        encoded = {}
        for i in self.indices:
            bits = self.compensation[(i, 0)].astype(np.float32).asnumpy().view(np.uint32) >> 16
            encoded[str(i)] = base64.b64encode(bits.astype("<u2").tobytes()).decode("ascii")
        return encoded

    def load_compensation(self, encoded: Dict[str, str]) -> None:
        """Set every device's compensation from :meth:`compensation_state` output (checked by the caller)."""
        for (i, _), comp in self.compensation.items():
            bits = np.frombuffer(base64.b64decode(encoded[str(i)]), dtype="<u2").astype(np.uint32) << 16
            value = nd.array(bits.view(np.float32).reshape(comp.shape), ctx=comp.context, dtype=np.float32)
            value.astype(BFLOAT16).copyto(comp)


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
    lost: the drift that the default Kahan compensation prevents (``bench/bench_bf16_weights.py`` shows both).
    The compensation already accumulated is dropped (set to zero).
    """
    weights = state_of(trainer).bf16_weights
    if weights is None:
        raise RuntimeError("use_plain_rounding: the trainer runs float32 weights; call "
                           "amp.init_trainer(trainer, weights='bfloat16') first")
    weights.kahan = False
    for comp in weights.compensation.values():
        comp[:] = 0


def weights_state(trainer) -> dict:
    """The weight mode of ``trainer`` as the JSON-safe ``"weights"`` entry of its AMP state.

    ``{"dtype": "float32", "compensation": {}}``, or ``{"dtype": "bfloat16", "compensation": {index: base64}}``:
    per bf16-true parameter (its index in the trainer), the little-endian bfloat16 bits of its compensation.
    """
    weights = attached(trainer).bf16_weights
    if weights is None:
        return {"dtype": "float32", "compensation": {}}
    return {"dtype": "bfloat16", "compensation": weights.compensation_state()}


def _decoded_size(text):
    try:
        return len(base64.b64decode(text.encode("ascii"), validate=True))
    except (ValueError, UnicodeEncodeError):
        return None


def prepare_weights_state(trainer, state, source):
    """Validate a ``"weights"`` entry (:func:`weights_state`) for ``trainer``; return a function applying it.

    Applying it: into bf16-true mode, a bfloat16 file's compensation replaces the current one (a float32 file's
    weights were split into ``w`` and ``c`` when the mode was turned on); into float32 mode, a bfloat16 file's
    compensation is added to the parameters, so that they hold ``w + c`` again (parameters loaded from that
    checkpoint's ``save_parameters`` file hold ``w``; others are left as they are, with a warning).

    Raises
    ------
    ValueError
        Not a dict with keys ``dtype`` and ``compensation``, an unknown dtype, or a compensation for a parameter
        that is not bf16-true here or of the wrong size (the message names it and ``source``).
    """
    if not isinstance(state, dict) or set(state) != {"dtype", "compensation"}:
        raise ValueError("invalid weights state in %s: expected keys ['compensation', 'dtype'], got %r"
                         % (source, sorted(state) if isinstance(state, dict) else state))
    if state["dtype"] not in WEIGHT_MODES or not isinstance(state["compensation"], dict):
        raise ValueError("invalid weights state in %s: dtype %r (valid: %s) with compensation %s"
                         % (source, state["dtype"], ", ".join(WEIGHT_MODES), type(state["compensation"]).__name__))
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
    expected = {str(i) for i in current.indices} if current is not None and state["dtype"] == "bfloat16" else set()
    if (state["dtype"] == "float32" and encoded) or (expected and set(encoded) != expected):
        raise ValueError("invalid weights state in %s: a %s state with compensation for parameters %s; expected %s"
                         % (source, state["dtype"], sorted(encoded, key=int), sorted(expected, key=int)))
    if current is not None:
        return lambda: current.load_compensation(encoded) if encoded else None
    return lambda: _add_compensation(trainer, encoded, source)


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
