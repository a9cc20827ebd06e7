"""``python -m mxnet.amp lists``: content of the table and of one operator's entry, one-line errors."""
import subprocess
import sys

import pytest

from mxnet.amp import lists
from mxnet.amp.__main__ import main


def test_table_lists_every_category_with_counts(capsys):
    assert main(["lists", "--dtype", "bfloat16"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("bfloat16: %d operators" % len(lists.registered_forward_ops()))
    for title, query in (("low precision", lists.list_lp16_ops), ("float32", lists.list_fp32_ops),
                         ("dtype-neutral", lists.list_lp16_fp32_ops),
                         ("widest type", lists.list_widest_type_cast)):
        count = len(set(query("bfloat16")) & lists.registered_forward_ops())
        assert "  %-20s %4d" % (title, count) in out
    assert "FullyConnected" in out and "\nfloat16:" not in out


def test_one_op_shows_category_and_reason_per_dtype(capsys):
    assert main(["lists", "--op", "Activation"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Activation"
    assert out[1].split()[:3] == ["float16", "conditional", "float32"] and "act_type in {softrelu" in out[1]
    assert any(line.strip().startswith("bfloat16") for line in out)
    assert main(["lists", "--op", "FullyConnected", "--dtype", "float16"]) == 0
    out = capsys.readouterr().out
    assert "float16   low precision" in out and lists.reason("FullyConnected", "float16")[:30] in out


def test_unknown_op_is_one_clear_line():
    proc = subprocess.run([sys.executable, "-m", "mxnet.amp", "lists", "--op", "FullyConected"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    err = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("error: Unknown operator 'FullyConected'")
    assert "Did you mean 'FullyConnected'" in err[0]


def test_bad_dtype_is_rejected_by_the_parser():
    with pytest.raises(SystemExit) as exc:
        main(["lists", "--dtype", "float8"])
    assert exc.value.code == 2


@pytest.mark.parametrize("argv, message", [
    (["frob"], "error: argument command: invalid choice: 'frob'"),
    (["doctor", "--symbol", "x"], "error: the following arguments are required: --params"),
])
def test_command_line_mistakes_are_one_line(argv, message):
    proc = subprocess.run([sys.executable, "-m", "mxnet.amp"] + argv, capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(message), proc.stderr
