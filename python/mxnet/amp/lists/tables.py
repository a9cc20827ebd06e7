"""The lookup tables behind :mod:`mxnet.amp.lists`: categories, reasons and the per-device kernel maps, built
once per dtype from the data modules (:mod:`.float16`, :mod:`.bfloat16`), and the validation of dtypes and
op names."""
import difflib
import functools
import importlib
from types import MappingProxyType
from typing import Any, Dict, FrozenSet, Mapping, Optional, Tuple

import numpy as np

from ..base.dtypes import BFLOAT16
from . import rounding
from ..base.op_names import ALL_OPS
from .groups import PROJECT_MATMUL

__all__ = ["CATEGORIES", "DTYPES", "LOSS_SCALE_ATTR", "normalize_dtype", "dtype_table", "category", "reason",
           "conditional_fp32", "registered_forward_ops", "alias_groups", "native_lp16_ops", "library_kernels",
           "emulation_kernels", "float32_kernels", "neutral_kernels", "inference_kernels", "rounded_products",
           "fanout_copies", "stats_kernels", "stats_output_dtype", "reads_float32_params", "transpose_swaps", "native_substitutes",
           "is_library_kernel", "commutes_with_rounding", "training_graph_floor"]

CATEGORIES = ("lp16", "fp32", "neutral", "widest", "conditional_fp32", "loss_output")
DTYPES = ("float16", "bfloat16")

#: Category of each data tuple in a dtype module (CONDITIONAL_FP32 holds entries, not names).
_CATEGORY_OF_TUPLE = (("lp16", "LP16"), ("fp32", "FP32"), ("neutral", "NEUTRAL"), ("widest", "WIDEST"),
                      ("loss_output", "LOSS_OUTPUT"))

#: Attribute that scales the gradient of each loss output (its backward ignores the head gradient, so
#: the loss scaler multiplies this attribute instead). SVMOutput's gradient is proportional to
#: ``regularization_coefficient``; the others have ``grad_scale``.
LOSS_SCALE_ATTR = MappingProxyType({
    "LinearRegressionOutput": "grad_scale",
    "LogisticRegressionOutput": "grad_scale",
    "MAERegressionOutput": "grad_scale",
    "MakeLoss": "grad_scale",
    "SVMOutput": "regularization_coefficient",
    "Softmax": "grad_scale",
    "SoftmaxOutput": "grad_scale",
    "_sparse_LinearRegressionOutput": "grad_scale",
    "_sparse_LogisticRegressionOutput": "grad_scale",
    "_sparse_MAERegressionOutput": "grad_scale",
})

_UNLISTED_CATEGORY = "fp32"
_UNLISTED_REASON = ("not in the built-in lists (registered after them, e.g. by mx.library.load): "
                    "float32, the safe default for a kernel of unknown dtype support")


def normalize_dtype(dtype: Any) -> str:
    """Return the canonical name of an AMP target dtype.

    Parameters
    ----------
    dtype : str, numpy dtype or type
        ``'float16'``, ``numpy.float16``, ``'bfloat16'`` or MXNet's bfloat16 dtype object
        (``numpy.dtype([('bfloat16', numpy.uint16)])``).

    Returns
    -------
    str
        ``'float16'`` or ``'bfloat16'``.

    Raises
    ------
    ValueError
        If ``dtype`` is not one of the above; the message lists the valid choices.
    """
    if isinstance(dtype, str):
        if dtype in DTYPES:
            return dtype
    else:
        try:
            resolved = np.dtype(dtype) if dtype is not None else None
        except (TypeError, ValueError):
            resolved = None
        if resolved == BFLOAT16:
            return "bfloat16"
        if resolved == np.float16:
            return "float16"
    raise ValueError("Unsupported AMP target dtype %r: expected 'float16' (or numpy.float16) or "
                     "'bfloat16' (or MXNet's bfloat16 dtype %r)" % (dtype, BFLOAT16))


def _per_device_maps(per_device):
    """``{device type: {op: value}}`` frozen."""
    return MappingProxyType({dev: MappingProxyType(dict(ops)) for dev, ops in per_device.items()})


class DtypeTable:
    """Lookup tables built once from one dtype module."""

    def __init__(self, module):
        categories = {}
        for cat, attr in _CATEGORY_OF_TUPLE:
            for name in getattr(module, attr):
                categories[name] = cat
        conditions = {}
        for op, attr, values in module.CONDITIONAL_FP32:
            categories[op] = "conditional_fp32"
            conditions.setdefault(op, []).append((attr, frozenset(values)))
        self.categories = MappingProxyType(categories)
        self.conditions = MappingProxyType({op: tuple(c) for op, c in conditions.items()})
        self.reasons = MappingProxyType({name: why for names, why in module.REASONS for name in names})
        self.by_category = MappingProxyType({
            cat: tuple(sorted(n for n, c in categories.items() if c == cat)) for cat in CATEGORIES})
        self.conditional_entries = tuple(module.CONDITIONAL_FP32)
        self.native_lp16 = MappingProxyType({dev: frozenset(ops) for dev, ops in module.NATIVE_LP16.items()})
        self.fp32_param_ops = module.FP32_PARAM_OPS
        self.library_kernels = _per_device_maps(module.LIBRARY_KERNELS)
        self.float32_kernels = MappingProxyType({dev: frozenset(ops) for dev, ops in module.FLOAT32_KERNELS.items()})
        self.emulation_kernels = _per_device_maps(module.EMULATION_KERNELS)
        self.native_substitutes = _per_device_maps(module.NATIVE_SUBSTITUTES)
        self.neutral_kernels = _per_device_maps(module.NEUTRAL_KERNELS)
        self.inference_neutral_kernels = frozenset(module.INFERENCE_NEUTRAL_KERNELS)
        self.inference_kernels = _per_device_maps(module.INFERENCE_KERNELS)
        self.rounded_products = _per_device_maps(module.ROUNDED_PRODUCTS)
        self.fanout_copies = MappingProxyType(dict(module.FANOUT_COPIES))
        self.training_graph_floor = MappingProxyType(dict(module.TRAINING_GRAPH_FLOOR))
        self.stats_kernels = _per_device_maps(module.STATS_KERNELS)
        self.stats_float32_outputs = frozenset(module.STATS_FLOAT32_OUTPUTS)
        self.float32_param_kernels = frozenset(module.FLOAT32_PARAM_KERNELS)
        self.transpose_swaps = _per_device_maps(module.TRANSPOSE_SWAPS)
        self.cpu_class_plans = MappingProxyType(dict(module.CPU_CLASS_PLANS))
        self.cpu_class_training_plans = MappingProxyType(dict(module.CPU_CLASS_TRAINING_PLANS))
        self.storage_moves = MappingProxyType({dev: frozenset(ops) for dev, ops in module.STORAGE_MOVES.items()})
        self.speed_untimed = frozenset(module.SPEED_UNTIMED)


_TABLES = {}
_LIBRARY_KERNEL_OPS = frozenset(PROJECT_MATMUL)


def dtype_table(dtype: Any) -> "DtypeTable":
    """Return the cached table for ``dtype`` (any spelling accepted by :func:`normalize_dtype`)."""
    try:
        return _TABLES[dtype]
    except (KeyError, TypeError):
        pass
    name = normalize_dtype(dtype)
    if name not in _TABLES:
        _TABLES[name] = DtypeTable(importlib.import_module("." + name, __package__))
    return _TABLES[name]


@functools.lru_cache(maxsize=None)
def _mxnet_forward_ops():
    import mxnet as mx
    return frozenset(op for op in mx.operator.get_all_registered_operators()
                     if not op.startswith("_backward"))


def registered_forward_ops() -> FrozenSet[str]:
    """Return every forward operator name MXNet knows now, this project's ops included.

    MXNet's registry is read once (after ``import mxnet.amp`` has loaded the extension library);
    the library's ops (:mod:`mxnet.amp.base.op_names`) are always included.

    Returns
    -------
    frozenset of str
    """
    return _mxnet_forward_ops() | frozenset(ALL_OPS)


@functools.lru_cache(maxsize=None)
def alias_groups() -> Tuple[Tuple[str, ...], ...]:
    """Return the registered forward op names grouped by operator (names sharing one op handle).

    Returns
    -------
    tuple of tuple of str
        Each group sorted; groups sorted by their first name.
    """
    from ..base.registry import group_by_operator
    return group_by_operator(registered_forward_ops())


def _unknown_op(op_name, dtype):
    known = registered_forward_ops()
    close = difflib.get_close_matches(str(op_name), sorted(known), n=3)
    hint = " Did you mean %s?" % ", ".join(repr(c) for c in close) if close else ""
    return ValueError("Unknown operator %r for AMP dtype %r: it is not a registered forward operator "
                      "(see mxnet.operator.get_all_registered_operators()).%s" % (op_name, dtype, hint))


def category(op_name: str, dtype: Any) -> str:
    """Return the AMP category of an operator for a target dtype.

    Cheap (one dict lookup after the first call per dtype): the rewriter calls it for every node.

    Parameters
    ----------
    op_name : str
        Registered operator name, e.g. ``'FullyConnected'`` or ``'_npi_matmul'``.
    dtype : str or dtype
        Target dtype, see :func:`normalize_dtype`.

    Returns
    -------
    str
        One of :data:`CATEGORIES`. Registered ops missing from the lists (ops registered after
        them, e.g. by a user's ``mx.library.load``) are ``'fp32'``.

    Raises
    ------
    ValueError
        For an unknown dtype, or an op name MXNet does not know (with close matches).
    """
    table = dtype_table(dtype)
    try:
        return table.categories[op_name]
    except KeyError:
        pass
    except TypeError:
        raise TypeError("op_name must be a str, got %r" % (op_name,)) from None
    if _is_registered_unlisted(op_name):
        return _UNLISTED_CATEGORY
    raise _unknown_op(op_name, normalize_dtype(dtype))


_UNLISTED = set()  # registered names missing from the lists, remembered once seen


def _is_registered_unlisted(op_name):
    """Whether MXNet knows ``op_name`` now (its registry is read again: a library may have been loaded)."""
    if op_name not in _UNLISTED:
        import mxnet as mx
        if op_name not in registered_forward_ops() and op_name not in mx.operator.get_all_registered_operators():
            return False
        _UNLISTED.add(op_name)
    return True


def reason(op_name: str, dtype: Any) -> str:
    """Return why an operator sits in its category for a target dtype (one sentence).

    Parameters
    ----------
    op_name : str
        Registered operator name.
    dtype : str or dtype
        Target dtype, see :func:`normalize_dtype`.

    Returns
    -------
    str

    Raises
    ------
    ValueError
        For an unknown dtype or operator name.
    """
    table = dtype_table(dtype)
    if op_name in table.reasons:
        return table.reasons[op_name]
    category(op_name, dtype)  # raises for unknown names
    return _UNLISTED_REASON


def conditional_fp32(dtype: Any) -> Mapping[str, Tuple[Tuple[str, FrozenSet[str]], ...]]:
    """Return the conditional fp32 rules as ``{op: ((attribute, frozenset(values)), ...)}``.

    The op runs in float32 when one of its attributes has one of the listed values, otherwise it is
    neutral. Attribute values compare as the strings MXNet stores in node attributes.
    """
    return dtype_table(dtype).conditions


def commutes_with_rounding(op: str, attrs: Optional[Mapping[str, str]] = None,
                           gradient: bool = False) -> bool:
    """Whether ``op`` with symbol-JSON ``attrs`` commutes with rounding to a low precision dtype.

    Such an op turns rounded inputs into rounded outputs, equal to its rounded float32 output: it moves,
    selects or takes the maximum of values (see :mod:`.rounding`). With ``gradient=True``, only ops whose
    gradient commutes with rounding too (those that move values).
    """
    if op in rounding.MOVES:
        return True
    if gradient:
        return False
    if op in rounding.SELECTS:
        return True
    for name, attr, values, default in rounding.SELECTS_WHEN:
        if op == name:
            return (attrs or {}).get(attr, default) in values
    return False


def native_lp16_ops(dtype: Any, device_type: str) -> FrozenSet[str]:
    """Return the low precision ops with fast ``dtype`` kernels on ``device_type`` in MXNet 1.9.1.

    Parameters
    ----------
    dtype : str or dtype
        Target dtype, see :func:`normalize_dtype`.
    device_type : {'cpu', 'gpu'}

    Returns
    -------
    frozenset of str
        float16: every lp16 op on GPU, none on CPU; bfloat16: every lp16 op on CPU (oneDNN, AVX-512
        required at run time), none on GPU.

    Raises
    ------
    ValueError
        For an unknown dtype or device type.
    """
    return _for_device(dtype_table(dtype).native_lp16, device_type)


def _for_device(per_device, device_type):
    if device_type not in per_device:
        raise ValueError("Unknown device_type %r: expected one of %s"
                         % (device_type, ", ".join(repr(d) for d in sorted(per_device))))
    return per_device[device_type]


def library_kernels(dtype: Any, device_type: str) -> Mapping[str, str]:
    """Return ``{MXNet op: op of this project's library}``: the kernels that replace MXNet's for ``dtype``.

    The library's oneDNN 3 matrix products and convolution (``amp_fully_connected``, ``amp_batch_dot``,
    ``amp_matmul``, ``amp_convolution``) run bfloat16 on CPUs faster than MXNet 1.9.1's kernels, or where it
    has none. Which ones a graph gets
    depends on the policy and the machine: :meth:`mxnet.amp.policy.Policy.library_kernel`.

    Raises
    ------
    ValueError
        For an unknown dtype or device type.
    """
    return _for_device(dtype_table(dtype).library_kernels, device_type)


def emulation_kernels(dtype: Any, device_type: str) -> Mapping[str, str]:
    """Return ``{MXNet op: op of this project's library}``: the float32 kernels that run ``dtype``-emulated ops
    whose MXNet kernel fails on the rounded (computed) tensors emulation feeds it.

    Raises
    ------
    ValueError
        For an unknown dtype or device type.
    """
    return _for_device(dtype_table(dtype).emulation_kernels, device_type)


def float32_kernels(dtype: Any, device_type: str) -> FrozenSet[str]:
    """Return the dtype-neutral ops that run in float32 between casts where ``device_type`` runs ``dtype``
    natively: their low precision kernels work but are slower than their float32 ones.

    Raises
    ------
    ValueError
        For an unknown dtype or device type.
    """
    return _for_device(dtype_table(dtype).float32_kernels, device_type)


def native_substitutes(dtype: Any, device_type: str) -> Mapping[str, Tuple[str, Dict[str, str]]]:
    """Return ``{op: (op, attributes)}``: dtype-neutral ops replaced, where ``device_type`` runs ``dtype``
    natively and the op's inputs are low precision, by an op computing the same function faster.

    Raises
    ------
    ValueError
        For an unknown dtype or device type.
    """
    return _for_device(dtype_table(dtype).native_substitutes, device_type)


def transpose_swaps(dtype: Any, device_type: str) -> Mapping[str, str]:
    """Return ``{op: op}``: transposes that swap two axes, run as the op that swaps them where ``device_type`` runs
    ``dtype`` natively and the data is of ``dtype`` (its own transpose kernel fails there).

    Raises
    ------
    ValueError
        For an unknown dtype or device type.
    """
    return _for_device(dtype_table(dtype).transpose_swaps, device_type)


def neutral_kernels(dtype: Any, device_type: str, inference: bool = False) -> Mapping[str, str]:
    """Return ``{op: library op}``: dtype-neutral ops that run on a library kernel on low precision data in
    training graphs (``inference``: in inference graphs), where ``device_type`` runs ``dtype`` natively
    (``BatchNorm`` -> ``amp_batch_norm`` on CPUs). ValueError for an unknown dtype or device type."""
    table = dtype_table(dtype)
    kernels = _for_device(table.neutral_kernels, device_type)
    return {op: k for op, k in kernels.items() if k in table.inference_neutral_kernels} if inference else kernels


def inference_kernels(dtype: Any, device_type: str) -> Mapping[str, str]:
    """Return ``{op: library op}``: dtype-neutral and widest-type ops that run on a library kernel (same attributes)
    in inference graphs where ``device_type`` runs ``dtype`` natively and every input is ``dtype`` (``Concat`` ->
    ``amp_concat`` on CPUs). ValueError for an unknown dtype or device type."""
    return _for_device(dtype_table(dtype).inference_kernels, device_type)


def rounded_products(dtype: Any, device_type: str) -> Mapping[str, str]:
    """Return ``{op: library op}``: float32 products that run on a library kernel writing ``dtype`` in inference
    graphs where ``device_type`` runs ``dtype`` natively and only low precision readers take the result
    (``broadcast_mul`` -> ``amp_broadcast_mul`` on CPUs). ValueError for an unknown dtype or device type."""
    return _for_device(dtype_table(dtype).rounded_products, device_type)


def training_graph_floor(dtype: Any, device_type: str) -> int:
    """The forward multiply-accumulates below which ``amp.init`` keeps a graph float32 (ValueError: unknown dtype)."""
    return _for_device(dtype_table(dtype).training_graph_floor, device_type)


def fanout_copies(dtype: Any, device_type: str) -> bool:
    """Whether training graphs on ``device_type`` read a ``dtype`` tensor read more than once through the library's
    ``amp_fanout`` copies (MXNet's ``add_n`` has no ``dtype`` kernel there). ValueError for an unknown dtype or
    device type."""
    return _for_device(dtype_table(dtype).fanout_copies, device_type)


def stats_kernels(dtype: Any, device_type: str) -> Mapping[str, str]:
    """Return ``{op: library op}``: float32-list ops whose library kernel reads and writes ``dtype`` data and keeps
    float32 statistics, used in training and inference graphs where ``device_type`` runs ``dtype`` natively
    (``LayerNorm`` -> ``amp_layer_norm``, ``softmax`` -> ``amp_softmax`` on CPUs, for bfloat16). ValueError for an
    unknown dtype or device type."""
    return _for_device(dtype_table(dtype).stats_kernels, device_type)


def stats_output_dtype(dtype: Any, kernel: str, data_dtype: str) -> str:
    """Return the dtype float32-statistics ``kernel`` writes in a ``dtype`` graph for data of ``data_dtype``: the
    data's, except for the kernels that always write float32 (``amp_log_softmax``: log-probabilities feed losses).
    ValueError for an unknown dtype."""
    return "float32" if kernel in dtype_table(dtype).stats_float32_outputs else data_dtype


def reads_float32_params(dtype: Any, kernel: str) -> bool:
    """Return whether library ``kernel`` reads float32 parameters beside ``dtype`` data in training graphs
    (attribute ``param_dtype="float32"``: no cast of its weight and bias, float32 gradients written directly).

    Raises
    ------
    ValueError
        For an unknown dtype.
    """
    return kernel in dtype_table(dtype).float32_param_kernels


def is_library_kernel(op: str) -> bool:
    """Whether ``op`` is one of this project's library kernels: it stands in for an MXNet op that a policy
    already made low precision, so user lists naming MXNet's ops leave it low precision."""
    return op in _LIBRARY_KERNEL_OPS
