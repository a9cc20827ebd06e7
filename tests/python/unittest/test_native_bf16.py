"""The native bfloat16 path (oneDNN on AVX-512 CPUs): graph rules proven on every machine, numerics where the
CPU runs bfloat16 natively (``requires_native_bf16`` skips with a reason elsewhere).

Rules: ops whose bfloat16 kernel failed the value probe (``lists/native_bf16_cpu.json``) never get a bfloat16
input; ops without a native kernel run in plain float32 there (no rounding); outputs come back in float32.
"""
import json
import subprocess
import sys

import numpy as np
import pytest

import mxnet as mx
from mxnet import amp, autograd, gluon
from mxnet.gluon import nn
from mxnet.gluon.model_zoo import vision
from mxnet.amp import lists
from mxnet.amp.inference import blocks, convert as C
from mxnet.amp.graph.infer import infer_entry_dtypes
from mxnet.amp.graph.rewrite import rewrite_symbol
from mxnet.amp.base.dtypes import BFLOAT16 as BF16
from mxnet.amp.core.policy import make_policy

from amp_testing import bf16_round, requires_native_bf16, requires_native_plan


class Encoder(gluon.HybridBlock):
    """Post-LN transformer encoder block: multi-head attention with transposes and batch_dot, FFN."""

    def __init__(self, units=64, heads=4, hidden=128, **kwargs):
        super().__init__(**kwargs)
        self.units, self.heads = units, heads
        with self.name_scope():
            self.q, self.k, self.v, self.o = (nn.Dense(units, flatten=False) for _ in range(4))
            self.f1 = nn.Dense(hidden, flatten=False, activation="relu")
            self.f2 = nn.Dense(units, flatten=False)
            self.n1, self.n2 = nn.LayerNorm(), nn.LayerNorm()

    def hybrid_forward(self, F, x):
        h, d = self.heads, self.units // self.heads

        def split(t):
            return F.reshape(F.transpose(F.reshape(t, shape=(0, 0, h, d)), axes=(0, 2, 1, 3)), shape=(-3, 0, 0))
        att = F.softmax(F.batch_dot(split(self.q(x)), split(self.k(x)), transpose_b=True) / np.sqrt(d))
        o = F.reshape(F.batch_dot(att, split(self.v(x))), shape=(-4, -1, h, 0, 0))
        o = F.reshape(F.transpose(o, axes=(0, 2, 1, 3)), shape=(0, 0, -3))
        x = self.n1(x + self.o(o))
        return self.n2(x + self.f2(self.f1(x)))


def _encoder():
    mx.random.seed(0)
    net = Encoder()
    net.initialize(mx.init.Xavier())
    net.hybridize()
    x = mx.nd.array(np.random.RandomState(0).uniform(-1, 1, (2, 16, 64)))
    return net, x


def _resnet(size=64):
    mx.random.seed(0)
    net = vision.resnet18_v1(classes=10)
    net.initialize(mx.init.Xavier(magnitude=2))
    x = mx.nd.array(np.random.RandomState(1).uniform(0, 1, (2, 3, size, size)))
    net(x)
    rng = np.random.RandomState(2)
    for p in net.collect_params().values():  # statistics that make BatchNorm matter
        if p.name.endswith(("running_var", "gamma")):
            p.set_data(mx.nd.array(rng.uniform(0.5, 1.5, p.shape)))
        elif p.name.endswith(("running_mean", "beta")):
            p.set_data(mx.nd.array(rng.uniform(-0.2, 0.2, p.shape)))
    net.hybridize()
    return net, x


def _deviation(got, ref):
    return float(np.abs(got - ref).max() / np.abs(ref).max())


def _input_dtypes(sym, input_dtypes):
    """``[(node op, [dtype of each input])]`` of a graph, by MXNet's type inference."""
    gdict = json.loads(sym.tojson(remove_amp_cast=False))
    dtypes = infer_entry_dtypes(gdict, input_dtypes)
    return [(n["op"], [dtypes.get((s, i)) for s, i, _ in n["inputs"]]) for n in gdict["nodes"]]


_BROKEN = {op for run in lists.native_evidence()["runs"] for op, row in run["ops"].items()
           if row["verdict"] in lists.BAD_VERDICTS}


# ---- every machine: the structure of native graphs -----------------------------------------------------
@pytest.mark.parametrize("fuse", [True, False])
def test_converted_native_graph_keeps_bf16_away_from_broken_kernels(fuse):
    net, x = _encoder()
    inputs, sym, params = blocks.block_graph(net, [x])
    out = C.convert(sym, params, {}, "bfloat16", emulate=False, fuse=fuse, cast_params_offline=True,
                    kernels="mxnet")  # the library's kernels: test_matmul_kernels.py
    dtypes = dict({k: v.dtype for k, v in out.arg_params.items()}, data=np.float32)
    nodes = _input_dtypes(out.symbol, dtypes)
    # the head split's transposes swap two axes: SwapAxis moves the bfloat16 values (lists.transpose_swaps)
    assert any(op == "SwapAxis" and ins == ["bfloat16"] for op, ins in nodes)
    for op, ins in nodes:
        if op in _BROKEN:
            assert "bfloat16" not in ins, (op, ins)
    assert any("bfloat16" in ins for op, ins in nodes if op in ("FullyConnected", "_sg_mkldnn_fully_connected"))


def test_amp_init_graph_keeps_bf16_away_from_broken_kernels():
    net, x = _encoder()
    _, sym, _ = blocks.block_graph(net, [x])
    low, _ = rewrite_symbol(sym, make_policy("bfloat16", emulate=False), "cpu")
    for op, ins in _input_dtypes(low, {"data": np.float32}):
        if op in _BROKEN:
            assert "bfloat16" not in ins, (op, ins)


def test_native_device_runs_ops_without_kernels_in_plain_float32(monkeypatch):
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")  # as on an AVX-512 CPU, whatever this one is
    net, x = _encoder()
    inputs, sym, params = blocks.block_graph(net, [x])
    out = C.convert(sym, params, {}, "bfloat16", fuse=False, kernels="mxnet")
    assert not out.summary.emulated and dict(out.summary.lp16_modes)["float32"] == 2  # two batch_dots
    nodes = _input_dtypes(out.symbol, {"data": np.float32})
    assert all(ins == ["float32", "float32"] for op, ins in nodes if op == "batch_dot")
    assert not any(op == "amp_round" for op, _ in nodes)
    assert "in float32 (no bfloat16 kernel" in out.summary.format()


@pytest.mark.parametrize("keep", [False, True])
def test_outputs_come_back_in_float32_unless_kept(keep):
    net, x = _resnet(32)
    inputs, sym, params = blocks.block_graph(net, [x])
    args = {k: v for k, v in params.items() if k in sym.list_arguments()}
    aux = {k: v for k, v in params.items() if k in sym.list_auxiliary_states()}
    out = C.convert(sym, args, aux, "bfloat16", emulate=False, keep_lp16_outputs=keep)
    dtypes = dict({k: v.dtype for k, v in dict(out.arg_params, **out.aux_params).items()}, data=np.float32)
    heads = infer_entry_dtypes(json.loads(out.symbol.tojson(remove_amp_cast=False)), dtypes)
    gdict = json.loads(out.symbol.tojson(remove_amp_cast=False))
    assert [heads[tuple(h[:2])] for h in gdict["heads"]] == ["bfloat16" if keep else "float32"]


def test_hardware_report_names_dtypes_and_ops():
    text = subprocess.run([sys.executable, "-m", "mxnet.amp", "hardware"], capture_output=True, text=True,
                          check=True, timeout=300).stdout
    assert "bfloat16 on CPU: " in text and "float16 on CPU: emulated" in text
    assert "kept in float32: bfloat16 kernel failed the value probe" in text and "transpose" in text
    # the native plan's report (classes (c) and (d)); class (b) has MXNet's bfloat16 kernels but emulates by default
    assert ("low precision ops in float32 here (no bfloat16 kernel)" in text) == amp.core.support.plans_native(
        "bfloat16", "cpu")
    if not amp.core.support.native_support("bfloat16", "cpu"):
        bad = subprocess.run([sys.executable, "-m", "mxnet.amp", "hardware", "--probe"], capture_output=True,
                             text=True, timeout=300)
        assert bad.returncode == 2 and "--probe needs a CPU where oneDNN runs bfloat16 natively" in bad.stderr


# ---- AVX-512: the native kernels ------------------------------------------------------------------------
@requires_native_bf16
def test_value_probe_confirms_the_evidence_here():
    from mxnet.amp.cli.probe import probe_values
    from mxnet.amp.cli.hardware import probe_verdict
    rows = probe_values(["transpose", "Convolution", "FullyConnected", "BatchNorm", "Pooling", "Concat",
                         "_np_transpose", "SwapAxis", "elemwise_add"])
    assert rows["transpose"]["verdict"] == "crash"  # oneDNN's bf16 transpose: heap corruption, every shape
    assert all(rows[op]["verdict"] == "ok" for op in rows if op != "transpose"), rows
    ok, text = probe_verdict(rows)
    assert ok and text.startswith("verdict: OK")


@requires_native_bf16
def test_conv_net_native_is_as_accurate_as_emulation():
    net, x = _resnet()
    ref = net(x).asnumpy()
    native = blocks.convert_hybrid_block(net, x, "bfloat16", cast_params_offline=True)
    out = native(x)
    assert out.dtype == np.float32
    dev_native = _deviation(out.asnumpy(), ref)
    dev_emulated = _deviation(blocks.convert_hybrid_block(net, x, "bfloat16", emulate=True)(x).asnumpy(), ref)
    # One rounding of the folded weights: oneDNN's own conv+BatchNorm fusion gave ~7x emulation's deviation.
    assert dev_native <= 2 * dev_emulated and dev_native < 2e-2, (dev_native, dev_emulated)
    unfused = blocks.convert_hybrid_block(net, x, "bfloat16", cast_params_offline=True, fuse=False)
    unfused(x).wait_to_read()  # oneDNN reorders unfused convolutions' bf16 weights in place
    for block in (native, unfused):  # parameters readable whatever layout oneDNN left them in
        for name, p in block.collect_params().items():
            assert np.isfinite(p.data().asnumpy().astype(np.float64)).all() if p.dtype == np.float32 else \
                np.isfinite(mx.nd.amp_cast(p.data(), dtype="float32").asnumpy()).all(), name
            p.data().asnumpy()


@requires_native_bf16
@pytest.mark.parametrize("fuse", [True, False])
def test_transformer_block_native_runs_and_matches(fuse):
    net, x = _encoder()
    ref = net(x).asnumpy()
    low = blocks.convert_hybrid_block(net, x, "bfloat16", cast_params_offline=True, fuse=fuse)
    got = low(x)
    assert got.dtype == np.float32
    assert _deviation(got.asnumpy(), ref) <= 5e-3


@requires_native_plan
def test_numpy_mode_block_with_bf16_params_runs_natively():
    mx.npx.set_np()
    try:
        net = nn.HybridSequential()
        net.add(nn.Conv2D(16, 3, padding=1), nn.BatchNorm(), nn.Activation("relu"), nn.Dense(4))
        net.initialize()
        x = mx.np.array(np.random.RandomState(4).uniform(-1, 1, (2, 3, 8, 8)).astype(np.float32))
        ref = net(x).asnumpy()
        low = blocks.convert_hybrid_block(net, x, "bfloat16", cast_params_offline=True)
        assert any("bfloat16" in str(p.dtype) for p in low.collect_params().values())
        got = low(x)
        assert isinstance(got, mx.np.ndarray) and got.dtype == np.float32
        assert _deviation(got.asnumpy(), ref) < 2e-2
    finally:
        mx.npx.reset_np()


@requires_native_bf16
def test_native_graph_exports_to_onnx(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    net, x = _resnet(32)
    low = blocks.convert_hybrid_block(net, x, "bfloat16", cast_params_offline=True, fuse=False)
    ref = low(x).asnumpy()  # runs first: oneDNN reorders the bf16 weights in place
    path = amp.export_onnx(low, None, [x.shape], str(tmp_path / "m.onnx"))
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    got = sess.run(None, {sess.get_inputs()[0].name: x.asnumpy()})[0]
    assert _deviation(got, ref) <= 1e-2


@requires_native_bf16
def test_amp_init_trains_resnet_block_close_to_float32():
    def run(use_amp, emulate=None):
        amp.reset()
        if use_amp:
            amp.init("bfloat16", emulate=emulate)
        mx.random.seed(3)
        net = nn.HybridSequential()
        net.add(nn.Conv2D(16, 3, padding=1), nn.BatchNorm(), nn.Activation("relu"),
                nn.Conv2D(16, 3, padding=1), nn.BatchNorm(), nn.Activation("relu"),
                nn.GlobalAvgPool2D(), nn.Dense(4))
        net.initialize(mx.init.Xavier())
        net.hybridize()
        trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.05})
        if use_amp:
            amp.init_trainer(trainer)
        rng = np.random.RandomState(5)
        x = mx.nd.array(rng.uniform(-1, 1, (8, 3, 8, 8)))
        y = mx.nd.array(rng.randint(0, 4, 8))
        loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
        losses, grads = [], []
        for _ in range(4):
            with autograd.record():
                loss = loss_fn(net(x), y).mean()
                if use_amp:
                    with amp.scale_loss(loss, trainer) as scaled:
                        autograd.backward(scaled)
                else:
                    loss.backward()
            grads.append(mx.nd.amp_cast(net[0].weight.grad(), dtype="float32").asnumpy())
            trainer.step(1)
            losses.append(float(loss.asnumpy()))
        return np.array(losses), grads[0]  # the first step's gradient: both runs from the same weights
    ref_loss, ref_grad = run(False)
    loss, grad = run(True)
    _, emulated_grad = run(True, emulate=True)
    assert np.isfinite(loss).all() and loss[-1] < loss[0]
    np.testing.assert_allclose(loss, ref_loss, rtol=3e-2)
    # bfloat16's own error (emulation: float32 kernels on rounded values) bounds the native kernels' error
    assert _deviation(grad, ref_grad) <= 1.25 * _deviation(emulated_grad, ref_grad) + 1e-3


@requires_native_plan
def test_amp_init_adds_the_gradients_of_tensors_read_more_than_once_through_fanout_copies():
    """The encoder block's input, cast to bfloat16, is read by the three projections, the first LayerNorm's output by
    the FFN and a residual sum: their readers' gradients are added by amp_fanout's backward (in float32, rounded
    once), not by MXNet's add_n, and the gradients match float32 training's within bfloat16's own error."""
    def grads(use_amp, emulate=None):
        amp.reset()
        if use_amp:
            amp.init("bfloat16", emulate=emulate)
        net, x = _encoder()
        x.attach_grad()
        with autograd.record():
            out = net(x)
        out.backward(mx.nd.array(np.random.RandomState(1).uniform(-1, 1, out.shape)))
        graph = json.loads(net._cached_graph[1].tojson(remove_amp_cast=False))
        fanouts = sorted(int(n["attrs"]["num_outputs"]) for n in graph["nodes"] if n["op"] == "amp_fanout")
        return x.grad.asnumpy(), net.q.weight.grad().asnumpy(), fanouts
    ref_dx, ref_dw, ref_fanouts = grads(False)
    dx, dw, fanouts = grads(True)
    emulated_dx, emulated_dw, emulated_fanouts = grads(True, emulate=True)
    assert ref_fanouts == emulated_fanouts == [] and fanouts == [2, 3]
    assert _deviation(dx, ref_dx) <= 1.25 * _deviation(emulated_dx, ref_dx) + 1e-3
    assert _deviation(dw, ref_dw) <= 1.25 * _deviation(emulated_dw, ref_dw) + 1e-3


@requires_native_bf16
def test_hardware_probe_gives_a_verdict_here():
    proc = subprocess.run([sys.executable, "-m", "mxnet.amp", "hardware", "--probe", "--dtype", "bfloat16"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1].startswith("verdict: OK: every op the lists feed bfloat16")


def _bn_graph():
    x = mx.sym.var("data")
    h = mx.sym.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=8, no_bias=True, name="conv")
    h = mx.sym.BatchNorm(h, fix_gamma=False, name="bn")
    return mx.sym.FullyConnected(mx.sym.relu(h, name="relu"), num_hidden=3, name="fc")


@pytest.mark.parametrize("emulate", [None, True])
def test_batchnorm_runs_in_float32_between_casts_where_bf16_is_native(monkeypatch, emulate):
    # lists.float32_kernels: MXNet's bfloat16 CPU BatchNorm is slower than its float32 one. The rewriter casts
    # its input to float32 and its output back, so the graph after it is what it would be in bfloat16
    # (upstream code reading the FullyConnected weight's dtype sees bfloat16); emulation is unchanged. That is
    # graphs with MXNet's kernels and the imperative path: graphs with the library's kernels run BatchNorm on its
    # amp_batch_norm in bfloat16 instead (lists.neutral_kernels, tests/python/unittest/test_batch_norm.py).
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")
    assert lists.float32_kernels("bfloat16", "cpu") >= {"BatchNorm", "_npx_batch_norm"}
    assert not lists.float32_kernels("float16", "cpu") and not lists.float32_kernels("bfloat16", "gpu")
    # (kernels="auto" runs it on the library's amp_batch_norm in bfloat16 instead: test_batch_norm.py)
    low, _ = rewrite_symbol(_bn_graph(), make_policy("bfloat16", emulate=emulate, kernels="mxnet"), "cpu",
                            inference=True)
    g = json.loads(low.tojson(remove_amp_cast=False))
    nodes = g["nodes"]
    dtypes = infer_entry_dtypes(g, {"data": "float32"})
    bn = next(i for i, n in enumerate(nodes) if n["name"] == "bn")
    relu = next(n for n in nodes if n["name"] == "relu")
    relu_in = tuple(relu["inputs"][0][:2])
    if emulate:
        assert dtypes[tuple(nodes[bn]["inputs"][0][:2])] == "float32" and relu_in == (bn, 0)
        return
    assert dtypes[tuple(nodes[bn]["inputs"][0][:2])] == "float32"
    assert nodes[relu_in[0]]["op"] == "amp_cast" and dtypes[relu_in] == "bfloat16"
    assert nodes[relu_in[0]]["inputs"][0][0] == bn
    fc = next(n for n in nodes if n["name"] == "fc")
    assert {dtypes[tuple(e[:2])] for e in fc["inputs"]} == {"bfloat16"}
    # the same imperatively under amp.init: BatchNorm sees float32, its output is bfloat16 again
    real = mx.nd.BatchNorm
    amp.init("bfloat16")
    x = mx.nd.amp_cast(mx.nd.array(np.random.RandomState(0).uniform(-1, 1, (2, 4, 3, 3))), dtype=BF16)
    gamma, beta, mean, var = mx.nd.ones(4), mx.nd.zeros(4), mx.nd.zeros(4), mx.nd.ones(4)
    y = mx.nd.BatchNorm(x, gamma, beta, mean, var, use_global_stats=True)
    assert mx.nd.BatchNorm is not real and y.dtype == BF16
    ref = real(mx.nd.amp_cast(x, dtype="float32"), gamma, beta, mean, var, use_global_stats=True)
    np.testing.assert_array_equal(mx.nd.amp_cast(y, dtype="float32").asnumpy(),
                                  mx.nd.amp_cast(mx.nd.amp_cast(ref, dtype=BF16), dtype="float32").asnumpy())


@pytest.mark.parametrize("emulate", [None, True])
def test_relu_on_bf16_becomes_onednn_activation_where_bf16_is_native(monkeypatch, emulate):
    # lists.native_substitutes: MXNet's relu has no oneDNN path (mshadow's emulated bfloat16 arithmetic, 9x
    # slower than Activation(relu) forward + backward); the rewriter swaps in the same function's oneDNN kernel
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")
    assert lists.native_substitutes("bfloat16", "cpu")["relu"] == ("Activation", {"act_type": "relu"})
    assert not lists.native_substitutes("float16", "cpu") and not lists.native_substitutes("bfloat16", "gpu")
    x = mx.sym.var("data")
    sym = mx.sym.relu(mx.sym.FullyConnected(x, num_hidden=6, name="fc"), name="r")
    # MXNet's FullyConnected: the library's would take the ReLU as its act_type (test_matmul_kernels.py)
    low, _ = rewrite_symbol(sym, make_policy("bfloat16", emulate=emulate, kernels="mxnet"), "cpu")
    relu = next(n for n in json.loads(low.tojson(remove_amp_cast=False))["nodes"] if n["name"] == "r")
    if emulate:  # float32 values on an emulated path: MXNet's relu stays
        assert relu["op"] == "relu"
        return
    assert (relu["op"], relu["attrs"]["act_type"]) == ("Activation", "relu")


@requires_native_plan
def test_relu_substituted_on_bf16_gives_relu_of_the_rounded_values():
    # the values need MXNet's bfloat16 kernels: checked where the CPU has them, skipped with the reason elsewhere
    x = mx.sym.var("data")
    sym = mx.sym.relu(mx.sym.FullyConnected(x, num_hidden=6, name="fc"), name="r")
    low, _ = rewrite_symbol(sym, make_policy("bfloat16", kernels="mxnet"), "cpu")
    relu = next(n for n in json.loads(low.tojson(remove_amp_cast=False))["nodes"] if n["name"] == "r")
    assert relu["op"] == "Activation"
    values = np.random.RandomState(1).uniform(-1, 1, (4, 5)).astype(np.float32)
    args = {"data": mx.nd.array(values), "fc_weight": mx.nd.array(np.eye(6, 5, dtype=np.float32)),
            "fc_bias": mx.nd.zeros(6)}
    got = low.eval(ctx=mx.cpu(), **args)[0].astype("float32").asnumpy()
    np.testing.assert_array_equal(got[:, :5], np.maximum(bf16_round(values), 0))


# ---- transposes of bfloat16 data: axis swaps (lists.transpose_swaps) ---------------------------------------
_MOVES = ("transpose", "_np_transpose", "SwapAxis", "_npi_swapaxes")


def _swapped(sym, **policy):
    low, _ = rewrite_symbol(sym, make_policy("bfloat16", **dict({"emulate": False}, **policy)), "cpu")
    return next(n for n in json.loads(low.tojson(remove_amp_cast=False))["nodes"] if n["op"] in _MOVES), low


def test_transposes_of_bfloat16_that_swap_two_axes_run_as_swapaxis():
    # MXNet's oneDNN bfloat16 transpose corrupts the heap (so transpose is a float32 op); SwapAxis moves bfloat16
    # values correctly: a head split's transpose keeps the heads in bfloat16, with no cast around it
    assert lists.transpose_swaps("bfloat16", "cpu") == {"transpose": "SwapAxis"}
    assert not lists.transpose_swaps("float16", "cpu") and not lists.transpose_swaps("bfloat16", "gpu")
    fc = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=24, flatten=False, name="fc")
    heads = mx.sym.reshape(fc, shape=(0, 0, 4, 6))
    node, low = _swapped(mx.sym.transpose(heads, axes=(0, 2, 1, 3)))
    assert (node["op"], node["attrs"]) == ("SwapAxis", {"dim1": "1", "dim2": "2"})
    assert ("SwapAxis", ["bfloat16"]) in _input_dtypes(low, {"data": np.float32})
    rng = np.random.RandomState(5)
    args = {"data": rng.uniform(-1, 1, (2, 3, 5)), "fc_weight": rng.uniform(-1, 1, (24, 5)), "fc_bias": np.zeros(24)}
    got = low.eval(ctx=mx.cpu(), **{k: mx.nd.array(v) for k, v in args.items()})[0]
    x = bf16_round(args["data"]).reshape(6, 5).astype(np.float64)
    y, scale = x @ args["fc_weight"].T, np.abs(x) @ np.abs(args["fc_weight"]).T
    # a bfloat16 output of float32 weights, read rounded to bfloat16 (classes (b)-(d)) or as they are (class (a))
    err = np.abs(got.asnumpy() - y.reshape(2, 3, 4, 6).transpose(0, 2, 1, 3))
    assert (err <= 2 ** -7 * scale.reshape(2, 3, 4, 6).transpose(0, 2, 1, 3)).all(), err.max()
    for axes in ((0, 2, 3, 1), ()):  # not one swap (or the reversal, which needs the rank): float32, as before
        assert _swapped(mx.sym.transpose(heads, axes=axes))[0]["op"] == "transpose"
    assert _swapped(mx.sym.transpose(mx.sym.var("data"), axes=(1, 0)))[0]["op"] == "transpose"  # float32 data
    assert _swapped(mx.sym.transpose(heads, axes=(0, 2, 1, 3)), emulate=True)[0]["op"] == "transpose"
    np_fc = mx.sym.npx.fully_connected(*(mx.sym.var(n).as_np_ndarray() for n in ("data", "w", "b")), num_hidden=24,
                                       flatten=False)
    node, low = _swapped(mx.sym.np.transpose(mx.sym.np.reshape(np_fc, (2, 3, 4, 6)), axes=(0, 2, 1, 3)))
    assert node["op"] == "_np_transpose"  # numpy mode's transpose runs bfloat16 natively
    assert ("_np_transpose", ["bfloat16"]) in _input_dtypes(low, {"data": np.float32})
