"""Operator categories for bfloat16 mixed precision.

Target: CPUs with AVX-512 (oneDNN bfloat16 primitives: Convolution, Deconvolution, FullyConnected,
Pooling, Activation, LRN, BatchNorm, Concat, ...) plus MXNet's native kernels that have a bfloat16 case.
MXNet 1.9.1 has no GPU bfloat16 kernels. On CPUs without AVX-512 oneDNN cannot create bfloat16
primitives, so the rewriter emulates (rounds to bfloat16, computes in float32). An op is NEUTRAL or
WIDEST here only if one of those kernels accepts bfloat16 (``tools/probe_bf16.py``, oneDNN
``SupportMKLDNN*`` checks for ``mshadow::kBfloat16`` in MXNet 1.9 sources); other ops are FP32 so that
they never receive bfloat16, except matmul-likes without a bf16 kernel, which are LP16 but not in
``NATIVE_LP16``: the rewriter emulates them (bf16-rounded inputs and outputs around the fp32 kernel).

Plain data read by :mod:`mxnet.amp.lists`: every forward operator registered in MXNet 1.9.1 (aliases
included) and every op of this project's library sits in exactly one category, which
``tests/python/unittest/test_lists.py`` checks.

Categories (``LP16``, ``FP32``, ``NEUTRAL``, ``WIDEST``, ``CONDITIONAL_FP32``, ``LOSS_OUTPUT``): see
:mod:`mxnet.amp.lists` for how the graph rewriter treats each.

The operators come in groups from :mod:`.groups` (one property each); this module adds the groups up
into categories. ``REASONS`` pairs each group with why it sits where it does (``python -m mxnet.amp
lists --op NAME`` prints it): the reasons that hold for both dtypes (``groups.REASONS``) plus the
bfloat16-specific ones. Evidence for kernel support comes from ``tools/probe_bf16.py`` (CPU, float16 and
bfloat16) and MXNet's GPU kernels.
"""
from . import groups as g

LP16 = g.MATMUL + g.ONEDNN_FUSED + g.RNN + g.BLAS_MATMUL + g.ATTENTION_GEMM + g.PROJECT_MATMUL
FP32 = (g.DEPRECATED_V1 + g.CUDNN_BATCH_NORM_V4 + g.ONEDNN_FUSED_ATTENTION + g.LINALG + g.DEFORMABLE +
        g.BATCH_NORM_FP32_ONLY + g.POOLING_V1 + g.RESAMPLE_PAD + g.NORMALIZATION + g.DROPOUT + g.SOFTMAX +
        g.UNSCALABLE_LOSS_HEADS + g.KL_SPARSITY_REGULARIZER + g.LOSSES +
        g.ELEMWISE_FP16_NOT_BF16 + g.EXP_LOG_POW + g.TRANSCENDENTAL + g.REDUCTIONS +
        g.TRUE_DIVIDE + g.SORT + g.FP32_INDEX_KERNELS + g.CROP + g.RANDOM_LIKE + g.RANDOM_DENSITY +
        g.GRADIENT_CHECKS + g.CUSTOM + g.QUANTIZE + g.QUANTIZED + g.DETECTION +
        g.SPATIAL_SAMPLING + g.NUMPY_HYPOT + g.FFT + g.BF16_KERNEL_BROKEN + g.ADAPTIVE_POOLING +
        g.ELEMWISE_MULTIPLY + g.SCALAR_ADDITION)
NEUTRAL = (g.BATCH_NORM + g.GPU_FUSION + g.LRN + g.EMBEDDING + g.SEQUENCE + g.ELEMWISE_SIMPLE + g.FP16_RANGE +
           g.INTEGER_SEMANTICS + g.INDEX_INPUTS + g.DATA_MOVEMENT + g.CASTS + g.CREATION +
           g.IN_PLACE + g.CONTAINERS + g.IMAGE + g.GRAPH_SAMPLING + g.AROUND +
           g.MAX_MIN + g.UNPREFIXED_BACKWARD + g.PROJECT_OPS + g.PROJECT_BATCH_NORM + g.PROJECT_LAYER_NORM +
           g.PROJECT_SOFTMAX + g.PROJECT_DROPOUT + g.PROJECT_STORAGE + g.PROJECT_COPY + g.PROJECT_PRODUCT)
WIDEST = g.ELEMWISE_MULTI_INPUT + g.COMPARE_MULTI_INPUT + g.CONCAT + g.WHERE
LOSS_OUTPUT = g.LOSS_HEADS

CONDITIONAL_FP32 = (
    ("Activation", "act_type", ("softrelu", "softsign")),
    ("_npx_activation", "act_type", ("softrelu", "softsign")),
    ("LeakyReLU", "act_type", ("prelu", "rrelu", "selu")),
    ("_npx_leaky_relu", "act_type", ("prelu", "rrelu", "selu")),
    ("Pooling", "pool_type", ("lp", "sum")),
    ("_npx_pooling", "pool_type", ("lp", "sum")),
)

# Ops whose bfloat16 kernels are fast on each device type: oneDNN on AVX-512 CPUs; no GPU bf16 in 1.9.1.
# The other LP16 ops have no bf16 kernel in 1.9.1: the rewriter emulates them (bf16-rounded inputs and
# outputs around the fp32 kernel), so models see bf16 matmul numerics everywhere.
NATIVE_LP16 = {"cpu": g.MATMUL + g.ONEDNN_FUSED + g.PROJECT_MATMUL, "gpu": ()}

# MXNet op -> the oneDNN 3 kernel of this project's library (libmxnet_amp) that replaces it, per device
# type. The rewriter uses them where the device runs bfloat16 natively and the library's oneDNN 3 is loaded
# (policy kernels="auto"; kernels="mxnet" keeps MXNet's): oneDNN 3 uses AMX and AVX512-BF16, MXNet 1.9.1's
# oneDNN 2.4 bf16 FullyConnected and Convolution run slower than their float32 ones on AMX Xeons, and MXNet
# has no bf16 batch_dot, matmul or interleaved attention product at all (bench/bench_matmul.py,
# bench/bench_conv.py).
LIBRARY_KERNELS = {
    "cpu": {
        "FullyConnected": "amp_fully_connected",
        "_npx_fully_connected": "amp_fully_connected",
        "batch_dot": "amp_batch_dot",
        "_npx_batch_dot": "amp_batch_dot",
        "_npi_matmul": "amp_matmul",
        "Convolution": "amp_convolution",
        "_npx_convolution": "amp_convolution",
        "Deconvolution": "amp_deconvolution",
        "_npx_deconvolution": "amp_deconvolution",
        "_contrib_interleaved_matmul_selfatt_qk": "amp_selfatt_qk",
        "_contrib_interleaved_matmul_selfatt_valatt": "amp_selfatt_valatt",
        "_contrib_interleaved_matmul_encdec_qk": "amp_encdec_qk",
        "_contrib_interleaved_matmul_encdec_valatt": "amp_encdec_valatt",
    },
    "gpu": {},
}

# The default plan (emulate=None) on each CPU class of mxnet.amp.cpu: how its low precision ops run, and the
# measurements that chose it. "native": bfloat16 operands into bfloat16 kernels (MXNet's, or the library's
# where LIBRARY_KERNELS maps the op); "emulated": float32 kernels on bf16-rounded values (the library's float32
# kernels where EMULATION_KERNELS maps the op): bf16 numerics either way. The evidence per op and class is
# cpu_op_evidence.json (bench/bench_plan.py; a test checks that each plan is the faster one for every op measured
# on its class): one plan per class, since no op measured disagrees with its class. On class (b) oneDNN's bf16
# kernels convert to float32 in registers, so the operands shrink but the arithmetic gets no faster.
CPU_CLASS_PLANS = {
    "a": ("emulated", "no AVX-512: MXNet has no bfloat16 kernels on this CPU"),
    "b": ("emulated", "no bf16 arithmetic: every product and convolution measured ran 1.35-2.7x faster emulated "
                      "than on oneDNN's bf16 kernels (class (b) stand-in on an AMD EPYC, 2026-12-05); on the Ice "
                      "Lake-class Xeon (2026-12-04) the transformer block ran 1.17x float32 emulated against "
                      "0.55-0.76x on oneDNN's bf16 kernels"),
    "c": ("native", "AVX512-BF16 dot products: every product and convolution measured ran 1.8-2.1x faster on "
                    "the bf16 kernels than emulated (AMD EPYC, 2026-12-05)"),
    "d": ("native", "AMX tiles: ResNet-50 inference 3.13x and the transformer block 4.16x float32 on the "
                    "library's oneDNN 3 kernels (Sapphire Rapids class, 2026-12-03)"),
}

# Training graphs on CPU classes where the default plan differs for them: "storage", bfloat16 tensors on float32
# arithmetic. Emulation (CPU_CLASS_PLANS) keeps a float32 graph with rounded copies of the weights and activations:
# a BERT-style encoder step peaked at 1.74x float32's RSS (AMD EPYC, class (a), 2026-12-06; issue 35). Under
# "storage" the graph keeps bfloat16 tensors, as on classes (c) and (d): the library's products, convolutions,
# LayerNorm and softmax (LIBRARY_KERNELS, STATS_KERNELS) widen bfloat16 operands into per-call float32 buffers and
# round their results (src/operator/amp/onednn/widen.h), BatchNorm and Dropout run on the library's kernels
# (NEUTRAL_KERNELS), MXNet's own ops run bfloat16 where the class-(a) value probe found them right (storage_ops:
# STORAGE_MOVES that storage_bf16_cpu.json found right) and in float32 between the library's casts elsewhere, and
# the other low precision ops run in float32.
# Inference keeps emulation, which keeps no activations anyway and rounds the weights once, offline.
CPU_CLASS_TRAINING_PLANS = {
    "a": ("storage", "no AVX-512: bfloat16 tensors, float32 arithmetic in the library's kernels"),
}

# The ops that move values without arithmetic, forward and backward (no sum in their gradient: not broadcast_to,
# tile, take...): in training graphs storing bfloat16 on float32 arithmetic, those the class-(a) value probe found
# right (storage_bf16_cpu.json) run on bfloat16 data. MXNet's other kernels have no oneDNN bfloat16 path there and
# compute bfloat16 element by element, 100-200x slower than float32 (add_n 119 ms for 524 288 values against 0.47 ms,
# elemwise_add 86 ms, AMD EPYC class (a), 2026-12-06): those ops run in float32 between the library's casts.
STORAGE_MOVES = {
    "cpu": ("Reshape", "_np_reshape", "_npx_reshape", "reshape_like", "_npx_reshape_like", "Flatten", "flatten",
            "SwapAxis", "_npi_swapaxes", "_np_transpose", "expand_dims", "_npi_expand_dims", "squeeze",
            "_np_squeeze", "slice", "slice_axis", "slice_like", "_npi_slice", "_npx_slice", "crop", "concat",
            "Concat", "_npi_concatenate", "stack", "_npi_stack", "_npi_hstack", "_npi_vstack", "_npi_dstack",
            "_npi_column_stack", "split", "SliceChannel", "_split_v2", "_npi_split", "_copy", "_np_copy", "identity",
            "BlockGrad", "stop_gradient", "depth_to_space", "space_to_depth", "SequenceReverse", "reverse", "flip",
            "_npi_flip"),
    "gpu": (),
}

# Dtype-neutral op -> the library kernel that runs it on bfloat16 data in training graphs storing bfloat16 on float32
# arithmetic (CPU_CLASS_TRAINING_PLANS), in place of a float32 island, where the node's attributes are among those
# the kernel takes (STORAGE_KERNEL_TAKES). MXNet 1.9.1's Pooling fails on bfloat16 data there ("could not create a
# primitive descriptor iterator"), and the float32 island around it kept the float32 data for backward: 33.5 MB
# behind ResNet-18's stem at batch 128 of 64x64 images (AMD EPYC, class (a), 2026-12-06). A max pooling writes
# values of its input, so amp_pooling pools bfloat16 exactly and keeps only its bfloat16 data.
STORAGE_KERNELS = {"cpu": {"Pooling": "amp_pooling", "_npx_pooling": "amp_pooling"}, "gpu": {}}

# Library kernel -> what it takes of its op's attributes: the values of a choice (the first is the op's default,
# taken for an absent attribute), or the length of a tuple.
STORAGE_KERNEL_TAKES = {
    "amp_pooling": {"pool_type": ("max",), "pooling_convention": ("valid", "full"), "layout": ("None", "NCHW"),
                    "kernel": 2},
}

# MXNet op -> the library kernel that runs it where it is emulated (float32 on rounded values), per device type.
# The library's oneDNN 3.2 float32 products and convolutions are faster than MXNet 1.9.1's float32 oneDNN 2.4
# ones (MXNet's float32 batch_dot runs at 22-31 GFLOP/s). Converted inference, 2026-12-04, AMD EPYC (class a,
# AVX2), against MXNet float32 in one process: transformer block 16x128x512 0.94x with MXNet's kernels, 1.64x
# with these (FullyConnected alone: 1.57x); ResNet-50 batch 16 0.71x against 0.82-0.96x (bench_inference.py).
# On the Ice Lake-class Xeon (class b), emulation on the library's float32 products ran the transformer block
# 1.17x float32 (../shared/cpu_classes/README.md). And MXNet 1.9.1's oneDNN Deconvolution backward aborts the
# process when its weight is a computed tensor (plain float32 reproduces it: w = w0 * 1.0), and an emulated
# op's rounded weight is one; the library's kernel computes the same values without the crash.
EMULATION_KERNELS = {
    "cpu": dict(LIBRARY_KERNELS["cpu"]),
    "gpu": {},
}

# Dtype-neutral ops that run in float32 between casts where the device runs bfloat16 natively, per device type
# (the rewriter casts their bfloat16 inputs to float32 and their first output back, so the graph's dtypes, and
# what follows the op, stay as if it ran in bfloat16). MXNet 1.9.1's CPU BatchNorm accepts bfloat16 data
# (probe_bf16: values match) but runs far slower on it: in a ResNet-18 training step (32x3x64x64) 4.6 ms per
# BatchNorm on bfloat16 against 1.0 ms on float32 data plus 0.25 ms per cast, the whole step 0.37 s against
# 0.25-0.27 s. Conversion folds inference BatchNorms into the convolution before them anyway.
FLOAT32_KERNELS = {"cpu": g.BATCH_NORM, "gpu": ()}

# Dtype-neutral op -> (op, attributes) computing the same function with a faster low precision kernel, where
# the device runs bfloat16 natively. MXNet 1.9.1's ``relu`` has no oneDNN path: on bfloat16 it runs mshadow's
# emulated arithmetic, 12.2 ms forward + backward on 64x32x16x16 against 1.4 ms for ``Activation(relu)``
# (oneDNN's eltwise) and 3.2 ms for float32 ``relu`` (tests/python/unittest/test_native_bf16.py).
NATIVE_SUBSTITUTES = {
    "cpu": {"relu": ("Activation", {"act_type": "relu"}), "_npx_relu": ("_npx_activation", {"act_type": "relu"})},
    "gpu": {},
}

# Transposes that swap two axes -> the op that swaps them, where the device runs bfloat16 natively and the data is
# bfloat16. MXNet 1.9.1's oneDNN bfloat16 transpose corrupts the heap (so transpose is a float32 op here, between
# casts), while SwapAxis moves bfloat16 values correctly: an attention head split (8x128x12x64, axes (0, 2, 1, 3))
# in 0.48 ms against 0.68 ms for the float32 transpose alone, before its two casts (AMD EPYC, class c, 2026-12-06),
# and a training graph keeps no float32 copy of the heads.
# (numpy mode's _np_transpose runs bfloat16 natively: it is not listed.)
TRANSPOSE_SWAPS = {"cpu": {"transpose": "SwapAxis"}, "gpu": {}}

# Dtype-neutral op -> the library kernel that runs it on low precision data in training graphs, where the
# device runs bfloat16 natively (ahead of FLOAT32_KERNELS, which it makes unnecessary there). BatchNorm in
# float32 between casts kept float32 activations alive for backward: ResNet-18 training at batch 128 peaked
# at 1.14x float32's RSS (AMD EPYC, class c, 2026-12-05); amp_batch_norm reads and writes bfloat16 with float32
# statistics, and is as fast as the float32 island (MXNet's own bfloat16 BatchNorm: a ResNet-18 step 0.18 ->
# 0.25 s). Inference conversion folds BatchNorm into the convolution before it instead.
#
# Dropout, a float32-list op (MXNet's CPU kernel has no bfloat16 case), runs on amp_dropout the same way, in its
# data's dtype (bfloat16 or float32), with no float32 island: MXNet's float32 Dropout draws its mask at about 5 ms per
# million elements against 1 ms (AMD EPYC, class c, 2026-12-06), three times per BERT layer and step.
NEUTRAL_KERNELS = {"cpu": {"BatchNorm": "amp_batch_norm", "Dropout": "amp_dropout", "_npx_dropout": "amp_dropout"},
                   "gpu": {}}

# The NEUTRAL_KERNELS that inference graphs use too. A BatchNorm that conversion cannot fold into a convolution before
# it (DenseNet's after each concatenation, a pre-activation ResNet's) ran as a float32 island: two casts and MXNet's
# float32 kernel, its ReLU after it on bfloat16. amp_batch_norm reads and writes bfloat16 with the ReLU fused: one pass.
INFERENCE_NEUTRAL_KERNELS = ("amp_batch_norm",)

# Dtype-neutral or widest-type op -> the library kernel that runs it in inference graphs where the device runs bfloat16
# natively and every input is bfloat16 (same attributes). MXNet 1.9.1's bfloat16 Concat of the library's plain-layout
# outputs took 0.46 ms a call in SqueezeNet 1.1 at batch 1, against 0.07 ms for its float32 Concat of oneDNN's blocked
# layouts: SqueezeNet ran 0.96x float32 (AMD EPYC, class (c), 2026-12-07). amp_concat copies rows. (Training graphs keep
# MXNet's Concat, whose backward keeps no input alive.)
INFERENCE_KERNELS = {"cpu": {"Concat": "amp_concat", "concat": "amp_concat"}, "gpu": {}}

# Products of two tensors (ELEMWISE_MULTIPLY, float32 for their rounding) -> the library kernel that runs them in
# inference graphs where the device runs bfloat16 natively and only low precision readers take the result: float32
# math on the operands as they are, one rounding to bfloat16, which the readers' casts would make anyway. MobileNet v3's
# squeeze-excitation products (gate times features, before a convolution) took 8.5 ms a forward at batch 16 in MXNet's
# float32 broadcast_mul between casts (AMD EPYC, class (c), 2026-12-07).
ROUNDED_PRODUCTS = {"cpu": {op: "amp_broadcast_mul" for op in ("_Mul", "_mul", "_npi_multiply", "broadcast_mul",
                                                                 "elemwise_mul")}, "gpu": {}}

# Per device type: the multiply-accumulates of one forward pass through a graph's products (graph.work) below which
# amp.init keeps the graph in float32: the casts, each low precision kernel's set-up and the larger backward graph
# cost more there than bfloat16's arithmetic saves. A training step of three Dense layers of U units (batch B, Adam,
# hybridized) under amp.init against float32, AMD EPYC, class (c), 2026-12-07 (bench/bench_small_graphs.py):
# 0.54 M MACs 0.51x, 2.1 M 0.80x, 4.4 M 0.38x, 8.5 M 1.00x, 17 M 0.73x, 34 M 1.32x, 68 M 1.31x, 270 M 2.04x; the
# training matrix's models (tests/python/unittest/matrix_models.py, 1 k to 136 k MACs) ran at 0.40-0.54x.
TRAINING_GRAPH_FLOOR = {"cpu": 24_000_000, "gpu": 0}

# Per device type: whether training graphs read a low precision tensor read more than once through copies from the
# library's amp_fanout, one per reader (graph.postops.fanout_copies), whose backward adds the readers' gradients in
# float32 and rounds once. MXNet sums them with add_n, which has no bfloat16 kernel on CPUs: on classes (c) and (d)
# it converts every gradient to a new float32 array first (a BERT-style encoder layer's input, read four times: five
# arrays of 3 MB per sum, freed into malloc's heap, which kept 9 MB of them), and on class (a) it adds element by
# element (538 ms for 2 M values, against 2 ms in float32). Intel Xeon, class (d), 2026-12-07: the encoder's step
# 0.282-0.292 -> 0.263-0.271 s, its peak 640 -> 631 MB with bfloat16 weights; ResNet-18's step 0.101-0.111 ->
# 0.096-0.104 s.
FANOUT_COPIES = {"cpu": True, "gpu": False}

# Dtype-flowing ops that the op-speed evidence (op_speed_bf16_cpu.json, bench/bench_op_speed.py) does not time,
# because a float32 island around them makes no sense: subgraph containers (their own ops are planned), casts,
# optimizer updates (they write their inputs in place), ops that create or sample arrays (they read shapes, not
# values), unprefixed backward ops and CUDA fusion. Every other dtype-neutral, widest-type or conditional op
# receives bfloat16 natively only where that table measured its bfloat16 kernel no slower than its float32 kernel
# between two casts; elsewhere it runs in float32 between casts (graph.postops.float32_islands). MXNet 1.9.1's
# generic bfloat16 element-wise kernels are 3-10x slower than its float32 ones (clip 3.3x, elemwise_add 6.4x, mean
# 9.6x on 16x96x112x112, AMD EPYC class (c), 2026-12-07).
SPEED_UNTIMED = g.CONTAINERS + g.CASTS + g.IN_PLACE + g.CREATION + g.UNPREFIXED_BACKWARD + g.GPU_FUSION

# Float32-list op -> the library kernel that runs it on target-dtype data with float32 statistics, per device type:
# "float32-statistics kernels", used in training and inference graphs alike where the device runs bfloat16 natively,
# the policy has kernels="auto" and the library's oneDNN 3 takes bfloat16. Their data input stays bfloat16 (no cast),
# gamma and beta stay float32, the output is bfloat16, in place of the float32 island (casts to float32, MXNet's
# float32 kernel) that kept float32 copies of the activations for backward. In a transformer block that island
# with its casts was about a quarter of the time (AMD EPYC, class c). The rewriter routes a node only where its
# attributes fit the kernel (the last axis; no output_mean_var; softmax dtype None or float32).
STATS_KERNELS = {
    "cpu": {
        "LayerNorm": "amp_layer_norm",
        "_npx_layer_norm": "amp_layer_norm",
        "softmax": "amp_softmax",
        "_npx_softmax": "amp_softmax",
        "log_softmax": "amp_log_softmax",
        "_npx_log_softmax": "amp_log_softmax",
    },
    "gpu": {},
}

# Library kernels that read float32 parameters (weight, bias) beside bfloat16 data in training graphs, where the
# rewriter gives them param_dtype="float32" instead of casting their parameters: the kernel converts the weight into
# a per-call buffer, forward and backward, and writes the float32 weight and bias gradients directly. A cast weight
# kept its bfloat16 copy alive for backward and produced a bfloat16 gradient that a cast's backward widened again
# (issue 35). Inference graphs keep cast (or offline-cast) bfloat16 weights: nothing is saved for backward there.
FLOAT32_PARAM_KERNELS = ("amp_fully_connected", "amp_convolution", "amp_deconvolution")

# Float32-statistics kernels whose output stays float32 whatever dtype their data arrives in: log-probabilities feed
# losses (a bfloat16 log p is off by up to 2^-8 |log p|), and no bfloat16 kernel reads them.
STATS_FLOAT32_OUTPUTS = ("amp_log_softmax",)

# Ops whose parameters stay float32 while the data is low precision (MXNet 2.0's
# list_lp16_use_fp32_params): BatchNorm's gamma, beta and statistics, the library LayerNorm's gamma and beta.
FP32_PARAM_OPS = g.BATCH_NORM + g.PROJECT_BATCH_NORM + g.PROJECT_LAYER_NORM

# (ops, why) pairs: every op above appears in exactly one of them.
REASONS = g.REASONS + (
    (g.PROJECT_MATMUL,
     "this project's oneDNN 3 matrix product or convolution (libmxnet_amp): bfloat16 operands, float32 "
     "accumulation, AMX / AVX512-BF16 kernels; the rewriter puts it in place of MXNet's op (LIBRARY_KERNELS) where the "
     "CPU runs bfloat16 natively"),
    (g.PROJECT_LAYER_NORM,
     "this project's LayerNorm over the last axis (libmxnet_amp, oneDNN 3): runs in its data's dtype with float32 "
     "gamma, beta and statistics; the rewriter puts it in place of LayerNorm where the CPU runs bfloat16 natively "
     "(STATS_KERNELS)"),
    (g.PROJECT_DROPOUT,
     "this project's Dropout (libmxnet_amp): runs in its data's dtype (float32 or bfloat16) and reads the graph's "
     "mode; the rewriter puts it in place of Dropout in training graphs where the CPU runs bfloat16 natively "
     "(NEUTRAL_KERNELS)"),
    (g.PROJECT_PRODUCT,
     "this project's product of two tensors under NumPy broadcasting (libmxnet_amp): float32 math on float32 or "
     "bfloat16 operands, one rounding to its dtype; the rewriter puts it in place of a float32 product whose result "
     "only low precision readers take, in inference graphs where the CPU runs bfloat16 natively (ROUNDED_PRODUCTS)"),
    (g.PROJECT_COPY,
     "this project's concatenation (libmxnet_amp): row copies in the data's dtype (float32 or bfloat16); the rewriter "
     "puts it in place of Concat in inference graphs where the CPU runs bfloat16 natively (INFERENCE_KERNELS)"),
    (g.PROJECT_STORAGE,
     "this project's max pooling and fan-out copies (libmxnet_amp): run in their data's dtype (float32 or bfloat16); "
     "the rewriter puts them in training graphs storing bfloat16 on float32 arithmetic (STORAGE_KERNELS, "
     "graph.postops.fanout_copies)"),
    (g.PROJECT_SOFTMAX,
     "this project's softmax and log-softmax over the last axis (libmxnet_amp): float32 math on float32 or "
     "bfloat16 data, output in its dtype attribute or the data's; the rewriter puts them in place of softmax "
     "where the CPU runs bfloat16 natively (STATS_KERNELS)"),
    (g.ONEDNN_FUSED,
     "oneDNN fused CPU op (subgraph backend): bf16 primitives on AVX-512; there is no fp16 "
     "CPU kernel"),
    (g.RNN,
     "RNN: a matmul-like recurrent layer, low precision; MXNet 1.9.1's CPU RNN kernels have no bf16 "
     "case, so it is emulated (bf16-rounded inputs and outputs around the fp32 kernel)"),
    (g.BLAS_MATMUL,
     "matmul-like, low precision; MXNet 1.9.1 has no bf16 kernel for it (native CPU kernel is "
     "fp32/fp64 only, no oneDNN path; probe_bf16: rejects bf16), so it is emulated (bf16-rounded "
     "inputs and outputs around the fp32 kernel)"),
    (g.ATTENTION_GEMM,
     "attention GEMM, low precision; fp16 kernels on GPU only, the CPU kernel checks float32 "
     "(probe_bf16), so for bf16 it is emulated (bf16-rounded inputs and outputs around the fp32 kernel)"),
    (g.POOLING_V1,
     "deprecated Pooling_v1: fp16 kernels exist (fp32 for pool_type='sum'); no bf16 kernel "
     "and no oneDNN path (probe_bf16)"),
    (g.RESAMPLE_PAD,
     "data movement op whose CPU kernel lacks a bf16 case (probe_bf16: 'Unknown type enum "
     "12')"),
    (g.DROPOUT,
     "Dropout: fp16 kernel on GPU; CPU kernel has no bf16 case and oneDNN has no dropout "
     "(probe_bf16)"),
    (g.ELEMWISE_FP16_NOT_BF16,
     "elementwise op whose CPU kernel has no bf16 case (probe_bf16: 'Unknown type enum "
     "12')"),
    (g.ADAPTIVE_POOLING,
     "weighted averages of many neighbours: MXNet's native bf16 kernels accumulate in bf16 (SE-ResNet-18 "
     "deviated 7.0e-3 from fp32 with them, 4.4e-3 without; FCN's bilinear upsampling 2.9e-2 -> 1.0e-2), so fp32"),
    (g.ELEMWISE_MULTIPLY,
     "product of two tensors, typically a gate or mask (squeeze-excitation, attention, hard-swish) whose "
     "result joins a residual sum: in bf16 every block adds a rounding there (SE-ResNet-18 4.4e-3 -> 3.5e-3, "
     "the contrib figure 3.3e-3), so fp32"),
    (g.SCALAR_ADDITION,
     "a tensor plus a constant (x + 3 in hard-swish, 1 + mask): bf16's 8-bit significand loses the tensor's "
     "low bits against the constant (MobileNetV3 deviated 1.3e-2 from fp32, 4.1e-3 in fp32), so fp32"),
    (g.BF16_KERNEL_BROKEN,
     "its bfloat16 kernel fails the native value probe on AVX-512 (native_bf16_cpu.json: transpose "
     "aborts in oneDNN, image resize returns garbage, numpy max/min raise), so it never receives "
     "bfloat16: fp32"),
    (g.TRUE_DIVIDE,
     "true division of two tensors: the numpy CPU kernel has no bf16 case (probe_bf16: "
     "'Unknown type enum 12'), so fp32 for bf16"),
    (g.RANDOM_LIKE,
     "reads only the shape of its input, but its CPU kernel has no bf16 case: fp32 input "
     "for bf16"),
    (g.GRADIENT_CHECKS,
     "gradient check/statistics op (finite check, LARS ratios): fp16 kernels exist; no "
     "bf16 case (probe_bf16), so fp32 for bf16"),
    (g.LRN,
     "LRN: sum of squares over a window; fp32 for fp16 (overflow), oneDNN bf16 LRN "
     "computes internally in fp32"),
    (g.FP16_RANGE,
     "would overflow float16, but bfloat16 has float32's exponent range and a bf16 kernel "
     "(probe_bf16): runs as is"),
    (g.ACTIVATION,
     "MXNet routes bf16 relu, sigmoid, tanh and softrelu to oneDNN (probe_bf16 --mkldnn); "
     "softrelu = log(1 + exp(x)) stays fp32 for accuracy and softsign has no bf16 kernel"),
    (g.LEAKY_RELU,
     "MXNet routes bf16 leaky, elu and gelu to oneDNN (probe_bf16 --mkldnn); prelu, rrelu "
     "and selu use native kernels without a bf16 case, so fp32 for them"),
    (g.POOLING,
     "MXNet routes bf16 max and avg pooling to oneDNN (SupportMKLDNNPooling accepts "
     "kBfloat16); sum and lp pooling use native kernels without a bf16 case (probe_bf16 "
     "--mkldnn)"),
)
