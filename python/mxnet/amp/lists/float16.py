"""Operator categories for float16 mixed precision.

Target: NVIDIA GPUs (cuDNN/cuBLAS float16 kernels, tensor cores). MXNet 1.9.1's CPU float16 kernels are
incomplete (no float16 GEMM), so on CPU float16 AMP is emulated by the rewriter; these lists describe
which dtype each op *should* run in.

Plain data read by :mod:`mxnet.amp.lists`: every forward operator registered in MXNet 1.9.1 (aliases
included) and every op of this project's library sits in exactly one category, which
``tests/python/unittest/test_lists.py`` checks.

Categories (``LP16``, ``FP32``, ``NEUTRAL``, ``WIDEST``, ``CONDITIONAL_FP32``, ``LOSS_OUTPUT``): see
:mod:`mxnet.amp.lists` for how the graph rewriter treats each.

The operators come in groups from :mod:`.groups` (one property each); this module adds the groups up
into categories. ``REASONS`` pairs each group with why it sits where it does (``python -m mxnet.amp
lists --op NAME`` prints it): the reasons that hold for both dtypes (``groups.REASONS``) plus the
float16-specific ones. Evidence for kernel support comes from ``tools/probe_bf16.py`` (CPU, float16 and
bfloat16) and MXNet's GPU kernels.
"""
from . import groups as g

LP16 = g.MATMUL + g.RNN + g.BLAS_MATMUL + g.ATTENTION_GEMM
FP32 = (g.DEPRECATED_V1 + g.CUDNN_BATCH_NORM_V4 + g.ONEDNN_FUSED + g.ONEDNN_FUSED_ATTENTION + g.LINALG + g.DEFORMABLE +
        g.BATCH_NORM_FP32_ONLY + g.LRN + g.NORMALIZATION + g.SOFTMAX + g.UNSCALABLE_LOSS_HEADS +
        g.KL_SPARSITY_REGULARIZER + g.LOSSES + g.FP16_RANGE + g.EXP_LOG_POW + g.TRANSCENDENTAL +
        g.REDUCTIONS + g.SORT + g.FP32_INDEX_KERNELS + g.CROP + g.RANDOM_DENSITY + g.CUSTOM +
        g.QUANTIZE + g.QUANTIZED + g.DETECTION + g.SPATIAL_SAMPLING + g.NUMPY_HYPOT + g.AROUND +
        g.FFT + g.PROJECT_LAYER_NORM + g.PROJECT_SOFTMAX + g.PROJECT_DROPOUT + g.PROJECT_STORAGE + g.PROJECT_COPY +
        g.PROJECT_PRODUCT)
NEUTRAL = (g.BATCH_NORM + g.GPU_FUSION + g.RESAMPLE_PAD + g.DROPOUT + g.EMBEDDING + g.SEQUENCE +
           g.ELEMWISE_FP16_NOT_BF16 + g.ELEMWISE_SIMPLE + g.INTEGER_SEMANTICS + g.INDEX_INPUTS +
           g.DATA_MOVEMENT + g.CASTS + g.CREATION + g.RANDOM_LIKE + g.IN_PLACE + g.GRADIENT_CHECKS +
           g.CONTAINERS + g.ADAPTIVE_POOLING + g.IMAGE + g.GRAPH_SAMPLING + g.MAX_MIN +
           g.UNPREFIXED_BACKWARD + g.PROJECT_OPS + g.PROJECT_BATCH_NORM + g.PROJECT_MATMUL + g.BF16_KERNEL_BROKEN +
           g.SCALAR_ADDITION)
WIDEST = g.ELEMWISE_MULTI_INPUT + g.ELEMWISE_MULTIPLY + g.TRUE_DIVIDE + g.COMPARE_MULTI_INPUT + g.CONCAT + g.WHERE
LOSS_OUTPUT = g.LOSS_HEADS

CONDITIONAL_FP32 = (
    ("Activation", "act_type", ("softrelu",)),
    ("_npx_activation", "act_type", ("softrelu",)),
    ("LeakyReLU", "act_type", ("elu", "selu")),
    ("_npx_leaky_relu", "act_type", ("elu", "selu")),
    ("Pooling", "pool_type", ("lp", "sum")),
    ("_npx_pooling", "pool_type", ("lp", "sum")),
    ("Pooling_v1", "pool_type", ("sum",)),
)

# Ops whose float16 kernels are fast on each device type (CPU float16 GEMM is missing in 1.9.1).
NATIVE_LP16 = {"gpu": LP16, "cpu": ()}

# Ops whose parameters stay float32 while the data is low precision, by name (MXNet 2.0's
# list_lp16_use_fp32_params): MXNet 2.0 answers None for float16.
FP32_PARAM_OPS = None

# MXNet op -> this project's kernel that replaces it (see bfloat16.py): none has float16 CPU kernels.
LIBRARY_KERNELS = {"cpu": {}, "gpu": {}}

# Dtype-neutral ops run in float32 between casts (see bfloat16.FLOAT32_KERNELS): none for float16.
FLOAT32_KERNELS = {"cpu": (), "gpu": ()}

# Faster equivalents of dtype-neutral ops (see bfloat16.NATIVE_SUBSTITUTES): none for float16.
NATIVE_SUBSTITUTES = {"cpu": {}, "gpu": {}}

# Library kernels of dtype-neutral ops in training graphs (see bfloat16.NEUTRAL_KERNELS): none for float16,
# which runs natively on GPUs only.
NEUTRAL_KERNELS = {"cpu": {}, "gpu": {}}
INFERENCE_NEUTRAL_KERNELS = ()
INFERENCE_KERNELS = {"cpu": {}, "gpu": {}}
ROUNDED_PRODUCTS = {"cpu": {}, "gpu": {}}

# The float32 floor of amp.init's graphs (see bfloat16.TRAINING_GRAPH_FLOOR): none measured for float16.
TRAINING_GRAPH_FLOOR = {"cpu": 0, "gpu": 0}

# Fan-out copies in training graphs (see bfloat16.FANOUT_COPIES): none for float16, whose add_n runs natively on GPUs.
FANOUT_COPIES = {"cpu": False, "gpu": False}

# Ops the op-speed evidence does not time (see bfloat16.SPEED_UNTIMED): float16 has no such evidence; its CPU
# graphs are emulated.
SPEED_UNTIMED = ()

# Library kernels of float32-list ops on low precision data (see bfloat16.STATS_KERNELS): none for float16.
STATS_KERNELS = {"cpu": {}, "gpu": {}}
STATS_FLOAT32_OUTPUTS = ()

# Transposes run as axis swaps on low precision data (see bfloat16.TRANSPOSE_SWAPS): none for float16.
TRANSPOSE_SWAPS = {"cpu": {}, "gpu": {}}

# Library kernels reading float32 parameters beside low precision data (see bfloat16.FLOAT32_PARAM_KERNELS): none.
FLOAT32_PARAM_KERNELS = ()

# The default plan per CPU class (see bfloat16.CPU_CLASS_PLANS): float16 is emulated on every CPU, since MXNet
# 1.9.1 has no complete CPU float16 kernels, AVX512-FP16 and AMX-FP16 (Sapphire Rapids, Granite Rapids) included.
CPU_CLASS_PLANS = {name: ("emulated", "MXNet 1.9.1 has no complete CPU float16 kernels, AVX512-FP16 and AMX-FP16 "
                                      "included") for name in "abcd"}

# Training graphs follow CPU_CLASS_PLANS on every class (see bfloat16.CPU_CLASS_TRAINING_PLANS).
CPU_CLASS_TRAINING_PLANS = {}
STORAGE_MOVES = {"cpu": (), "gpu": ()}
STORAGE_KERNELS = {"cpu": {}, "gpu": {}}
STORAGE_KERNEL_TAKES = {}

# Kernels for emulated ops: float16 on CPU is always emulated; see bfloat16.EMULATION_KERNELS for why. Only the
# crash is routed around here: the library's kernels are float32 ops in this list (PROJECT_MATMUL), so a
# float16 graph holding them would no longer round around them.
EMULATION_KERNELS = {
    "cpu": {"Deconvolution": "amp_deconvolution", "_npx_deconvolution": "amp_deconvolution"},
    "gpu": {},
}

# (ops, why) pairs: every op above appears in exactly one of them.
REASONS = g.REASONS + (
    (g.PROJECT_MATMUL,
     "this project's oneDNN 3 matrix product (libmxnet_amp): float32 or bfloat16 operands only, no float16 "
     "kernel: fp32"),
    (g.PROJECT_LAYER_NORM + g.PROJECT_SOFTMAX,
     "this project's LayerNorm and softmaxes over the last axis (libmxnet_amp): float32 or bfloat16 data only, no "
     "float16 kernel: fp32"),
    (g.PROJECT_DROPOUT, "this project's Dropout (libmxnet_amp): float32 or bfloat16 data only, no float16 kernel: "
                        "fp32"),
    (g.PROJECT_STORAGE, "this project's max pooling and fan-out copies (libmxnet_amp): float32 or bfloat16 data only, "
                        "no float16 kernel: fp32"),
    (g.PROJECT_COPY, "this project's concatenation (libmxnet_amp): float32 or bfloat16 data only, no float16 kernel: "
                     "fp32"),
    (g.PROJECT_PRODUCT, "this project's broadcast product (libmxnet_amp): float32 or bfloat16 operands only, no "
                        "float16 kernel: fp32"),
    (g.RNN, "RNN: cuDNN RNN in fp16 with fp32 accumulation"),
    (g.BLAS_MATMUL, "matmul-like: cuBLAS/tensor-core GEMM in fp16 with fp32 accumulation"),
    (g.ATTENTION_GEMM, "attention GEMM (cuBLAS strided batched GEMM) in fp16"),
    (g.ONEDNN_FUSED, "oneDNN fused CPU op: there is no fp16 CPU kernel, fp32"),
    (g.LRN, "LRN: sum of squares over a window overflows fp16, so fp32"),
    (g.FP16_RANGE, "can overflow float16 (max 65504) or flush its small values: fp32"),
    (g.RESAMPLE_PAD, "upsampling/padding: fp16 kernels exist (GPU and CPU), runs in the arriving type"),
    (g.DROPOUT, "Dropout: fp16 kernels (cuDNN and native), a mask multiply runs in the arriving type"),
    (g.ELEMWISE_FP16_NOT_BF16, "elementwise op with fp16 kernels: runs in the arriving type"),
    (g.RANDOM_LIKE, "reads only the shape of its input: runs in the arriving type"),
    (g.GRADIENT_CHECKS,
     "gradient check/statistics op (finite check, LARS ratios): fp16 kernels with fp32 "
     "outputs"),
    (g.TRUE_DIVIDE, "division of two tensors: inputs cast to the widest type among them"),
    (g.ADAPTIVE_POOLING,
     "pooling/resampling by weighted averages of neighbours: float16 kernels, runs in the arriving type"),
    (g.ELEMWISE_MULTIPLY, "product of two tensors: inputs cast to the widest type among them"),
    (g.SCALAR_ADDITION, "a tensor plus a constant: float16 kernels, runs in the arriving type"),
    (g.BF16_KERNEL_BROKEN,
     "moves or selects values, exact in any float type: runs in the arriving type (only its bfloat16 "
     "kernel is broken in MXNet 1.9.1)"),
    (g.ACTIVATION,
     "softrelu = log(1 + exp(x)) overflows float16, so fp32 for it; relu, sigmoid, tanh "
     "and softsign run in float16 (cuDNN)"),
    (g.LEAKY_RELU,
     "elu and selu are exp based: fp32 for them; leaky, prelu, rrelu and gelu run in "
     "float16"),
    (g.POOLING,
     "sum pooling can overflow float16 and lp pooling raises to a power: fp32 for them; "
     "max and avg pooling run in float16 (cuDNN)"),
    (g.POOLING_V1,
     "deprecated Pooling_v1: sum pooling can overflow float16, fp32 for it; max and avg "
     "run in float16"),
)
