"""Operator categories for AMP: which dtype every MXNet operator runs in, per target dtype.

The data live in plain modules: the operator groups in :mod:`.groups`, and per target dtype (:mod:`.float16`,
:mod:`.bfloat16`) which category each group lands in and why, and the ops emulation may round after in
:mod:`.rounding`; this module
validates dtypes and op names, builds cached lookup tables from the data and answers the public queries
(``list_lp16_ops`` and friends, re-exported as ``mxnet.amp.list_*``).

Categories (how the graph rewriter treats a node; the dtype modules name them in capitals):

- ``lp16``: floating inputs cast to the target dtype (or, where the device has no such kernel for the op,
  rounded to it around the float32 kernel: emulation).
- ``fp32``: floating inputs cast to float32.
- ``neutral``: inputs untouched; the op runs in whatever float type arrives.
- ``widest``: floating inputs cast to the widest float type among them.
- ``conditional_fp32``: ``(op, attribute, values)``: float32 when the attribute has one of the values,
  otherwise neutral.
- ``loss_output``: legacy loss heads whose backward ignores the head gradient: float32 inputs, the loss
  scale goes into their scale attribute (:data:`LOSS_SCALE_ATTR`).

Example
-------
>>> from mxnet.amp import lists
>>> lists.category("FullyConnected", "bfloat16")
'lp16'
>>> lists.category("softmax", "float16")
'fp32'
"""
from .tables import (CATEGORIES, DTYPES, LOSS_SCALE_ATTR, alias_groups, category, commutes_with_rounding,
                     conditional_fp32, emulation_kernels, fanout_copies, float32_kernels, inference_kernels,
                     is_library_kernel, library_kernels, native_lp16_ops, native_substitutes, neutral_kernels,
                     normalize_dtype, reason, reads_float32_params, registered_forward_ops, rounded_products, stats_kernels,
                     stats_output_dtype, training_graph_floor, transpose_swaps)
from .evidence import (BAD_VERDICTS, SPEED_MARGIN, SPEED_VERDICTS, cpu_class_plan, cpu_op_evidence, float32_island_ops,
                       native_evidence, natively_fed_ops, op_speed_evidence, op_speed_table, speed_timed_ops,
                       storage_evidence, storage_kernel, storage_ops)
from .upstream import (list_conditional_fp32_ops, list_fp32_ops, list_loss_output_functions, list_lp16_fp32_ops,
                       list_lp16_ops, list_lp16_use_fp32_params, list_widest_type_cast, upstream_lists)
from . import symbol_bf16, symbol_fp16  # upstream's list modules, derived from the tables

__all__ = ["CATEGORIES", "DTYPES", "LOSS_SCALE_ATTR", "normalize_dtype", "category", "reason", "conditional_fp32",
           "registered_forward_ops", "alias_groups", "native_lp16_ops", "library_kernels", "emulation_kernels",
           "float32_kernels", "neutral_kernels", "inference_kernels", "rounded_products", "fanout_copies", "stats_kernels",
           "stats_output_dtype", "reads_float32_params", "training_graph_floor", "transpose_swaps",
           "cpu_class_plan", "native_substitutes", "is_library_kernel",
           "commutes_with_rounding", "natively_fed_ops", "native_evidence", "storage_evidence", "storage_ops",
           "storage_kernel",
           "cpu_op_evidence", "BAD_VERDICTS", "SPEED_MARGIN", "SPEED_VERDICTS", "op_speed_evidence", "speed_timed_ops",
           "op_speed_table", "float32_island_ops", "list_lp16_ops", "list_fp32_ops", "list_lp16_fp32_ops",
           "list_conditional_fp32_ops", "list_widest_type_cast", "list_loss_output_functions",
           "list_lp16_use_fp32_params", "upstream_lists", "symbol_fp16", "symbol_bf16"]
