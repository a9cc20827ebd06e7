"""The fuzz of the trainer state-file loader (checkpoint_fuzz.py, which says what is mutated and checked), as a test.

It runs in a child process, so that a crash in the loader fails this test with a message instead of killing
pytest; a hang fails it by timeout. Its seed and case count are printed (``-s``), recorded as a property and
shown in the closing summary. A longer or another run::

    MXNET_AMP_FUZZ_CASES=100000 MXNET_AMP_FUZZ_SEED=7 python -m pytest tests/python/unittest/test_checkpoint_fuzz.py

or ``python tests/python/unittest/checkpoint_fuzz.py --cases 100000 --seed 7``.
"""
import json
import os
import subprocess
import sys

import pytest

from checkpoint_fuzz import DEFAULT_CASES

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "checkpoint_fuzz.py")
CASES = int(os.environ.get("MXNET_AMP_FUZZ_CASES", DEFAULT_CASES))
SEED = int(os.environ.get("MXNET_AMP_FUZZ_SEED", "0"))
MAX_RSS_MB = 2048


def test_fuzzed_state_files_load_exactly_or_raise_value_error(tmp_path, record_property):
    header = "checkpoint fuzz: seed %d, %d cases" % (SEED, CASES)
    print(header)
    timeout = 120 + CASES * 0.02
    try:
        proc = subprocess.run([sys.executable, WORKER, "--seed", str(SEED), "--cases", str(CASES),
                               "--folder", str(tmp_path)], cwd=str(tmp_path), capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail("%s: no end within %d s (a hang; each load has 20 s)" % (header, timeout))
    lines = proc.stdout.strip().splitlines()
    if proc.returncode not in (0, 1) or not lines or not lines[-1].startswith("{"):
        how = ("signal %d" % -proc.returncode if proc.returncode < 0 else "exit code %d" % proc.returncode)
        pytest.fail("%s: the loading process died (%s; MXNet reports a segmentation fault as exit code 255): a "
                    "crash in the loader\n%s" % (header, how, proc.stderr[-3000:]))
    summary = json.loads(lines[-1])
    text = ("%s: %d refused with ValueError and the trainer unchanged, %d accepted and restored exactly what the "
            "file holds, %d malicious refused with nothing run; %.1f s, slowest load %.3f s, peak %d MB"
            % (header, summary["refused"], summary["accepted"], summary["malicious"], summary["seconds"],
               summary["slowest_load"][0], summary["max_rss_mb"]))
    print(text)
    record_property("summary", text)
    assert summary["failure_count"] == 0, "%s: %d failures, the first:\n%s" % (
        header, summary["failure_count"], "\n".join(summary["failures"]))
    assert summary["cases"] == CASES and summary["accepted"] and summary["malicious"], text
    assert summary["max_rss_mb"] < MAX_RSS_MB, text
