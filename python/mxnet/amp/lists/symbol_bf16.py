"""The bfloat16 lists under ``mxnet.contrib.amp``'s names, derived from :mod:`.bfloat16` (nothing is listed twice).

Plain lists, as upstream code reads them (``amp.lists.symbol_bf16.BF16_FUNCS``). As upstream, every registered
forward op sits in exactly one of ``BF16_FUNCS``, ``BF16_FP32_FUNCS``, ``FP32_FUNCS``, ``WIDEST_TYPE_CASTS``
and the ops of ``CONDITIONAL_FP32_FUNCS``; ``LOSS_OUTPUT_FUNCTIONS`` is the part of ``FP32_FUNCS`` whose loss
gradient the loss scale reaches through an attribute. ``BF16_USE_FP32_PARAMS`` maps the ops whose parameters
stay float32 to their inputs (``''`` for the data).
"""
from .upstream import list_lp16_use_fp32_params, upstream_lists

__all__ = ["BF16_FUNCS", "BF16_FP32_FUNCS", "FP32_FUNCS", "CONDITIONAL_FP32_FUNCS", "WIDEST_TYPE_CASTS",
           "LOSS_OUTPUT_FUNCTIONS", "BF16_USE_FP32_PARAMS"]

(BF16_FUNCS, BF16_FP32_FUNCS, FP32_FUNCS, CONDITIONAL_FP32_FUNCS, WIDEST_TYPE_CASTS,
 LOSS_OUTPUT_FUNCTIONS) = upstream_lists("bfloat16")
BF16_USE_FP32_PARAMS = list_lp16_use_fp32_params("bfloat16")
