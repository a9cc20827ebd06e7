"""``python -m mxnet.amp convert`` and ``doctor`` end to end on saved real models (in-process ``main``)."""
import contextlib
import io

import mxnet as mx
import numpy as np
import pytest
from mxnet.amp.__main__ import main

import zoo

DTYPES = ("bfloat16", "float16")


def _cli(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    assert rc == 0, err.getvalue()
    return out.getvalue()


def _shapes(model):
    return sum((["--input-shape", ",".join(map(str, s))] for s in model.shapes), [])


@pytest.fixture(scope="session")
def converted(tmp_path_factory, saved):
    """``converted(model, dtype)`` -> ``(report text, output prefix, ONNX path or None)``, converted once."""
    cache = {}

    def get(model, dtype):
        if (model, dtype) not in cache:
            _, prefix, _ = saved(model)
            mx.npx.reset_np()  # as in a fresh process: the command reads the numpy-mode flag from the file
            folder = tmp_path_factory.mktemp("converted")
            out_prefix = str(folder / "low")
            onnx_path = None if model.no_onnx else str(folder / "low.onnx")
            argv = ["convert", "--symbol", prefix + "-symbol.json", "--params", prefix + "-0000.params",
                    "--dtype", dtype, "--out", out_prefix] + _shapes(model)
            cache[model, dtype] = (_cli(argv + (["--onnx", onnx_path] if onnx_path else [])), out_prefix,
                                   onnx_path)
        return cache[model, dtype]
    return get


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("model", zoo.params())
def test_convert(model, dtype, converted):
    text, out_prefix, _ = converted(model, dtype)
    deviations = [line for line in text.splitlines() if line.startswith("deviation:")]
    assert len(deviations) == (3 if model.name == "lstm_lm_stateful" else 1), text
    native = "native bfloat16 kernels" in text.splitlines()[0]
    for line in deviations:
        assert "max rel " in line, text  # measured: the converted model ran
        rel = float(line.split("max rel ")[1].split()[0])
        assert rel < zoo.TOLERANCE[dtype], text
    with mx.util.np_shape(model.export == "numpy"):
        sym = mx.sym.load(out_prefix + "-symbol.json")
        params = mx.nd.load(out_prefix + "-0000.params")
    assert {"amp_cast", "amp_round"} & {n["op"] for n in zoo.nodes(sym)}
    assert set(sym.list_arguments() + sym.list_auxiliary_states()) >= {k.split(":", 1)[1] for k in params}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("model", zoo.params())
def test_onnx_runs_in_onnxruntime(model, dtype, converted, saved):
    """The ``--onnx`` file agrees with the float32 model in onnxruntime."""
    if model.no_onnx:
        pytest.skip(model.no_onnx)
    import onnxruntime
    from mxnet.amp.cli.convert import load_model
    _, _, onnx_path = converted(model, dtype)
    _, prefix, _ = saved(model)
    sym, args, aux = load_model(prefix + "-symbol.json", prefix + "-0000.params")
    batch = [b.asnumpy() for b in _legacy(model)]
    session = onnxruntime.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    got = session.run(None, {i.name: b for i, b in zip(session.get_inputs(), batch)})
    names = [n for n in sym.list_inputs() if n not in args and n not in aux]
    exe = sym.bind(mx.cpu(), dict(args, **{n: mx.nd.array(b) for n, b in zip(names, batch)}),
                   aux_states=aux, grad_req="null")
    ref = [o.asnumpy() for o in exe.forward(is_train=False)]
    assert len(got) == len(ref)
    for r, g in zip(ref, got):
        err = float(np.abs(r - g.astype(np.float32)).max()) / float(np.abs(r).max())
        assert err < zoo.TOLERANCE[dtype], (model, err)


def test_convert_onnx_refusal_is_one_line(saved, tmp_path):
    """A numpy-mode model with --onnx: MXNet's exporter has no numpy-op converters; one error, no files."""
    model, = [m for m in zoo.MODELS if m.export == "numpy"]
    _, prefix, _ = saved(model)
    mx.npx.reset_np()
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(["convert", "--symbol", prefix + "-symbol.json", "--params", prefix + "-0000.params",
                   "--dtype", "float16", "--out", str(tmp_path / "low"), "--onnx", str(tmp_path / "low.onnx")]
                  + _shapes(model))
    assert rc == 2
    assert err.getvalue().splitlines() == [
        "error: --onnx: MXNet's ONNX exporter cannot export this model: No conversion function registered for op "
        "type _npi_add yet. (nothing written)"]
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def _legacy(model):
    return [mx.nd.array(b.asnumpy()) for b in model.batch()]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("model", zoo.params())
def test_doctor(model, dtype, saved, tmp_path):
    _, prefix, names = saved(model)
    mx.npx.reset_np()
    data = tmp_path / "batch.npz"
    np.savez(str(data), **{n: b.asnumpy() for n, b in zip(names, _legacy(model))})
    text = _cli(["doctor", "--symbol", prefix + "-symbol.json", "--params", prefix + "-0000.params",
                 "--data", str(data), "--dtype", dtype])
    lines = text.splitlines()
    assert lines[0] == "amp doctor (%s, emulated on float32 kernels)" % dtype
    assert not any(line.startswith("ops whose") for line in lines), text  # random weights: nothing breaks
    assert "advice:" in lines


@pytest.mark.parametrize("model", zoo.params([m for m in zoo.MODELS if m.name == "resnet18_v1"]))
def test_doctor_finds_an_injected_overflow(model, saved, tmp_path):
    """One stage-3 convolution's weights scaled past float16's range: that convolution is found first."""
    _, prefix, _ = saved(model)
    mx.npx.reset_np()
    with mx.util.np_shape(model.export == "numpy"):
        params = mx.nd.load(prefix + "-0000.params")
        key, = [k for k in params if k.endswith("_stage3_conv0_weight")]
        params[key] = params[key] * 1e5
        mx.nd.save(str(tmp_path / "hot-0000.params"), params)
    cmd = ["doctor", "--symbol", prefix + "-symbol.json", "--params", str(tmp_path / "hot-0000.params")]
    text = _cli(cmd + _shapes(model) + ["--dtype", "float16"])
    findings = [line.split() for line in text.splitlines() if line.startswith("  overflow")]
    assert findings and findings[0][1:3] == [key[4:-len("_weight")] + "_fwd", "Convolution"], text
    assert float(findings[0][-1]) > 65504
    assert "  - add these ops to extra_fp32_ops: amp.init('float16', extra_fp32_ops=['Convolution'])" in text
    assert "  - or use bfloat16, which has the float32 range: amp.init('bfloat16')" in text
    bf16 = _cli(cmd + _shapes(model) + ["--dtype", "bfloat16"])
    assert not [line for line in bf16.splitlines() if line.startswith("  overflow")], bf16
