"""Tests for mxnet.amp.core.policy and mxnet.amp.core.support: how each low precision op runs per device, and the
hardware detection."""
import pytest

from mxnet.amp import lists
from mxnet.amp.core import cpu
from mxnet.amp.core.policy import EMULATED, FLOAT32, NATIVE, make_policy
from mxnet.amp.core.support import library_ready, native_support

from amp_testing import cpuinfo_of_class


@pytest.mark.parametrize("forced, bf16_cpu", [("1", False), ("0", True)])
def test_emulate_variable_overrides_detection(monkeypatch, forced, bf16_cpu):
    monkeypatch.setenv("MXNET_AMP_EMULATE", forced)
    assert native_support("bfloat16", "cpu") == bf16_cpu
    assert native_support("float16", "cpu") is False  # MXNet 1.9.1 has no fast CPU float16 kernels at all
    assert native_support("float16", "gpu") == (forced == "0")
    assert native_support("bfloat16", "gpu") is False


def test_lp16_mode_native_float32_or_emulated(monkeypatch):
    policy = make_policy("bfloat16", kernels="mxnet")  # MXNet's kernels (the library's: test_matmul_kernels.py)
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")  # as on an AVX-512 CPU
    assert policy.lp16_mode("FullyConnected", "cpu") == NATIVE
    for op in ("batch_dot", "_npi_matmul", "RNN", "_contrib_interleaved_matmul_selfatt_qk"):
        assert policy.lp16_mode(op, "cpu") == FLOAT32, op  # no bf16 kernel: plain float32, no rounding
    assert policy.lp16_mode("FullyConnected", "gpu") == EMULATED  # no GPU bf16 kernels in MXNet 1.9.1
    monkeypatch.setenv("MXNET_AMP_EMULATE", "1")
    assert {policy.lp16_mode(op, "cpu") for op in lists.list_lp16_ops("bfloat16")} == {EMULATED}
    monkeypatch.delenv("MXNET_AMP_EMULATE")
    forced = [make_policy("bfloat16", emulate=e) for e in (True, False)]
    assert [p.lp16_mode("batch_dot", "cpu") for p in forced] == [EMULATED, NATIVE]
    fp16 = make_policy("float16")
    assert fp16.lp16_mode("batch_dot", "cpu") == EMULATED and fp16.emulates("Convolution", "cpu")


def test_keep_lp16_outputs_is_validated():
    assert make_policy("bfloat16").keep_lp16_outputs is False
    assert make_policy("bfloat16", keep_lp16_outputs=True).keep_lp16_outputs is True
    with pytest.raises(ValueError, match="keep_lp16_outputs must be True or False, got 'yes'"):
        make_policy("bfloat16", keep_lp16_outputs="yes")


def test_stats_kernels_only_on_native_classes_with_the_library_kernels(tmp_path, monkeypatch):
    """LayerNorm and softmax run on the library's float32-statistics kernels on classes (c) and (d) only, never
    where the user keeps them float32, emulates, picks MXNet's kernels or targets float16."""
    monkeypatch.delenv("MXNET_AMP_EMULATE", raising=False)
    ready = library_ready("bfloat16")
    for cls in "abcd":
        monkeypatch.setenv(cpu.CPUINFO_ENV, cpuinfo_of_class(tmp_path, cls))
        want = "amp_layer_norm" if cls in "cd" and ready else None
        assert make_policy("bfloat16").stats_kernel("LayerNorm", "cpu") == want, cls
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")
    want = "amp_softmax" if ready else None
    assert make_policy("bfloat16").stats_kernel("softmax", "cpu") == want
    for policy in (make_policy("bfloat16", emulate=True), make_policy("bfloat16", kernels="mxnet"),
                   make_policy("float16"), make_policy("bfloat16", extra_fp32_ops=["softmax"]),
                   make_policy("bfloat16", fp32_ops=["softmax"])):
        assert policy.stats_kernel("softmax", "cpu") is None and policy.stats_kernel("softmax", "gpu") is None
    assert make_policy("bfloat16", excluded_sym_names=["sm"]).stats_kernel("softmax", "cpu", "sm") is None
