"""``python -m mxnet.amp convert``: outputs, printed summary, and clear errors that leave nothing written."""
import argparse
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import mxnet as mx
from mxnet.gluon import nn
from mxnet.amp.cli import convert as convert_cli
from mxnet.amp.base.dtypes import BFLOAT16
from mxnet.amp.core.support import native_support


@pytest.fixture(scope="module")
def saved_net(tmp_path_factory):
    folder = tmp_path_factory.mktemp("net")
    net = nn.HybridSequential()
    net.add(nn.Conv2D(4, 3, padding=1), nn.BatchNorm(), nn.Activation("relu"), nn.GlobalAvgPool2D(),
            nn.Dense(3))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    net(mx.nd.ones((1, 3, 8, 8)))
    prefix = str(folder / "net")
    net.export(prefix)
    return prefix


def _run(*argv):
    parser = argparse.ArgumentParser()
    convert_cli.add_arguments(parser)
    out = io.StringIO()
    code = convert_cli.run(parser.parse_args(list(argv)), out=out)
    return code, out.getvalue()


def _args(prefix, out, *extra):
    return ["--symbol", prefix + "-symbol.json", "--params", prefix + "-0000.params", "--out", out] + list(extra)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_convert_saves_model_and_prints_summary(saved_net, tmp_path, dtype):
    out = str(tmp_path / "low")
    code, text = _run(*_args(saved_net, out, "--dtype", dtype, "--input-shape", "2,3,8,8",
                             "--onnx", str(tmp_path / "low.onnx")))
    assert code == 0
    for needle in ("target dtype:", "casts inserted:", "ops by precision:", "parameters:", "deviation:"):
        assert needle in text, needle
    assert sorted(os.listdir(tmp_path)) == ["low-0000.params", "low-symbol.json", "low.onnx"]
    graph = json.load(open(out + "-symbol.json"))
    assert any(n["op"] in ("amp_cast", "amp_round") for n in graph["nodes"])  # casts kept on save
    sym, args, aux = mx.model.load_checkpoint(out, 0)
    x = np.random.RandomState(0).uniform(-1, 1, (2, 3, 8, 8)).astype(np.float32)
    exe = sym.bind(mx.cpu(), dict(args, data=mx.nd.array(x)), aux_states=aux, grad_req="null")
    assert np.isfinite(exe.forward()[0].astype("float32").asnumpy()).all()
    dev = [line for line in text.splitlines() if line.startswith("deviation:")][0]
    rel = float(dev.split("max rel ")[1].split()[0])
    assert rel < (0.05 if dtype == "bfloat16" else 0.01)
    # Emulation (no kernels on this CPU) is said once, with the CLI's own option names.
    notes = [line for line in text.splitlines() if line.startswith("note:")]
    assert len(notes) == (0 if native_support(dtype, "cpu") else 1)
    assert all("--emulate no" in n and "emulate=" not in n for n in notes)


def test_native_graph_for_another_machine_is_saved_not_run(saved_net, tmp_path):
    out = str(tmp_path / "native")
    code, text = _run(*_args(saved_net, out, "--dtype", "bfloat16", "--emulate", "no", "--no-fuse",
                             "--input-shape", "2,3,8,8"))
    assert code == 0 and "native bfloat16 kernels" in text and "note:" not in text
    if not native_support("bfloat16", "cpu"):
        assert "not measured" in text
    _, args, _ = mx.model.load_checkpoint(out, 0)
    assert {str(a.dtype) for k, a in args.items() if "conv" in k or "dense" in k} == {str(BFLOAT16)}


def test_without_shape_deviation_is_not_measured(saved_net, tmp_path):
    code, text = _run(*_args(saved_net, str(tmp_path / "low"), "--dtype", "bfloat16"))
    assert code == 0 and "not measured (pass --input-shape)" in text


def test_deviation_reference():
    ref = np.array([1.0, -2.0, 4.0])
    assert convert_cli.deviation(ref, ref + [0.0, 0.5, 0.0]) == (0.5, 0.125)


@pytest.mark.parametrize("extra, error, match", [
    (["--dtype", "int8"], ValueError, "int8"),
    (["--dtype", "bfloat16", "--input-shape", "2,4,8,8"], ValueError, "does not fit"),
    (["--dtype", "bfloat16", "--input-shape", "2,3,8,8", "--input-shape", "1,1"], ValueError, "1 inputs"),
    (["--dtype", "bfloat16", "--onnx", "x.onnx"], ValueError, "--input-shape"),
])
def test_user_mistakes_raise_one_line_and_write_nothing(saved_net, tmp_path, extra, error, match):
    with pytest.raises(error, match=match):
        _run(*_args(saved_net, str(tmp_path / "low"), *extra))
    assert os.listdir(tmp_path) == []


def test_missing_files_and_folders(saved_net, tmp_path):
    with pytest.raises(FileNotFoundError, match="nope-symbol.json"):
        _run(*_args(str(tmp_path / "nope"), str(tmp_path / "low"), "--dtype", "bfloat16"))
    with pytest.raises(FileNotFoundError, match="--out: folder does not exist"):
        _run(*_args(saved_net, str(tmp_path / "missing" / "low"), "--dtype", "bfloat16"))
    with pytest.raises(FileNotFoundError, match="--onnx: folder does not exist: .*missing"):
        _run(*_args(saved_net, str(tmp_path / "low"), "--dtype", "bfloat16", "--input-shape", "2,3,8,8",
                    "--onnx", str(tmp_path / "missing" / "low.onnx")))
    (tmp_path / "taken.onnx").mkdir()
    with pytest.raises(ValueError, match="--onnx: .*taken.onnx is a folder"):
        _run(*_args(saved_net, str(tmp_path / "low"), "--dtype", "bfloat16", "--input-shape", "2,3,8,8",
                    "--onnx", str(tmp_path / "taken.onnx")))
    with pytest.raises(ValueError, match="--out must name a file prefix"):
        _run(*_args(saved_net, str(tmp_path) + os.sep, "--dtype", "bfloat16"))
    assert os.listdir(tmp_path) == ["taken.onnx"]


def test_failed_save_keeps_the_previous_outputs(saved_net, tmp_path, monkeypatch):
    out = str(tmp_path / "low")
    assert _run(*_args(saved_net, out, "--dtype", "bfloat16"))[0] == 0
    before = {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)}
    real_replace = os.replace

    def failing_replace(src, dst):  # the second output's rename fails
        if dst.endswith(".params") and not src.endswith(".amp-backup") and not dst.endswith(".amp-backup"):
            raise OSError("disk full")
        return real_replace(src, dst)
    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        _run(*_args(saved_net, out, "--dtype", "float16"))
    monkeypatch.undo()
    assert {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)} == before


def test_bad_shape_text():
    with pytest.raises(ValueError, match="1,x"):
        convert_cli.parse_shape("1,x")
    with pytest.raises(ValueError, match="0,3"):
        convert_cli.parse_shape("0,3")
    assert convert_cli.parse_shape("1,3,224,224") == (1, 3, 224, 224)


def test_module_entry_point(saved_net, tmp_path):
    from mxnet.amp import __main__ as entry
    if "convert" not in entry.COMMANDS:
        pytest.skip("the 'convert' command is not registered in mxnet.amp.__main__ yet")
    cmd = [sys.executable, "-m", "mxnet.amp", "convert"] + _args(saved_net, str(tmp_path / "low"),
                                                                 "--dtype", "float32")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "error:" in proc.stderr and "Traceback" not in proc.stderr
    assert os.listdir(tmp_path) == []


def test_dtype_auto_follows_the_cpu_class(saved_net, tmp_path, monkeypatch):
    from mxnet.amp.core import advice, cpu
    monkeypatch.delenv("MXNET_AMP_EMULATE", raising=False)
    dtype, _ = advice.resolve("auto", "cpu")
    out = str(tmp_path / "auto")
    code, text = _run(*_args(saved_net, out, "--dtype", "auto", "--input-shape", "2,3,8,8"))
    assert code == 0
    first = text.splitlines()[0]
    if dtype is None:  # classes (a) and (b): the float32 model, saved as it is and measured against itself
        assert first.startswith("target dtype:     float32 on cpu") and "casts inserted:   0 amp_cast" in text
        assert "deviation:        output 0: max abs 0, max rel 0 (vs float32" in text, text
    else:
        assert first.startswith("target dtype:     bfloat16 on cpu")
    assert cpu.cpu_class().name in "abcd"
