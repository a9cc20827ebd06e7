"""The list queries of ``mxnet.contrib.amp`` and MXNet 2.0 (``amp.list_lp16_ops`` and friends), read off the
tables, and upstream's six lists per dtype (what :mod:`.symbol_fp16` and :mod:`.symbol_bf16` hold)."""
from typing import Any, Dict, List, Optional, Tuple

from .tables import dtype_table

__all__ = ["list_lp16_ops", "list_fp32_ops", "list_lp16_fp32_ops", "list_conditional_fp32_ops",
           "list_widest_type_cast", "list_loss_output_functions", "list_lp16_use_fp32_params", "upstream_lists"]


def list_lp16_ops(dtype: Any) -> List[str]:
    """Return the ops that run in the target dtype (inputs cast to it). See :func:`category`."""
    return list(dtype_table(dtype).by_category["lp16"])


def list_fp32_ops(dtype: Any) -> List[str]:
    """Return the ops that always run in float32 (inputs cast to float32)."""
    return list(dtype_table(dtype).by_category["fp32"])


def list_lp16_fp32_ops(dtype: Any) -> List[str]:
    """Return the dtype-neutral ops: they run in whatever float type arrives, inputs untouched."""
    return list(dtype_table(dtype).by_category["neutral"])


def list_conditional_fp32_ops(dtype: Any) -> List[Tuple[str, str, List[str]]]:
    """Return ``[(op, attribute, [values]), ...]``: float32 when the attribute has one of the values."""
    return [(op, attr, list(values)) for op, attr, values in dtype_table(dtype).conditional_entries]


def list_widest_type_cast(dtype: Any) -> List[str]:
    """Return the multi-input ops whose float inputs are cast to the widest float type among them."""
    return list(dtype_table(dtype).by_category["widest"])


def list_loss_output_functions(dtype: Any) -> List[str]:
    """Return the legacy loss heads (fp32 inputs; the loss scale goes into :data:`LOSS_SCALE_ATTR`)."""
    return list(dtype_table(dtype).by_category["loss_output"])


def list_lp16_use_fp32_params(dtype: Any) -> Optional[Dict[str, List[str]]]:
    """Return ``{op: [input names]}``: ops whose parameters stay float32 when the data is in ``dtype``.

    MXNet 2.0's format: one entry per input of the op, ``''`` for the data and the name of each float32
    parameter. None for float16 (as MXNet 2.0 answers). The input names come from MXNet's operator registry.

    Example
    -------
    >>> lists.list_lp16_use_fp32_params("bfloat16")["BatchNorm"]
    ['', 'gamma', 'beta', 'moving_mean', 'moving_var']
    """
    ops = dtype_table(dtype).fp32_param_ops
    if ops is None:
        return None
    import mxnet as mx
    out = {}
    for op in ops:
        args = mx.operator.get_operator_arguments(op)
        inputs = [n for n, t in zip(args.names, args.types) if t.startswith("NDArray")]
        out[op] = [""] + inputs[1:]
    return out


def upstream_lists(dtype: Any) -> Tuple[list, list, list, list, list, list]:
    """Return ``mxnet.contrib.amp``'s six lists for ``dtype``, built from the tables (see :mod:`.symbol_fp16`).

    Returns
    -------
    tuple of list
        ``(low precision, dtype-neutral, float32 with the loss outputs, conditional entries, widest type casts,
        loss outputs)``.
    """
    return (list_lp16_ops(dtype), list_lp16_fp32_ops(dtype),
            sorted(list_fp32_ops(dtype) + list_loss_output_functions(dtype)), list_conditional_fp32_ops(dtype),
            list_widest_type_cast(dtype), list_loss_output_functions(dtype))
