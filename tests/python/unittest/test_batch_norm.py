"""amp_batch_norm, the library's BatchNorm on float32 / bfloat16 data with float32 statistics, and its place in
low precision training graphs (in place of BatchNorm in float32 between casts), told the graph's mode by
Dropout(p=0.5) of a tensor of ones (1 in inference, 0 or 2 in training).

The kernel runs on every CPU; the training graphs need the library's bfloat16 convolutions
(``requires_onednn3_bf16``).
"""
import json

import mxnet as mx
import numpy as np
import pytest
from mxnet import amp, autograd, gluon
from mxnet.gluon import nn

from mxnet.amp.graph.rewrite import rewrite_symbol
from mxnet.amp.base.dtypes import BFLOAT16
from mxnet.amp.core.policy import make_policy

from amp_testing import bf16_round, requires_onednn3_bf16

_RNG = np.random.RandomState(0)
X = _RNG.uniform(-1, 3, (4, 5, 6, 7)).astype(np.float32)
DY = _RNG.uniform(-1, 1, X.shape).astype(np.float32)
GAMMA, BETA = _RNG.uniform(0.5, 1.5, 5).astype(np.float32), _RNG.uniform(-0.5, 0.5, 5).astype(np.float32)
MEAN, VAR = _RNG.uniform(-0.2, 0.2, 5).astype(np.float32), _RNG.uniform(0.5, 1.5, 5).astype(np.float32)


def _run(op, x, train, fix_gamma, axis=1, dtype=None):
    """Forward + backward of MXNet's BatchNorm ('mxnet') or amp_batch_norm ('ours'); returns the output, the
    moving statistics after the call and the gradients of data, gamma and beta, as float64 NumPy arrays."""
    c = x.shape[axis]
    X_, G, B = mx.nd.array(x), mx.nd.array(GAMMA[:c]), mx.nd.array(BETA[:c])
    M, V = mx.nd.array(MEAN[:c]), mx.nd.array(VAR[:c])
    if dtype == "bfloat16":
        X_ = mx.nd.amp_cast(X_, dtype=BFLOAT16)
    for a in (X_, G, B):
        a.attach_grad()
    dy = mx.nd.array(DY.reshape(-1)[:x.size].reshape(x.shape))
    with autograd.record(train_mode=train):
        if op == "mxnet":
            y = mx.nd.BatchNorm(X_, G, B, M, V, eps=1e-3, momentum=0.9, fix_gamma=fix_gamma, axis=axis)
        else:
            mode = mx.nd.array([0.0 if train else 1.0])
            y = mx.nd.amp_batch_norm(X_, G, B, M, V, mode, eps=1e-3, momentum=0.9, fix_gamma=fix_gamma,
                                     axis=axis)[0]
    y.backward(dy.astype(y.dtype) if dtype != "bfloat16" else mx.nd.amp_cast(dy, dtype=BFLOAT16), train_mode=train)
    out = [y, M, V, X_.grad, G.grad, B.grad]
    return [mx.nd.amp_cast(a, dtype="float32").asnumpy().astype(np.float64) for a in out]


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("fix_gamma", [False, True])
@pytest.mark.parametrize("axis,shape", [(1, (4, 5, 6, 7)), (-1, (3, 4, 5)), (1, (6, 5))])
def test_float32_matches_mxnet_batch_norm(train, fix_gamma, axis, shape):
    x = X.reshape(-1)[:int(np.prod(shape))].reshape(shape)
    ours, theirs = _run("ours", x, train, fix_gamma, axis), _run("mxnet", x, train, fix_gamma, axis)
    for name, a, b in zip(("output", "moving_mean", "moving_var", "dx", "dgamma", "dbeta"), ours, theirs):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5, err_msg=name)
    if not train:  # inference leaves the moving statistics alone
        assert np.array_equal(ours[1], MEAN[:x.shape[axis]]) and np.array_equal(ours[2], VAR[:x.shape[axis]])


@pytest.mark.parametrize("train", [True, False])
def test_bfloat16_data_against_a_float64_reference(train):
    x = bf16_round(X).astype(np.float64)
    dy = bf16_round(DY).astype(np.float64)
    axes = (0, 2, 3)
    mean = x.mean(axis=axes) if train else MEAN.astype(np.float64)
    var = x.var(axis=axes) if train else VAR.astype(np.float64)
    invstd = 1 / np.sqrt(var + 1e-3)
    c = (slice(None), None, None)
    xhat = (x - mean[c]) * invstd[c]
    y = xhat * GAMMA[c] + BETA[c]
    dbeta, dgamma = dy.sum(axis=axes), (dy * xhat).sum(axis=axes)
    n = x.size / x.shape[1]
    dx = GAMMA[c] * invstd[c] * ((dy - dbeta[c] / n - xhat * dgamma[c] / n) if train else dy)
    got = _run("ours", X, train, False, dtype="bfloat16")
    for name, g, want, bf16 in (("output", got[0], y, True), ("dx", got[3], dx, True),
                                ("dgamma", got[4], dgamma, False), ("dbeta", got[5], dbeta, False)):
        # bfloat16 outputs: one rounding (2^-8 relative) over float32 math; float32 sums of bf16 terms
        tol = 2.0 ** -8 * np.abs(want) + 1e-5 * np.abs(want).max() if bf16 else 1e-4 * np.abs(want).max()
        assert (np.abs(g - want) <= tol).all(), (name, np.abs(g - want).max())
    if train:
        np.testing.assert_allclose(got[1], 0.9 * MEAN + 0.1 * mean, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got[2], 0.9 * VAR + 0.1 * var, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kwargs,message", [
    ({"output_mean_var": True}, "amp_batch_norm: output_mean_var=True is not supported"),
    ({"eps": 0}, "amp_batch_norm: attribute eps must be > 0"),
    ({"axis": 4}, "amp_batch_norm: axis 4 is out of range for data of 4 dimensions"),
    ({"momentum": "fast"}, "amp_batch_norm: attribute momentum must be a number"),
    ({"act_type": "tanh"}, "amp_batch_norm: attribute act_type must be relu or relu6 \\(got 'tanh'\\)"),
])
def test_bad_attributes_are_named(kwargs, message):
    args = [mx.nd.array(X)] + [mx.nd.array(a) for a in (GAMMA, BETA, MEAN, VAR)] + [mx.nd.ones((1,))]
    with pytest.raises(mx.base.MXNetError, match=message):
        mx.nd.amp_batch_norm(*args, **kwargs)[0].wait_to_read()


@pytest.mark.parametrize("dtype", [None, "bfloat16"])
@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("act", ["relu", "relu6"])
def test_fused_relu_matches_batch_norm_then_relu(dtype, train, act):
    """act_type="relu" or "relu6" (fused into training graphs): relu(BatchNorm(x)) or clip(BatchNorm(x), 0, 6), and
    the gradient through both; the masked gradient is written into dx first and normalised in place there. ReLU6
    passes the gradient where 0 < y < 6 (PyTorch's ReLU6; MXNet's clip also passes it at the bounds themselves,
    which a bfloat16 output reaches often), so its composition masks the output gradient by that."""
    top = np.inf if act == "relu" else 6.0
    gamma = GAMMA * (1 if act == "relu" else 8)  # ReLU6: outputs above 6 too

    def run(fused):
        x = mx.nd.array(X)
        x = mx.nd.amp_cast(x, dtype=BFLOAT16) if dtype else x
        g, b, m, v = (mx.nd.array(a) for a in (gamma, BETA, MEAN, VAR))
        for a in (x, g, b):
            a.attach_grad()
        with autograd.record(train_mode=train):
            mode = mx.nd.array([0.0 if train else 1.0])
            attrs = {"act_type": act} if fused else {}
            y = mx.nd.amp_batch_norm(x, g, b, m, v, mode, fix_gamma=False, **attrs)[0]
            y = mx.nd.relu(y) if act == "relu" and not fused else y
        head = DY
        if act == "relu6" and not fused:
            normalised = mx.nd.amp_cast(y, dtype="float32").asnumpy()
            head = head * ((normalised > 0) & (normalised < 6))
        head = mx.nd.array(head)
        y.backward(mx.nd.amp_cast(head, dtype=BFLOAT16) if dtype else head, train_mode=train)
        y = mx.nd.clip(y, 0, 6) if act == "relu6" and not fused else y
        return [mx.nd.amp_cast(a, dtype="float32").asnumpy() for a in (y, x.grad, g.grad, b.grad, m, v)]
    fused, composed = run(True), run(False)
    assert (fused[0] >= 0).all() and (fused[0] == 0).any() and (fused[0] > 0).any() and (fused[0] <= top).all()
    assert act == "relu" or (fused[0] == 6).any()
    for name, a, b in zip(("y", "dx", "dgamma", "dbeta", "moving_mean", "moving_var"), fused, composed):
        np.testing.assert_array_equal(a, b, err_msg=name)  # the same arithmetic, in the same order


@pytest.mark.parametrize("dtype", [None, "bfloat16"])
@pytest.mark.parametrize("relu", [False, True])
def test_fused_residual_sum_matches_batch_norm_then_add(dtype, relu):
    """with_sum=True: relu?(BatchNorm(x) + addend) in float32, rounded once; the addend's gradient is dy through the
    ReLU. float32: the same values as the composition, bit for bit; bfloat16: within one rounding."""
    addend = _RNG.uniform(-2, 2, X.shape).astype(np.float32)

    def run(fused):
        x, r = mx.nd.array(X), mx.nd.array(addend)
        x, r = (mx.nd.amp_cast(x, dtype=BFLOAT16), mx.nd.amp_cast(r, dtype=BFLOAT16)) if dtype else (x, r)
        g, b, m, v = (mx.nd.array(a) for a in (GAMMA, BETA, MEAN, VAR))
        for a in (x, r, g, b):
            a.attach_grad()
        with autograd.record():
            mode = mx.nd.array([0.0])
            attrs = dict({"act_type": "relu"} if relu else {}, with_sum=True) if fused else {}
            if fused:
                y = mx.nd.amp_batch_norm(x, g, b, m, v, mode, r, fix_gamma=False, **attrs)[0]
            else:
                y = mx.nd.amp_batch_norm(x, g, b, m, v, mode, fix_gamma=False)[0]
                y = mx.nd.amp_cast(mx.nd.amp_cast(y, dtype="float32") + mx.nd.amp_cast(r, dtype="float32"),
                                   dtype=y.dtype)
                y = mx.nd.relu(y) if relu else y
        head = mx.nd.array(DY)
        y.backward(mx.nd.amp_cast(head, dtype=BFLOAT16) if dtype else head)
        return [mx.nd.amp_cast(a, dtype="float32").asnumpy() for a in (y, x.grad, r.grad, g.grad, b.grad)]
    fused, composed = run(True), run(False)
    for name, a, b in zip(("y", "dx", "daddend", "dgamma", "dbeta"), fused, composed):
        if dtype is None:
            np.testing.assert_array_equal(a, b, err_msg=name)
        else:  # the composition rounds the normalised data before the sum: one bfloat16 step apart at most
            np.testing.assert_allclose(a, b, rtol=2 ** -7, atol=2 ** -7 * np.abs(b).max(), err_msg=name)
    with pytest.raises(mx.base.MXNetError, match="the addend must have the data's shape"):
        args = [mx.nd.array(X)] + [mx.nd.array(a) for a in (GAMMA, BETA, MEAN, VAR)] + [mx.nd.ones((1,))]
        mx.nd.amp_batch_norm(*args, mx.nd.ones((2, 5)), with_sum=True)[0].wait_to_read()


@requires_onednn3_bf16
def test_training_graphs_fuse_a_residual_block_tail_into_batch_norm(monkeypatch):
    """conv -> BatchNorm -> + residual -> ReLU (a ResNet basic block's tail) becomes one amp_batch_norm with
    with_sum and act_type: backward keeps the block's output only, and the outputs and gradients are those of the
    same bfloat16 graph unfused, within the rounding the unfused graph adds (of the normalised data, before the sum).
    Against float32 the bfloat16 graphs differ where an output near 0 flips the ReLU's mask."""
    from mxnet.amp.graph import rewrite as rewrite_module
    x = mx.sym.Convolution(mx.sym.var("data"), kernel=(1, 1), num_filter=5, name="stem")  # the block's input
    h = mx.sym.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=5, name="conv")
    h = mx.sym.BatchNorm(h, fix_gamma=False, name="bn")
    sym = mx.sym.Activation(h + x, act_type="relu", name="out")
    low, _ = rewrite_symbol(sym, make_policy("bfloat16", emulate=False), "cpu")
    nodes = json.loads(low.tojson())["nodes"]
    bn = next(n for n in nodes if n["name"] == "bn")
    assert (bn["op"], bn["attrs"]["with_sum"], bn["attrs"]["act_type"]) == ("amp_batch_norm", "True", "relu")
    assert not {"elemwise_add", "_plus", "Activation"} & {n["op"] for n in nodes}
    monkeypatch.setattr(rewrite_module, "fuse_sum", lambda graph, var_dtypes: graph)
    monkeypatch.setattr(rewrite_module, "fuse_activation", lambda graph, training=False: graph)
    unfused, _ = rewrite_symbol(sym, make_policy("bfloat16", emulate=False), "cpu")
    assert {"elemwise_add", "Activation"} <= {n["op"] for n in json.loads(unfused.tojson())["nodes"]}
    rng = np.random.RandomState(4)
    arg_shapes, _, aux_shapes = sym.infer_shape(data=(2, 5, 6, 6))
    args = {k: bf16_round(rng.uniform(-1, 1, sh)) for k, sh in zip(sym.list_arguments(), arg_shapes)}
    head, results = bf16_round(rng.uniform(-1, 1, (2, 5, 6, 6))), []
    for graph in (unfused, low):
        grads = {k: mx.nd.zeros(v.shape) for k, v in args.items()}
        aux = {k: mx.nd.array(np.full(sh, 0.0 if "mean" in k else 1.0)) for k, sh in
               zip(sym.list_auxiliary_states(), aux_shapes)}
        exe = graph.bind(mx.cpu(), {k: mx.nd.array(v) for k, v in args.items()}, args_grad=grads, aux_states=aux)
        out = exe.forward(is_train=True)[0].asnumpy()
        exe.backward(mx.nd.array(head))
        results.append([out] + [grads[k].asnumpy() for k in sorted(grads)] + [aux[k].asnumpy() for k in sorted(aux)])
    for name, ref, got in zip(["out"] + sorted(args) + sorted(sym.list_auxiliary_states()), *results):
        np.testing.assert_allclose(got, ref, rtol=2 ** -7, atol=2 ** -7 * np.abs(ref).max(), err_msg=name)


def test_statistics_must_be_float32_of_the_channels():
    args = [mx.nd.array(X)] + [mx.nd.array(a) for a in (GAMMA, BETA, MEAN)] + [mx.nd.ones((4,)), mx.nd.ones((1,))]
    with pytest.raises(mx.base.MXNetError, match=r"input 4 \(moving_var\) must have shape \(5,\)"):
        mx.nd.amp_batch_norm(*args)[0].wait_to_read()
    args[4] = mx.nd.amp_cast(mx.nd.ones((5,)), dtype=BFLOAT16)
    with pytest.raises(mx.base.MXNetError, match=r"input 4 \(moving_var\) must be float32 \(got bfloat16\)"):
        mx.nd.amp_batch_norm(*args)[0].wait_to_read()


def test_the_mode_flag_is_what_mxnet_runs_the_call_with():
    """The flag amp_batch_norm reads: Dropout(p=0.5) of ones is exactly 1 in inference, 0 or 2 in training."""
    ones = mx.nd.ones((64,))
    assert (mx.nd.Dropout(ones, p=0.5).asnumpy() == 1).all()
    with autograd.record(train_mode=False):
        assert (mx.nd.Dropout(ones, p=0.5).asnumpy() == 1).all()
    with autograd.record():
        values = set(mx.nd.Dropout(ones, p=0.5).asnumpy().tolist())
    assert values <= {0.0, 2.0} and values  # never 1


def _cnn():
    net = nn.HybridSequential(prefix="cnn_")  # the same parameter names for each net built
    with net.name_scope():
        net.add(nn.Conv2D(8, 3, padding=1, in_channels=3), nn.BatchNorm(in_channels=8), nn.Activation("relu"),
                nn.Conv2D(8, 3, padding=1, in_channels=8), nn.BatchNorm(in_channels=8), nn.GlobalAvgPool2D(),
                nn.Dense(4, in_units=8))
    return net


def _bn_nodes(sym):
    return [n for n in json.loads(sym.tojson(remove_amp_cast=False))["nodes"] if "BatchNorm" in n["op"]
            or n["op"] == "amp_batch_norm"]


def test_training_graphs_keep_batch_norm_in_bfloat16_on_the_library_kernel():
    sym = _cnn()(mx.sym.var("data"))
    low, stats = rewrite_symbol(sym, make_policy("bfloat16", emulate=False), "cpu")
    nodes = json.loads(low.tojson(remove_amp_cast=False))["nodes"]
    assert [n["op"] for n in _bn_nodes(low)] == ["amp_batch_norm"] * 2 and stats.kernels["amp_batch_norm"] == 2
    mode = [i for i, n in enumerate(nodes) if n["op"] == "Dropout"]
    assert len(mode) == 1 and nodes[mode[0]]["attrs"]["p"] == "0.5"  # one mode flag per graph
    assert nodes[nodes[mode[0]]["inputs"][0][0]]["op"] == "_ones"
    bns = _bn_nodes(low)
    assert [bn.get("attrs", {}).get("act_type") for bn in bns] == ["relu", None]  # the ReLU after the first fused
    assert "Activation" not in [n["op"] for n in nodes]
    for bn in bns:
        assert bn["inputs"][-1][0] == mode[0]
        assert nodes[bn["inputs"][0][0]]["op"] == "amp_convolution"  # bfloat16 straight from the convolution
    # no float32 island: no cast of the data around either BatchNorm
    assert not [n for n in nodes if n["op"] == "amp_cast" and n["attrs"]["dtype"] == "float32"
                and nodes[n["inputs"][0][0]]["op"] == "amp_convolution"]
    # inference graphs too (a BatchNorm conversion cannot fold: here, unfused, both), with the ReLU fused
    inference, _ = rewrite_symbol(sym, make_policy("bfloat16", emulate=False), "cpu", inference=True)
    assert [(n["op"], n.get("attrs", {}).get("act_type")) for n in _bn_nodes(inference)] == [
        ("amp_batch_norm", "relu"), ("amp_batch_norm", None)]
    # emulation, float16 and kernels="mxnet" keep MXNet's BatchNorm
    for policy in (make_policy("bfloat16", emulate=True), make_policy("float16"),
                   make_policy("bfloat16", emulate=False, kernels="mxnet")):
        other, _ = rewrite_symbol(sym, policy, "cpu")
        assert [n["op"] for n in _bn_nodes(other)] == ["BatchNorm"] * 2


class _DenseLayer(gluon.HybridBlock):
    """DenseNet's layer: the input concatenated with a 1x1 -> 3x3 branch, each convolution after BatchNorm and ReLU
    (the BatchNorm after the concatenation has no convolution before it to fold into)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.stem = nn.Conv2D(8, 3, padding=1)
            self.bn1, self.conv1 = nn.BatchNorm(), nn.Conv2D(16, 1)
            self.bn2, self.conv2 = nn.BatchNorm(), nn.Conv2D(4, 3, padding=1)
            self.bn3 = nn.BatchNorm()

    def hybrid_forward(self, F, x):
        x = self.stem(x)
        h = self.conv2(F.relu(self.bn2(self.conv1(F.relu(self.bn1(x))))))
        return F.relu(self.bn3(F.concat(x, h, dim=1)))


@requires_onednn3_bf16
def test_inference_runs_unfoldable_batch_norms_on_the_library_kernel_and_exports_them():
    """Converted for inference, the BatchNorms no convolution precedes run on amp_batch_norm with their ReLUs fused,
    reading and writing bfloat16 (no float32 island); the outputs follow float32 and the ONNX export computes them."""
    net = _DenseLayer()
    net.initialize(mx.init.Xavier())
    x = mx.nd.array(np.random.RandomState(2).uniform(-1, 1, (2, 3, 8, 8)))
    net(x)
    rng = np.random.RandomState(3)
    for name, param in net.collect_params().items():
        if name.endswith(("running_var", "gamma")):
            param.set_data(mx.nd.array(rng.uniform(0.5, 1.5, param.shape)))
        elif name.endswith(("running_mean", "beta")):
            param.set_data(mx.nd.array(rng.uniform(-0.2, 0.2, param.shape)))
    ref = net(x).asnumpy()
    low = amp.convert_hybrid_block(net, x, "bfloat16", emulate=False)
    nodes = json.loads(low._cached_graph[1].tojson(remove_amp_cast=False))["nodes"]
    bns = [n for n in nodes if "BatchNorm" in n["op"] or n["op"] == "amp_batch_norm"]
    assert [(n["op"], n.get("attrs", {}).get("act_type")) for n in bns] == [("amp_batch_norm", "relu")] * 2
    assert not {"relu", "Activation", "BatchNorm"} & {n["op"] for n in nodes}  # bn2 folded, every ReLU fused
    for bn in bns:  # bfloat16 straight in
        assert nodes[bn["inputs"][0][0]]["op"] in ("amp_convolution", "amp_concat")
    got = low(x).asnumpy()
    assert np.abs(got - ref).max() <= 0.02 * np.abs(ref).max()
    onnx = pytest.importorskip("onnxruntime")
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        path = amp.export_onnx(low, None, [x.shape], tmp + "/m.onnx", bf16_mode="emulate")
        sess = onnx.InferenceSession(path, providers=["CPUExecutionProvider"])
        exported = sess.run(None, {sess.get_inputs()[0].name: x.asnumpy()})[0]
    assert np.abs(exported - got).max() <= 0.02 * np.abs(got).max()


def _trained(use_amp, steps=3):
    mx.random.seed(0)
    net = _cnn()
    net.initialize(mx.init.Xavier())
    net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.05})
    x = mx.nd.array(np.random.RandomState(1).uniform(-1, 1, (8, 3, 8, 8)))
    y = mx.nd.array(np.arange(8) % 4)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    if use_amp:
        amp.init_trainer(trainer)
    for _ in range(steps):
        with autograd.record():
            loss = loss_fn(net(x), y)
            if use_amp:
                with amp.scale_loss(loss, trainer) as scaled:
                    autograd.backward(scaled)
            else:
                loss.backward()
        trainer.step(8)
    stats = {k: v.data().asnumpy().copy() for k, v in net.collect_params(".*running.*").items()}
    return net, x, stats


@requires_onednn3_bf16
def test_amp_training_updates_the_statistics_and_inference_reads_them():
    """amp.init training with amp_batch_norm follows float32 training (bf16 tolerance), updates the moving
    statistics in training calls only, and normalises with them in inference calls."""
    ref_net, x, ref_stats = _trained(False)
    ref_infer = ref_net(x).asnumpy()
    amp.init("bfloat16", emulate=False)
    try:
        net, _, stats = _trained(True)
        assert "amp_batch_norm" in net._cached_graph[1].tojson()
        for k in ref_stats:  # moved by three training steps, as float32 moved them
            assert not np.array_equal(stats[k], np.ones_like(stats[k])) and not np.array_equal(stats[k], 0 * stats[k])
            np.testing.assert_allclose(stats[k], ref_stats[k], rtol=0.05, atol=0.02, err_msg=k)
        after_train = {k: v.data().asnumpy().copy() for k, v in net.collect_params(".*running.*").items()}
        low = net(x).asnumpy()  # inference: the moving statistics, untouched
        for k, v in net.collect_params(".*running.*").items():
            assert np.array_equal(v.data().asnumpy(), after_train[k]), k
        assert np.abs(low - ref_infer).max() <= 0.02 * np.abs(ref_infer).max()  # measured: 0.0056
        with autograd.record(train_mode=False):  # recorded, not training: the moving statistics too
            assert np.abs(net(x).asnumpy() - low).max() <= 1e-6 * max(1.0, np.abs(low).max())
        with autograd.record():  # a training call moves them
            net(x).wait_to_read()
        assert all(not np.array_equal(v.data().asnumpy(), after_train[k])
                   for k, v in net.collect_params(".*running.*").items())
    finally:
        amp.reset()
