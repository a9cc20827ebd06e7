"""The probe's cases as data: the inputs and attributes each operator is invoked with (:data:`SPECS`), the extra
shapes of the value probe (:data:`VALUE_CASES`), and its verdicts and tolerance. Read by :mod:`.probe`."""

__all__ = ["DTYPES", "NCHW", "DEFAULT_SHAPES", "SPECS", "VALUE_CASES", "EVIDENCE_VERDICTS", "VALUE_TOLERANCE",
           "lengths"]

DTYPES = ("float32", "float16", "bfloat16")
NCHW = (2, 3, 4, 4)


def f32(shape):
    """Mark an input that stays float32 whatever the probed dtype (e.g. BatchNorm's gamma)."""
    return ("float32", shape)


def i32(shape):
    """Mark an integer input (indices) that keeps its dtype whatever the probed dtype."""
    return ("int32", shape)


def lengths(shape):
    """Mark an input of sequence lengths (whole numbers 1..3, in the probed dtype)."""
    return ("lengths", shape)


BN = [NCHW, f32((3,)), f32((3,)), f32((3,)), f32((3,))]

# Ops that need specific shapes or attributes: name -> (inputs, attrs), or None to skip (fused
# subgraph ops). An input is a shape (created in the probed dtype) or (dtype, shape) to pin its dtype.
# Every other op gets one (2, 3, 4, 4) input per NDArray argument and no attrs.
SPECS = {
    "Activation": ([NCHW], {"act_type": "relu"}),
    "BatchNorm": (BN, {}),
    "BatchNorm_v1": (BN, {}),
    "_contrib_BatchNormWithReLU": (BN, {}),
    "_contrib_SyncBatchNorm": (BN, {"key": "probe"}),
    "Concat": ([NCHW, NCHW], {"num_args": 2}),
    "Convolution": ([NCHW, (4, 3, 3, 3), (4,)], {"kernel": (3, 3), "num_filter": 4}),
    "Convolution_v1": ([NCHW, (4, 3, 3, 3), (4,)], {"kernel": (3, 3), "num_filter": 4}),
    "Embedding": ([(2, 3), (10, 4)], {"input_dim": 10, "output_dim": 4}),
    "_contrib_SparseEmbedding": ([(2, 3), (10, 4)], {"input_dim": 10, "output_dim": 4}),
    "FullyConnected": ([(2, 3), (4, 3), (4,)], {"num_hidden": 4}),
    "GroupNorm": ([NCHW, (1,), (1,)], {}),
    "InstanceNorm": ([NCHW, (3,), (3,)], {}),
    "LayerNorm": ([NCHW, (4,), (4,)], {}),
    "LRN": ([NCHW], {"nsize": 3}),
    "Pad": ([NCHW], {"mode": "constant", "pad_width": (0, 0, 0, 0, 1, 1, 1, 1)}),
    "Pooling": ([NCHW], {"kernel": (2, 2), "pool_type": "max"}),
    "Pooling_v1": ([NCHW], {"kernel": (2, 2), "pool_type": "max"}),
    "RNN": ([(3, 2, 4), (160,), (1, 2, 4), (1, 2, 4)],
            {"state_size": 4, "num_layers": 1, "mode": "lstm", "state_outputs": False}),
    "SliceChannel": ([NCHW], {"num_outputs": 3}),
    "UpSampling": ([NCHW], {"scale": 2, "sample_type": "nearest", "num_args": 1}),
    "SequenceMask": ([(3, 2, 4), lengths((2,))], {"use_sequence_length": True}),
    "SequenceLast": ([(3, 2, 4), lengths((2,))], {"use_sequence_length": True}),
    "SequenceReverse": ([(3, 2, 4), lengths((2,))], {"use_sequence_length": True}),
    "Softmax": ([(2, 3), (2,)], {}),
    "SVMOutput": ([(2, 3), (2,)], {}),
    "LinearRegressionOutput": ([(2, 3), (2, 3)], {}),
    "LogisticRegressionOutput": ([(2, 3), (2, 3)], {}),
    "MAERegressionOutput": ([(2, 3), (2, 3)], {}),
    "CTCLoss": ([(5, 2, 4), (2, 3)], {}),
    "ROIPooling": ([NCHW, (1, 5)], {"pooled_size": (2, 2), "spatial_scale": 1.0}),
    "_contrib_ROIAlign": ([NCHW, (1, 5)], {"pooled_size": (2, 2), "spatial_scale": 1.0}),
    "_contrib_AdaptiveAvgPooling2D": ([NCHW], {"output_size": (2, 2)}),
    "_contrib_BilinearResize2D": ([NCHW], {"height": 8, "width": 8}),
    "_contrib_interleaved_matmul_selfatt_qk": ([(3, 2, 12)], {"heads": 2}),
    "_contrib_interleaved_matmul_selfatt_valatt": ([(3, 2, 12), (4, 3, 3)], {"heads": 2}),
    "_contrib_interleaved_matmul_encdec_qk": ([(3, 2, 4), (3, 2, 8)], {"heads": 2}),
    "_contrib_interleaved_matmul_encdec_valatt": ([(3, 2, 8), (4, 3, 3)], {"heads": 2}),
    "_contrib_div_sqrt_dim": ([NCHW], {}),
    "_npi_matmul": ([(2, 3), (3, 4)], {}),
    "_np_dot": ([(2, 3), (3, 4)], {}),
    "_sparse_dot": ([(2, 3), (3, 4)], {}),
    "_npx_batch_dot": ([(2, 2, 3), (2, 3, 4)], {}),
    "_npi_einsum": ([(2, 3), (3, 4)], {"num_args": 2, "subscripts": "ij,jk->ik"}),
    "_npi_tensordot": ([(2, 3), (3, 4)], {"a_axes_summed": (1,), "b_axes_summed": (0,)}),
    "_npi_tensordot_int_axes": ([(2, 3), (3, 4)], {"axes": 1}),
    "_linalg_gemm": ([(2, 3), (3, 4), (2, 4)], {}),
    "_linalg_gemm2": ([(2, 3), (3, 4)], {}),
    "khatri_rao": ([(2, 3), (4, 3)], {"num_args": 2}),
    "_npi_concatenate": ([NCHW, NCHW], {"num_args": 2}),
    "_npi_stack": ([NCHW, NCHW], {"num_args": 2}),
    "stack": ([NCHW, NCHW], {"num_args": 2}),
    "_npi_hstack": ([NCHW, NCHW], {"num_args": 2}),
    "_npi_vstack": ([NCHW, NCHW], {"num_args": 2}),
    "_npi_dstack": ([NCHW, NCHW], {"num_args": 2}),
    "_npi_column_stack": ([(2, 3), (2, 3)], {"num_args": 2}),
    "_np_atleast_1d": ([NCHW], {"num_args": 1}),
    "_np_atleast_2d": ([NCHW], {"num_args": 1}),
    "_np_atleast_3d": ([NCHW], {"num_args": 1}),
    "_npi_rnn_param_concat": ([(2, 3), (2, 3)], {"num_args": 2, "dim": 1}),
    "ElementWiseSum": ([NCHW, NCHW], {"num_args": 2}),
    "amp_multicast": ([NCHW, NCHW], {"num_outputs": 2}),
    "multi_sum_sq": ([NCHW, NCHW], {"num_arrays": 2}),
    "multi_all_finite": ([NCHW, NCHW], {"num_arrays": 2}),
    "Crop": ([NCHW], {"num_args": 1, "h_w": (2, 2)}),
    "_np_moveaxis": ([NCHW], {"source": (0,), "destination": (1,)}),
    "_np_repeat": ([NCHW], {"repeats": 2}),
    "_np_reshape": ([NCHW], {"newshape": (6, 16)}),
    "_npi_reshape": ([NCHW], {"newshape": (6, 16)}),
    "_npi_clip": ([NCHW], {"a_min": 0.2, "a_max": 0.5}),
    "_npi_expand_dims": ([NCHW], {"axis": 0}),
    "expand_dims": ([NCHW], {"axis": 0}),
    "_npi_flip": ([NCHW], {"axis": 0}),
    "flip": ([NCHW], {"axis": 0}),
    "_npi_full_like": ([NCHW], {"fill_value": 1.0}),
    "_npi_pad": ([NCHW], {"pad_width": ((0, 0), (0, 0), (1, 1), (1, 1)), "mode": "constant"}),
    "_npi_slice": ([NCHW], {"begin": (0,), "end": (1,)}),
    "slice_axis": ([NCHW], {"axis": 0, "begin": 0, "end": 1}),
    "_npi_split": ([NCHW], {"indices": (0, 1), "axis": 0}),
    "_npi_hsplit": ([NCHW], {"indices": (0, 1), "axis": 1}),
    "_npi_dsplit": ([NCHW], {"indices": (0, 1), "axis": 2}),
    "_npi_tile": ([NCHW], {"reps": (2,)}),
    "_npx_one_hot": ([(2, 3)], {"depth": 4}),
    "_onehot_encode": ([(2,), (2, 4)], {}),
    "depth_to_space": ([(2, 4, 2, 2)], {"block_size": 2}),
    "space_to_depth": ([NCHW], {"block_size": 2}),
    "im2col": ([NCHW], {"kernel": (2, 2)}),
    "col2im": ([(2, 12, 9)], {"output_size": (4, 4), "kernel": (2, 2)}),
    "_crop_assign": ([NCHW, (1, 3, 4, 4)], {"begin": (0,), "end": (1,)}),
    "_crop_assign_scalar": ([NCHW], {"begin": (0,), "end": (1,), "scalar": 1.0}),
    "Cast": ([NCHW], {"dtype": "float32"}),
    "amp_cast": ([NCHW], {"dtype": "float32"}),
    "_image_adjust_lighting": ([(4, 4, 3)], {"alpha": (0.1, 0.1, 0.1)}),
    "_image_crop": ([(4, 4, 3)], {"x": 0, "y": 0, "width": 2, "height": 2}),
    "_image_to_tensor": ([(4, 4, 3)], {}),
    "_image_normalize": ([(3, 4, 4)], {}),
    "_image_flip_left_right": ([(4, 4, 3)], {}),
    "_image_flip_top_bottom": ([(4, 4, 3)], {}),
    "_image_resize": ([(4, 4, 3)], {"size": (2, 2)}),
    "L2Normalization": ([NCHW], {}),
    "_npi_boolean_mask_assign_scalar": ([NCHW, ("bool", NCHW)], {"value": 1.0}),
    "_npx_pick": ([(2, 3), (2,)], {}),
    "_npi_take": ([(4, 3), (2,)], {}),
    "batch_take": ([(2, 3), i32((2,))], {}),
    "fill_element_0index": ([(2, 3), (2,), (2,)], {}),
    "_npi_insert_scalar": ([(4,)], {"val": 1.0, "int_ind": 1}),
    "_npi_boolean_mask_assign_tensor": ([(2, 3), ("bool", (2, 3)), (1,)], {}),
    "_npi_gather_nd": ([(4, 3), (1, 2)], {}),
    "scatter_nd": ([(2,), (1, 2)], {"shape": (4,)}),
    "_npi_scatter_set_nd": ([(4,), (2,), (1, 2)], {"shape": (4,)}),
    "_npx_topk": ([(2, 5)], {"k": 2}),
    "_npi_where": ([NCHW, NCHW, NCHW], {}),
    "_sparse_where": ([NCHW, NCHW, NCHW], {}),
    "_npi_where_lscalar": ([NCHW, NCHW], {"scalar": 1.0}),
    "_npi_where_rscalar": ([NCHW, NCHW], {"scalar": 1.0}),
    "_npi_where_scalar2": ([NCHW], {"x": 1.0, "y": 2.0}),
    "_npi_diff": ([(5,)], {}),
    "_npi_ediff1d": ([(5,)], {}),
    "_npi_polyval": ([(3,), (4,)], {}),
    "_contrib_box_iou": ([(3, 4), (2, 4)], {}),
    "_contrib_box_nms": ([(4, 6)], {}),
    "_contrib_index_copy": ([(4, 3), (2,), (2, 3)], {}),
    "_contrib_count_sketch": ([(2, 4), (4,), (4,)], {"out_dim": 3}),
    "GridGenerator": ([(2, 6)], {"transform_type": "affine", "target_shape": (4, 4)}),
    "BilinearSampler": ([NCHW, (2, 2, 4, 4)], {}),
    "SpatialTransformer": ([NCHW, (2, 6)], {"transform_type": "affine", "sampler_type": "bilinear",
                                            "target_shape": (4, 4)}),
    "Deconvolution": ([NCHW, (3, 4, 3, 3)], {"kernel": (3, 3), "num_filter": 4}),
    "LeakyReLU": ([NCHW], {"act_type": "leaky"}),
    "Reshape": ([NCHW], {"shape": (6, 16)}),
    "_npx_softmax": ([(2, 3)], {}),
    "softmax_cross_entropy": ([(2, 3), (2,)], {}),
    "_np_roll": ([NCHW], {"shift": 1}),
    "_np_diag": ([(3, 3)], {}),
    "moments": ([NCHW], {"axes": (0,)}),
    "broadcast_to": ([(1, 3)], {"shape": (2, 3)}),
    "_npi_broadcast_to": ([(1, 3)], {"shape": (2, 3)}),
    "_npi_rot90": ([(3, 3)], {"axes": (0, 1)}),
    "_contrib_boolean_mask": ([(3, 2), (3,)], {}),
    "_sg_mkldnn_conv": None,
    "_sg_mkldnn_fully_connected": None,
}


# Extra input shapes for the value probe: (inputs, attrs) per case, on top of SPECS (or the default input).
# Channel counts of 16 and more put oneDNN's outputs in blocked layouts, which small shapes never reach.
BIG = (1, 16, 8, 8)
VALUE_CASES = {
    "Activation": [([BIG], {"act_type": "relu"}), ([BIG], {"act_type": "sigmoid"}),
                   ([(16, 32)], {"act_type": "tanh"})],
    "BatchNorm": [([BIG] + [f32((16,))] * 4, {}), ([(4, 16, 5)] + [f32((16,))] * 4, {})],
    "Concat": [([BIG, BIG], {"num_args": 2, "dim": 1}), ([(16, 32), (16, 8)], {"num_args": 2, "dim": 1})],
    "Convolution": [([BIG, (32, 16, 3, 3), (32,)], {"kernel": (3, 3), "num_filter": 32, "pad": (1, 1)}),
                    ([BIG, (16, 1, 3, 3), (16,)], {"kernel": (3, 3), "num_filter": 16, "num_group": 16}),
                    ([(2, 16, 9), (8, 16, 3), (8,)], {"kernel": (3,), "num_filter": 8})],
    "Deconvolution": [([BIG, (16, 8, 2, 2)], {"kernel": (2, 2), "stride": (2, 2), "num_filter": 8})],
    "FullyConnected": [([(16, 64), (32, 64), (32,)], {"num_hidden": 32}),
                       ([(2, 5, 64), (32, 64), (32,)], {"num_hidden": 32, "flatten": False})],
    "LeakyReLU": [([BIG], {"act_type": "leaky"}), ([BIG], {"act_type": "elu"}), ([BIG], {"act_type": "gelu"})],
    "LRN": [([BIG], {"nsize": 5})],
    "Pooling": [([BIG], {"kernel": (2, 2), "stride": (2, 2), "pool_type": "max"}),
                ([BIG], {"kernel": (3, 3), "pad": (1, 1), "pool_type": "avg"}),
                ([BIG], {"global_pool": True, "kernel": (1, 1), "pool_type": "avg"})],
    "transpose": [([(2, 3, 4, 5)], {"axes": (0, 2, 1, 3)}), ([(16, 32)], {"axes": (1, 0)}),
                  ([(1, 64, 8, 8)], {"axes": (0, 2, 3, 1)})],
    "Reshape": [([BIG], {"shape": (0, -1)})],
    "Flatten": [([BIG], {})],
    "_np_transpose": [([(2, 3, 4, 5)], {"axes": (0, 2, 1, 3)}), ([BIG], {"axes": (0, 2, 3, 1)})],
    "SwapAxis": [([(2, 3, 4, 5)], {"dim1": 1, "dim2": 2}), ([BIG], {"dim1": 1, "dim2": 3})],
}
EVIDENCE_VERDICTS = {
    "ok": "matches the float32 kernel on the same bfloat16 values (within the run's tolerance)",
    "mismatch": "deviates more than the tolerance (or the output shape differs)",
    "error": "raises on bfloat16 inputs", "crash": "kills the process", "hang": "stops answering",
    "skip": "no case with a valid float32 call: nothing to compare"}
#: Largest relative deviation from the float32 kernel on the same bfloat16 values that passes.
VALUE_TOLERANCE = 2e-2
DEFAULT_SHAPES = (NCHW, BIG, (16, 32), (2, 3, 5))
