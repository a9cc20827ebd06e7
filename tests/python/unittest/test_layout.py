"""amp_layout pass: CPU proofs (emulated channels-last convolutions vs the original fp32 graph) and
structural checks of the real channels-last graphs (transposes only at region boundaries, layouts)."""
import json
import subprocess
import sys
import textwrap
import warnings

import mxnet as mx
import numpy as np
import pytest
from mxnet.gluon import nn
from mxnet.gluon.model_zoo import vision

from mxnet.amp.graph import layout

GPU = mx.gpu(0)  # a context object only: structural tests build graphs for it, never run them
RTOL, ATOL = 1e-5, 1e-5


# ---- hand-made models ---------------------------------------------------------------------------
class ResidualProjection(nn.HybridBlock):
    """conv-bn-relu-conv-bn plus a strided 1x1 projection shortcut, then relu."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.body = nn.HybridSequential()
        self.body.add(nn.Conv2D(8, 3, strides=2, padding=1), nn.BatchNorm(), nn.Activation("relu"),
                      nn.Conv2D(8, 3, padding=1), nn.BatchNorm())
        self.proj = nn.Conv2D(8, 1, strides=2)

    def hybrid_forward(self, F, x):
        return F.relu(self.body(x) + self.proj(x))


class ConvDense(nn.HybridBlock):
    """2-D convs, a pooled map that is not 1x1 flattened into dense layers."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.conv = nn.HybridSequential()
        self.conv.add(nn.Conv2D(6, 3, padding=1), nn.LeakyReLU(0.1), nn.MaxPool2D(2),
                      nn.Conv2D(4, 3, padding=1), nn.Dropout(0.5), nn.AvgPool2D(2))
        self.dense = nn.HybridSequential()
        self.dense.add(nn.Dense(16, activation="tanh"), nn.Dense(5))

    def hybrid_forward(self, F, x):
        return self.dense(self.conv(x))


class ChannelOps(nn.HybridBlock):
    """Concat, slice_axis and split on the channel axis, a squeeze-excitation broadcast, output map."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.c1 = nn.Conv2D(8, 3, padding=1)
        self.c2 = nn.Conv2D(8, 1)
        self.se = nn.Dense(15, activation="sigmoid")
        self.out = nn.Conv2D(3, 3, padding=1)

    def hybrid_forward(self, F, x):
        y = F.relu(self.c1(x))
        a = F.slice_axis(y, axis=1, begin=0, end=3)
        b, c = F.split(y, num_outputs=2, axis=1)
        z = F.concat(a, b * 2 + c, self.c2(y), dim=1)
        s = self.se(F.Pooling(z, global_pool=True, kernel=(1, 1), pool_type="avg"))
        z = F.broadcast_mul(z, s.reshape((0, 0, 1, 1)))
        return self.out(F.sigmoid(z))


class Conv3DNet(nn.HybridBlock):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = nn.HybridSequential()
        self.net.add(nn.Conv3D(4, 3, padding=1), nn.BatchNorm(), nn.Activation("relu"),
                     nn.MaxPool3D(2), nn.Conv3D(6, 1), nn.GlobalAvgPool3D(), nn.Dense(3))

    def hybrid_forward(self, F, x):
        return self.net(x)


class DeconvNet(nn.HybridBlock):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.net = nn.HybridSequential()
        self.net.add(nn.Conv2D(4, 3, strides=2, padding=1), nn.Activation("relu"),
                     nn.Conv2DTranspose(3, 4, strides=2, padding=1), nn.Activation("tanh"))

    def hybrid_forward(self, F, x):
        return self.net(x)


class MiniInception(nn.HybridBlock):
    """Four branches (1x1, 1x1-3x3, 1x1-5x5, pool-1x1) concatenated on channels, twice."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.stem = nn.Conv2D(8, 3, padding=1)
        self.blocks = []
        for i in range(2):
            branches = [nn.HybridSequential(prefix="b%d_%d_" % (i, j)) for j in range(4)]
            branches[0].add(nn.Conv2D(4, 1))
            branches[1].add(nn.Conv2D(4, 1), nn.Conv2D(6, 3, padding=1))
            branches[2].add(nn.Conv2D(2, 1), nn.Conv2D(4, 5, padding=2))
            branches[3].add(nn.MaxPool2D(3, 1, 1), nn.Conv2D(4, 1))
            for j, b in enumerate(branches):
                self.register_child(b, "b%d_%d" % (i, j))
            self.blocks.append(branches)
        self.head = nn.HybridSequential()
        self.head.add(nn.GlobalAvgPool2D(), nn.Flatten(), nn.Dense(4))

    def hybrid_forward(self, F, x):
        x = F.relu(self.stem(x))
        for branches in self.blocks:
            x = F.concat(*[F.relu(b(x)) for b in branches], dim=1)
        return self.head(x)


class FollowOps(nn.HybridBlock):
    """amp_cast, amp_multicast, LeakyReLU (elu), clip, a (1, C, 1, 1) per-channel parameter, Dropout."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.c1 = nn.Conv2D(4, 3, padding=1)
        self.c2 = nn.Conv2D(4, 1)
        self.shift = self.params.get("shift", shape=(1, 4, 1, 1), init=mx.init.Uniform(1.0))
        self.head = nn.HybridSequential()
        self.head.add(nn.GlobalMaxPool2D(), nn.Dense(3))

    def hybrid_forward(self, F, x, shift):  # pylint: disable=arguments-differ
        a = self.c1(x)
        b = F.amp_cast(self.c2(x), dtype="float32")  # float16 has no oneDNN CPU kernels here
        a, b = F.amp_multicast(a, b, num_outputs=2)
        y = F.clip(F.LeakyReLU(a + b, act_type="elu"), -1.0, 1.0)
        y = F.Dropout(F.broadcast_add(y, shift), p=0.1)
        return self.head(y)


def _zoo(name):
    return getattr(vision, name)


# name -> (factory, input shape)
MODELS = {
    "resnet18_v1": (_zoo("resnet18_v1"), (2, 3, 32, 32)),
    "resnet18_v2": (_zoo("resnet18_v2"), (2, 3, 32, 32)),
    "vgg11_bn": (_zoo("vgg11_bn"), (2, 3, 32, 32)),
    "densenet121": (_zoo("densenet121"), (1, 3, 224, 224)),
    "inception_v3": (_zoo("inception_v3"), (1, 3, 299, 299)),
    "mini_inception": (MiniInception, (2, 3, 16, 16)),
    "mobilenet1_0": (lambda: vision.get_mobilenet(0.25), (2, 3, 32, 32)),
    "mobilenet_v2": (lambda: vision.get_mobilenet_v2(0.25), (2, 3, 32, 32)),
    "residual_projection": (ResidualProjection, (2, 3, 16, 16)),
    "conv_dense": (ConvDense, (2, 3, 16, 16)),
    "channel_ops": (ChannelOps, (2, 3, 12, 12)),
    "conv3d": (Conv3DNet, (2, 3, 6, 8, 8)),
    "deconv": (DeconvNet, (2, 3, 8, 8)),
    "follow_ops": (FollowOps, (2, 3, 8, 8)),
}

# Transposes of activations expected in the real channels-last graph with offline weights:
# one where the channels-last region begins, one where a channels-first consumer or a graph output
# needs the layout back. None before a Flatten/FullyConnected of a global pooling (1x1 whatever the
# input size); VGG, DenseNet and Inception pool with a fixed window, so they get one there.
EXPECTED_BOUNDARIES = {
    "resnet18_v1": ["data_amp_to_nhwc"],
    "resnet18_v2": ["*_batchnorm0_fwd_amp_to_nhwc"],
    "vgg11_bn": ["data_amp_to_nhwc", "*_amp_to_nchw"],
    "densenet121": ["data_amp_to_nhwc", "*_amp_to_nchw"],
    "inception_v3": ["data_amp_to_nhwc", "*_amp_to_nchw"],
    "mini_inception": ["data_amp_to_nhwc"],
    "mobilenet1_0": ["data_amp_to_nhwc"],
    "mobilenet_v2": ["data_amp_to_nhwc"],
    "residual_projection": ["data_amp_to_nhwc", "*_amp_to_nchw"],
    "conv_dense": ["data_amp_to_nhwc", "*_amp_to_nchw"],
    "channel_ops": ["data_amp_to_nhwc", "*_amp_to_nhwc", "*_amp_to_nchw"],
    "conv3d": ["data_amp_to_nhwc"],
    "deconv": ["data_amp_to_nhwc", "*_amp_to_nchw"],
    "follow_ops": ["data_amp_to_nhwc", "*_shift_amp_to_nhwc"],
}


def _build(name):
    """Symbol, fp32 params (random, BatchNorm statistics included) and an input for a model."""
    mx.random.seed(0)
    rng = np.random.RandomState(0)
    factory, shape = MODELS[name]
    net = factory()
    net.initialize(mx.init.Xavier(magnitude=2.0))
    x = mx.nd.array(rng.uniform(-1, 1, size=shape))
    net(x)  # deferred shapes
    mx.nd.waitall()  # the forward queues asynchronous reorders of the weights: reading one races them
    sym = net(mx.sym.var("data"))
    aux_names = set(sym.list_auxiliary_states())
    args, aux = {}, {}
    for p in net.collect_params().values():
        value = p.data().asnumpy()
        if p.name.endswith(("running_var", "gamma")):
            value = rng.uniform(0.5, 1.5, size=value.shape)
        elif p.name.endswith(("running_mean", "beta")):
            value = rng.uniform(-0.5, 0.5, size=value.shape)
        (aux if p.name in aux_names else args)[p.name] = mx.nd.array(value)
    return sym, args, aux, x


def _forward(sym, args, aux, x):
    exe = sym.bind(mx.cpu(), dict(args, data=x), aux_states={k: v.copy() for k, v in aux.items()})
    return [o.asnumpy() for o in exe.forward(is_train=False)]


def _nodes(sym):
    return json.loads(sym.tojson())["nodes"]


def _inserted(sym):
    """Sorted names of the layout-changing nodes (transpose, Reshape) the pass inserted."""
    return sorted(n["name"] for n in _nodes(sym)
                  if n["op"] in ("transpose", "Reshape") and "_amp_to_" in n["name"])


def _no_inverse_pairs(sym):
    nodes = _nodes(sym)
    for n in nodes:
        if n["op"] != "transpose":
            continue
        src = nodes[n["inputs"][0][0]]
        assert src["op"] != "transpose", "inverse pair %s -> %s left" % (src["name"], n["name"])


def _matches(pattern, name):
    return name.endswith(pattern[1:]) if pattern.startswith("*") else name == pattern


# ---- CPU proofs -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(MODELS))
def test_emulated_graph_matches_original(name):
    sym, args, aux, x = _build(name)
    (ref,) = _forward(sym, args, aux, x)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="amp_layout")
        train_graph = layout.optimize_layout(sym, input_shapes={"data": x.shape}, ctx=mx.cpu(),
                                             emulate=True, allow_3d=True)
    conv_stamps = set(layout.layout_report(train_graph).values())
    assert conv_stamps <= {"NHWC (emulated)", "NDHWC (emulated)"} and conv_stamps
    (out,) = _forward(train_graph, args, aux, x)
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)

    conv_sym, conv_args, conv_aux = layout.convert_layout(sym, args, aux, {"data": x.shape},
                                                          ctx=mx.cpu(), emulate=True, allow_3d=True)
    # oneDNN's BatchNorm over axis 3 can crash: see test_emulated_batchnorm_after_nchw_one_by_one_map
    for graph in (train_graph, conv_sym):
        assert {a.get("axis", "1") for a in _nodes_attrs(graph, "BatchNorm")} <= {"1"}
    (out,) = _forward(conv_sym, conv_args, conv_aux, x)
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)


# Run in a child process, so that a crash fails the test: on AVX-512 CPUs oneDNN keeps convolution
# outputs in its nhwc layout, and MXNet 1.9.1's BatchNorm(axis=3) of an (N, 1, 1, C) tensor, whose
# input and output it reshapes to (N, C, 1, 1) as views, then reuses the primitive cached by an NCHW
# BatchNorm of the (N, C, 1, 1) convolution output: segmentation fault or heap corruption.
_ONE_BY_ONE_MAP = textwrap.dedent('''
    import mxnet as mx, numpy as np
    from mxnet.gluon import nn
    from mxnet.amp.graph import layout
    mx.random.seed(0)
    net = nn.HybridSequential()
    net.add(nn.Conv2D(16, 3, strides=2, padding=1), nn.BatchNorm(), nn.Activation("relu"))
    net.initialize(mx.init.Xavier())
    rng = np.random.RandomState(0)
    x = mx.nd.array(rng.uniform(-1, 1, (2, 3, 2, 2)))  # a 1x1 map after the convolution
    head = mx.nd.array(rng.uniform(-1, 1, (2, 16, 1, 1)))
    net(x)  # imperative: oneDNN's BatchNorm primitive for the NCHW (2, 16, 1, 1) map is cached
    sym = net(mx.sym.var("data"))
    params = {p.name: p.data() for p in net.collect_params().values()}
    aux = {k: v for k, v in params.items() if k in sym.list_auxiliary_states()}
    args = {k: v for k, v in params.items() if k not in aux}
    new = layout.optimize_layout(sym, input_shapes={"data": x.shape}, ctx=mx.cpu(), emulate=True)
    def run(graph, train):  # gradients bound when training: no conv+BatchNorm fusion then
        grads = {k: mx.nd.zeros_like(v) for k, v in args.items()} if train else None
        exe = graph.bind(mx.cpu(), dict(args, data=x), args_grad=grads,
                         aux_states={k: v.copy() for k, v in aux.items()})
        out = exe.forward(is_train=train)[0]
        if train:
            exe.backward(head)
        return [out.asnumpy()] + ([grads[k].asnumpy() for k in sorted(grads)] if train else [])
    for train in (False, True):
        refs = run(sym, train)
        for got, ref in zip(run(new, train), refs):
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    print("ok")
''')


def test_emulated_batchnorm_after_nchw_one_by_one_map():
    proc = subprocess.run([sys.executable, "-c", _ONE_BY_ONE_MAP], capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), (proc.returncode,
                                                                         proc.stderr[-2000:])


def test_training_graph_gradients_match():
    """Batch statistics and weight gradients through the weight transposes equal the original's."""
    sym, args, aux, x = _build("residual_projection")
    loss = mx.sym.make_loss(mx.sym.sum(mx.sym.square(sym)))
    new = layout.optimize_layout(loss, input_shapes={"data": x.shape}, ctx=mx.cpu(), emulate=True)
    results = []
    for s in (loss, new):
        grads = {k: mx.nd.zeros_like(v) for k, v in args.items()}
        exe = s.bind(mx.cpu(), dict(args, data=x), args_grad=dict(grads, data=mx.nd.zeros_like(x)),
                     aux_states={k: v.copy() for k, v in aux.items()})
        exe.forward(is_train=True)
        exe.backward()
        results.append((exe.outputs[0].asnumpy(), {k: g.asnumpy() for k, g in grads.items()}))
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=RTOL)
    for k in args:
        np.testing.assert_allclose(results[1][1][k], results[0][1][k], rtol=1e-4, atol=1e-4,
                                   err_msg=k)


@pytest.mark.parametrize("name", ["resnet18_v1", "mobilenet_v2_0_25"])
def test_hybridized_block_emulated_any_input_size(name):
    """The rewritten cached graph stays right for other input sizes than the one it was built for."""
    mx.random.seed(1)
    net = getattr(vision, name)()
    net.initialize(mx.init.Xavier())
    x = mx.nd.random.uniform(shape=(2, 3, 32, 32))
    x_big = mx.nd.random.uniform(shape=(1, 3, 64, 64))
    refs = [net(x).asnumpy(), net(x_big).asnumpy()]
    net.hybridize()
    assert layout.optimize_layout(net, x, emulate=True) is net
    _, sym = net._cached_graph  # pylint: disable=protected-access
    assert set(layout.layout_report(sym).values()) == {"NHWC (emulated)"}
    np.testing.assert_allclose(net(x).asnumpy(), refs[0], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(net(x_big).asnumpy(), refs[1], rtol=RTOL, atol=ATOL)


# ---- structure of the real channels-last graphs -----------------------------------------------------
@pytest.mark.parametrize("name", sorted(MODELS))
def test_transposes_only_at_region_boundaries(name):
    sym, args, aux, x = _build(name)
    new, new_args, _ = layout.convert_layout(sym, args, aux, {"data": x.shape}, ctx=GPU,
                                             allow_3d=True)
    inserted = _inserted(new)
    expected = EXPECTED_BOUNDARIES[name]
    assert len(inserted) == len(expected), inserted
    for pattern in expected:
        assert any(_matches(pattern, n) for n in inserted), (pattern, inserted)
    _no_inverse_pairs(new)
    layouts = {n["attrs"].get("layout") for n in _nodes(new) if n["op"] in ("Convolution", "Deconvolution")}
    assert layouts == ({"NDHWC"} if name == "conv3d" else {"NHWC"})
    # Weights were transposed offline: same values in (O, spatial..., I) order.
    for wname, value in args.items():
        if wname + "_amp_nhwc" in new_args:
            axes = (0,) + tuple(range(2, value.ndim)) + (1,)
            np.testing.assert_array_equal(new_args[wname + "_amp_nhwc"].asnumpy(),
                                          value.asnumpy().transpose(axes))
    assert new.infer_shape(data=x.shape)[1] == sym.infer_shape(data=x.shape)[1]


def test_layout_attributes_follow():
    sym, _, _, x = _build("channel_ops")
    new = layout.optimize_layout(sym, input_shapes={"data": x.shape}, ctx=GPU)
    by_op = {}
    for n in _nodes(new):
        by_op.setdefault(n["op"], []).append(n.get("attrs", {}))
    assert [a["dim"] for a in by_op["Concat"]] == ["3"]
    assert [a["axis"] for a in by_op["slice_axis"]] == ["3"]
    assert [a["axis"] for a in by_op["SliceChannel"]] == ["3"]
    assert [a["layout"] for a in by_op["Pooling"]] == ["NHWC"]
    resnet, _, _, x = _build("resnet18_v1")
    new = layout.optimize_layout(resnet, input_shapes={"data": x.shape}, ctx=GPU)
    assert {a["axis"] for a in _nodes_attrs(new, "BatchNorm")} == {"3"}
    # Training graph: one weight transpose (or free reshape for 1x1 kernels) per convolution.
    convs = [n for n in _nodes(new) if n["op"] == "Convolution"]
    weights = [n for n in _inserted(new) if n.endswith("_weight_amp_to_nhwc")]
    assert len(weights) == len(convs)
    _no_inverse_pairs(new)


def _nodes_attrs(sym, op):
    return [n.get("attrs", {}) for n in _nodes(sym) if n["op"] == op]


def test_resnet50_converted_has_transposes_only_at_input():
    mx.random.seed(0)
    net = vision.resnet50_v1()
    net.initialize()
    x = mx.nd.zeros((1, 3, 224, 224))
    net(x)  # imperative: oneDNN's BatchNorm primitive for the NCHW (2, 16, 1, 1) map is cached
    sym = net(mx.sym.var("data"))
    aux_names = set(sym.list_auxiliary_states())
    params = {p.name: p.data() for p in net.collect_params().values()}
    args = {k: v for k, v in params.items() if k not in aux_names}
    aux = {k: v for k, v in params.items() if k in aux_names}
    new, new_args, _ = layout.convert_layout(sym, args, aux, {"data": x.shape}, ctx=GPU)
    nodes = _nodes(new)
    transposes = [n["name"] for n in nodes if n["op"] in ("transpose", "Reshape")]
    assert transposes == ["data_amp_to_nhwc"]
    assert len([n for n in nodes if n["op"] == "Convolution"]) == 53
    assert set(layout.layout_report(new).values()) == {"NHWC"}
    convs = [k for k in args if k.endswith("conv0_weight")]
    assert len(convs) == 5  # the stem and each stage's first: each reads a transposed copy, the original goes
    assert all(k + "_amp_nhwc" in new_args and k not in new_args for k in convs), sorted(new_args)[:8]


# ---- refusals and unsupported patterns --------------------------------------------------------------
def test_cpu_context_refused_in_one_line():
    sym, _, _, x = _build("conv_dense")
    with pytest.raises(ValueError, match="NCHW") as err:
        layout.optimize_layout(sym, input_shapes={"data": x.shape}, ctx=mx.cpu())
    assert "\n" not in str(err.value)
    assert layout.layout_refusal(mx.cpu()) == str(err.value)
    assert layout.layout_refusal(GPU) is None
    net = ConvDense()
    net.initialize()
    with pytest.raises(ValueError, match="NCHW"):
        layout.optimize_layout(net, x)


def test_unknown_pass_name_and_option_raise(monkeypatch):
    sym, _, _, x = _build("conv_dense")
    with pytest.raises(ValueError, match="amp_layoutx.*valid passes: amp_layout"):
        layout._run_pass(sym, {"data": x}, {}, pass_name="amp_layoutx")  # pylint: disable=protected-access
    # A name MXNet does not know is only logged by MXNet, leaving the graph as it was: caught too.
    monkeypatch.setattr(layout, "PASS_NAMES", ("amp_layout", "amp_ghost"))
    with pytest.raises(RuntimeError, match="'amp_ghost' did not run"):
        layout._run_pass(sym, {"data": x}, {}, pass_name="amp_ghost")  # pylint: disable=protected-access
    with pytest.raises(mx.MXNetError, match="unknown option 'colour'; valid options: allow_3d, emulate"):
        sym.optimize_for("amp_layout", {"data": x}, {}, ctx=mx.cpu(), colour=1)
    with pytest.raises(mx.MXNetError, match="emulate='maybe' is not a flag"):
        sym.optimize_for("amp_layout", {"data": x}, {}, ctx=mx.cpu(), emulate="maybe")


def test_unsupported_convolutions_left_unchanged_with_reason():
    data = mx.sym.var("data")
    conv1d = mx.sym.Convolution(data, kernel=(3,), num_filter=4, name="c1d")
    with pytest.warns(UserWarning, match=r"unchanged: 1-D kernel.*\(c1d\)"):
        new = layout.optimize_layout(conv1d, input_shapes={"data": (2, 3, 10)}, ctx=GPU)
    assert _inserted(new) == []
    assert "layout" not in _nodes_attrs(new, "Convolution")[0]
    conv3d = mx.sym.Convolution(data, kernel=(3, 3, 3), num_filter=4, name="c3d")
    with pytest.warns(UserWarning, match=r"unchanged: 3-D; MXNet 1.9.1 runs 3-D convolutions only in NCDHW"):
        new = layout.optimize_layout(conv3d, input_shapes={"data": (2, 3, 5, 5, 5)}, ctx=GPU)
    assert _inserted(new) == []
    nhwc = mx.sym.Convolution(data, kernel=(3, 3), num_filter=4, layout="NHWC", name="cl")
    with pytest.warns(UserWarning, match="unchanged: layout is already NHWC"):
        new = layout.optimize_layout(nhwc, input_shapes={"data": (2, 10, 10, 3)}, ctx=GPU)
    assert _inserted(new) == []


def test_graph_without_convolution_is_returned_as_is():
    sym = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=3)
    assert layout.optimize_layout(sym, input_shapes={"data": (2, 4)}, ctx=GPU) is sym


def test_rewriting_twice_refused():
    sym, args, aux, x = _build("residual_projection")
    new = layout.optimize_layout(sym, input_shapes={"data": x.shape}, ctx=GPU)
    with pytest.raises(ValueError, match="already rewritten by amp_layout"):
        layout.optimize_layout(new, input_shapes={"data": x.shape}, ctx=GPU)
    new, new_args, new_aux = layout.convert_layout(sym, args, aux, {"data": x.shape}, ctx=GPU)
    with pytest.raises(ValueError, match="already rewritten by amp_layout"):
        layout.convert_layout(new, new_args, new_aux, {"data": x.shape}, ctx=GPU)


def test_argument_types_checked():
    with pytest.raises(TypeError, match="HybridBlock or an mx.sym.Symbol"):
        layout.optimize_layout("resnet", ctx=GPU)
    sym, args, aux, x = _build("conv_dense")
    with pytest.raises(TypeError, match="input_shapes"):
        layout.optimize_layout(sym, input_shapes=[(2, 3)], ctx=GPU)
    with pytest.raises(TypeError, match="aux_params"):
        layout.convert_layout(sym, args, None, {"data": x.shape}, ctx=GPU)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_offline_weights_keep_low_precision_bits(dtype):
    mx_dtype = np.dtype([("bfloat16", np.uint16)]) if dtype == "bfloat16" else np.float16
    data = mx.sym.var("data")
    sym = mx.sym.Convolution(data, kernel=(3, 3), num_filter=5, no_bias=True, name="c0")
    sym = mx.sym.Convolution(mx.sym.relu(sym), kernel=(1, 1), num_filter=4, num_group=1,
                             no_bias=True, name="c1")
    rng = np.random.RandomState(3)
    args = {name: mx.nd.amp_cast(mx.nd.array(rng.standard_normal(shape)), dtype=mx_dtype)
            for name, shape in (("c0_weight", (5, 3, 3, 3)), ("c1_weight", (4, 5, 1, 1)))}
    new, new_args, _ = layout.convert_layout(sym, args, {}, {"data": (2, 3, 8, 8)},
                                             input_dtypes={"data": mx_dtype}, ctx=GPU)
    assert sorted(new_args) == ["c0_weight_amp_nhwc", "c1_weight_amp_nhwc"]
    for name, value in args.items():
        moved = new_args[name + "_amp_nhwc"]
        assert moved.dtype == value.dtype
        as_f32 = [mx.nd.amp_cast(a, dtype="float32").asnumpy() for a in (moved, value)]
        np.testing.assert_array_equal(as_f32[0], as_f32[1].transpose(0, 2, 3, 1))
    assert _inserted(new) == ["c1_amp_to_nchw", "data_amp_to_nhwc"]


def test_amp_converted_resnet_gets_weights_transposed_through_casts():
    """An AMP-converted model (weights cast in the graph): the casts read the transposed copies."""
    from mxnet.amp.inference import blocks, convert
    mx.random.seed(0)
    net = vision.resnet18_v1()
    net.initialize(mx.init.Xavier())
    x = mx.nd.random.uniform(shape=(2, 3, 32, 32))
    low = blocks.convert_hybrid_block(net, x, "float16")
    ref = low(x).asnumpy()
    sym = low(mx.sym.var("data"))
    aux_names = set(sym.list_auxiliary_states())
    params = {p.name: p.data() for p in low.collect_params().values()}
    args = {k: v for k, v in params.items() if k not in aux_names}
    aux = {k: v for k, v in params.items() if k in aux_names}
    new, _, _ = layout.convert_layout(sym, args, aux, {"data": x.shape}, ctx=GPU)
    moved = [n["name"] for n in _nodes(new) if n["op"] in ("transpose", "Reshape")]
    # One transpose, of the input (after its cast); none for the weights, none inside.
    assert len(moved) == 1 and moved[0].startswith("data") and moved[0].endswith("_amp_to_nhwc"), moved
    emulated, new_args, new_aux = layout.convert_layout(sym, args, aux, {"data": x.shape}, ctx=mx.cpu(),
                                                        emulate=True)
    (out,) = _forward(emulated, new_args, new_aux, x)
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)


def test_graph_transposes_cancel_with_the_pass():
    """A model fed NHWC data that transposes to NCHW itself, and back at the end: none left."""
    data = mx.sym.var("data")
    x = mx.sym.transpose(data, axes=(0, 3, 1, 2))
    y = mx.sym.Activation(mx.sym.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=4, name="c0"),
                          act_type="relu")
    y = mx.sym.Convolution(y, kernel=(1, 1), num_filter=5, name="c1")
    sym = mx.sym.transpose(y, axes=(0, 2, 3, 1))
    shape = (2, 6, 6, 3)
    new = layout.optimize_layout(sym, input_shapes={"data": shape}, ctx=GPU)
    assert [n["op"] for n in _nodes(new) if n["op"] in ("transpose", "Reshape")
            and not n["name"].endswith("_weight_amp_to_nhwc")] == []
    rng = np.random.RandomState(0)
    args = {"data": mx.nd.array(rng.uniform(-1, 1, shape)),
            "c0_weight": mx.nd.array(rng.standard_normal((4, 3, 3, 3))), "c0_bias": mx.nd.ones(4),
            "c1_weight": mx.nd.array(rng.standard_normal((5, 4, 1, 1))), "c1_bias": mx.nd.zeros(5)}
    (ref,) = _forward(sym, args, {}, args["data"])
    emulated = layout.optimize_layout(sym, input_shapes={"data": shape}, ctx=mx.cpu(), emulate=True)
    (out,) = _forward(emulated, args, {}, args["data"])
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)


def test_numpy_mode_symbol_stays_numpy():
    sym = mx.sym.Convolution(mx.sym.var("data"), kernel=(3, 3), num_filter=4, name="c0").as_np_ndarray()
    new = layout.optimize_layout(sym, input_shapes={"data": (1, 3, 8, 8)}, ctx=GPU)
    assert isinstance(new, mx.sym.np._Symbol)  # pylint: disable=protected-access
    assert layout.layout_report(new) == {"c0": "NHWC"}


def test_amp_init_layout_optimization_refuses_on_cpu_with_reason():
    from mxnet import amp
    amp.init("bfloat16", layout_optimization=True)
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Conv2D(4, 3, in_channels=3), mx.gluon.nn.Activation("relu"))
    net.initialize()
    net.hybridize()
    with pytest.warns(UserWarning, match=r"amp layout_optimization skipped: layout optimization refused on "
                                         r"cpu\(0\): MXNet 1.9.1 runs Convolution only in NCHW"):
        out = net(mx.nd.ones((1, 3, 8, 8)))
    assert out.shape == (1, 4, 6, 6)
    nodes = json.loads(net._cached_graph[1].tojson(remove_amp_cast=False))["nodes"]
    assert not any(n["op"] == "transpose" for n in nodes)
    with pytest.raises(ValueError, match="layout_optimization must be True or False"):
        amp.reset()
        amp.init("bfloat16", layout_optimization="yes")


def test_convert_hybrid_block_layout_argument():
    from mxnet import amp
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Conv2D(4, 3, in_channels=3))
    net.initialize()
    x = mx.nd.ones((1, 3, 8, 8))
    with pytest.raises(ValueError, match=r"layout must be one of None, 'NCHW', 'NHWC', got 'nhwc'"):
        amp.convert_hybrid_block(net, x, "bfloat16", layout="nhwc")
    with pytest.raises(ValueError, match=r"layout optimization refused on cpu\(0\)"):
        amp.convert_hybrid_block(net, x, "bfloat16", layout="NHWC")
    same = amp.convert_hybrid_block(net, x, "bfloat16", layout="NCHW")
    assert same(x).shape == (1, 4, 6, 6)
