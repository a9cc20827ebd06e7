"""Probe MXNet's operator kernels in low precision on this machine: which accept bfloat16 / float16, and
which compute the right values in bfloat16.

Two probes, both running the ops in child processes so that a kernel that kills its process (oneDNN's
bfloat16 ``transpose`` on AVX-512 CPUs, say) only marks that op:

* :func:`probe` (dtype acceptance): every op invoked on small inputs in float32, float16 and bfloat16; an op
  "supports" a dtype when the float32 and the low precision calls both succeed (``unprobed`` when the float32
  call fails). oneDNN is off by default (the native kernels are probed); with ``mkldnn=True`` an op whose
  bf16 call reaches a oneDNN primitive this CPU cannot create (bf16 primitives need AVX-512) is reported as
  ``onednn:...``.
* :func:`probe_values` (values, for CPUs where oneDNN runs bfloat16): each op on bfloat16 inputs with oneDNN
  on, for several shapes and ranks (:data:`VALUE_CASES`) with positive and signed inputs, compared with its
  float32 kernel on the same bfloat16-rounded values; verdicts in :data:`EVIDENCE_VERDICTS`. Its results
  for the ops the bfloat16 lists feed bfloat16 natively are the evidence file
  ``mxnet/amp/lists/native_bf16_cpu.json`` (``tools/probe_bf16.py --values --out ...``).

``python tools/probe_bf16.py`` and ``python -m mxnet.amp hardware --probe`` are the command lines.
"""
import collections
import ctypes
import json
import os
import subprocess
import sys

__all__ = ["SPECS", "VALUE_CASES", "VALUE_TOLERANCE", "EVIDENCE_VERDICTS", "DTYPES", "op_groups", "probe",
           "probe_values"]

DTYPES = ("float32", "float16", "bfloat16")
_BF16 = [("bfloat16", "<u2")]  # numpy spelling of MXNet's bfloat16 dtype

_NCHW = (2, 3, 4, 4)


def _f32(shape):
    """Mark an input that stays float32 whatever the probed dtype (e.g. BatchNorm's gamma)."""
    return ("float32", shape)


def _i32(shape):
    """Mark an integer input (indices) that keeps its dtype whatever the probed dtype."""
    return ("int32", shape)


def _lengths(shape):
    """Mark an input of sequence lengths (whole numbers 1..3, in the probed dtype)."""
    return ("lengths", shape)


_BN = [_NCHW, _f32((3,)), _f32((3,)), _f32((3,)), _f32((3,))]

# Ops that need specific shapes or attributes: name -> (inputs, attrs), or None to skip (fused
# subgraph ops). An input is a shape (created in the probed dtype) or (dtype, shape) to pin its dtype.
# Every other op gets one (2, 3, 4, 4) input per NDArray argument and no attrs.
SPECS = {
    "Activation": ([_NCHW], {"act_type": "relu"}),
    "BatchNorm": (_BN, {}),
    "BatchNorm_v1": (_BN, {}),
    "_contrib_BatchNormWithReLU": (_BN, {}),
    "_contrib_SyncBatchNorm": (_BN, {"key": "probe"}),
    "Concat": ([_NCHW, _NCHW], {"num_args": 2}),
    "Convolution": ([_NCHW, (4, 3, 3, 3), (4,)], {"kernel": (3, 3), "num_filter": 4}),
    "Convolution_v1": ([_NCHW, (4, 3, 3, 3), (4,)], {"kernel": (3, 3), "num_filter": 4}),
    "Embedding": ([(2, 3), (10, 4)], {"input_dim": 10, "output_dim": 4}),
    "_contrib_SparseEmbedding": ([(2, 3), (10, 4)], {"input_dim": 10, "output_dim": 4}),
    "FullyConnected": ([(2, 3), (4, 3), (4,)], {"num_hidden": 4}),
    "GroupNorm": ([_NCHW, (1,), (1,)], {}),
    "InstanceNorm": ([_NCHW, (3,), (3,)], {}),
    "LayerNorm": ([_NCHW, (4,), (4,)], {}),
    "LRN": ([_NCHW], {"nsize": 3}),
    "Pad": ([_NCHW], {"mode": "constant", "pad_width": (0, 0, 0, 0, 1, 1, 1, 1)}),
    "Pooling": ([_NCHW], {"kernel": (2, 2), "pool_type": "max"}),
    "Pooling_v1": ([_NCHW], {"kernel": (2, 2), "pool_type": "max"}),
    "RNN": ([(3, 2, 4), (160,), (1, 2, 4), (1, 2, 4)],
            {"state_size": 4, "num_layers": 1, "mode": "lstm", "state_outputs": False}),
    "SliceChannel": ([_NCHW], {"num_outputs": 3}),
    "UpSampling": ([_NCHW], {"scale": 2, "sample_type": "nearest", "num_args": 1}),
    "SequenceMask": ([(3, 2, 4), _lengths((2,))], {"use_sequence_length": True}),
    "SequenceLast": ([(3, 2, 4), _lengths((2,))], {"use_sequence_length": True}),
    "SequenceReverse": ([(3, 2, 4), _lengths((2,))], {"use_sequence_length": True}),
    "Softmax": ([(2, 3), (2,)], {}),
    "SVMOutput": ([(2, 3), (2,)], {}),
    "LinearRegressionOutput": ([(2, 3), (2, 3)], {}),
    "LogisticRegressionOutput": ([(2, 3), (2, 3)], {}),
    "MAERegressionOutput": ([(2, 3), (2, 3)], {}),
    "CTCLoss": ([(5, 2, 4), (2, 3)], {}),
    "ROIPooling": ([_NCHW, (1, 5)], {"pooled_size": (2, 2), "spatial_scale": 1.0}),
    "_contrib_ROIAlign": ([_NCHW, (1, 5)], {"pooled_size": (2, 2), "spatial_scale": 1.0}),
    "_contrib_AdaptiveAvgPooling2D": ([_NCHW], {"output_size": (2, 2)}),
    "_contrib_BilinearResize2D": ([_NCHW], {"height": 8, "width": 8}),
    "_contrib_interleaved_matmul_selfatt_qk": ([(3, 2, 12)], {"heads": 2}),
    "_contrib_interleaved_matmul_selfatt_valatt": ([(3, 2, 12), (4, 3, 3)], {"heads": 2}),
    "_contrib_interleaved_matmul_encdec_qk": ([(3, 2, 4), (3, 2, 8)], {"heads": 2}),
    "_contrib_interleaved_matmul_encdec_valatt": ([(3, 2, 8), (4, 3, 3)], {"heads": 2}),
    "_contrib_div_sqrt_dim": ([_NCHW], {}),
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
    "_npi_concatenate": ([_NCHW, _NCHW], {"num_args": 2}),
    "_npi_stack": ([_NCHW, _NCHW], {"num_args": 2}),
    "stack": ([_NCHW, _NCHW], {"num_args": 2}),
    "_npi_hstack": ([_NCHW, _NCHW], {"num_args": 2}),
    "_npi_vstack": ([_NCHW, _NCHW], {"num_args": 2}),
    "_npi_dstack": ([_NCHW, _NCHW], {"num_args": 2}),
    "_npi_column_stack": ([(2, 3), (2, 3)], {"num_args": 2}),
    "_np_atleast_1d": ([_NCHW], {"num_args": 1}),
    "_np_atleast_2d": ([_NCHW], {"num_args": 1}),
    "_np_atleast_3d": ([_NCHW], {"num_args": 1}),
    "_npi_rnn_param_concat": ([(2, 3), (2, 3)], {"num_args": 2, "dim": 1}),
    "ElementWiseSum": ([_NCHW, _NCHW], {"num_args": 2}),
    "amp_multicast": ([_NCHW, _NCHW], {"num_outputs": 2}),
    "multi_sum_sq": ([_NCHW, _NCHW], {"num_arrays": 2}),
    "multi_all_finite": ([_NCHW, _NCHW], {"num_arrays": 2}),
    "Crop": ([_NCHW], {"num_args": 1, "h_w": (2, 2)}),
    "_np_moveaxis": ([_NCHW], {"source": (0,), "destination": (1,)}),
    "_np_repeat": ([_NCHW], {"repeats": 2}),
    "_np_reshape": ([_NCHW], {"newshape": (6, 16)}),
    "_npi_reshape": ([_NCHW], {"newshape": (6, 16)}),
    "_npi_clip": ([_NCHW], {"a_min": 0.2, "a_max": 0.5}),
    "_npi_expand_dims": ([_NCHW], {"axis": 0}),
    "expand_dims": ([_NCHW], {"axis": 0}),
    "_npi_flip": ([_NCHW], {"axis": 0}),
    "flip": ([_NCHW], {"axis": 0}),
    "_npi_full_like": ([_NCHW], {"fill_value": 1.0}),
    "_npi_pad": ([_NCHW], {"pad_width": ((0, 0), (0, 0), (1, 1), (1, 1)), "mode": "constant"}),
    "_npi_slice": ([_NCHW], {"begin": (0,), "end": (1,)}),
    "slice_axis": ([_NCHW], {"axis": 0, "begin": 0, "end": 1}),
    "_npi_split": ([_NCHW], {"indices": (0, 1), "axis": 0}),
    "_npi_hsplit": ([_NCHW], {"indices": (0, 1), "axis": 1}),
    "_npi_dsplit": ([_NCHW], {"indices": (0, 1), "axis": 2}),
    "_npi_tile": ([_NCHW], {"reps": (2,)}),
    "_npx_one_hot": ([(2, 3)], {"depth": 4}),
    "_onehot_encode": ([(2,), (2, 4)], {}),
    "depth_to_space": ([(2, 4, 2, 2)], {"block_size": 2}),
    "space_to_depth": ([_NCHW], {"block_size": 2}),
    "im2col": ([_NCHW], {"kernel": (2, 2)}),
    "col2im": ([(2, 12, 9)], {"output_size": (4, 4), "kernel": (2, 2)}),
    "_crop_assign": ([_NCHW, (1, 3, 4, 4)], {"begin": (0,), "end": (1,)}),
    "_crop_assign_scalar": ([_NCHW], {"begin": (0,), "end": (1,), "scalar": 1.0}),
    "Cast": ([_NCHW], {"dtype": "float32"}),
    "amp_cast": ([_NCHW], {"dtype": "float32"}),
    "_image_adjust_lighting": ([(4, 4, 3)], {"alpha": (0.1, 0.1, 0.1)}),
    "_image_crop": ([(4, 4, 3)], {"x": 0, "y": 0, "width": 2, "height": 2}),
    "_image_to_tensor": ([(4, 4, 3)], {}),
    "_image_normalize": ([(3, 4, 4)], {}),
    "_image_flip_left_right": ([(4, 4, 3)], {}),
    "_image_flip_top_bottom": ([(4, 4, 3)], {}),
    "_image_resize": ([(4, 4, 3)], {"size": (2, 2)}),
    "L2Normalization": ([_NCHW], {}),
    "_npi_boolean_mask_assign_scalar": ([_NCHW, ("bool", _NCHW)], {"value": 1.0}),
    "_npx_pick": ([(2, 3), (2,)], {}),
    "_npi_take": ([(4, 3), (2,)], {}),
    "batch_take": ([(2, 3), _i32((2,))], {}),
    "fill_element_0index": ([(2, 3), (2,), (2,)], {}),
    "_npi_insert_scalar": ([(4,)], {"val": 1.0, "int_ind": 1}),
    "_npi_boolean_mask_assign_tensor": ([(2, 3), ("bool", (2, 3)), (1,)], {}),
    "_npi_gather_nd": ([(4, 3), (1, 2)], {}),
    "scatter_nd": ([(2,), (1, 2)], {"shape": (4,)}),
    "_npi_scatter_set_nd": ([(4,), (2,), (1, 2)], {"shape": (4,)}),
    "_npx_topk": ([(2, 5)], {"k": 2}),
    "_npi_where": ([_NCHW, _NCHW, _NCHW], {}),
    "_sparse_where": ([_NCHW, _NCHW, _NCHW], {}),
    "_npi_where_lscalar": ([_NCHW, _NCHW], {"scalar": 1.0}),
    "_npi_where_rscalar": ([_NCHW, _NCHW], {"scalar": 1.0}),
    "_npi_where_scalar2": ([_NCHW], {"x": 1.0, "y": 2.0}),
    "_npi_diff": ([(5,)], {}),
    "_npi_ediff1d": ([(5,)], {}),
    "_npi_polyval": ([(3,), (4,)], {}),
    "_contrib_box_iou": ([(3, 4), (2, 4)], {}),
    "_contrib_box_nms": ([(4, 6)], {}),
    "_contrib_index_copy": ([(4, 3), (2,), (2, 3)], {}),
    "_contrib_count_sketch": ([(2, 4), (4,), (4,)], {"out_dim": 3}),
    "GridGenerator": ([(2, 6)], {"transform_type": "affine", "target_shape": (4, 4)}),
    "BilinearSampler": ([_NCHW, (2, 2, 4, 4)], {}),
    "SpatialTransformer": ([_NCHW, (2, 6)], {"transform_type": "affine", "sampler_type": "bilinear",
                                              "target_shape": (4, 4)}),
    "Deconvolution": ([_NCHW, (3, 4, 3, 3)], {"kernel": (3, 3), "num_filter": 4}),
    "LeakyReLU": ([_NCHW], {"act_type": "leaky"}),
    "Reshape": ([_NCHW], {"shape": (6, 16)}),
    "_npx_softmax": ([(2, 3)], {}),
    "softmax_cross_entropy": ([(2, 3), (2,)], {}),
    "_np_roll": ([_NCHW], {"shift": 1}),
    "_np_diag": ([(3, 3)], {}),
    "moments": ([_NCHW], {"axes": (0,)}),
    "broadcast_to": ([(1, 3)], {"shape": (2, 3)}),
    "_npi_broadcast_to": ([(1, 3)], {"shape": (2, 3)}),
    "_npi_rot90": ([(3, 3)], {"axes": (0, 1)}),
    "_contrib_boolean_mask": ([(3, 2), (3,)], {}),
    "_sg_mkldnn_conv": None,
    "_sg_mkldnn_fully_connected": None,
}


# Extra input shapes for the value probe: (inputs, attrs) per case, on top of SPECS (or the default input).
# Channel counts of 16 and more put oneDNN's outputs in blocked layouts, which small shapes never reach.
_BIG = (1, 16, 8, 8)
VALUE_CASES = {
    "Activation": [([_BIG], {"act_type": "relu"}), ([_BIG], {"act_type": "sigmoid"}),
                   ([(16, 32)], {"act_type": "tanh"})],
    "BatchNorm": [([_BIG] + [_f32((16,))] * 4, {}), ([(4, 16, 5)] + [_f32((16,))] * 4, {})],
    "Concat": [([_BIG, _BIG], {"num_args": 2, "dim": 1}), ([(16, 32), (16, 8)], {"num_args": 2, "dim": 1})],
    "Convolution": [([_BIG, (32, 16, 3, 3), (32,)], {"kernel": (3, 3), "num_filter": 32, "pad": (1, 1)}),
                    ([_BIG, (16, 1, 3, 3), (16,)], {"kernel": (3, 3), "num_filter": 16, "num_group": 16}),
                    ([(2, 16, 9), (8, 16, 3), (8,)], {"kernel": (3,), "num_filter": 8})],
    "Deconvolution": [([_BIG, (16, 8, 2, 2)], {"kernel": (2, 2), "stride": (2, 2), "num_filter": 8})],
    "FullyConnected": [([(16, 64), (32, 64), (32,)], {"num_hidden": 32}),
                       ([(2, 5, 64), (32, 64), (32,)], {"num_hidden": 32, "flatten": False})],
    "LeakyReLU": [([_BIG], {"act_type": "leaky"}), ([_BIG], {"act_type": "elu"}), ([_BIG], {"act_type": "gelu"})],
    "LRN": [([_BIG], {"nsize": 5})],
    "Pooling": [([_BIG], {"kernel": (2, 2), "stride": (2, 2), "pool_type": "max"}),
                ([_BIG], {"kernel": (3, 3), "pad": (1, 1), "pool_type": "avg"}),
                ([_BIG], {"global_pool": True, "kernel": (1, 1), "pool_type": "avg"})],
    "transpose": [([(2, 3, 4, 5)], {"axes": (0, 2, 1, 3)}), ([(16, 32)], {"axes": (1, 0)}),
                  ([(1, 64, 8, 8)], {"axes": (0, 2, 3, 1)})],
    "Reshape": [([_BIG], {"shape": (0, -1)})],
    "Flatten": [([_BIG], {})],
    "_np_transpose": [([(2, 3, 4, 5)], {"axes": (0, 2, 1, 3)}), ([_BIG], {"axes": (0, 2, 3, 1)})],
    "SwapAxis": [([(2, 3, 4, 5)], {"dim1": 1, "dim2": 2}), ([_BIG], {"dim1": 1, "dim2": 3})],
}
EVIDENCE_VERDICTS = {
    "ok": "matches the float32 kernel on the same bfloat16 values (within the run's tolerance)",
    "mismatch": "deviates more than the tolerance (or the output shape differs)",
    "error": "raises on bfloat16 inputs", "crash": "kills the process", "hang": "stops answering",
    "skip": "no case with a valid float32 call: nothing to compare"}
#: Largest relative deviation from the float32 kernel on the same bfloat16 values that passes.
VALUE_TOLERANCE = 2e-2
_DEFAULT_SHAPES = (_NCHW, _BIG, (16, 32), (2, 3, 5))


def op_groups():
    """Return a list of alias groups (first name is the probed one) of forward ops."""
    import mxnet as mx
    from mxnet.base import _LIB, c_str, check_call
    groups = collections.OrderedDict()
    for name in sorted(mx.operator.get_all_registered_operators()):
        if name.startswith("_backward"):
            continue
        handle = ctypes.c_void_p()
        check_call(_LIB.NNGetOpHandle(c_str(name), ctypes.byref(handle)))
        groups.setdefault(handle.value, []).append(name)
    return list(groups.values())


def _spec(group):
    """Return (inputs, attrs) for an alias group, or None when the op needs attrs SPECS lacks."""
    import mxnet as mx
    for name in group:
        if name in SPECS:
            return SPECS[name]
    args = mx.operator.get_operator_arguments(group[0])
    if any("required" in t for t in args.types):
        return None
    n_in = sum(t.startswith("NDArray") for t in args.types)
    return [_NCHW] * max(n_in, 1), {}


def _invoke(name, shapes, attrs, dtype):
    """Run op ``name`` once with inputs in ``dtype``; return the output dtype names."""
    import numpy as np
    import mxnet as mx
    from mxnet.base import _LIB, OpHandle, c_str, check_call
    from mxnet.ndarray._internal import _imperative_invoke
    rng = np.random.RandomState(0)
    target = np.dtype(_BF16) if dtype == "bfloat16" else dtype
    inputs = []
    for shape in shapes:
        in_dtype, shape = shape if isinstance(shape[0], str) else (target, shape)
        values = mx.nd.array(rng.uniform(0.1, 0.9, shape))
        if in_dtype == "lengths":
            in_dtype, values = target, mx.nd.array(rng.randint(1, 4, shape))
        if in_dtype in ("int32", "bool"):
            inputs.append(values.astype(in_dtype))
        else:
            inputs.append(mx.nd.amp_cast(values, dtype=in_dtype))
    handle = OpHandle()
    check_call(_LIB.NNGetOpHandle(c_str(name), ctypes.byref(handle)))
    keys = list(attrs)
    vals = [str(v) for v in attrs.values()]
    out = _imperative_invoke(handle.value, inputs, keys, vals, None, False, True)
    outs = out if isinstance(out, (list, tuple)) else [out]
    for o in outs:
        o.wait_to_read()
    return ["bfloat16" if o.dtype == np.dtype(_BF16) else np.dtype(o.dtype).name for o in outs]


def _first_error_line(err):
    """The informative line of an MXNet error message (they start with a C++ traceback)."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    for line in lines:
        if "Check failed" in line or ("Error" in line and not line.startswith("Traceback")):
            return line[:200]
    return lines[-1][:200] if lines else type(err).__name__


def _child(names):
    """Probe each alias group named on the command line, one JSON line per op."""
    groups = {g[0]: g for g in op_groups()}
    for name in names:
        spec = _spec(groups[name])
        row = {"op": name}
        if spec is None:
            row.update({d: "unprobed" for d in DTYPES})
        else:
            for dtype in DTYPES:
                try:
                    row[dtype] = "ok:" + ",".join(_invoke(name, spec[0], spec[1], dtype))
                except Exception as err:  # any MXNetError/TypeError is a result here
                    line = _first_error_line(err)
                    # oneDNN took the op but this CPU lacks the ISA (bf16 primitives need AVX-512)
                    row[dtype] = ("onednn:" if "primitive descriptor" in line else "error:") + line
            if not row["float32"].startswith("ok"):
                row.update({d: "unprobed" for d in DTYPES[1:]})
        print(json.dumps(row), flush=True)


def _arrays(shapes, dtype, signed, seed):
    """Inputs for one call: (bfloat16 inputs, float32 inputs holding the same values).

    Values are uniform in (0.1, 0.9), the first input's in (-0.9, 0.9) when ``signed``."""
    import numpy as np
    import mxnet as mx
    rng = np.random.RandomState(seed)
    low, ref = [], []
    for k, shape in enumerate(shapes):
        in_dtype, shape = shape if isinstance(shape[0], str) else (dtype, shape)
        # signed values for the data (first input) only: others may be lengths, indices or scales
        values = mx.nd.array(rng.uniform(-0.9 if signed and k == 0 else 0.1, 0.9, shape))
        if in_dtype == "lengths":
            in_dtype, values = dtype, mx.nd.array(rng.randint(1, 4, shape))
        if in_dtype in ("int32", "bool"):
            low.append(values.astype(in_dtype))
            ref.append(low[-1])
        elif in_dtype == "float32":
            low.append(values)
            ref.append(values)
        else:
            low.append(mx.nd.amp_cast(values, dtype=np.dtype(_BF16)))
            ref.append(mx.nd.amp_cast(low[-1], dtype="float32"))
    return low, ref


def _call(name, inputs, attrs):
    """Run op ``name`` on ``inputs``; return its outputs as float64 NumPy arrays (bfloat16 read via amp_cast)."""
    import numpy as np
    import mxnet as mx
    from mxnet.base import OpHandle, c_str, check_call, _LIB
    from mxnet.ndarray._internal import _imperative_invoke
    handle = OpHandle()
    check_call(_LIB.NNGetOpHandle(c_str(name), ctypes.byref(handle)))
    mx.random.seed(0)
    out = _imperative_invoke(handle.value, inputs, list(attrs), [str(v) for v in attrs.values()], None, False,
                             True)
    outs = out if isinstance(out, (list, tuple)) else [out]
    result = []
    for o in outs:
        if o.dtype == np.dtype(_BF16):  # amp_cast infers no shape for 0-d arrays
            o = mx.nd.amp_cast(o.reshape((1,)) if o.ndim == 0 else o, dtype="float32").reshape(o.shape)
        result.append(o.asnumpy().astype(np.float64))
    return result


def _value_cases(group):
    """(inputs, attrs) cases for an alias group: SPECS' (or the default) plus VALUE_CASES."""
    import mxnet as mx
    spec = _spec(group)
    if spec is None:
        return []
    cases = [spec]
    if not any(name in SPECS for name in group):
        args = mx.operator.get_operator_arguments(group[0])
        n_in = max(sum(t.startswith("NDArray") for t in args.types), 1)
        cases = [([shape] * n_in, {}) for shape in _DEFAULT_SHAPES]
    return cases + [c for name in group for c in VALUE_CASES.get(name, ())]


def _value_child(names):
    """Value-probe each alias group named on the command line: one JSON line per op, after a start line."""
    import numpy as np
    groups = {g[0]: g for g in op_groups()}
    for name in names:
        print(json.dumps({"start": name}), flush=True)
        row, worst, checked = {"op": name}, 0.0, 0
        for case, (shapes, attrs) in enumerate(_value_cases(groups[name])):
            for signed in (False, True):
                low, ref = _arrays(shapes, "bfloat16", signed, case)
                try:
                    expected = _call(name, ref, attrs)
                except Exception:  # no valid float32 call for this case: nothing to compare
                    continue
                if not all(np.isfinite(e).all() for e in expected):
                    continue
                try:
                    got = _call(name, low, attrs)
                except Exception as err:
                    row.update(verdict="error", why=_first_error_line(err))
                    break
                checked += 1
                for g, e in zip(got, expected):
                    if g.shape != e.shape:
                        row.update(verdict="mismatch", why="shape %s, float32 %s" % (g.shape, e.shape))
                        break
                    scale = max(float(np.abs(e).max()), 1e-30) if e.size else 1.0
                    worst = max(worst, float(np.abs(g - e).max()) / scale if e.size else 0.0)
            if "verdict" in row:
                break
        if "verdict" not in row:
            if not checked:
                row.update(verdict="skip", why="no case with a valid float32 call")
            else:
                row.update(verdict="ok" if worst <= VALUE_TOLERANCE else "mismatch", rel=worst)
        row["cases"] = checked
        print(json.dumps(row), flush=True)


def probe_values(names, batch=25, timeout=300):
    """Value-probe ops ``names`` in child processes (oneDNN on); return ``{name: row}``.

    Aliases of one operator are probed once. A row has ``verdict`` (:data:`EVIDENCE_VERDICTS`), ``cases``
    (calls compared), ``rel`` (the largest relative deviation) or ``why``.
    """
    canonical = {name: group[0] for group in op_groups() for name in group}
    unknown = sorted(set(names) - set(canonical))
    if unknown:
        raise ValueError("not registered forward operators: %s" % ", ".join(unknown))
    rows = _probe_canonical(sorted({canonical[n] for n in names}), batch, timeout)
    return {name: {k: v for k, v in rows[canonical[name]].items() if k != "op"} for name in names}


def _probe_canonical(names, batch, timeout):
    env = dict(os.environ, MXNET_MKLDNN_ENABLED="1", OMP_NUM_THREADS="1")
    results, pending = {}, list(names)
    while pending:
        chunk, pending = pending[:batch], pending[batch:]
        started, lines = None, []
        try:
            proc = subprocess.run([sys.executable, "-m", __name__, "--value-child", ",".join(chunk)], env=env,
                                  capture_output=True, text=True, check=False, timeout=timeout)
            lines, failure = proc.stdout.splitlines(), "crash"
            why = "exit %d: %s" % (proc.returncode, (proc.stderr.strip().splitlines() or ["?"])[-1][:160])
        except subprocess.TimeoutExpired as err:
            out = err.stdout.decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
            lines, failure, why = out.splitlines(), "hang", "no answer within %d s" % timeout
        for line in lines:
            if line.startswith("{"):
                row = json.loads(line)
                if "start" in row:
                    started = row["start"]
                else:
                    results[row["op"]] = row
        started = started if started is not None else chunk[0]  # died before its first op: blame that one
        if started not in results:  # the child died (or hung) in this op
            results[started] = {"op": started, "verdict": failure, "why": why, "cases": 0}
        pending = [n for n in chunk if n not in results] + pending
    return results


def probe(names, mkldnn=False, batch=40):
    """Run the probe for ``names`` in child processes; return ``{op: row}``."""
    env = dict(os.environ, MXNET_MKLDNN_ENABLED="1" if mkldnn else "0", OMP_NUM_THREADS="1")
    results = {}
    pending = list(names)
    while pending:
        chunk, pending = pending[:batch], pending[batch:]
        proc = subprocess.run([sys.executable, "-m", __name__, "--child", ",".join(chunk)],
                              env=env, capture_output=True, text=True, check=False, timeout=600)
        for line in proc.stdout.splitlines():
            if line.startswith("{"):
                row = json.loads(line)
                results[row["op"]] = row
        done = [n for n in chunk if n in results]
        if len(done) < len(chunk):          # the child died on chunk[len(done)]
            crashed = chunk[len(done)]
            results[crashed] = {"op": crashed, "float32": "crash", "float16": "crash",
                                "bfloat16": "crash"}
            pending = chunk[len(done) + 1:] + pending
    return results


if __name__ == "__main__":  # a child process of probe() / probe_values()
    {"--child": _child, "--value-child": _value_child}[sys.argv[1]](sys.argv[2].split(","))
