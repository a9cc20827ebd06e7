"""ONNX export of converted models, every export run in onnxruntime and compared with MXNet.

Tolerances (max abs error / max |MXNet output|):
* float16 ONNX (float16 kernels in onnxruntime) vs MXNet emulated float16 (float32 kernels, float16 rounding):
  5e-2 -- onnxruntime's CPU float16 kernels round intermediate results that MXNet's emulation keeps in float32
  (measured: 2.7e-2 on the transformer block, below 1e-3 on the others).
* bfloat16 'emulate' ONNX vs MXNet emulated bfloat16: 1e-3 (same rounding points, float32 compute in both;
  measured below 1e-6).
* bfloat16 'float16' / 'float32' ONNX vs MXNet bfloat16: 2e-2 (activations rounded differently or not at all;
  measured below 6e-3).
"""
import numpy as np
import pytest

import mxnet as mx
from mxnet import amp
from mxnet.gluon import nn, HybridBlock
import mxnet.amp.inference.onnx as amp_onnx
from mxnet.amp.inference.blocks import block_graph, convert_hybrid_block
from mxnet.amp.inference.convert import convert

from amp_testing import requires_native_bf16, requires_native_plan

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

TOL = {"float16": 5e-2, "emulate": 1e-3, "float16-from-bf16": 2e-2, "float32": 2e-2}


class _CNN(HybridBlock):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.body = nn.HybridSequential()
            self.body.add(nn.Conv2D(8, 3, padding=1), nn.BatchNorm(), nn.Activation("relu"),
                          nn.Conv2D(8, 3, padding=1, use_bias=False), nn.BatchNorm(), nn.Activation("relu"),
                          nn.MaxPool2D(2), nn.Flatten(), nn.Dense(10))

    def hybrid_forward(self, F, x):
        return self.body(x)


class _MobileNet(HybridBlock):
    """Depthwise-separable blocks with relu6, global pooling."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.stem = nn.Conv2D(8, 3, strides=2, padding=1, use_bias=False)
            self.bn0 = nn.BatchNorm()
            self.dw = nn.Conv2D(8, 3, padding=1, groups=8, use_bias=False)
            self.bn1 = nn.BatchNorm()
            self.pw = nn.Conv2D(16, 1, use_bias=False)
            self.bn2 = nn.BatchNorm()
            self.pool = nn.GlobalAvgPool2D()
            self.out = nn.Dense(5)

    def hybrid_forward(self, F, x):
        x = F.clip(self.bn0(self.stem(x)), 0, 6)
        x = F.clip(self.bn1(self.dw(x)), 0, 6)
        x = self.bn2(self.pw(x))
        return self.out(F.flatten(self.pool(x)))


class _MLP(HybridBlock):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.net = nn.HybridSequential()
            self.net.add(nn.Dense(32, activation="relu"), nn.Dense(32, activation="tanh"), nn.Dense(4))

    def hybrid_forward(self, F, x):
        return self.net(x)


class _Encoder(HybridBlock):
    """A transformer encoder block (2 heads) for inputs of shape (2, 5, 16)."""
    B, T, C, H = 2, 5, 16, 2

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.qkv = nn.Dense(3 * self.C, flatten=False)
            self.proj = nn.Dense(self.C, flatten=False)
            self.ln1 = nn.LayerNorm()
            self.ffn1 = nn.Dense(32, flatten=False, activation="relu")
            self.ffn2 = nn.Dense(self.C, flatten=False)
            self.ln2 = nn.LayerNorm()

    def hybrid_forward(self, F, x):
        B, T, C, H = self.B, self.T, self.C, self.H
        D = C // H

        def split_heads(t):
            t = F.transpose(F.reshape(t, shape=(B, T, H, D)), axes=(0, 2, 1, 3))
            return F.reshape(t, shape=(B * H, T, D))

        q, k, v = F.split(self.qkv(x), num_outputs=3, axis=2)
        att = F.softmax(F.batch_dot(split_heads(q), split_heads(k), transpose_b=True) / np.sqrt(D), axis=-1)
        o = F.batch_dot(att, split_heads(v))
        o = F.reshape(F.transpose(F.reshape(o, shape=(B, H, T, D)), axes=(0, 2, 1, 3)), shape=(B, T, C))
        x = self.ln1(x + self.proj(o))
        return self.ln2(x + self.ffn2(self.ffn1(x)))


class _InterleavedEncoder(HybridBlock):
    """GluonNLP's BERT layer layout: (T, B, C) data, one interleaved projection, MXNet's interleaved attention
    products (the library's amp_selfatt_* on bfloat16 CPUs), GELU."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.qkv = nn.Dense(48, flatten=False)
            self.proj = nn.Dense(16, flatten=False)
            self.ln1 = nn.LayerNorm()
            self.ffn1 = nn.Dense(32, flatten=False)
            self.ffn2 = nn.Dense(16, flatten=False)
            self.ln2 = nn.LayerNorm()

    def hybrid_forward(self, F, x):
        qkv = self.qkv(x)
        att = F.softmax(F.contrib.interleaved_matmul_selfatt_qk(qkv, heads=2), axis=-1)
        x = self.ln1(x + self.proj(F.contrib.interleaved_matmul_selfatt_valatt(qkv, att, heads=2)))
        return self.ln2(x + self.ffn2(F.LeakyReLU(self.ffn1(x), act_type="gelu")))


class _EncoderDecoderAttention(HybridBlock):
    """GluonNLP's encoder-decoder attention: queries from (Tq, B, C) data, keys and values interleaved from a
    shorter (Tk, B, C) memory (here the data's first 3 steps)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.q = nn.Dense(16, flatten=False)
            self.kv = nn.Dense(32, flatten=False)
            self.proj = nn.Dense(16, flatten=False)

    def hybrid_forward(self, F, x):
        q, kv = self.q(x), self.kv(F.slice_axis(x, axis=0, begin=0, end=3))
        att = F.softmax(F.contrib.interleaved_matmul_encdec_qk(q, kv, heads=2), axis=-1)
        return self.proj(F.contrib.interleaved_matmul_encdec_valatt(kv, att, heads=2))


MODELS = {"cnn_bn": (_CNN, (2, 3, 8, 8)), "mobilenet": (_MobileNet, (2, 3, 16, 16)),
          "mlp": (_MLP, (4, 20)), "transformer": (_Encoder, (2, 5, 16)),
          "bert_layer": (_InterleavedEncoder, (5, 2, 16)), "encdec_attention": (_EncoderDecoderAttention, (5, 2, 16))}


def _model(name):
    cls, shape = MODELS[name]
    mx.random.seed(0)
    net = cls()
    net.initialize(mx.init.Xavier())
    x = mx.nd.array(np.random.RandomState(0).uniform(-1, 1, shape).astype(np.float32))
    net(x)
    rng = np.random.RandomState(1)
    for param in net.collect_params().values():  # non-trivial BatchNorm statistics
        if param.name.endswith("running_mean"):
            param.set_data(mx.nd.array(rng.uniform(-0.2, 0.2, param.shape)))
        elif param.name.endswith("running_var"):
            param.set_data(mx.nd.array(rng.uniform(0.5, 1.5, param.shape)))
    return net, x


def _run_onnx(path, x):
    options = ort.SessionOptions()
    options.log_severity_level = 3
    sess = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return sess, sess.run(None, {sess.get_inputs()[0].name: x.asnumpy()})[0]


def _check(got, ref, tol):
    ref = ref.astype(np.float32)
    err = np.abs(got.astype(np.float32) - ref).max() / np.abs(ref).max()
    assert err <= tol, "relative deviation %.3g > %.3g" % (err, tol)


def test_converters_are_registered_by_conversion_and_taken_back_by_reset():
    from mxnet.onnx.mx2onnx._export_onnx import MXNetGraph
    original = MXNetGraph.create_onnx_graph_proto
    amp.reset()  # what the import registered is taken back too
    assert "amp_cast" not in MXNetGraph.registry_.get(12, {}) and MXNetGraph.create_onnx_graph_proto is original
    net, x = _model("mlp")
    convert_hybrid_block(net, x, "float16")
    for op in ("amp_cast", "amp_multicast", "amp_multi_cast", "amp_round"):
        assert op in MXNetGraph.registry_[12], op
    assert MXNetGraph.create_onnx_graph_proto is not original
    amp.reset()
    assert "amp_cast" not in MXNetGraph.registry_.get(12, {}) and MXNetGraph.create_onnx_graph_proto is original


@pytest.mark.parametrize("name", sorted(MODELS))
def test_float16_export_runs_in_onnxruntime(name, tmp_path):
    net, x = _model(name)
    low = convert_hybrid_block(net, x, "float16", cast_params_offline=True, emulate=False)
    path = amp_onnx.export_onnx(low, None, [x.shape], str(tmp_path / "m.onnx"))
    model = onnx.load(path)
    init_types = {i.data_type for i in model.graph.initializer if i.name.endswith("weight")}
    assert init_types == {onnx.TensorProto.FLOAT16}
    assert any(n.op_type == "Cast" for n in model.graph.node)
    sess, got = _run_onnx(path, x)
    assert sess.get_outputs()[0].type == "tensor(float)"  # keep_io_types
    ref = convert_hybrid_block(net, x, "float16", emulate=True)(x).asnumpy()
    _check(got, ref, TOL["float16"])


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("mode", ["emulate", "float16", "float32"])
def test_bfloat16_export_modes_run_in_onnxruntime(name, mode, tmp_path):
    net, x = _model(name)
    low = convert_hybrid_block(net, x, "bfloat16", cast_params_offline=True, fuse=False)
    ref = low(x).astype("float32").asnumpy()
    path = amp_onnx.export_onnx(low, None, [x.shape], str(tmp_path / "m.onnx"), bf16_mode=mode)
    _, got = _run_onnx(path, x)
    _check(got, ref, TOL["float16-from-bf16" if mode == "float16" else mode])


@requires_native_bf16  # the reference: the default plan, native where MXNet has bfloat16 kernels
def test_native_bfloat16_graph_exports_in_every_mode(tmp_path):
    # A graph for CPUs with bf16 kernels (weights stored bf16, ops read bf16): onnxruntime's CPU provider has
    # no bf16 kernels, so 'emulate' rewrites it to float32 compute with bf16 rounding.
    net, x = _model("cnn_bn")
    native = convert_hybrid_block(net, x, "bfloat16", cast_params_offline=True, emulate=False, fuse=False)
    ref = convert_hybrid_block(net, x, "bfloat16", fuse=False)(x).asnumpy()
    for mode in ("emulate", "float16", "float32"):
        path = amp_onnx.export_onnx(native, None, [x.shape], str(tmp_path / ("%s.onnx" % mode)), bf16_mode=mode)
        _, got = _run_onnx(path, x)
        _check(got, ref, TOL["float16-from-bf16" if mode == "float16" else mode])
    path = amp_onnx.export_onnx(native, None, [x.shape], str(tmp_path / "bf16.onnx"), bf16_mode="bfloat16")
    model = onnx.load(path)
    onnx.checker.check_model(model)
    assert any(n.op_type == "Cast" and n.attribute[0].i == onnx.TensorProto.BFLOAT16 for n in model.graph.node)


@requires_native_plan  # an emulated graph rounds the convolution's output before the clip: nothing fuses
def test_a_fused_relu6_exports_as_a_clip(tmp_path):
    """The default conversion folds MobileNet's BatchNorms and fuses its clips to [0, 6] into the convolutions
    (act_type="relu6"); the export writes each as the convolution then a Clip, with the same values."""
    import json
    net, x = _model("mobilenet")
    low = convert_hybrid_block(net, x, "bfloat16")
    nodes = json.loads(low._cached_graph[1].tojson(remove_amp_cast=False))["nodes"]
    if not any(n["op"] == "amp_convolution" for n in nodes):
        pytest.skip("the library's convolution does not run here (oneDNN 3 unavailable)")
    assert [n.get("attrs", {}).get("act_type") for n in nodes if n["op"] == "amp_convolution"].count("relu6") == 2
    assert not any(n["op"] == "clip" for n in nodes)
    ref = low(x).asnumpy()
    for mode in ("emulate", "float32"):
        path = amp_onnx.export_onnx(low, None, [x.shape], str(tmp_path / ("%s.onnx" % mode)), bf16_mode=mode)
        assert sum(n.op_type == "Clip" for n in onnx.load(path).graph.node) == 2
        _, got = _run_onnx(path, x)
        _check(got, ref, TOL[mode])


class _HardSwishNet(HybridBlock):
    """MobileNet v3's stem and squeeze-excitation gate (GluonCV's HardSwish and HardSigmoid)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.stem = nn.Conv2D(8, 3, padding=1)
            self.fc = nn.Conv2D(8, 1)
            self.out = nn.Dense(5)

    def hybrid_forward(self, F, x):
        y = self.stem(x)
        y = y * (F.clip(y + 3, 0, 6) / 6)
        gate = F.clip(self.fc(F.contrib.AdaptiveAvgPooling2D(y, output_size=1)) + 3, 0, 6) / 6
        return self.out(F.broadcast_mul(y, gate))


@requires_native_plan  # the library's convolutions with their fused activations
def test_fused_hard_swish_hard_sigmoid_and_gate_product_match_float32_and_export(tmp_path):
    import json
    net = _HardSwishNet()
    net.initialize(mx.init.Xavier())
    x = mx.nd.array(np.random.RandomState(0).uniform(-3, 3, (2, 3, 8, 8)))
    ref = net(x).asnumpy()
    low = convert_hybrid_block(net, x, "bfloat16")
    nodes = json.loads(low._cached_graph[1].tojson(remove_amp_cast=False))["nodes"]
    assert sorted(n.get("attrs", {}).get("act_type") for n in nodes if n["op"] == "amp_convolution") == [
        "hard_sigmoid", "hard_swish"]
    assert not {"clip", "_plus_scalar", "_div_scalar", "elemwise_mul", "broadcast_mul"} & {n["op"] for n in nodes}
    product = next(n for n in nodes if n["op"] == "amp_broadcast_mul")  # the gate times its features, for the Dense
    assert product["attrs"]["dtype"] == "bfloat16"
    got = low(x).asnumpy()
    _check(got, ref, 2e-2)
    path = amp_onnx.export_onnx(low, None, [x.shape], str(tmp_path / "m.onnx"), bf16_mode="emulate")
    _, exported = _run_onnx(path, x)
    _check(exported, got, TOL["emulate"] * 10)


def test_mxnet_export_model_directly_keeps_casts(tmp_path):
    net, x = _model("mlp")
    inputs, sym, params = block_graph(net, [x])
    out = convert(sym, params, {}, "float16", cast_params_offline=True, emulate=False)
    path = str(tmp_path / "direct.onnx")
    mx.onnx.export_model(out.symbol, dict(out.arg_params), in_shapes=[x.shape], in_types=[np.float32],
                         onnx_file_path=path)
    model = onnx.load(path)
    assert sum(n.op_type == "Cast" for n in model.graph.node) >= 1
    _, got = _run_onnx(path, x)
    ref = convert_hybrid_block(net, x, "float16", emulate=True)(x).asnumpy()
    _check(got, ref, TOL["float16"])


def test_emulated_rounding_pairs_become_two_casts(tmp_path):
    net, x = _model("mlp")
    low = convert_hybrid_block(net, x, "bfloat16", fuse=False, emulate=True)  # params not cast offline
    path = amp_onnx.export_onnx(low, None, [x.shape], str(tmp_path / "m.onnx"), bf16_mode="bfloat16")
    model = onnx.load(path)
    by_output = {o: n for n in model.graph.node for o in n.output}
    pairs = [n for n in model.graph.node if n.op_type == "Cast" and n.attribute[0].i == onnx.TensorProto.FLOAT
             and by_output.get(n.input[0]) is not None and by_output[n.input[0]].op_type == "Cast"]
    assert pairs and all(by_output[n.input[0]].attribute[0].i == onnx.TensorProto.BFLOAT16 for n in pairs)
    _, got = _run_onnx(path, x)  # only Casts touch bfloat16: onnxruntime runs it
    _check(got, low(x).asnumpy(), TOL["emulate"])


def test_keep_io_types_false_leaves_float16_output(tmp_path):
    net, x = _model("mlp")
    low = convert_hybrid_block(net, x, "float16", cast_params_offline=True, emulate=False, keep_lp16_outputs=True)
    path = amp_onnx.export_onnx(low, None, [x.shape], str(tmp_path / "m.onnx"), keep_io_types=False)
    sess, got = _run_onnx(path, x)
    assert sess.get_outputs()[0].type == "tensor(float16)" and got.dtype == np.float16


def test_export_errors_leave_no_file(tmp_path):
    net, x = _model("cnn_bn")
    path = tmp_path / "m.onnx"
    with pytest.raises(ValueError, match="bf16_mode"):
        amp_onnx.export_onnx(net, None, [x.shape], str(path), bf16_mode="int8")
    with pytest.raises(ValueError, match="2 inputs"):
        amp_onnx.export_onnx(net, None, [x.shape, x.shape], str(path))
    fused = convert_hybrid_block(net, x, "bfloat16", fuse=True, kernels="mxnet")  # MXNet's fused ops
    with pytest.raises(ValueError, match="fuse=False"):
        amp_onnx.export_onnx(fused, None, [x.shape], str(path))
    with pytest.raises(TypeError, match="Symbol or a HybridBlock"):
        amp_onnx.export_onnx("net.json", None, [x.shape], str(path))
    assert list(tmp_path.iterdir()) == []
