"""The float16 lists under ``mxnet.contrib.amp``'s names, derived from :mod:`.float16` (nothing is listed twice).

Plain lists, as upstream code reads them (``amp.lists.symbol_fp16.FP16_FUNCS``). As upstream, every registered
forward op sits in exactly one of ``FP16_FUNCS``, ``FP16_FP32_FUNCS``, ``FP32_FUNCS``, ``WIDEST_TYPE_CASTS``
and the ops of ``CONDITIONAL_FP32_FUNCS``; ``LOSS_OUTPUT_FUNCTIONS`` is the part of ``FP32_FUNCS`` whose loss
gradient the loss scale reaches through an attribute.
"""
from .upstream import upstream_lists

__all__ = ["FP16_FUNCS", "FP16_FP32_FUNCS", "FP32_FUNCS", "CONDITIONAL_FP32_FUNCS", "WIDEST_TYPE_CASTS",
           "LOSS_OUTPUT_FUNCTIONS"]

(FP16_FUNCS, FP16_FP32_FUNCS, FP32_FUNCS, CONDITIONAL_FP32_FUNCS, WIDEST_TYPE_CASTS,
 LOSS_OUTPUT_FUNCTIONS) = upstream_lists("float16")
