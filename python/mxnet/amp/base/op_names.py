"""The names of the ops libmxnet_amp.so registers with MXNet: the one place that lists them.

Plain data, no imports: :mod:`.library` checks and loads them, :mod:`mxnet.amp.lists.groups` files them into
the operator categories, the graph passes recognise them.
"""

__all__ = ["MULTI_TENSOR_OPS", "BATCH_NORM_OPS", "MATMUL_OPS", "LAYER_NORM_OPS", "SOFTMAX_OPS", "DROPOUT_OPS",
           "STORAGE_OPS", "COPY_OPS", "PRODUCT_OPS", "ALL_OPS"]

#: The multi-tensor casts and updates, the loss scaler's step and the emulation rounding.
MULTI_TENSOR_OPS = ("amp_multi_cast", "amp_multi_unscale_check", "amp_multi_update", "amp_multi_widest_cast",
                    "amp_round", "amp_scaler_update")

#: BatchNorm on float32, float16 or bfloat16 data with float32 parameters and statistics.
BATCH_NORM_OPS = ("amp_batch_norm",)

#: The oneDNN 3 matrix products and convolutions (float32 or bfloat16 operands; need libmxnet_amp_onednn.so),
#: the interleaved attention products among them.
MATMUL_OPS = ("amp_batch_dot", "amp_convolution", "amp_deconvolution", "amp_encdec_qk", "amp_encdec_valatt",
              "amp_fully_connected", "amp_matmul", "amp_selfatt_qk", "amp_selfatt_valatt")

#: LayerNorm over the last axis on float32 or bfloat16 data, float32 parameters and statistics (oneDNN 3: needs
#: libmxnet_amp_onednn.so).
LAYER_NORM_OPS = ("amp_layer_norm",)

#: Softmax and log-softmax over the last axis on float32 or bfloat16 data, float32 math (oneDNN 3 where loaded, else
#: the library's own row kernels, which also serve lengths and temperatures).
SOFTMAX_OPS = ("amp_log_softmax", "amp_softmax")

#: Dropout on float32 or bfloat16 data in the data's dtype, told the graph's mode by an input.
DROPOUT_OPS = ("amp_dropout",)

#: What training graphs storing bfloat16 on float32 arithmetic (CPU class (a)) run in the data's dtype, float32 or
#: bfloat16: 2-D max pooling, and the copies of a tensor read more than once (their gradients added in float32).
STORAGE_OPS = ("amp_fanout", "amp_pooling")

#: Concatenation by row copies, float32 or bfloat16 data (converted inference graphs).
COPY_OPS = ("amp_concat",)

#: The product of two arrays under NumPy broadcasting, float32 or bfloat16 operands, float32 math, one rounding
#: (converted inference graphs).
PRODUCT_OPS = ("amp_broadcast_mul",)

#: Every op of the library.
ALL_OPS = (MULTI_TENSOR_OPS + BATCH_NORM_OPS + MATMUL_OPS + LAYER_NORM_OPS + SOFTMAX_OPS + DROPOUT_OPS + STORAGE_OPS
           + COPY_OPS + PRODUCT_OPS)
