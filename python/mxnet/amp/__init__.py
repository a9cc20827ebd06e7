"""Automatic mixed precision (AMP) for MXNet 1.9.1: ``from mxnet import amp``.

>>> from mxnet import amp
>>> amp.init("bfloat16")            # before building the model
>>> with amp.disable():             # a region in float32
...     ...
>>> amp.reset()                     # undo init completely

:data:`__all__` is the API, with :mod:`mxnet.amp.lists` (upstream's list modules live there). The subpackages
(``core``, ``graph``, ``autocast``, ``training``, ``inference``, ``cli``) are the implementation. Importing this
package loads the C++ extension library once and registers the ONNX converters of the AMP ops.
"""
from .core import library  # noqa: F401  (loads the C++ library once)
from .core.advice import SlowBfloat16Warning
from .core.policy import Policy
from .autocast.context import current_policy, disable, is_enabled, target_dtype
from .autocast.switch import init, reset
from .graph.layout import convert_layout, optimize_layout
from .inference.blocks import convert_hybrid_block
from .inference.bucketing import convert_bucketing_module
from .inference.convert import convert_model, convert_symbol
from .inference.onnx import export_onnx
from .inference.onnx_converters import register_converters
from .inference.summary import Conversion, ConversionSummary
from . import lists
from .lists import (list_conditional_fp32_ops, list_fp32_ops, list_loss_output_functions, list_lp16_fp32_ops,
                    list_lp16_ops, list_lp16_use_fp32_params, list_widest_type_cast)
from .training.diagnosis import diagnose, diagnose_block
from .training.loss_scaler import LossScaler
from .training.states import load_state_dict, load_states, state_dict
from .training.trainer import get_loss_scaler, init_trainer, scale_loss, unscale

__all__ = ["SlowBfloat16Warning", "init", "reset", "disable", "is_enabled", "target_dtype", "current_policy", "Policy",
           "LossScaler", "init_trainer", "scale_loss", "unscale", "get_loss_scaler", "state_dict",
           "load_state_dict", "load_states", "convert_symbol", "convert_model", "convert_hybrid_block",
           "convert_bucketing_module", "Conversion", "ConversionSummary", "export_onnx", "optimize_layout",
           "convert_layout", "list_lp16_ops", "list_fp32_ops", "list_lp16_fp32_ops", "list_conditional_fp32_ops",
           "list_widest_type_cast", "list_loss_output_functions", "list_lp16_use_fp32_params", "lists", "diagnose",
           "diagnose_block"]

#: Modules of mxnet.amp 0.1 that moved into the subpackages: ``from mxnet.amp import policy`` says where.
MOVED = {"_ext": "mxnet.amp.core.library and mxnet.amp.core.ops", "advice": "mxnet.amp.core.advice",
         "cpu": "mxnet.amp.core.cpu", "compat": "mxnet.amp.core.compat",
         "policy": "mxnet.amp.core.policy (Policy is mxnet.amp.Policy)", "fold": "mxnet.amp.graph.fold",
         "fusion": "mxnet.amp.graph.fusion", "layout": "mxnet.amp.graph.layout",
         "report": "mxnet.amp.graph.precision_map and mxnet.amp.cli.plots",
         "trainer": "mxnet.amp.training.trainer", "module_api": "mxnet.amp.training.module_api",
         "amp_state": "mxnet.amp.training.amp_state", "loss_scaler": "mxnet.amp.training.loss_scaler",
         "device_scaler": "mxnet.amp.training.device_scaler", "scaler_state": "mxnet.amp.training.scaler_state",
         "fused_update": "mxnet.amp.training.fused_update", "grad_buffer": "mxnet.amp.training.grad_buffer",
         "adamw": "mxnet.amp.training.adamw", "checkpoint": "mxnet.amp.training.checkpoint",
         "convert": "mxnet.amp.inference.convert", "converted_block": "mxnet.amp.inference.converted_block",
         "bucketing": "mxnet.amp.inference.bucketing", "onnx": "mxnet.amp.inference.onnx",
         "demo": "mxnet.amp.cli.demo", "doctor": "mxnet.amp.cli.doctor", "hardware": "mxnet.amp.cli.hardware",
         "probe": "mxnet.amp.cli.probe", "convert_cli": "mxnet.amp.cli.convert", "lists_cli": "mxnet.amp.cli.lists"}

register_converters()


def __getattr__(name: str):
    """A clear error for the module paths of mxnet.amp 0.1 (``amp.policy``, ``from mxnet.amp import trainer``)."""
    if name in MOVED:
        raise ImportError("mxnet.amp.%s moved to %s; it is internal: the API is mxnet.amp.__all__ (see "
                          "docs/architecture.md)" % (name, MOVED[name]), name="mxnet.amp." + name)
    raise AttributeError("module 'mxnet.amp' has no attribute %r" % name)
