"""The float16 lists under ``mxnet.contrib.amp``'s names, derived from :mod:`.float16` (nothing is listed twice).

Plain lists, as upstream code reads them (``amp.lists.symbol_fp16.FP16_FUNCS``). As upstream, every registered
forward op sits in exactly one of ``FP16_FUNCS``, ``FP16_FP32_FUNCS``, ``FP32_FUNCS``, ``WIDEST_TYPE_CASTS``
and the ops of ``CONDITIONAL_FP32_FUNCS``; ``LOSS_OUTPUT_FUNCTIONS`` is the part of ``FP32_FUNCS`` whose loss
gradient the loss scale reaches through an attribute.
"""
from . import (list_conditional_fp32_ops, list_fp32_ops, list_loss_output_functions, list_lp16_fp32_ops,
               list_lp16_ops, list_widest_type_cast)

__all__ = ["FP16_FUNCS", "FP16_FP32_FUNCS", "FP32_FUNCS", "CONDITIONAL_FP32_FUNCS", "WIDEST_TYPE_CASTS",
           "LOSS_OUTPUT_FUNCTIONS"]

FP16_FUNCS = list_lp16_ops("float16")
FP16_FP32_FUNCS = list_lp16_fp32_ops("float16")
FP32_FUNCS = sorted(list_fp32_ops("float16") + list_loss_output_functions("float16"))
CONDITIONAL_FP32_FUNCS = list_conditional_fp32_ops("float16")
WIDEST_TYPE_CASTS = list_widest_type_cast("float16")
LOSS_OUTPUT_FUNCTIONS = list_loss_output_functions("float16")
