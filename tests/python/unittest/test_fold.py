"""Tests for mxnet.amp.fold: BatchNorm folded into the convolution before it, exactly, and only where exact."""
import json

import numpy as np
import pytest

import mxnet as mx
from mxnet.gluon import nn
from mxnet.gluon.model_zoo import vision
from mxnet.amp.graph.fold import fold_batchnorm


def _graph(net, shape, seed=0):
    """Symbol, parameters (BatchNorm statistics and scales far from 1 and 0) and an input of a Gluon net."""
    rng = np.random.RandomState(seed)
    net.initialize(mx.init.Xavier(magnitude=2.0))
    x = mx.nd.array(rng.uniform(-1, 1, shape))
    net(x)
    mx.nd.waitall()  # the forward queues asynchronous reorders of the weights: reading one races them
    sym = net(mx.sym.var("data"))
    args, aux = {}, {}
    for p in net.collect_params().values():
        value = p.data().asnumpy()
        if p.name.endswith(("running_var", "gamma")):
            value = rng.uniform(0.3, 2.0, value.shape)
        elif p.name.endswith(("running_mean", "beta")):
            value = rng.uniform(-0.5, 0.5, value.shape)
        (aux if p.name in sym.list_auxiliary_states() else args)[p.name] = mx.nd.array(value)
    return sym, args, aux, x


def _run(sym, args, aux, x):
    exe = sym.bind(mx.cpu(), dict(args, data=x), aux_states=aux, grad_req="null")
    return exe.forward(is_train=False)[0].asnumpy()


def _ops(sym):
    return [n["op"] for n in json.loads(sym.tojson())["nodes"]]


@pytest.mark.parametrize("name", ["resnet18_v1", "mobilenetv2_0.25", "densenet121", "vgg11_bn"])
def test_folded_model_zoo_nets_compute_the_same(name):
    small = name != "densenet121"  # it pools with a fixed 7x7 window
    sym, args, aux, x = _graph(vision.get_model(name, classes=10), (2, 3, 32, 32) if small else (1, 3, 224, 224))
    folded, f_args, f_aux = fold_batchnorm(sym, args, aux)
    ref = _run(sym, args, aux, x)
    np.testing.assert_allclose(_run(folded, f_args, f_aux, x), ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max())
    convs_followed_by_bn = _ops(sym).count("BatchNorm") - _ops(folded).count("BatchNorm")
    assert convs_followed_by_bn > 0 and _ops(folded).count("Convolution") == _ops(sym).count("Convolution")
    assert set(f_args) | set(f_aux) == set(folded.list_inputs()) - {"data"}  # nothing stale, nothing missing


def test_one_pair_matches_the_numpy_formula():
    data, w = mx.sym.var("data"), mx.sym.var("w")
    gamma, beta, mean, var = (mx.sym.var(n) for n in ("g", "b", "m", "v"))
    conv = mx.sym.Convolution(data, w, kernel=(3, 3), num_filter=4, no_bias=True, name="c")
    sym = mx.sym.BatchNorm(conv, gamma, beta, mean, var, eps=1e-3, fix_gamma=False, name="bn")
    rng = np.random.RandomState(1)
    W, g, b, m, v = (rng.uniform(0.2, 1.5, s) for s in ((4, 2, 3, 3), (4,), (4,), (4,), (4,)))
    args = {"w": mx.nd.array(W), "g": mx.nd.array(g), "b": mx.nd.array(b)}
    folded, f_args, f_aux = fold_batchnorm(sym, args, {"m": mx.nd.array(m), "v": mx.nd.array(v)})
    assert f_aux == {} and sorted(f_args) == ["c_bias", "w"]
    s = g / np.sqrt(v + 1e-3)
    np.testing.assert_allclose(f_args["w"].asnumpy(), (W * s[:, None, None, None]).astype(np.float32), rtol=1e-6)
    np.testing.assert_allclose(f_args["c_bias"].asnumpy(), (b - m * s).astype(np.float32), rtol=1e-6, atol=1e-7)
    assert _ops(folded).count("BatchNorm") == 0
    conv_node = next(n for n in json.loads(folded.tojson())["nodes"] if n["op"] == "Convolution")
    assert conv_node["attrs"]["no_bias"] == "False"


def test_fix_gamma_ignores_gamma():
    net = nn.HybridSequential()
    net.add(nn.Conv2D(4, 3, use_bias=True), nn.BatchNorm(scale=False))  # fix_gamma=True
    sym, args, aux, x = _graph(net, (1, 3, 6, 6))
    folded, f_args, f_aux = fold_batchnorm(sym, args, aux)
    assert "BatchNorm" not in _ops(folded)
    np.testing.assert_allclose(_run(folded, f_args, f_aux, x), _run(sym, args, aux, x), rtol=1e-5, atol=1e-6)


def test_unfoldable_pairs_are_left_alone():
    data, w = mx.sym.var("data"), mx.sym.var("w")
    conv = mx.sym.Convolution(data, w, kernel=(1, 1), num_filter=3, no_bias=True, name="c")
    shared = mx.sym.BatchNorm(conv, name="bn1") + conv          # conv output read twice
    other = mx.sym.Convolution(data, w, kernel=(1, 1), num_filter=3, no_bias=True, name="c2")
    reused = mx.sym.BatchNorm(other, name="bn2")               # its weight is read by another conv too
    kept = mx.sym.BatchNorm(mx.sym.Convolution(data, num_filter=3, kernel=(1, 1), name="c3"), name="bn3")
    sym = mx.sym.Group([shared, reused, kept])
    shapes = dict(zip(sym.list_arguments(), sym.infer_shape(data=(1, 3, 4, 4))[0]))
    aux_shapes = dict(zip(sym.list_auxiliary_states(), sym.infer_shape(data=(1, 3, 4, 4))[2]))
    args = {k: mx.nd.ones(s) for k, s in shapes.items() if k != "data"}
    aux = {k: mx.nd.ones(s) for k, s in aux_shapes.items()}
    same, same_args, same_aux = fold_batchnorm(sym, args, aux, keep=["bn3"])
    assert same is sym and same_args is args and same_aux is aux
    folded, _, _ = fold_batchnorm(sym, args, aux)
    assert _ops(folded).count("BatchNorm") == 2  # only c3 -> bn3 folds


def test_numpy_mode_graph_folds():
    mx.npx.set_np()
    try:
        net = nn.HybridSequential()
        net.add(nn.Conv2D(4, 3), nn.BatchNorm(), nn.Activation("relu"))
        net.initialize()
        x = mx.np.array(np.random.RandomState(2).uniform(-1, 1, (1, 3, 6, 6)).astype(np.float32))
        net(x)
        sym = net(mx.sym.var("data").as_np_ndarray())
        params = {p.name: p.data().as_nd_ndarray() for p in net.collect_params().values()}
        args = {k: v for k, v in params.items() if k in sym.list_arguments()}
        aux = {k: v for k, v in params.items() if k in sym.list_auxiliary_states()}
        folded, f_args, f_aux = fold_batchnorm(sym, args, aux)
        assert isinstance(folded, mx.sym.np._Symbol) and not f_aux
        got = folded.as_nd_ndarray().bind(mx.cpu(), dict(f_args, data=x.as_nd_ndarray())).forward()[0]
        np.testing.assert_allclose(got.asnumpy(), net(x).asnumpy(), rtol=1e-5, atol=1e-6)
    finally:
        mx.npx.reset_np()
