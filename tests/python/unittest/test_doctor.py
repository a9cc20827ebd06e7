"""amp.doctor on models built to overflow / underflow in float16: findings, gradients, advice, CLI."""
import subprocess
import sys

import mxnet as mx
import numpy as np
import pytest

from mxnet.amp import diagnose, diagnose_block


def _model(weight_scale, input_scale=1.0):
    data = mx.sym.var("data")
    h = mx.sym.FullyConnected(data, num_hidden=16, name="big")
    h = mx.sym.Activation(h, act_type="relu", name="act")
    out = mx.sym.FullyConnected(h, num_hidden=4, name="head")
    rs = np.random.RandomState(0)
    args = {"big_weight": mx.nd.array(rs.uniform(0, 1, (16, 32)) * weight_scale),
            "big_bias": mx.nd.zeros(16), "head_weight": mx.nd.array(rs.uniform(-1, 1, (4, 16))),
            "head_bias": mx.nd.zeros(4)}
    batch = {"data": rs.uniform(0, 1, (8, 32)).astype(np.float32) * input_scale}
    return out, args, batch


def test_overflowing_op_is_found_first_with_advice():
    sym, args, batch = _model(weight_scale=8000.0)  # |big| ~ 32 * 0.25 * 8000 = 64000 .. 130000 > 65504
    report = diagnose(sym, args, {}, batch, "float16")
    assert [(f.node, f.op, f.kind) for f in report.findings][:1] == [("big", "FullyConnected", "overflow")]
    assert report.findings[0].fp32_max_abs > 65504
    advice = report.advice()
    assert advice[0] == "add these ops to extra_fp32_ops: amp.init('float16', extra_fp32_ops=['FullyConnected'])"
    assert "bfloat16" in advice[1]
    assert set(report.overflowing_grads) >= {"big_weight"}
    text = report.format()
    assert "overflow  big" in text and "advice:" in text


def test_same_model_is_bfloat16_safe():
    sym, args, batch = _model(weight_scale=8000.0)
    report = diagnose(sym, args, {}, batch, "bfloat16")
    assert report.findings == [] and report.overflowing_grads == []
    assert report.advice() == ["no problem found: the model is bfloat16-safe on this batch"]


def test_underflow_and_loss_scale_advice():
    sym, args, batch = _model(weight_scale=1.0, input_scale=1e-9)  # outputs ~1e-8 < fp16's smallest 6e-8
    report = diagnose(sym, args, {}, batch, "float16", loss_scale=2.0 ** 24)
    assert ("big", "underflow") in [(f.node, f.kind) for f in report.findings]
    assert any(line.startswith("outputs underflow to zero in float16") for line in report.advice())
    grad_line = [line for line in report.advice() if line.startswith("gradients overflow at loss scale")]
    assert grad_line and "LossScaler(init_scale=" in grad_line[0]


def test_diagnose_block():
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(8, in_units=4), mx.gluon.nn.Dense(2, in_units=8))
    net.initialize(mx.init.Constant(3000.0))
    report = diagnose_block(net, mx.nd.ones((2, 4)), "float16")
    assert report.findings and report.findings[0].kind == "overflow"


def test_cli_report_and_errors(tmp_path):
    sym, args, batch = _model(weight_scale=8000.0)
    prefix = str(tmp_path / "net")
    sym.save(prefix + "-symbol.json")
    mx.nd.save(prefix + "-0000.params", {"arg:" + k: v for k, v in args.items()})
    np.save(str(tmp_path / "batch.npy"), batch["data"])
    cmd = [sys.executable, "-m", "mxnet.amp", "doctor", "--symbol", prefix + "-symbol.json",
           "--params", prefix + "-0000.params"]
    ok = subprocess.run(cmd + ["--input-shape", "8,32", "--data", str(tmp_path / "batch.npy")],
                        capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr
    assert "overflow  big" in ok.stdout and "extra_fp32_ops=['FullyConnected']" in ok.stdout
    for extra, message in ((["--input-shape", "8,x"], "bad --input-shape '8,x': expected positive integers"),
                           (["--input-shape", "4,32", "--data", str(tmp_path / "batch.npy")],
                            "--data has shape (8, 32) for data but --input-shape is (4, 32)"),
                           (["--input-shape", "8,32", "--input-shape", "8,4"],
                            "2 --input-shape given but the model has 1 inputs (data)"),
                           ([], "give --input-shape (one per input: data) or --data"),
                           (["--input-shape", "8,32", "--data", str(tmp_path / "missing.npy")],
                            "no such file")):
        bad = subprocess.run(cmd + extra, capture_output=True, text=True, timeout=300)
        lines = [line for line in bad.stderr.splitlines() if line.strip()]
        assert bad.returncode == 2 and len(lines) == 1 and message in lines[0], bad.stderr


def test_ops_after_the_overflow_that_commute_with_rounding_are_not_causes():
    # big overflows float16; relu and reshape only pass its values on (the rewrite rounds after them).
    data = mx.sym.var("data")
    h = mx.sym.reshape(mx.sym.Activation(mx.sym.FullyConnected(data, num_hidden=16, name="big"), act_type="relu",
                                         name="act"), shape=(0, -1), name="resh")
    sym = mx.sym.FullyConnected(h, num_hidden=4, name="head")
    _, args, batch = _model(weight_scale=8000.0)
    report = diagnose(sym, args, {}, batch, "float16")
    assert [(f.node, f.kind) for f in report.findings] == [("big", "overflow")]
    assert report.advice()[0] == ("add these ops to extra_fp32_ops: "
                                  "amp.init('float16', extra_fp32_ops=['FullyConnected'])")


def _bn_cnn(overflow):
    """Conv2D -> BatchNorm -> relu -> Dense; ``overflow`` scales the conv weights past float16's range."""
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Conv2D(8, 3, in_channels=3), mx.gluon.nn.BatchNorm(in_channels=8),
            mx.gluon.nn.Activation("relu"), mx.gluon.nn.Dense(4))
    net.initialize(mx.init.Uniform(0.1))
    x = mx.nd.array(np.random.RandomState(1).uniform(0, 1, (2, 3, 8, 8)))
    net(x)
    conv = net[0].weight
    conv.set_data(mx.nd.abs(conv.data()) * overflow)
    return net, x


def test_batchnorm_model_overflow_is_attributed_to_the_convolution():
    net, x = _bn_cnn(overflow=1e5)  # |conv| ~ 27 * 0.05 * 0.5 * 1e5 = 67500 on average, > 65504
    stats = {k: v.data().asnumpy() for k, v in net.collect_params(".*running.*").items()}
    report = diagnose_block(net, x, "float16")
    assert [(f.op, f.kind) for f in report.findings] == [("Convolution", "overflow")]
    assert report.findings[0].node == net[0].name + "_fwd" and report.findings[0].fp32_max_abs > 65504
    assert report.advice()[0] == ("add these ops to extra_fp32_ops: "
                                  "amp.init('float16', extra_fp32_ops=['Convolution'])")
    for k, v in net.collect_params(".*running.*").items():  # the training-mode gradient run used copies
        assert np.array_equal(v.data().asnumpy(), stats[k])
    assert diagnose_block(net, x, "bfloat16").findings == []


def test_numpy_mode_block():
    mx.npx.set_np()
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(8, in_units=4), mx.gluon.nn.BatchNorm(in_channels=8), mx.gluon.nn.Dense(2))
    net.initialize(mx.init.Constant(3000.0))
    report = diagnose_block(net, mx.np.ones((2, 4)), "float16")
    assert report.findings[0].kind == "overflow" and report.findings[0].op == "FullyConnected"


def test_several_inputs_and_outputs():
    a, b = mx.sym.var("a"), mx.sym.var("b")
    big = mx.sym.FullyConnected(a, num_hidden=4, no_bias=True, name="big")
    small = mx.sym.FullyConnected(b, num_hidden=4, no_bias=True, name="small")
    sym = mx.sym.Group([mx.sym.relu(big, name="r"), small + big])
    args = {"big_weight": mx.nd.ones((4, 8)) * 1e4, "small_weight": mx.nd.ones((4, 8))}
    batch = {"a": np.ones((2, 8), np.float32), "b": np.ones((2, 8), np.float32)}
    report = diagnose(sym, args, {}, batch, "float16", loss_scale=2.0 ** 14)
    assert [(f.node, f.kind) for f in report.findings] == [("big", "overflow")]
    assert report.overflowing_grads == ["big_weight"]  # 2 heads * 2 rows * 2**14 = 65536; small_weight: 32768
    try:
        diagnose(sym, args, {}, {"a": batch["a"], "c": batch["b"]}, "float16")
    except ValueError as err:
        assert str(err) == "diagnose: no value for b; no input named c; the model's data inputs are a, b"
    else:
        raise AssertionError("a missing input was accepted")


def test_converted_model_is_diagnosed_as_its_float32_model():
    from mxnet import amp
    net, x = _bn_cnn(overflow=1e5)
    converted = amp.convert_hybrid_block(net, x, "float16", cast_params_offline=True, emulate=True)
    assert "amp_round" in converted._cached_graph[1].tojson()  # the library's op
    report = diagnose_block(converted, x, "float16")
    assert [(f.op, f.kind) for f in report.findings] == [("Convolution", "overflow")]
    inputs, sym = net._cached_graph
    params = {p.name: p.data() for p in net.collect_params().values()}
    aux = {k: params.pop(k) for k in sym.list_auxiliary_states()}
    # A native float16 graph (amp_cast nodes, float16 weights) does not run on a CPU; its float32 model does.
    sym16, args16, aux16 = amp.convert_model(sym, params, aux, "float16", cast_params_offline=True, emulate=False)
    assert np.float16 in {v.dtype for v in args16.values()}
    report = diagnose(sym16, args16, aux16, {"data": x.asnumpy()}, "float16")
    assert [(f.op, f.kind) for f in report.findings] == [("Convolution", "overflow")]


def test_sync_batchnorm_model():
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Conv2D(8, 3, in_channels=3), mx.gluon.contrib.nn.SyncBatchNorm(in_channels=8),
            mx.gluon.nn.Dense(4))
    net.initialize(mx.init.Uniform(0.1))
    x = mx.nd.array(np.random.RandomState(1).uniform(0, 1, (2, 3, 8, 8)))
    net(x)
    net[0].weight.set_data(mx.nd.abs(net[0].weight.data()) * 1e5)
    assert "_contrib_SyncBatchNorm" in net(mx.sym.var("data")).tojson()
    report = diagnose_block(net, x, "float16")
    assert [(f.op, f.kind) for f in report.findings] == [("Convolution", "overflow")]


def test_library_kernels_are_reported_as_the_mxnet_ops_they_replace():
    # 3.4e38 is finite in float32 but past bfloat16's largest value (3.3895e38): rounding it gives inf
    from mxnet import amp
    net = mx.gluon.nn.Dense(2, in_units=1, use_bias=False)
    net.initialize(mx.init.Constant(3.4e38))
    net.hybridize()
    x = mx.nd.ones((1, 1))
    converted = amp.convert_hybrid_block(net, x, "bfloat16", emulate=True, cast_params_offline=False)  # cast per call
    if "amp_fully_connected" not in converted._cached_graph[1].tojson():
        pytest.skip("the library's oneDNN 3 kernels did not load here")
    report = diagnose_block(converted, x, "bfloat16")
    assert [(f.op, f.kind) for f in report.findings] == [("FullyConnected", "overflow")]
    assert report.advice()[0] == ("add these ops to extra_fp32_ops: "
                                  "amp.init('bfloat16', extra_fp32_ops=['FullyConnected'])")
