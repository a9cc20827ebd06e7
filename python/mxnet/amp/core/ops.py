"""The library's multi-tensor ops as Python functions: casts, the fused check, the fused update, the scaler.

All functions take NDArrays (legacy ``mx.nd.NDArray`` or numpy-mode ``mx.np.ndarray``) that live on one
context, and return arrays of the kind of the first one. Each is one op call (one engine push) whatever the
number of arrays. Importing this module needs the library loaded (:mod:`mxnet.amp.core.library`).
"""
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import mxnet as mx
import numpy as np
from mxnet.ndarray._internal import _imperative_invoke

from . import library
from ..base.dtypes import BFLOAT16, TARGET_DTYPES
from ..base.registry import op_handle

__all__ = ["UPDATE_RULES", "multi_cast", "widest_cast", "unscale_and_check", "multi_update", "scaler_update"]

#: Update rules of :func:`multi_update`, with the float32 states each parameter carries.
UPDATE_RULES = {"sgd": (), "sgd_mom": ("momentum",), "adam": ("mean", "var"), "adamw": ("mean", "var")}

#: How :func:`multi_update` stores bf16-true weights: not at all, with Kahan compensation, rounded plainly,
#: rounded stochastically.
_BF16_WEIGHT_UPDATES = ("off", "kahan", "round", "stochastic")

_ND = mx.nd.NDArray
_NP = mx.np.ndarray
_OP_HANDLES = {name: op_handle(name) for name in library.OP_NAMES}


def _check_arrays(func, name, arrays):
    if isinstance(arrays, (_ND, np.ndarray)):
        raise TypeError("%s: %s must be a list or tuple of NDArrays, got a single %s"
                        % (func, name, type(arrays).__name__))
    arrays = list(arrays)
    if not arrays:
        raise ValueError("%s: %s is empty; pass at least one NDArray" % (func, name))
    for i, a in enumerate(arrays):
        if not isinstance(a, _ND):
            raise TypeError("%s: %s[%d] is a %s; expected mx.nd.NDArray or mx.np.ndarray"
                            % (func, name, i, type(a).__name__))
    return arrays


def _invoke(op_name, func, arrays, out=None, **attrs):
    """Run op_name on arrays (a non-empty sequence of NDArrays) in one call; returns a list.

    Outputs are numpy-mode arrays when arrays[0] is one, or the arrays of out when given. Array
    handles go straight to MXNet (no per-array conversion); MXNet itself rejects arrays on different
    contexts and out arrays of the wrong shape or dtype.
    """
    arrays = _check_arrays(func, "arrays", arrays)
    if out is not None:
        out = _check_arrays(func, "out", out)
        if len(out) != len(arrays):
            raise ValueError("%s: out has %d arrays but arrays has %d; they must match one to one"
                             % (func, len(out), len(arrays)))
    attrs["num_args"] = len(arrays)
    result = _imperative_invoke(_OP_HANDLES[op_name], arrays, list(attrs),
                                [str(v) for v in attrs.values()], out,
                                isinstance(arrays[0], _NP), True)
    return out if out is not None else result


def _target_name(dtype):
    if isinstance(dtype, str) and dtype in TARGET_DTYPES:
        return dtype
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt == BFLOAT16:
        return "bfloat16"
    if dt is not None and dt.name in ("float32", "float16"):
        return dt.name
    raise ValueError("multi_cast: dtype %r is not supported; valid choices: %s"
                     % (dtype, ", ".join(TARGET_DTYPES)))


def multi_cast(arrays: Sequence[mx.nd.NDArray], dtype: Any,
               out: Optional[Sequence[mx.nd.NDArray]] = None) -> List[mx.nd.NDArray]:
    """Cast N arrays to one dtype in a single fused op call.

    Parameters
    ----------
    arrays : list of NDArray
        Float arrays (float32, float64, float16 or bfloat16, mixed allowed) on one context.
    dtype : str or numpy dtype
        Target dtype: "float32", "float16" or "bfloat16" (or np.float32, np.float16, MXNet's bfloat16
        dtype object). Math is float32; float16 rounds like ``numpy.astype``, bfloat16 like ``amp_cast``.
    out : list of NDArray, optional
        N preallocated arrays of the target dtype and the inputs' shapes to write into (saves one
        allocation per array when the same list is cast every step).

    Returns
    -------
    list of NDArray
        N arrays of the target dtype (``out`` when given), same shapes and kind as the inputs.

    Raises
    ------
    ValueError
        Empty list, unsupported dtype, or ``out`` of another length.
    TypeError
        An element is not an NDArray.

    Example
    -------
    >>> low = multi_cast([w1, w2], "float16")
    """
    return _invoke("amp_multi_cast", "multi_cast", arrays, out, dtype=_target_name(dtype))


def widest_cast(arrays: Sequence[mx.nd.NDArray],
                out: Optional[Sequence[mx.nd.NDArray]] = None) -> List[mx.nd.NDArray]:
    """Cast N arrays to the widest float dtype among them (``amp_multicast`` semantics), one op call.

    float64 > float32 > float16, bfloat16; float16 mixed with bfloat16 gives float32.

    Parameters
    ----------
    arrays : list of NDArray
        Float arrays on one context, any shapes (zero-size included).
    out : list of NDArray, optional
        N preallocated arrays of the widest dtype to write into.

    Returns
    -------
    list of NDArray
        N arrays of the widest dtype (``out`` when given).

    Raises
    ------
    ValueError
        Empty list, or ``out`` of another length.
    TypeError
        An element is not an NDArray.

    Example
    -------
    >>> a32, b32 = widest_cast([a16, b32])
    """
    return _invoke("amp_multi_widest_cast", "widest_cast", arrays, out)


def unscale_and_check(arrays: Sequence[mx.nd.NDArray], inv_scale: float, sum_squares: bool = False
                      ) -> Union[mx.nd.NDArray, Tuple[mx.nd.NDArray, mx.nd.NDArray]]:
    """Unscale gradients in place and check them for inf/nan in one fused pass.

    Every array is multiplied by ``inv_scale`` in place (no writes when ``inv_scale == 1.0``: a pure
    check); each byte is read once. Results are checked after rounding to the array's dtype.

    Parameters
    ----------
    arrays : list of NDArray
        Float gradients (float32, float64, float16, bfloat16, mixed allowed) on one context. Each array
        at most once, and no two overlapping views (they are scaled in place).
    inv_scale : float
        1 / loss scale.
    sum_squares : bool, optional
        Also return the global sum of squares of the unscaled values (for norm clipping).

    Returns
    -------
    NDArray or (NDArray, NDArray)
        float32 array of shape (1,): 1.0 if every value is finite, else 0.0. With ``sum_squares``,
        the pair (flag, sumsq), sumsq a float32 array of shape (1,). Reading either on the host
        (``.asscalar()``) waits for the computation: a host sync.

    Raises
    ------
    ValueError
        Empty list, or an array given twice.
    TypeError
        An element is not an NDArray, or inv_scale is not a real number.

    Example
    -------
    >>> flag = unscale_and_check(grads, 1.0 / scaler.scale)
    >>> if flag.asscalar():  # host sync
    ...     trainer.update(batch_size)
    """
    if isinstance(inv_scale, bool) or not isinstance(inv_scale, (int, float, np.floating, np.integer)):
        raise TypeError("unscale_and_check: inv_scale must be a real number, got %r" % (inv_scale,))
    arrays = list(arrays)
    handles = [getattr(getattr(a, "handle", None), "value", id(a)) for a in arrays]
    if len(set(handles)) != len(handles):
        first = {}
        i = next(i for i, h in enumerate(handles) if first.setdefault(h, i) != i)
        raise ValueError("unscale_and_check: arrays[%d] is arrays[%d] again; each gradient may appear once "
                         "(it is scaled in place)" % (i, first[handles[i]]))
    out = _invoke("amp_multi_unscale_check", "unscale_and_check", arrays,
                  inv_scale=repr(float(inv_scale)), sum_squares=bool(sum_squares))
    return (out[0], out[1]) if sum_squares else out[0]


def _floats(values):
    return ",".join(repr(float(v)) for v in values)


def _seed_list(bf16_weights, seeds):
    """``seeds`` as a list of unsigned 64-bit ints; ValueError unless given exactly with ``'stochastic'``."""
    if (seeds is None) != (bf16_weights != "stochastic"):
        raise ValueError("multi_update: seeds are needed with bf16_weights='stochastic' and only then (got "
                         "bf16_weights=%r, seeds=%r)" % (bf16_weights, seeds))
    values = [int(seed) for seed in seeds]
    if not all(0 <= seed < 2 ** 64 for seed in values):
        raise ValueError("multi_update: seeds must be unsigned 64-bit integers, got %r" % (seeds,))
    return values


#: amp_multi_update's attribute defaults (src/operator/amp/ops/multi_update.cc; floats as written there, which
#: the op reads as float32 like any value passed).
_UPDATE_DEFAULTS = dict(multi_precision=False, check_grads=False, rescale_grad=1.0, clip_gradient=-1.0, momentum=0.0,
                        beta1=0.9, beta2=0.999, epsilon=1e-8, bf16_weights="off")


def _update_groups(rule, params, multi_precision, bf16_weights):
    """``params`` as a list, each tuple checked to hold the arrays that ``rule`` needs."""
    if rule not in UPDATE_RULES:
        raise ValueError("multi_update: rule %r is not supported; valid choices: %s"
                         % (rule, ", ".join(sorted(UPDATE_RULES))))
    if bf16_weights not in _BF16_WEIGHT_UPDATES:
        raise ValueError("multi_update: bf16_weights %r is not supported; valid choices: %s"
                         % (bf16_weights, ", ".join(_BF16_WEIGHT_UPDATES)))
    params = list(params)
    width = 2 + len(UPDATE_RULES[rule]) + (1 if multi_precision or bf16_weights == "kahan" else 0)
    for i, group in enumerate(params):
        if len(group) != width:
            raise ValueError("multi_update: params[%d] has %d arrays; rule %r%s needs %d (weight, grad%s%s)"
                             % (i, len(group), rule, " with multi_precision" if multi_precision else "", width,
                                "".join(", " + name for name in UPDATE_RULES[rule]),
                                ", master" if multi_precision else
                                (", compensation" if bf16_weights == "kahan" else "")))
    return params


def _per_parameter_attrs(rule, count, lrs, wds, etas, bf16_weights, seeds, if_previous_skipped):
    """``amp_multi_update``'s per-parameter list attributes, checked: one value per parameter in each."""
    lists = {"lrs": list(lrs), "wds": list(wds)}
    if rule == "adamw":
        lists["etas"] = list(etas) if etas is not None else []
    if seeds is not None or bf16_weights == "stochastic":
        lists["seeds"] = _seed_list(bf16_weights, seeds)
    if if_previous_skipped is not None:
        if set(if_previous_skipped) != {key for key in lists if key != "wds"}:
            raise ValueError("multi_update: if_previous_skipped has keys %s; this call needs %s"
                             % (sorted(if_previous_skipped), sorted(key for key in lists if key != "wds")))
        lists.update((key + "_if_skipped", _seed_list(bf16_weights, values) if key == "seeds" else list(values))
                     for key, values in if_previous_skipped.items())
    for key, values in lists.items():
        if len(values) != count:
            raise ValueError("multi_update: %s has %d values for %d parameters" % (key, len(values), count))
    return {key: (_floats(values) if not key.startswith("seeds") else ",".join(map(str, values)))
            for key, values in lists.items()}


def multi_update(rule: str, params: Sequence[Tuple[mx.nd.NDArray, ...]], flag: Optional[mx.nd.NDArray],
                 scaler_state: mx.nd.NDArray, lrs: Sequence[float], wds: Sequence[float],
                 etas: Optional[Sequence[float]] = None, rescale_grad: float = 1.0,
                 clip_gradient: Optional[float] = None, momentum: float = 0.0, beta1: float = 0.9,
                 beta2: float = 0.999, epsilon: float = 1e-8, multi_precision: bool = False,
                 bf16_weights: str = "off", seeds: Optional[Sequence[int]] = None,
                 previous_applied: Optional[mx.nd.NDArray] = None,
                 if_previous_skipped: Optional[Dict[str, Sequence[float]]] = None) -> mx.nd.NDArray:
    """One fused optimizer step over many parameters, skipped on the device when ``flag`` is 0.

    Parameters
    ----------
    rule : {'sgd', 'sgd_mom', 'adam', 'adamw'}
        Update formula (MXNet 1.9.1's ``multi_sgd_update``, ``multi_sgd_mom_update``, ``adam_update`` and
        ``contrib.adamw_update``, operation by operation; see ``src/operator/amp/kernels/multi_tensor.h``).
    params : list of tuple of NDArray
        Per parameter ``(weight, grad, *states[, master])`` on one context: ``states`` as
        :data:`UPDATE_RULES` names them (float32), ``master`` the float32 master weights when
        ``multi_precision`` (then the weight may be float16 or bfloat16). Updated in place.
    flag : NDArray or None
        float32 (1,) from :func:`unscale_and_check`: 0 skips the update (nothing is written). None: the op
        checks the gradients of ``params`` itself first (:func:`unscale_and_check`'s check, in the same call),
        for a step whose parameters are all here.
    scaler_state : NDArray
        float64 (6,) loss scaler state (:func:`scaler_update`); the gradients are multiplied by
        ``rescale_grad / scaler_state[0]``.
    lrs, wds : sequence of float
        Per-parameter learning rates (Adam: bias-corrected) and weight decays.
    etas : sequence of float, optional
        AdamW only: per-parameter schedule multipliers (MXNet's ``eta``).
    rescale_grad, clip_gradient, momentum, beta1, beta2, epsilon : float
        As MXNet's optimizers take them; ``clip_gradient`` None or 0 turns clipping off, as in MXNet.
    bf16_weights : {'off', 'kahan', 'round', 'stochastic'}, optional
        bf16-true weights (CPU only): every weight, grad and state is bfloat16, the update runs in float32 and
        its result is stored in bfloat16 with a Kahan compensation (``'kahan'``: a bfloat16 ``compensation``
        array follows the states in each tuple), rounded to nearest (``'round'``, the drifting control) or
        rounded stochastically (``'stochastic'``: weights and states, unbiased, random bits from ``seeds``).
        Not with ``multi_precision``.
    seeds : sequence of int, optional
        ``'stochastic'`` only (and then required): one unsigned 64-bit seed per parameter. Element ``i`` of a
        parameter draws its random bits from ``(seed, i)`` alone: the same seed rounds the same way.
    previous_applied : NDArray, optional
        float32 (1,): what the previous step's ``multi_update`` returned, with ``if_previous_skipped``.
    if_previous_skipped : dict, optional
        The ``lrs`` (and ``etas``, ``seeds`` where this call takes them) to use instead when
        ``previous_applied`` is 0: values that depend on update counts, for a step issued before the host
        knows whether the previous one was applied. Chosen where the update runs: no host sync.

    Returns
    -------
    NDArray
        float32 (1,): 1.0 if the update was applied, 0.0 if it was skipped (with ``flag`` None: whether the
        gradients were finite). No host sync.

    Raises
    ------
    ValueError
        Unknown rule, no parameters, a tuple of the wrong length, a lrs/wds/etas/seeds length mismatch,
        ``seeds`` missing with ``'stochastic'`` (or given without it), or ``if_previous_skipped`` given without
        ``previous_applied`` (or the other way round) or with other keys than the lists of this call.
    """
    params = _update_groups(rule, params, multi_precision, bf16_weights)
    if (previous_applied is None) != (if_previous_skipped is None):
        raise ValueError("multi_update: previous_applied and if_previous_skipped go together (got %s)"
                         % ("previous_applied alone" if previous_applied is not None else "if_previous_skipped alone"))
    attrs = _per_parameter_attrs(rule, len(params), lrs, wds, etas, bf16_weights, seeds, if_previous_skipped)
    arrays = [array for group in params for array in group] + ([flag] if flag is not None else []) + [scaler_state]
    if previous_applied is not None:
        arrays.append(previous_applied)
    given = dict(multi_precision=bool(multi_precision), check_grads=flag is None, rescale_grad=float(rescale_grad),
                 clip_gradient=float(clip_gradient or -1.0), momentum=float(momentum), beta1=float(beta1),
                 beta2=float(beta2), epsilon=float(epsilon), bf16_weights=bf16_weights)
    for key, value in given.items():  # what the op's defaults say needs no string to pass and parse
        if value != _UPDATE_DEFAULTS[key]:
            attrs[key] = repr(value) if isinstance(value, float) else value
    return _invoke("amp_multi_update", "multi_update", arrays, rule=rule, **attrs)[0]


def scaler_update(scaler_state: mx.nd.NDArray, flag: mx.nd.NDArray, config: Any) -> mx.nd.NDArray:
    """Advance a loss scaler's device state by one step (``loss_scaler.next_state`` on the device).

    Parameters
    ----------
    scaler_state : NDArray
        float64 (6,): scale, growth_tracker, steps, skipped_steps, last_overflow_step (0: none),
        steps_at_floor. Updated in place.
    flag : NDArray
        float32 (1,): the step's finite flag.
    config : ScalerConfig

    Returns
    -------
    NDArray
        float32 (1,): the new scale. No host sync.
    """
    return _invoke("amp_scaler_update", "scaler_update", [scaler_state, flag], dynamic=bool(config.dynamic),
                   growth_factor=repr(config.growth_factor), backoff_factor=repr(config.backoff_factor),
                   growth_interval=repr(float(config.growth_interval)), min_scale=repr(config.min_scale),
                   max_scale=repr(config.max_scale))[0]
