"""Automatic mixed precision (AMP) for MXNet 1.9.1: ``from mxnet import amp``.

>>> from mxnet import amp
>>> amp.init("bfloat16")            # before building the model
>>> with amp.disable():             # a region in float32
...     ...
>>> amp.reset()                     # undo init completely

Importing this package loads the C++ extension library (fused multi-tensor kernels) once.
"""
from . import _ext  # noqa: F401  (loads the C++ library once)
from .advice import SlowBfloat16Warning
from .autocast import current_policy, disable, init, is_enabled, reset, target_dtype
from .bucketing import convert_bucketing_module
from .convert import Conversion, ConversionSummary, convert_hybrid_block, convert_model, convert_symbol
from . import lists
from .lists import (list_conditional_fp32_ops, list_fp32_ops, list_loss_output_functions, list_lp16_fp32_ops,
                    list_lp16_ops, list_lp16_use_fp32_params, list_widest_type_cast)
from .layout import convert_layout, optimize_layout
from .loss_scaler import LossScaler
from .onnx import export_onnx  # also registers the AMP ops with mx.onnx.export_model
from .policy import Policy
from .trainer import get_loss_scaler, init_trainer, load_state_dict, scale_loss, state_dict, unscale

__all__ = ["SlowBfloat16Warning", "init", "reset", "disable", "is_enabled", "target_dtype", "current_policy", "Policy",
           "LossScaler", "init_trainer", "scale_loss", "unscale", "get_loss_scaler", "state_dict",
           "load_state_dict", "convert_symbol", "convert_model", "convert_hybrid_block", "convert_bucketing_module",
           "Conversion", "ConversionSummary", "export_onnx", "optimize_layout", "convert_layout",
           "list_lp16_ops", "list_fp32_ops", "list_lp16_fp32_ops", "list_conditional_fp32_ops",
           "list_widest_type_cast", "list_loss_output_functions", "list_lp16_use_fp32_params", "lists"]
