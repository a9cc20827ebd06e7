"""AMP with Horovod: ``hvd.DistributedTrainer`` on 2 ranks on localhost (Gloo), an MLP and a CNN with BatchNorm.

Every rank ends with bit-identical parameters; an inf on one rank skips the step on every rank and the loss
scales stay equal; a checkpoint (parameters and trainer states) resumes bit-identically. The test command
(``bash tools/run.sh test``) builds Horovod 0.28.1 with Gloo into the environment.
"""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("horovod.mxnet", reason="Horovod is not installed: bash tools/run.sh test builds it")

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hvd_worker.py")
TIMEOUT = 300


def _run(tmp_path, model, dtype):
    out = str(tmp_path)
    cmd = [sys.executable, "-m", "horovod.runner.launch", "-np", "2", "-H", "localhost:2", "--gloo",
           sys.executable, WORKER, out, model, dtype]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return [json.load(open(os.path.join(out, "rank%d.json" % rank))) for rank in (0, 1)]


# Steps 1, 3 and 4 have an inf on rank 1, rank 0 and both: every rank skips exactly those.
APPLIED = [True, False, True, False, False, True]


@pytest.mark.parametrize("model,dtype", [("mlp", "float16"), ("cnn", "bfloat16")])
def test_ranks_agree_skip_together_and_resume(tmp_path, model, dtype):
    ranks = _run(tmp_path, model, dtype)
    assert [r["size"] for r in ranks] == [2, 2]
    for r in ranks:
        assert r["applied"] == APPLIED
        assert r["resumed_applied"] == APPLIED[2:]  # the checkpoint was taken after step 1
        assert r["resumed_params"] == r["params"]  # bit for bit
        assert r["resumed_scaler"] == r["scaler"]
    assert ranks[0]["params"] == ranks[1]["params"]  # bit for bit across ranks
    assert ranks[0]["scaler"] == ranks[1]["scaler"]
    scaler = ranks[0]["scaler"]
    assert scaler["steps"] == 6 and scaler["skipped_steps"] == 3
    if dtype == "float16":  # 256 -> 128 (step 1) -> 64 (step 3) -> 32 (step 4); never 2 finite steps in a row
        assert scaler["dynamic"] and scaler["scale"] == 2.0 ** 5
    else:
        assert not scaler["dynamic"] and scaler["scale"] == 1.0
