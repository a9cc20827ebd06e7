"""The main job: AMP vs fp32 on the digits data, checkpoint resume, table and report plots."""
import io
import os
import subprocess
import sys


from mxnet import amp
from mxnet.amp.core import cpu
from mxnet.amp.cli.demo import DemoConfig, run_demo

PNG = b"\x89PNG\r\n\x1a\n"


def test_demo_trains_resumes_and_reports(tmp_path):
    out = io.StringIO()
    result = run_demo(DemoConfig(epochs=3, out_dir=str(tmp_path)), out)
    text = out.getvalue()
    klass = cpu.cpu_class()  # the first line: the CPU class and what bfloat16 does there
    assert text.splitlines()[0].startswith("CPU class (%s) %s: bfloat16 is %s here" % (klass.name, klass.title,
                                                                                       klass.bf16))
    assert ("target_dtype='auto' would train in float32 here" in text.splitlines()[0]) == (klass.name in "ab")
    fp32, bf16 = result["float32"], result["bfloat16"]
    assert fp32["accuracy"][-1] > 0.6 and bf16["accuracy"][-1] > 0.6, (fp32["accuracy"], bf16["accuracy"])
    assert bf16["loss"][-1] < 0.5 * bf16["loss"][0]
    assert bf16["resumed_at"] == 22
    # the whole scaler state travels with the checkpoint, counters included (a fresh scaler has steps 0), and the
    # optimizer's update count with it
    assert bf16["scaler_loaded"] == bf16["scaler_saved"] and bf16["scaler_saved"]["steps"] == 22
    assert bf16["updates_loaded"] == bf16["updates_saved"] == 22
    assert "checkpoint saved and reloaded into a new Trainer: loss scale %g -> %g" % (
        bf16["scale_saved"], bf16["scale_loaded"]) in text
    for row in ("final test accuracy", "seconds per epoch (median)", "skipped steps",
                "loss scale at save / after load", "parameter bytes (training)", "converted model: test accuracy",
                "ONNX in onnxruntime: accuracy"):
        assert row in text
    infer = result["inference"]
    assert abs(infer["accuracy"] - bf16["accuracy"][-1]) <= 0.02  # same weights, inference graph
    # within two bfloat16 roundings of max |output|: the two runtimes compute float32 values a few ulps apart, a
    # value next to a rounding boundary may round to either neighbour, and a hidden layer's carries to the output
    assert abs(infer["onnx_accuracy"] - infer["accuracy"]) <= 0.01 and infer["onnx_deviation"] < 2 ** -7
    assert "%.3f" % bf16["accuracy"][-1] in text
    assert os.path.getsize(infer["onnx_path"]) > 10000
    for name in ("loss.png", "loss_scale.png", "precision_map.png"):
        with open(os.path.join(str(tmp_path), name), "rb") as f:
            assert f.read(8) == PNG, name
    assert not amp.is_enabled()  # the demo leaves AMP off


def test_demo_cli_rejects_bad_options():
    proc = subprocess.run([sys.executable, "-m", "mxnet.amp", "demo", "--epochs", "0"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 2 and "expected a positive integer, got '0'" in proc.stderr
    assert "Traceback" not in proc.stderr
