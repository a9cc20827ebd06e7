"""Tests for mxnet.amp.lists: every registered forward op classified once per dtype, sound choices."""
import collections
import ctypes
import json
import os
import subprocess
import sys
import types

import numpy as np
import pytest

import mxnet as mx
import mxnet.amp  # noqa: F401  (loads the extension library: its ops must be registered first)
from mxnet.amp import lists
from mxnet.amp.base.registry import op_handle
from mxnet.amp.core import library
from mxnet.amp.lists import bfloat16, float16, groups

from amp_testing import mxnet_onednn_runs_bf16

MODULES = {"float16": float16, "bfloat16": bfloat16}
DTYPES = tuple(MODULES)
_TUPLES = ("LP16", "FP32", "NEUTRAL", "WIDEST", "LOSS_OUTPUT")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


CUDA_BUILD = mx.runtime.Features().is_enabled("CUDA")


def registered_forward_ops():
    """Forward ops computed here, independently of the package: MXNet's registry + the project's ops, and on
    a CPU build the ops only CUDA builds register (the lists serve both wheels)."""
    ops = {op for op in mx.operator.get_all_registered_operators() if not op.startswith("_backward")}
    return ops | set(library.OP_NAMES) | (set() if CUDA_BUILD else set(groups.GPU_BUILD_ONLY))


def test_gpu_build_only_ops_are_exactly_those_this_build_lacks_or_has():
    # on the CPU wheel none is registered, on a CUDA wheel all are: a stale GPU_BUILD_ONLY fails one of the two
    registry = set(mx.operator.get_all_registered_operators())
    present = registry & set(groups.GPU_BUILD_ONLY)
    assert present == (set(groups.GPU_BUILD_ONLY) if CUDA_BUILD else set()), (CUDA_BUILD, sorted(present))
    for dtype in DTYPES:
        assert lists.category("_FusedOp", dtype) == "neutral" and lists.category("CuDNNBatchNorm", dtype) == "fp32"
        assert lists.category("_contrib_mrcnn_mask_target", dtype) == "fp32"
        assert "fusion" in lists.reason("_FusedOp", dtype) and "cuDNN >= 5" in lists.reason("CuDNNBatchNorm", dtype)


def listed_names(module):
    """Every name a dtype module lists, one entry per appearance (an op with several conditional
    entries counts once)."""
    names = [name for attr in _TUPLES for name in getattr(module, attr)]
    return names + sorted({op for op, _, _ in module.CONDITIONAL_FP32})


def coverage_problems(module, registered):
    """Return {'missing': [...], 'duplicated': [...], 'unregistered': [...]} for a dtype module."""
    counts = collections.Counter(listed_names(module))
    return {
        "missing": sorted(set(registered) - set(counts)),
        "duplicated": sorted(name for name, n in counts.items() if n > 1),
        "unregistered": sorted(set(counts) - set(registered)),
    }


def without(module, name):
    """A copy of a dtype module's data with ``name`` deleted from wherever it is listed."""
    copy = types.SimpleNamespace(**{attr: tuple(n for n in getattr(module, attr) if n != name)
                                    for attr in _TUPLES})
    copy.CONDITIONAL_FP32 = tuple(e for e in module.CONDITIONAL_FP32 if e[0] != name)
    return copy


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_registered_forward_op_is_classified_exactly_once(dtype):
    problems = coverage_problems(MODULES[dtype], registered_forward_ops())
    assert problems == {"missing": [], "duplicated": [], "unregistered": []}, (
        "%s op lists are out of date with MXNet %s: %s" % (dtype, mx.__version__, json.dumps(problems)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_deleting_any_one_op_is_reported(dtype):
    module, registered = MODULES[dtype], registered_forward_ops()
    for name in sorted(set(listed_names(module))):
        assert coverage_problems(without(module, name), registered)["missing"] == [name]


@pytest.mark.parametrize("dtype", DTYPES)
def test_checker_reports_duplicates_and_unregistered_names(dtype):
    module = MODULES[dtype]
    broken = types.SimpleNamespace(**{attr: getattr(module, attr) for attr in _TUPLES})
    broken.CONDITIONAL_FP32 = module.CONDITIONAL_FP32
    broken.FP32 = module.FP32 + ("Convolution", "NotAnOp")
    problems = coverage_problems(broken, registered_forward_ops())
    assert problems == {"missing": [], "duplicated": ["Convolution"], "unregistered": ["NotAnOp"]}


def test_project_ops_are_classified():
    assert library.OP_NAMES
    for dtype in DTYPES:
        for op in library.OP_NAMES:
            assert lists.category(op, dtype) in lists.CATEGORIES
            assert op in registered_forward_ops()


@pytest.mark.parametrize("dtype", DTYPES)
def test_aliases_share_a_category_and_conditions(dtype):
    conditions = lists.conditional_fp32(dtype)
    groups = lists.alias_groups()
    assert any("_npx_fully_connected" in g and "FullyConnected" in g for g in groups)
    for group in groups:
        cats = {name: lists.category(name, dtype) for name in group}
        assert len(set(cats.values())) == 1, "aliases differ for %s: %s" % (dtype, cats)
        conds = {name: sorted(conditions.get(name, ())) for name in group}
        assert len({repr(c) for c in conds.values()}) == 1, "alias conditions differ: %s" % conds


@pytest.mark.parametrize("dtype", DTYPES)
def test_data_are_plain_tuples_and_every_op_has_a_reason(dtype):
    module = MODULES[dtype]
    for attr in _TUPLES:
        value = getattr(module, attr)
        assert isinstance(value, tuple) and all(isinstance(n, str) for n in value), attr
    reasons = collections.Counter(n for names, _ in module.REASONS for n in names)
    assert sorted(n for n, c in reasons.items() if c > 1) == []
    assert set(reasons) == set(listed_names(module))
    for names, why in module.REASONS:
        assert isinstance(names, tuple) and isinstance(why, str) and len(why) > 20
        assert len({lists.category(n, dtype) for n in names}) == 1, "reason group spans categories"
    assert lists.reason("Convolution", dtype) == dict(
        (n, w) for names, w in module.REASONS for n in names)["Convolution"]


MATMUL_LIKE = ("Convolution", "Deconvolution", "FullyConnected", "RNN", "dot", "batch_dot", "_np_dot",
               "_npi_matmul", "_npi_einsum", "_npi_tensordot", "_npi_tensordot_int_axes",
               "_contrib_interleaved_matmul_selfatt_qk", "_contrib_interleaved_matmul_selfatt_valatt",
               "_contrib_interleaved_matmul_encdec_qk", "_contrib_interleaved_matmul_encdec_valatt")
# MXNet 1.9.1 has bf16 kernels (oneDNN) only for these matmul-likes; the rest are emulated.
BF16_MATMUL = ("Convolution", "Deconvolution", "FullyConnected", "_sg_mkldnn_conv",
               "_sg_mkldnn_fully_connected")


def test_matmul_likes_run_in_low_precision():
    for op in MATMUL_LIKE:
        assert lists.category(op, "float16") == "lp16", op
        assert lists.category(op, "bfloat16") == "lp16", op
    native = lists.native_lp16_ops("bfloat16", "cpu")
    assert set(BF16_MATMUL) <= native
    for op in set(MATMUL_LIKE) - set(BF16_MATMUL):
        assert op not in native, op
        assert "emulated" in lists.reason(op, "bfloat16")


FP32_ONLY = ("sum", "mean", "prod", "nansum", "norm", "_np_sum", "_npi_mean", "_npi_std", "_npi_var",
             "_npi_norm", "moments", "exp", "log", "_npi_exp", "_npi_log", "_npi_power", "broadcast_power",
             "softmax", "log_softmax", "softmin", "SoftmaxActivation", "_npx_softmax", "LayerNorm",
             "GroupNorm", "InstanceNorm", "L2Normalization", "CTCLoss", "softmax_cross_entropy",
             "smooth_l1", "make_loss")
LOSS_HEADS = ("SoftmaxOutput", "LinearRegressionOutput", "LogisticRegressionOutput", "MAERegressionOutput",
              "SVMOutput", "MakeLoss")


@pytest.mark.parametrize("dtype", DTYPES)
def test_reductions_softmax_norms_and_losses_run_in_fp32(dtype):
    for op in FP32_ONLY:
        assert lists.category(op, dtype) == "fp32", op
    assert sorted(lists.list_loss_output_functions(dtype)) == sorted(
        {alias for g in lists.alias_groups() for alias in g if set(g) & set(LOSS_HEADS)})


INDEX_TAKING = ("Embedding", "take", "batch_take", "one_hot", "pick", "gather_nd", "scatter_nd",
                "SequenceMask", "SequenceLast", "SequenceReverse", "_contrib_boolean_mask", "_onehot_encode",
                "argmax", "argmin", "topk", "argsort", "sort", "_npi_bitwise_and", "_npi_equal_scalar",
                "_contrib_SparseEmbedding", "_npi_take", "_ravel_multi_index")


@pytest.mark.parametrize("dtype", DTYPES)
def test_integer_semantics_ops_are_never_cast_to_low_precision(dtype):
    for op in INDEX_TAKING:
        assert lists.category(op, dtype) in ("neutral", "fp32"), op


@pytest.mark.parametrize("dtype", DTYPES)
def test_in_place_ops_are_neutral(dtype):
    # casting an input of an in-place update would update a temporary copy
    for op in ("sgd_update", "adam_update", "multi_mp_sgd_mom_update", "_npi_boolean_mask_assign_scalar",
               "reset_arrays", "amp_multi_unscale_check"):
        assert lists.category(op, dtype) == "neutral", op


def test_bf16_keeps_conv_nets_in_bf16():
    # a conv block must not bounce to fp32 between layers
    for op in ("Activation", "Pooling"):
        assert lists.category(op, "bfloat16") == "conditional_fp32"
    for op in ("BatchNorm", "relu", "Flatten", "Reshape", "SwapAxis", "_np_transpose", "LRN"):
        assert lists.category(op, "bfloat16") == "neutral", op
    for op in ("Concat", "elemwise_add", "broadcast_add", "_npi_add", "add_n", "where"):
        assert lists.category(op, "bfloat16") == "widest", op
    low_or_any = (lists.list_lp16_ops("bfloat16") + lists.list_lp16_fp32_ops("bfloat16")
                  + lists.list_widest_type_cast("bfloat16"))
    assert len(low_or_any) > 1.7 * len(lists.list_fp32_ops("bfloat16"))
    # ...but gates, masks and constant offsets (squeeze-excitation, attention, hard-swish) stay float32
    for op in ("elemwise_mul", "broadcast_mul", "_plus_scalar", "_contrib_AdaptiveAvgPooling2D"):
        assert lists.category(op, "bfloat16") == "fp32" and lists.category(op, "float16") != "fp32", op


def _create_symbol(op, attrs):
    """Create an atomic symbol through MXNet's C API (parses and validates every attribute)."""
    handle = ctypes.c_void_p(op_handle(op))
    sym = mx.base.SymbolHandle()
    keys = mx.base.c_str_array(list(attrs))
    vals = mx.base.c_str_array([str(v) for v in attrs.values()])
    mx.base.check_call(mx.base._LIB.MXSymbolCreateAtomicSymbol(
        handle, mx.base.mx_uint(len(attrs)), keys, vals, ctypes.byref(sym)))
    mx.base.check_call(mx.base._LIB.NNSymbolFree(sym))


# attributes (other than the conditional one) that an op needs before its symbol can be created
REQUIRED_ATTRS = {"Pooling": {"kernel": (2, 2)}, "Pooling_v1": {"kernel": (2, 2)}}


def _required_attrs(op):
    group = next(g for g in lists.alias_groups() if op in g)
    return next((REQUIRED_ATTRS[name] for name in group if name in REQUIRED_ATTRS), {})


@pytest.mark.parametrize("dtype", DTYPES)
def test_conditional_entries_name_real_attribute_values(dtype):
    entries = lists.list_conditional_fp32_ops(dtype)
    assert {op for op, _, _ in entries} >= {"Activation", "_npx_activation", "LeakyReLU", "Pooling"}
    for op, attr, values in entries:
        for value in values:
            _create_symbol(op, dict(_required_attrs(op), **{attr: value}))
        with pytest.raises(mx.base.MXNetError):
            _create_symbol(op, dict(_required_attrs(op), **{attr: "no_such_value"}))
        assert lists.conditional_fp32(dtype)[op] == ((attr, frozenset(values)),)
    assert ("Activation", "act_type", ["softrelu"] if dtype == "float16" else ["softrelu", "softsign"]) \
        in entries


def test_loss_scale_attributes_are_real_arguments():
    for dtype in DTYPES:
        heads = lists.list_loss_output_functions(dtype)
        assert sorted(heads) == sorted(lists.LOSS_SCALE_ATTR)
    for op, attr in lists.LOSS_SCALE_ATTR.items():
        assert attr in mx.operator.get_operator_arguments(op).names, (op, attr)


BF16 = np.dtype([("bfloat16", np.uint16)])


@pytest.mark.parametrize("spelling, expected", [
    ("float16", "float16"), (np.float16, "float16"), (np.dtype("float16"), "float16"),
    ("bfloat16", "bfloat16"), (BF16, "bfloat16"), ([("bfloat16", np.uint16)], "bfloat16")])
def test_normalize_dtype_accepts_the_target_dtypes(spelling, expected):
    assert lists.normalize_dtype(spelling) == expected
    assert lists.category("FullyConnected", spelling) == "lp16"


@pytest.mark.parametrize("bad", ["float32", np.float32, "fp16", "bf16", None, 16, np.dtype("uint16")])
def test_normalize_dtype_rejects_others_listing_the_choices(bad):
    with pytest.raises(ValueError) as err:
        lists.normalize_dtype(bad)
    message = str(err.value)
    assert repr(bad) in message and "'float16'" in message and "'bfloat16'" in message
    with pytest.raises(ValueError):
        lists.list_lp16_ops(bad)


def test_unknown_op_names_get_close_matches():
    with pytest.raises(ValueError, match="FullyConected.*Did you mean 'FullyConnected'"):
        lists.category("FullyConected", "float16")
    with pytest.raises(ValueError, match="Did you mean"):
        lists.reason("Convolutoin", "bfloat16")
    with pytest.raises(TypeError, match="op_name must be a str"):
        lists.category(["Convolution"], "float16")


def test_registered_but_unlisted_ops_default_to_fp32():
    assert lists.category("_backward_FullyConnected", "float16") == "fp32"
    assert "not in the built-in lists" in lists.reason("_backward_FullyConnected", "bfloat16")


@pytest.mark.parametrize("dtype", DTYPES)
def test_public_queries_partition_the_ops(dtype):
    parts = [lists.list_lp16_ops(dtype), lists.list_fp32_ops(dtype), lists.list_lp16_fp32_ops(dtype),
             lists.list_widest_type_cast(dtype), lists.list_loss_output_functions(dtype),
             sorted({op for op, _, _ in lists.list_conditional_fp32_ops(dtype)})]
    flat = [op for part in parts for op in part]
    assert len(flat) == len(set(flat)) == len(registered_forward_ops())
    assert all(isinstance(p, list) for p in parts)
    parts[0].append("mutated")  # callers get copies
    assert "mutated" not in lists.list_lp16_ops(dtype)


def test_native_lp16_ops_per_device():
    assert lists.native_lp16_ops("float16", "gpu") == frozenset(lists.list_lp16_ops("float16"))
    assert lists.native_lp16_ops("float16", "cpu") == frozenset()
    assert lists.native_lp16_ops("bfloat16", "cpu") < frozenset(lists.list_lp16_ops("bfloat16"))
    assert lists.native_lp16_ops("bfloat16", "gpu") == frozenset()
    with pytest.raises(ValueError, match="'tpu'.*'cpu', 'gpu'"):
        lists.native_lp16_ops("float16", "tpu")


# Native (non-oneDNN) bf16 kernels the bf16 lists rely on, and ones they avoid because they lack one.
_PROBED_NEUTRAL = ("BatchNorm", "_sparse_relu", "_np_transpose", "Concat", "_npi_add", "take", "Embedding")
_PROBED_NO_BF16 = ("Dropout", "_npi_true_divide", "_npx_batch_dot", "_np_sum")
# Ops without a native bf16 kernel that MXNet routes to oneDNN for bf16 (AVX-512 needed to run them).
_ONEDNN_BF16 = ("Convolution", "Deconvolution", "FullyConnected", "Activation", "LeakyReLU", "Pooling", "LRN")


def _probe(ops, *flags):
    proc = subprocess.run([sys.executable, os.path.join(REPO, "tools", "probe_bf16.py"), "--json",
                           "--ops", ",".join(ops)] + list(flags),
                          capture_output=True, text=True, check=True, timeout=300)
    return json.loads(proc.stdout)


def test_bf16_choices_match_the_native_kernel_probe():
    rows = _probe(_PROBED_NEUTRAL + _PROBED_NO_BF16 + _ONEDNN_BF16)
    for op in _PROBED_NEUTRAL:
        assert rows[op]["bfloat16"] == "ok:bfloat16", (op, rows[op])
        assert lists.category(op, "bfloat16") in ("neutral", "widest")
    for op in _PROBED_NO_BF16 + _ONEDNN_BF16:
        assert rows[op]["float32"].startswith("ok") and rows[op]["bfloat16"].startswith("error"), rows[op]
    for op in _PROBED_NO_BF16:  # never handed bf16: float32, or low precision emulated on its fp32 kernel
        cat = lists.category(op, "bfloat16")
        assert cat == "fp32" or (cat == "lp16" and op not in lists.native_lp16_ops("bfloat16", "cpu")), op


def test_bf16_ops_without_native_kernels_are_routed_to_onednn():
    rows = _probe(_ONEDNN_BF16, "--mkldnn")
    avx512 = mxnet_onednn_runs_bf16()
    for op in _ONEDNN_BF16:
        # "ok" where oneDNN 2.4 runs AVX-512; elsewhere it is reached but cannot create the bf16 primitive
        if avx512:
            assert rows[op]["bfloat16"] == "ok:bfloat16", rows[op]
        else:
            assert rows[op]["bfloat16"].startswith("onednn:"), rows[op]
        assert lists.category(op, "bfloat16") in ("lp16", "neutral", "conditional_fp32")


#: How to call each op of lists.rounding on a (2, 3, 4, 4) input, and the attribute of its condition, if any.
_COMMUTING_CALLS = {
    "Flatten": {}, "Reshape": {"shape": (2, -1)}, "SwapAxis": {"dim1": 1, "dim2": 3}, "expand_dims": {"axis": 1},
    "relu": {}, "squeeze": {}, "transpose": {"axes": (0, 2, 3, 1)}, "_np_reshape": {"newshape": (6, 16)},
    "_np_squeeze": {}, "_np_transpose": {"axes": (3, 2, 1, 0)}, "_npi_expand_dims": {"axis": 0},
    "_npx_relu": {}, "_npx_reshape": {"newshape": (-2, -1)},
    "Activation": {"act_type": "relu"}, "Pooling": {"kernel": (2, 2), "stride": (2, 2)},
    "_npx_activation": {"act_type": "relu"}, "_npx_pooling": {"kernel": (3, 3), "pad": (1, 1)},
}


@pytest.mark.parametrize("dtype", DTYPES)
def test_ops_said_to_commute_with_rounding_do(dtype):
    from amp_testing import lp_round
    moves = set(lists.rounding.MOVES)
    names = list(moves) + list(lists.rounding.SELECTS) + [entry[0] for entry in lists.rounding.SELECTS_WHEN]
    assert sorted(names) == sorted(_COMMUTING_CALLS)
    assert set(names) <= registered_forward_ops()
    x = lp_round(np.random.RandomState(7).normal(0, 3, (2, 3, 4, 4)).astype(np.float32), dtype)
    version = json.loads(mx.sym.var("x").tojson())["attrs"]
    for name, kwargs in _COMMUTING_CALLS.items():
        attrs = {k: str(v) for k, v in kwargs.items()}
        graph = {"nodes": [{"op": "null", "name": "x", "inputs": []},
                           {"op": name, "name": "op", "attrs": attrs, "inputs": [[0, 0, 0]]}],
                 "arg_nodes": [0], "heads": [[1, 0, 0]], "attrs": version}
        exe = mx.sym.load_json(json.dumps(graph)).bind(mx.cpu(), {"x": mx.nd.array(x)}, grad_req="null")
        y = exe.forward()[0].asnumpy()
        np.testing.assert_array_equal(y, lp_round(y, dtype), err_msg=name)  # rounded inputs, rounded outputs
        assert lists.commutes_with_rounding(name, attrs), name
        assert lists.commutes_with_rounding(name, attrs, gradient=True) == (name in moves), name
    assert not lists.commutes_with_rounding("Pooling", {"pool_type": "avg"})
    assert not lists.commutes_with_rounding("Activation", {"act_type": "sigmoid"})
    assert not lists.commutes_with_rounding("Dropout")


# ---- native bfloat16 evidence (lists/native_bf16_cpu.json, recorded by tools/probe_bf16.py --values) ----------
def _fed_bf16():
    return lists.natively_fed_ops("bfloat16", "cpu") - set(library.OP_NAMES)  # ours: test_kernels.py


def test_evidence_file_is_well_formed_and_covers_every_natively_fed_op():
    evidence = lists.native_evidence()
    assert set(evidence["verdicts"]) == set(lists.BAD_VERDICTS) | {"ok", "skip"}
    assert len(evidence["runs"]) >= 2 and len({r["meta"]["cpu"] for r in evidence["runs"]}) == len(evidence["runs"])
    for run in evidence["runs"]:
        assert {"cpu", "mxnet", "date", "tolerance", "command"} <= set(run["meta"]), run["meta"]
        assert {row["verdict"] for row in run["ops"].values()} <= set(evidence["verdicts"])
        missing = sorted(_fed_bf16() - set(run["ops"]))
        assert not missing, "%s: not probed (re-record: tools/probe_bf16.py --values --out ...): %s" % (
            run["meta"]["cpu"], missing)


def test_no_op_fed_bf16_natively_failed_the_value_probe_anywhere():
    fed = _fed_bf16()
    for run in lists.native_evidence()["runs"]:
        bad = {op: row for op, row in run["ops"].items() if row["verdict"] in lists.BAD_VERDICTS}
        assert not fed & set(bad), (run["meta"]["cpu"], {op: bad[op] for op in fed & set(bad)})
        for op in bad:  # such ops get float32 around them (or are low precision without a native kernel)
            cat = lists.category(op, "bfloat16")
            assert cat == "fp32" or (cat == "lp16" and op not in lists.native_lp16_ops("bfloat16", "cpu")), op
    assert lists.category("transpose", "bfloat16") == "fp32" and lists.category("transpose", "float16") == "neutral"
