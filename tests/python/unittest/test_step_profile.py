"""``bench/bench_train_step.py --profile``: the per-step split of a training step (issue 15's step profile).

The categorisation of MXNet profiler rows is checked on names, and the profile itself on a tiny ResNet-18 step
of the fp32 and ``mxnet.amp`` configurations: every category is measured, casts and oneDNN reorders are counted,
and ``mxnet.amp``'s step has casts where fp32's has none (its finite check is part of the fused update).
"""
import json
import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "bench")
sys.path.insert(0, BENCH)
import bench_train_step as bts  # noqa: E402


def test_profiler_rows_fall_into_their_categories():
    assert bts.category("Convolution") == "forward" and bts.category("amp_convolution") == "forward"
    assert bts.category("_backward_Convolution") == "backward" and bts.category("add_n") == "backward"
    assert bts.category("amp_cast") == bts.category("_backward_amp_cast") == "casts"
    assert bts.category("amp_multi_unscale_check") == "check" == bts.category("multi_all_finite")
    assert bts.category("multi_sgd_mom_update") == "optimizer" == bts.category("adam_update")
    assert bts.category("MXNDArraySyncCopyToCPU") is None and bts.category("Memory: cpu/0") is None


@pytest.mark.parametrize("config", ["fp32", "amp_bf16"])
def test_profile_of_a_small_step(config):
    class Args:
        steps, batch, size, model = 1, 2, 32, "resnet18"
    row = bts._run_child(config, Args, profile=True)
    assert "error" not in row, row
    assert set(row["ms"]) == set(bts.CATEGORIES)
    assert row["ms"]["forward"] > 0 and row["ms"]["backward"] > 0 and row["ms"]["optimizer"] > 0
    assert row["wall_ms"] >= sum(row["ms"].values()) * 0.9
    # counted from oneDNN's verbose log: ResNet-18's 20 convolutions take their weights (changed every step) into
    # oneDNN's blocked layout, on MXNet's oneDNN 2 or the library's oneDNN 3 (92 fp32 / 181 AMP on an AVX2 CPU)
    assert row["reorders"] >= 20 and row["reorders"] == int(row["reorders"]), row
    if config == "fp32":
        assert row["casts"] == 0 and row["ms"]["check"] == 0
    else:
        assert row["casts"] > 0  # the finite check runs inside the fused update (amp_multi_update: "optimizer")
        assert row["ms"]["check"] == 0 and row["ms"]["optimizer"] > 0
    json.dumps(row)  # the child's report is plain data
