"""Groups of operators that both dtype modules classify, and the reasons that hold for both dtypes.

Each tuple below holds operators that share one property (what they compute, which kernels MXNet 1.9.1 has
for them); :mod:`.float16` and :mod:`.bfloat16` add the groups up into their categories. Which category a
group lands in, and why where that depends on the target dtype, stay in the dtype modules. ``REASONS``
pairs a group with its reason where one text serves both dtypes; a dtype module's own ``REASONS`` adds
the others, so every group has exactly one reason per dtype.

Every tuple is plain data; ``tests/python/unittest/test_lists.py`` checks that every registered forward
operator sits in exactly one category per dtype.
"""
from ..base import op_names

# -------------------- matrix products, linear algebra ----------------------------------------------

# Convolution, Deconvolution and FullyConnected: GEMM-bound, with oneDNN and cuDNN kernels.
MATMUL = (
    "Convolution", "Deconvolution", "FullyConnected", "_npx_convolution", "_npx_deconvolution",
    "_npx_fully_connected", "_sparse_FullyConnected",
)

# oneDNN subgraph-fused convolution and FullyConnected (CPU only).
ONEDNN_FUSED = (
    "_sg_mkldnn_conv", "_sg_mkldnn_fully_connected",
)

# Recurrent layers (cuDNN RNN on GPU).
RNN = (
    "RNN", "_npx_rnn",
)

# Dot products on cuBLAS GEMMs: fp16 kernels on GPU, no bf16 kernel in MXNet 1.9.1.
BLAS_MATMUL = (
    "_np_dot", "_npi_einsum", "_npi_matmul", "_npi_tensordot", "_npi_tensordot_int_axes",
    "_npx_batch_dot", "_sparse_dot", "batch_dot", "dot",
)

# Interleaved multi-head attention GEMMs (cuBLAS strided batched).
ATTENTION_GEMM = (
    "_contrib_interleaved_matmul_encdec_qk", "_contrib_interleaved_matmul_encdec_valatt",
    "_contrib_interleaved_matmul_selfatt_qk", "_contrib_interleaved_matmul_selfatt_valatt",
)

# Deprecated Convolution_v1.
DEPRECATED_V1 = ("Convolution_v1",)

# oneDNN subgraph-fused self-attention (CPU only).
ONEDNN_FUSED_ATTENTION = (
    "_sg_mkldnn_selfatt_qk", "_sg_mkldnn_selfatt_valatt",
)

# LAPACK/BLAS linear algebra: float32/float64 kernels only.
LINALG = (
    "_linalg_det", "_linalg_extractdiag", "_linalg_extracttrian", "_linalg_gelqf", "_linalg_gemm",
    "_linalg_gemm2", "_linalg_inverse", "_linalg_makediag", "_linalg_maketrian", "_linalg_potrf",
    "_linalg_potri", "_linalg_slogdet", "_linalg_sumlogdiag", "_linalg_syevd", "_linalg_syrk",
    "_linalg_trmm", "_linalg_trsm", "_npi_cholesky", "_npi_det", "_npi_eig", "_npi_eigh",
    "_npi_eigvals", "_npi_eigvalsh", "_npi_inv", "_npi_pinv", "_npi_pinv_scalar_rcond",
    "_npi_slogdet", "_npi_solve", "_npi_svd", "_npi_tensorinv", "_npi_tensorsolve", "khatri_rao",
    "linalg_det", "linalg_extractdiag", "linalg_extracttrian", "linalg_gelqf", "linalg_gemm",
    "linalg_gemm2", "linalg_inverse", "linalg_makediag", "linalg_maketrian", "linalg_potrf",
    "linalg_potri", "linalg_slogdet", "linalg_sumlogdiag", "linalg_syrk", "linalg_trmm",
    "linalg_trsm",
)

# Convolutions that sample the input at learned offsets.
DEFORMABLE = (
    "_contrib_DeformableConvolution", "_contrib_ModulatedDeformableConvolution",
)

# -------------------- normalisation, activation, pooling, dropout ---------------------------------

# BatchNorm that takes low-precision data with fp32 parameters and statistics.
BATCH_NORM = (
    "BatchNorm", "_contrib_BatchNormWithReLU", "_npx_batch_norm",
)

# BatchNorm variants whose type check accepts only float32.
BATCH_NORM_FP32_ONLY = (
    "BatchNorm_v1", "_contrib_SyncBatchNorm",
)

# Other normalisation layers (statistics over features, groups or instances).
NORMALIZATION = (
    "GroupNorm", "InstanceNorm", "L2Normalization", "LayerNorm", "_npx_layer_norm", "moments",
)

# Local response normalisation: a sum of squares over a window.
LRN = ("LRN",)

# Softmax family: exponentials then a normalising sum.
SOFTMAX = (
    "SoftmaxActivation", "_npx_log_softmax", "_npx_softmax", "log_softmax", "softmax", "softmin",
)

# Activation: float32 or neutral by ``act_type`` (CONDITIONAL_FP32 in the dtype modules).
ACTIVATION = (
    "Activation", "_npx_activation",
)

# LeakyReLU: float32 or neutral by ``act_type`` (CONDITIONAL_FP32 in the dtype modules).
LEAKY_RELU = (
    "LeakyReLU", "_npx_leaky_relu",
)

# Pooling: float32 or neutral by ``pool_type`` (CONDITIONAL_FP32 in the dtype modules).
POOLING = (
    "Pooling", "_npx_pooling",
)

# Deprecated Pooling_v1.
POOLING_V1 = ("Pooling_v1",)

# Adaptive average pooling and bilinear resize: weighted averages of neighbours.
ADAPTIVE_POOLING = (
    "_contrib_AdaptiveAvgPooling2D", "_contrib_BilinearResize2D",
)

# Dropout: a random mask multiply.
DROPOUT = (
    "Dropout", "_npx_dropout",
)

# -------------------- losses ----------------------------------------------------------------------

# Legacy loss heads with a scale attribute; their backward ignores the head gradient.
LOSS_HEADS = (
    "LinearRegressionOutput", "LogisticRegressionOutput", "MAERegressionOutput", "MakeLoss",
    "SVMOutput", "Softmax", "SoftmaxOutput", "_sparse_LinearRegressionOutput",
    "_sparse_LogisticRegressionOutput", "_sparse_MAERegressionOutput",
)

# Loss heads that ignore the head gradient and have no scale attribute.
UNSCALABLE_LOSS_HEADS = (
    "_sparse_make_loss", "make_loss",
)

# Adds a KL sparsity penalty to the gradient.
KL_SPARSITY_REGULARIZER = ("IdentityAttachKLSparseReg",)

# Loss functions computed and reduced inside one op.
LOSSES = (
    "CTCLoss", "_contrib_CTCLoss", "_contrib_ctc_loss", "_contrib_hawkesll", "_npx_smooth_l1",
    "ctc_loss", "smooth_l1", "softmax_cross_entropy",
)

# -------------------- elementwise math ------------------------------------------------------------

# Cheap unary and tensor-scalar elementwise ops with fp16 and bf16 kernels.
ELEMWISE_SIMPLE = (
    "_DivScalar", "_MaximumScalar", "_MinimumScalar", "_ModScalar", "_MulScalar",
    "_RModScalar", "_contrib_backward_gradientmultiplier",
    "_contrib_div_sqrt_dim", "_contrib_gradientmultiplier", "_contrib_round_ste",
    "_contrib_sign_ste", "_div_scalar", "_maximum_scalar", "_minimum_scalar",
    "_mod_scalar", "_mul_scalar", "_npi_abs", "_npi_absolute", "_npi_arctan",
    "_npi_cbrt", "_npi_ceil", "_npi_clip", "_npi_cos", "_npi_degrees", "_npi_fix", "_npi_floor",
    "_npi_maximum_scalar", "_npi_minimum_scalar", "_npi_mod_scalar", "_npi_multiply_scalar",
    "_npi_nan_to_num", "_npi_negative", "_npi_radians", "_npi_rint", "_npi_rmod_scalar",
    "_npi_sign", "_npi_sin", "_npi_sqrt",
    "_npi_tanh", "_npi_trunc", "_npi_where_scalar2", "_npx_relu", "_npx_sigmoid",
    "_rmod_scalar", "_sparse__contrib_round_ste", "_sparse__contrib_sign_ste",
    "_sparse_abs", "_sparse_arctan", "_sparse_cbrt", "_sparse_ceil", "_sparse_clip", "_sparse_cos",
    "_sparse_degrees", "_sparse_fix", "_sparse_floor", "_sparse_negative", "_sparse_radians",
    "_sparse_relu", "_sparse_rint", "_sparse_round", "_sparse_sigmoid", "_sparse_sign",
    "_sparse_sin", "_sparse_sqrt", "_sparse_tanh", "_sparse_trunc", "abs", "arctan", "cbrt", "ceil",
    "clip", "cos", "degrees", "fix", "floor", "negative", "radians", "relu", "rint", "round",
    "sigmoid", "sign", "sin", "softsign", "sqrt", "tanh", "trunc",
)

# Elementwise ops with fp16 kernels but no bf16 case on CPU (probe_bf16).
ELEMWISE_FP16_NOT_BF16 = (
    "_npi_rtrue_divide_scalar", "_npi_true_divide_scalar", "col2im", "hard_sigmoid", "im2col",
)

# Results that can leave float16's range (squares, reciprocals, hypot, ldexp).
FP16_RANGE = (
    "_Hypot", "_HypotScalar", "_RDivScalar", "_contrib_quadratic", "_hypot", "_hypot_scalar",
    "_npi_copysign", "_npi_copysign_scalar", "_npi_hypot_scalar", "_npi_ldexp", "_npi_ldexp_scalar",
    "_npi_rcopysign_scalar", "_npi_reciprocal", "_npi_rldexp_scalar", "_npi_square", "_rdiv_scalar",
    "_sparse_rsqrt", "_sparse_square", "broadcast_hypot", "rcbrt", "reciprocal", "rsqrt", "square",
)

# Exponentials, logarithms and powers.
EXP_LOG_POW = (
    "_Power", "_PowerScalar", "_RPowerScalar", "_npi_exp", "_npi_expm1", "_npi_log", "_npi_log10",
    "_npi_log1p", "_npi_log2", "_npi_power", "_npi_power_scalar", "_npi_powerd",
    "_npi_rpower_scalar", "_power", "_power_scalar", "_rpower_scalar", "_sparse_exp",
    "_sparse_expm1", "_sparse_log", "_sparse_log10", "_sparse_log1p", "_sparse_log2",
    "broadcast_power", "exp", "expm1", "log", "log10", "log1p", "log2",
)

# Other transcendental functions (inverse trig, hyperbolic, erf, gamma, polyval).
TRANSCENDENTAL = (
    "_npi_arccos", "_npi_arccosh", "_npi_arcsin", "_npi_arcsinh", "_npi_arctan2",
    "_npi_arctan2_scalar", "_npi_arctanh", "_npi_cosh", "_npi_polyval", "_npi_rarctan2_scalar",
    "_npi_sinh", "_npi_tan", "_npx_erf", "_npx_erfinv", "_npx_gamma", "_npx_gammaln",
    "_sparse_arccos", "_sparse_arccosh", "_sparse_arcsin", "_sparse_arcsinh", "_sparse_arctanh",
    "_sparse_cosh", "_sparse_gamma", "_sparse_gammaln", "_sparse_sinh", "_sparse_tan", "arccos",
    "arccosh", "arcsin", "arcsinh", "arctanh", "cosh", "erf", "erfinv", "gamma", "gammaln", "sinh",
    "tan",
)

# numpy hypot of two tensors: no bf16 kernel, squares overflow fp16.
NUMPY_HYPOT = ("_npi_hypot",)

# numpy around: its kernel rejects float16 but accepts bfloat16.
AROUND = ("_npi_around",)

# Arithmetic on two or more tensors.
ELEMWISE_MULTI_INPUT = (
    "ElementWiseSum", "_Div", "_Maximum", "_Minimum", "_Minus", "_Mod", "_Plus", "_add",
    "_contrib_index_copy", "_div", "_grad_add", "_identity_with_attr_like_rhs", "_maximum",
    "_minimum", "_minus", "_mod", "_npi_add", "_npi_maximum", "_npi_minimum", "_npi_mod",
    "_npi_subtract", "_plus", "_scatter_elemwise_div", "_sparse_ElementWiseSum",
    "_sparse_add_n", "_sparse_broadcast_add", "_sparse_broadcast_div", "_sparse_broadcast_minus",
    "_sparse_broadcast_plus", "_sparse_broadcast_sub",
    "_sparse_elemwise_add", "_sparse_elemwise_div", "_sparse_elemwise_sub",
    "_sub", "add_n", "broadcast_add", "broadcast_div", "broadcast_maximum", "broadcast_minimum",
    "broadcast_minus", "broadcast_mod", "broadcast_plus", "broadcast_sub",
    "elemwise_add", "elemwise_div", "elemwise_sub",
)

# Products of two tensors (gates and masks: squeeze-excitation, attention, hard-swish).
ELEMWISE_MULTIPLY = (
    "_Mul", "_mul", "_npi_multiply", "_sparse_broadcast_mul", "_sparse_elemwise_mul", "broadcast_mul",
    "elemwise_mul",
)

# A tensor plus or minus a constant (x + 3 in hard-swish, 1 + mask): the constant can dominate the values.
SCALAR_ADDITION = (
    "_MinusScalar", "_PlusScalar", "_RMinusScalar", "_minus_scalar", "_npi_add_scalar", "_npi_rsubtract_scalar",
    "_npi_subtract_scalar", "_plus_scalar",
    "_rminus_scalar",
)

# numpy true division of two tensors.
TRUE_DIVIDE = ("_npi_true_divide",)

# Comparisons and logic on two or more tensors.
COMPARE_MULTI_INPUT = (
    "_Equal", "_Greater", "_Greater_Equal", "_Lesser", "_Lesser_Equal", "_Logical_And",
    "_Logical_Or", "_Logical_Xor", "_Not_Equal", "_contrib_allclose", "_equal", "_greater",
    "_greater_equal", "_lesser", "_lesser_equal", "_logical_and", "_logical_or", "_logical_xor",
    "_not_equal", "_npi_equal", "_npi_greater", "_npi_greater_equal", "_npi_less",
    "_npi_less_equal", "_npi_not_equal", "broadcast_equal", "broadcast_greater",
    "broadcast_greater_equal", "broadcast_lesser", "broadcast_lesser_equal",
    "broadcast_logical_and", "broadcast_logical_or", "broadcast_logical_xor", "broadcast_not_equal",
)

# Selection between two tensors by a condition.
WHERE = (
    "_npi_where", "_npi_where_lscalar", "_npi_where_rscalar", "_sparse_where", "where",
)

# -------------------- reductions and sorting ------------------------------------------------------

# Reductions that accumulate many terms (sums, means, norms, products, histograms).
REDUCTIONS = (
    "_contrib_count_sketch", "_histogram", "_np_cumsum", "_np_prod", "_np_product", "_np_sum",
    "_np_trace", "_npi_average", "_npi_histogram", "_npi_mean", "_npi_norm", "_npi_percentile",
    "_npi_std", "_npi_var", "_sparse_mean", "_sparse_norm", "_sparse_sum", "_square_sum", "cumsum",
    "mean", "multi_sum_sq", "nanprod", "nansum", "norm", "prod", "sum", "sum_axis",
)

# max/min reductions: they pick an existing value.
MAX_MIN = (
    "max", "max_axis", "min", "min_axis",
)

# Ops whose bfloat16 kernels in MXNet 1.9.1 fail the native value probe (tools/probe_bf16.py --values, evidence
# in native_bf16_cpu.json): oneDNN's bf16 transpose corrupts the heap, bf16 image resize returns garbage, the
# numpy max/min reductions raise on bf16. Otherwise they move or select values (dtype-neutral).
BF16_KERNEL_BROKEN = (
    "_image_resize", "_np_amax", "_np_amin", "_np_max", "_np_min", "_npx__image_resize", "transpose",
)

# Sorting.
SORT = (
    "_npi_argsort", "_npi_sort", "argsort", "sort",
)

# -------------------- data movement, indexing, creation, casts ------------------------------------

# Copies, reshapes, slices, transposes, broadcasts: values moved, not computed.
DATA_MOVEMENT = (
    "BlockGrad", "Flatten", "Reshape", "SliceChannel", "SwapAxis", "_CrossDeviceCopy",
    "_contrib_arange_like", "_copy", "_copyto", "_crop_assign", "_crop_assign_scalar",
    "_np_atleast_1d", "_np_atleast_2d", "_np_atleast_3d", "_np_copy", "_np_diag", "_np_diagflat",
    "_np_diagonal", "_np_moveaxis", "_np_repeat", "_np_reshape", "_np_roll", "_np_squeeze",
    "_np_transpose", "_npi_broadcast_to", "_npi_copyto", "_npi_diff", "_npi_dsplit", "_npi_ediff1d",
    "_npi_expand_dims", "_npi_flip", "_npi_full_like", "_npi_hsplit", "_npi_pad", "_npi_reshape",
    "_npi_rot90", "_npi_shuffle", "_npi_slice", "_npi_slice_assign", "_npi_slice_assign_scalar",
    "_npi_split", "_npi_swapaxes", "_npi_tile", "_npi_tril", "_npx_arange_like",
    "_npx_batch_flatten", "_npx_reshape", "_npx_reshape_like", "_npx_slice",
    "_scatter_minus_scalar", "_scatter_plus_scalar", "_set_value", "_shuffle", "_slice_assign",
    "_slice_assign_scalar", "_sparse_cast_storage", "_sparse_slice", "_sparse_stop_gradient",
    "_sparse_zeros_like", "_split_v2", "broadcast_axes", "broadcast_axis", "broadcast_like",
    "broadcast_to", "cast_storage", "crop", "depth_to_space", "diag", "expand_dims", "flatten",
    "flip", "identity", "ones_like", "repeat", "reshape", "reshape_like", "reverse", "shuffle",
    "slice", "slice_axis", "slice_like", "space_to_depth", "split", "squeeze", "stop_gradient",
    "swapaxes", "tile", "zeros_like",
)

# Padding and upsampling.
RESAMPLE_PAD = (
    "Pad", "UpSampling", "pad",
)

# Concatenation and stacking of several inputs.
CONCAT = (
    "Concat", "_npi_column_stack", "_npi_concatenate", "_npi_dstack", "_npi_hstack",
    "_npi_rnn_param_concat", "_npi_stack", "_npi_vstack", "_rnn_param_concat", "_sparse_concat",
    "concat", "stack",
)

# Legacy Crop.
CROP = ("Crop",)

# Casts, the rewriter's own included.
CASTS = (
    "Cast", "_npi_cast", "_npx_cast", "amp_cast", "amp_multicast", "cast",
)

# Ops with integer or boolean results or inputs (scalar comparisons, argmax, bitwise).
INTEGER_SEMANTICS = (
    "_EqualScalar", "_GreaterEqualScalar", "_GreaterScalar", "_LesserEqualScalar", "_LesserScalar",
    "_LogicalAndScalar", "_LogicalOrScalar", "_LogicalXorScalar", "_NotEqualScalar",
    "_contrib_edge_id", "_contrib_getnnz", "_contrib_index_array", "_equal_scalar",
    "_greater_equal_scalar", "_greater_scalar", "_lesser_equal_scalar", "_lesser_scalar",
    "_logical_and_scalar", "_logical_or_scalar", "_logical_xor_scalar", "_not_equal_scalar",
    "_np_all", "_np_any", "_np_sometrue", "_npi_argmax", "_npi_argmin", "_npi_bincount",
    "_npi_bitwise_and", "_npi_bitwise_and_scalar", "_npi_bitwise_not", "_npi_bitwise_or",
    "_npi_bitwise_or_scalar", "_npi_bitwise_xor", "_npi_bitwise_xor_scalar",
    "_npi_diag_indices_from", "_npi_equal_scalar", "_npi_greater_equal_scalar",
    "_npi_greater_scalar", "_npi_isfinite", "_npi_isinf", "_npi_isnan", "_npi_isneginf",
    "_npi_isposinf", "_npi_lcm", "_npi_lcm_scalar", "_npi_less_equal_scalar", "_npi_less_scalar",
    "_npi_logical_not", "_npi_nonzero", "_npi_not_equal_scalar", "_npi_share_memory", "_npi_unique",
    "_npx_constraint_check", "_npx_nonzero", "_npx_shape_array", "_npx_topk", "_ravel_multi_index",
    "_unravel_index", "argmax", "argmax_channel", "argmin", "logical_not", "ravel_multi_index",
    "shape_array", "size_array", "topk", "unravel_index",
)

# Ops that take integer indices stored as floats.
INDEX_INPUTS = (
    "_contrib_boolean_mask", "_npi_boolean_mask", "_npi_boolean_mask_assign_scalar",
    "_npi_boolean_mask_assign_tensor", "_npi_delete", "_npi_gather_nd", "_npi_insert_scalar",
    "_npi_insert_slice", "_npi_insert_tensor", "_npi_scatter_set_nd", "_npi_take", "_npx_gather_nd",
    "_npx_one_hot", "_npx_pick", "_scatter_set_nd", "_sparse_retain", "batch_take",
    "choose_element_0index", "gather_nd", "one_hot", "pick", "scatter_nd", "take",
)

# Legacy index ops with float32-only kernels.
FP32_INDEX_KERNELS = (
    "_onehot_encode", "fill_element_0index",
)

# Embedding lookups: integer indices plus a weight gather.
EMBEDDING = (
    "Embedding", "_contrib_SparseEmbedding", "_npx_embedding", "_sparse_Embedding",
)

# Sequence ops with an integer-valued float ``sequence_length`` input.
SEQUENCE = (
    "SequenceLast", "SequenceMask", "SequenceReverse", "_npx_sequence_mask",
)

# Ops that create a tensor from attributes alone (no floating input).
CREATION = (
    "_NoGradient", "_arange", "_cvimdecode", "_cvimread", "_eye", "_full", "_imdecode", "_linspace",
    "_npi_arange", "_npi_blackman", "_npi_cvimdecode", "_npi_cvimread", "_npi_eye", "_npi_full",
    "_npi_hamming", "_npi_hanning", "_npi_identity", "_npi_indices", "_npi_linspace",
    "_npi_logspace", "_npi_ones", "_npi_random_randint", "_npi_zeros", "_ones",
    "_random_exponential", "_random_gamma", "_random_generalized_negative_binomial",
    "_random_negative_binomial", "_random_normal", "_random_poisson", "_random_randint",
    "_random_uniform", "_sample_unique_zipfian", "_zeros", "_zeros_without_dtype", "normal",
    "random_exponential", "random_gamma", "random_generalized_negative_binomial",
    "random_negative_binomial", "random_normal", "random_poisson", "random_randint",
    "random_uniform", "uniform",
)

# Random generators that read only the shape of their input.
RANDOM_LIKE = (
    "_random_exponential_like", "_random_gamma_like", "_random_generalized_negative_binomial_like",
    "_random_negative_binomial_like", "_random_normal_like", "_random_poisson_like",
    "_random_uniform_like",
)

# Samplers and densities with tensor distribution parameters.
RANDOM_DENSITY = (
    "_npi_bernoulli", "_npi_choice", "_npi_exponential", "_npi_gamma", "_npi_gumbel",
    "_npi_logistic", "_npi_multinomial", "_npi_normal", "_npi_normal_n", "_npi_pareto",
    "_npi_rayleigh", "_npi_uniform", "_npi_uniform_n", "_npi_weibull", "_random_pdf_dirichlet",
    "_random_pdf_exponential", "_random_pdf_gamma", "_random_pdf_generalized_negative_binomial",
    "_random_pdf_negative_binomial", "_random_pdf_normal", "_random_pdf_poisson",
    "_random_pdf_uniform", "_sample_exponential", "_sample_gamma",
    "_sample_generalized_negative_binomial", "_sample_multinomial", "_sample_negative_binomial",
    "_sample_normal", "_sample_poisson", "_sample_uniform", "random_pdf_dirichlet",
    "random_pdf_exponential", "random_pdf_gamma", "random_pdf_generalized_negative_binomial",
    "random_pdf_negative_binomial", "random_pdf_normal", "random_pdf_poisson", "random_pdf_uniform",
    "sample_exponential", "sample_gamma", "sample_generalized_negative_binomial",
    "sample_multinomial", "sample_negative_binomial", "sample_normal", "sample_poisson",
    "sample_uniform",
)

# -------------------- optimizers, graph structure, this project -----------------------------------

# Optimizer updates and other ops that write into their inputs.
IN_PLACE = (
    "_adamw_update", "_contrib_group_adagrad_update", "_mp_adamw_update", "_multi_adamw_update",
    "_multi_lamb_update", "_multi_mp_adamw_update", "_multi_mp_lamb_update",
    "_sparse_adagrad_update", "_sparse_adam_update", "_sparse_ftrl_update",
    "_sparse_sgd_mom_update", "_sparse_sgd_update", "adam_update", "ftml_update", "ftrl_update",
    "lamb_update_phase1", "lamb_update_phase2", "mp_lamb_update_phase1", "mp_lamb_update_phase2",
    "mp_nag_mom_update", "mp_sgd_mom_update", "mp_sgd_update", "multi_mp_sgd_mom_update",
    "multi_mp_sgd_update", "multi_sgd_mom_update", "multi_sgd_update", "nag_mom_update",
    "preloaded_multi_mp_sgd_mom_update", "preloaded_multi_mp_sgd_update",
    "preloaded_multi_sgd_mom_update", "preloaded_multi_sgd_update", "reset_arrays",
    "rmsprop_update", "rmspropalex_update", "sgd_mom_update", "sgd_update", "signsgd_update",
    "signum_update",
)

# Gradient checks and statistics (finite checks, LARS ratios).
GRADIENT_CHECKS = (
    "all_finite", "multi_all_finite", "multi_lars",
)

# Graph containers: subgraphs, control flow, cached ops.
CONTAINERS = (
    "_CachedOp", "_CachedOpThreadSafe", "_cond", "_foreach", "_while_loop",
)

# User-defined Python operators.
CUSTOM = (
    "Custom", "_CustomFunction", "_NDArray", "_Native", "_npi_Custom",
)

# Backward ops registered without the ``_backward_`` prefix.
UNPREFIXED_BACKWARD = (
    "_broadcast_backward", "_contrib_backward_hawkesll", "_contrib_backward_index_copy",
    "_contrib_backward_quadratic", "_npi_backward_ediff1d", "_npi_backward_nan_to_num",
    "_npi_backward_polyval", "_npi_hsplit_backward", "_split_v2_backward",
)

# This project's ops (libmxnet_amp, :mod:`mxnet.amp.base.op_names`): the multi-tensor ops; BatchNorm (float32,
# float16 or bfloat16 data, float32 parameters and statistics); the oneDNN 3 matrix products and convolutions
# (float32 or bfloat16 operands); LayerNorm, softmax and log-softmax over the last axis (float32 or bfloat16 data,
# float32 statistics and parameters); Dropout (float32 or bfloat16 data); max pooling and fan-out copies (float32 or
# bfloat16 data, for training graphs storing bfloat16 on float32 arithmetic); concatenation and the broadcast
# product (float32 or bfloat16, for inference graphs).
PROJECT_OPS = op_names.MULTI_TENSOR_OPS
PROJECT_BATCH_NORM = op_names.BATCH_NORM_OPS
PROJECT_MATMUL = op_names.MATMUL_OPS
PROJECT_LAYER_NORM = op_names.LAYER_NORM_OPS
PROJECT_SOFTMAX = op_names.SOFTMAX_OPS
PROJECT_DROPOUT = op_names.DROPOUT_OPS
PROJECT_STORAGE = op_names.STORAGE_OPS
PROJECT_COPY = op_names.COPY_OPS
PROJECT_PRODUCT = op_names.PRODUCT_OPS

# -------------------- domain-specific -------------------------------------------------------------

# Quantization and calibration.
QUANTIZE = (
    "_contrib_calibrate_entropy", "_contrib_dequantize", "_contrib_quantize",
    "_contrib_quantize_asym", "_contrib_quantize_v2", "_contrib_requantize",
)

# Quantized int8 ops.
QUANTIZED = (
    "_contrib_quantized_act", "_contrib_quantized_batch_norm", "_contrib_quantized_concat",
    "_contrib_quantized_conv", "_contrib_quantized_elemwise_add", "_contrib_quantized_elemwise_mul",
    "_contrib_quantized_embedding", "_contrib_quantized_flatten",
    "_contrib_quantized_fully_connected", "_contrib_quantized_pooling", "_contrib_quantized_rnn",
)

# Object detection and ROI ops.
DETECTION = (
    "ROIPooling", "_contrib_DeformablePSROIPooling", "_contrib_MultiBoxDetection",
    "_contrib_MultiBoxPrior", "_contrib_MultiBoxTarget", "_contrib_MultiProposal",
    "_contrib_PSROIPooling", "_contrib_Proposal", "_contrib_ROIAlign", "_contrib_RROIAlign",
    "_contrib_bipartite_matching", "_contrib_box_decode", "_contrib_box_encode", "_contrib_box_iou",
    "_contrib_box_nms", "_contrib_box_non_maximum_suppression", "_contrib_mrcnn_mask_target",
    "_npx_multibox_detection", "_npx_multibox_prior", "_npx_multibox_target", "_npx_roi_pooling",
)

# The legacy cuDNN v4 BatchNorm (CUDA builds only). With cuDNN >= 5, as in every 1.9.1 GPU wheel, binding it
# fails: "CuDNNBatchNorm is merged into BatchNorm for cudnn version above v5".
CUDNN_BATCH_NORM_V4 = ("CuDNNBatchNorm",)

# MXNet's GPU pointwise fusion (CUDA builds, MXNET_USE_FUSION=1 by default): the executor replaces chains of
# elementwise ops of a bound GPU graph by _FusedOp (NVRTC code generated for the dtypes it finds) after AMP
# rewrote the graph; the helpers carry its backward. The fusion may take in the amp_cast and amp_multicast
# nodes AMP inserted (the rewriter drops multicasts whose inputs already agree). Upstream's YOLOv3 crash was a
# fused amp_multicast; this has not run on a GPU here yet, and MXNET_USE_FUSION=0 turns the fusion off.
GPU_FUSION = ("_FusedOp", "_FusedOpHelper", "_FusedOpOutHelper")

#: Ops that only CUDA builds of MXNet 1.9.1 register (the mxnet-cu1xx wheels): classified like every op, and
#: expected to be absent from a CPU build's registry.
GPU_BUILD_ONLY = CUDNN_BATCH_NORM_V4 + GPU_FUSION + ("_contrib_mrcnn_mask_target",)

# Spatial transformers, grid sampling and correlation.
SPATIAL_SAMPLING = (
    "BilinearSampler", "Correlation", "GridGenerator", "SpatialTransformer",
)

# FFT (GPU-only kernel).
FFT = (
    "_contrib_fft", "_contrib_ifft",
)

# Image preprocessing.
IMAGE = (
    "_cvcopyMakeBorder", "_cvimresize", "_image_adjust_lighting", "_image_crop",
    "_image_flip_left_right", "_image_flip_top_bottom", "_image_normalize",
    "_image_random_brightness", "_image_random_color_jitter", "_image_random_contrast",
    "_image_random_flip_left_right", "_image_random_flip_top_bottom", "_image_random_hue",
    "_image_random_lighting", "_image_random_saturation", "_image_to_tensor",
    "_npi_cvimresize", "_npx__image_adjust_lighting", "_npx__image_crop",
    "_npx__image_flip_left_right", "_npx__image_flip_top_bottom", "_npx__image_normalize",
    "_npx__image_random_brightness", "_npx__image_random_color_jitter",
    "_npx__image_random_contrast", "_npx__image_random_flip_left_right",
    "_npx__image_random_flip_top_bottom", "_npx__image_random_hue", "_npx__image_random_lighting",
    "_npx__image_random_saturation", "_npx__image_to_tensor",
)

# DGL graph sampling on integer CSR data.
GRAPH_SAMPLING = (
    "_contrib_dgl_adjacency", "_contrib_dgl_csr_neighbor_non_uniform_sample",
    "_contrib_dgl_csr_neighbor_uniform_sample", "_contrib_dgl_graph_compact",
    "_contrib_dgl_subgraph",
)

# --------------------------------------------------------------------------------------------------

# (ops, why) pairs for the groups whose reason is the same for float16 and bfloat16.
REASONS = (
    (CUDNN_BATCH_NORM_V4,
     "legacy cuDNN v4 BatchNorm of CUDA builds: it refuses to bind with cuDNN >= 5 (every 1.9.1 GPU wheel; "
     "MXNet says use BatchNorm), so it is never given low precision: fp32"),
    (GPU_FUSION,
     "MXNet's GPU pointwise fusion (MXNET_USE_FUSION): made by MXNet's executor after AMP's rewrite from the "
     "graph's elementwise ops, its generated code runs the dtypes of the ops it fused; AMP leaves it as it is"),
    (MATMUL,
     "matmul-like: runs on GEMM/tensor-core (GPU) or oneDNN (AVX-512 CPU) kernels in low "
     "precision with fp32 accumulation"),
    (DEPRECATED_V1, "deprecated v1 operator without cuDNN/oneDNN low-precision paths: kept in fp32"),
    (ONEDNN_FUSED_ATTENTION,
     "oneDNN fused CPU self-attention: no fp16 kernel, bf16 support not confirmed in "
     "1.9.1, so fp32"),
    (LINALG,
     "LAPACK/BLAS linalg kernels support only float32/float64 (probe_bf16: 'only supports "
     "32-bit and 64-bit')"),
    (DEFORMABLE,
     "deformable convolution: bilinear sampling of learned offsets needs fp32 and has no "
     "cuDNN/oneDNN low-precision path"),
    (BATCH_NORM,
     "BatchNorm: low-precision data with fp32 gamma/beta/statistics is supported (cuDNN; "
     "oneDNN and native CPU accept bf16 data, probe_bf16)"),
    (BATCH_NORM_FP32_ONLY, "deprecated BatchNorm_v1: float32-only type check"),
    (NORMALIZATION, "normalisation layer: mean/variance statistics need fp32"),
    (SOFTMAX, "softmax family: exp + normalisation, fp32 for numerical stability"),
    (LOSS_HEADS,
     "legacy loss head whose backward ignores the head gradient: fp32 inputs, loss scale "
     "applied through its scale attribute"),
    (UNSCALABLE_LOSS_HEADS,
     "loss head whose backward ignores the head gradient and has no scale attribute: fp32, "
     "outside loss scaling (prefer MakeLoss)"),
    (KL_SPARSITY_REGULARIZER,
     "sparsity regulariser: keeps a moving average of activations and adds a KL penalty to "
     "the gradient, fp32"),
    (LOSSES, "loss: computed and reduced in fp32"),
    (ELEMWISE_SIMPLE,
     "cheap elementwise op with low-precision kernels (probe_bf16): runs in whatever type "
     "arrives"),
    (EXP_LOG_POW, "exp/log/power family: large dynamic range and error amplification, computed in fp32"),
    (TRANSCENDENTAL,
     "transcendental function with poor accuracy or overflow near its domain edges in "
     "16-bit: fp32"),
    (NUMPY_HYPOT,
     "numpy hypot of two tensors: its type check rejects bf16 (probe_bf16) and the squares "
     "overflow fp16, so fp32"),
    (AROUND,
     "numpy around: the kernel explicitly rejects float16 (probe_bf16), bf16 works, so "
     "fp32 for fp16 only"),
    (ELEMWISE_MULTI_INPUT, "multi-input elementwise op: inputs are cast to the widest float type among them"),
    (COMPARE_MULTI_INPUT, "multi-input comparison/logic: inputs must share one type, result is boolean/0-1"),
    (WHERE,
     "selection between two tensors: data inputs cast to the widest type (condition is "
     "passed through)"),
    (REDUCTIONS,
     "reduction: accumulating many terms in 16 bits loses precision (MXNet 1.x accumulates "
     "in the input type), so fp32"),
    (MAX_MIN, "max/min reductions pick an existing value: exact in any float type"),
    (SORT,
     "sort/argsort: CPU kernels have no fp16/bf16 case (probe_bf16) and sort keys must "
     "stay exact"),
    (DATA_MOVEMENT,
     "data movement / shape op: values copied, not computed; kernel supports the "
     "low-precision dtype (probe_bf16)"),
    (CONCAT,
     "concatenation of several inputs: widest type so mixed fp32/low-precision branches "
     "can be joined"),
    (CROP, "legacy Crop: its type check accepts only float32 (probe_bf16)"),
    (CASTS, "casting op: passes dtypes through untouched (the rewriter's own casts)"),
    (INTEGER_SEMANTICS,
     "integer/boolean semantics (comparisons with a scalar, argmax, top-k, bitwise ops, "
     "counts): inputs never cast"),
    (INDEX_INPUTS,
     "takes integer indices stored as floats: casting them to 16-bit floats would corrupt "
     "indices > 256 (bf16) / 2048 (fp16)"),
    (FP32_INDEX_KERNELS,
     "legacy index op with a float32-only kernel (probe_bf16); its indices must not be "
     "cast to 16-bit"),
    (EMBEDDING,
     "Embedding: data are integer indices (stored as floats) and must not be cast; the "
     "weight gather runs in the weight's type"),
    (SEQUENCE,
     "sequence op with a float 'sequence_length' input holding integers: must not be cast "
     "to 16-bit"),
    (CREATION, "creates a tensor from attributes only (no floating input): nothing to cast"),
    (RANDOM_DENSITY,
     "sampling op or density: distribution parameters (when given as tensors) kept in fp32 "
     "for accurate samples"),
    (IN_PLACE,
     "optimizer/assign op that updates its inputs in place: casting an input would update "
     "a copy, so inputs are never touched"),
    (CONTAINERS,
     "graph container (subgraph / control flow / cached op): the rewriter handles its "
     "body, the node itself is not cast"),
    (CUSTOM, "user-defined Python operator: unknown dtype support, fp32"),
    (UNPREFIXED_BACKWARD,
     "backward op registered without the '_backward_' prefix: it only appears in gradient "
     "graphs, which the rewriter leaves alone"),
    (PROJECT_OPS,
     "this project's ops (libmxnet_amp): the multi-tensor casts and amp_round (emulation "
     "rounding) set dtypes themselves; unscale-and-check updates gradients in place in any "
     "float type"),
    (PROJECT_BATCH_NORM,
     "this project's BatchNorm (libmxnet_amp): runs in its data's dtype with float32 parameters and "
     "statistics; the rewriter puts it in place of BatchNorm in low precision training graphs where the CPU "
     "runs bfloat16 natively (NEUTRAL_KERNELS)"),
    (QUANTIZE, "quantization op: consumes float32 (or int8) by design, fp32"),
    (QUANTIZED, "quantized int8 op: its float inputs are min/max ranges that must stay fp32"),
    (DETECTION,
     "detection/ROI op: box coordinates and scores need fp32 precision; many kernels are "
     "float32-only"),
    (SPATIAL_SAMPLING,
     "spatial sampling/resampling op: coordinate arithmetic needs fp32; kernel "
     "float32-only on CPU for bf16"),
    (FFT, "FFT: GPU-only kernel, float32"),
    (IMAGE,
     "image preprocessing op: runs before the network on whatever type arrives (usually "
     "uint8/float32)"),
    (GRAPH_SAMPLING, "graph-sampling op on integer CSR data: no floating compute"),
)
