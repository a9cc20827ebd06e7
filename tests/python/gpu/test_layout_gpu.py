"""Real channels-last graphs (amp_layout, no emulation) against the NCHW originals on a GPU."""
import json

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd
from mxnet.gluon import nn
from mxnet.gluon.model_zoo import vision

from mxnet.amp.graph import layout

pytestmark = pytest.mark.skipif(
    mx.context.num_gpus() == 0,
    reason="needs a GPU build of MXNet and a GPU: channels-last convolutions do not run on CPU")

# Largest difference allowed, relative to the largest magnitude of the reference: cuDNN picks other
# algorithms (and TF32 on Ampere and later) for NHWC than for NCHW.
TOLERANCE = {"float32": 5e-3, "float16": 3e-2}


def _deconv():
    net = nn.HybridSequential()
    net.add(nn.Conv2D(8, 3, strides=2, padding=1), nn.Activation("relu"),
            nn.Conv2DTranspose(3, 4, strides=2, padding=1))
    return net


def _conv3d():
    net = nn.HybridSequential()
    net.add(nn.Conv3D(8, 3, padding=1), nn.BatchNorm(), nn.Activation("relu"), nn.MaxPool3D(2),
            nn.GlobalAvgPool3D(), nn.Dense(4))
    return net


MODELS = {
    "resnet18_v1": (vision.resnet18_v1, (4, 3, 64, 64)),
    "resnet18_v2": (vision.resnet18_v2, (4, 3, 64, 64)),
    "densenet121": (vision.densenet121, (2, 3, 224, 224)),
    "mobilenet1_0": (vision.mobilenet1_0, (4, 3, 64, 64)),
    "mobilenet_v2": (vision.mobilenet_v2_1_0, (4, 3, 64, 64)),
    "inception_v3": (vision.inception_v3, (2, 3, 299, 299)),
    "vgg11_bn": (vision.vgg11_bn, (2, 3, 224, 224)),
    "deconv": (_deconv, (4, 3, 32, 32)),
    "conv3d": (_conv3d, (2, 3, 8, 16, 16)),
}


def _net(name, dtype):
    mx.random.seed(0)
    factory, shape = MODELS[name]
    ctx = mx.gpu(0)
    net = factory()
    net.initialize(mx.init.Xavier(magnitude=2.0), ctx=ctx)
    x = mx.nd.random.uniform(-1, 1, shape=shape, ctx=ctx)
    net(x)
    net.cast(dtype)
    return net, x.astype(dtype)


def _run(net, x, train):
    with autograd.record(train_mode=train):
        out = net(x)
        loss = (out.astype("float32") ** 2).mean()
    grads = {}
    if train:
        loss.backward()
        grads = {p.name: p.grad().asnumpy().astype(np.float32)
                 for p in net.collect_params().values() if p.grad_req != "null"}
    return out.asnumpy().astype(np.float32), grads


def _close(actual, expected, tol, what):
    scale = max(1e-6, float(np.abs(expected).max()))
    err = float(np.abs(actual - expected).max()) / scale
    assert err <= tol, "%s: max difference %.3g of the largest magnitude (allowed %.3g)" % (what, err, tol)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_channels_last_matches_nchw_on_gpu(name, dtype):
    net, x = _net(name, dtype)
    net.hybridize()
    ref, ref_grads = _run(net, x, train=True)
    ref_infer, _ = _run(net, x, train=False)
    if name == "conv3d":  # MXNet 1.9.1 runs 3-D convolutions in NCDHW only: left as they are
        with pytest.warns(UserWarning, match="unchanged: 3-D"):
            layout.optimize_layout(net, x)
    else:
        layout.optimize_layout(net, x)
        _, sym = net._cached_graph  # pylint: disable=protected-access
        assert set(layout.layout_report(sym).values()) == {"NHWC"}
        convs = [n for n in json.loads(sym.tojson())["nodes"]
                 if n["op"] in ("Convolution", "Deconvolution")]
        assert all(n["attrs"]["layout"] == "NHWC" for n in convs)
    out, grads = _run(net, x, train=True)
    tol = TOLERANCE[dtype]
    _close(out, ref, tol, "training output")
    for k, g in ref_grads.items():
        _close(grads[k], g, tol, "gradient of " + k)
    out, _ = _run(net, x, train=False)
    _close(out, ref_infer, tol, "inference output")


def test_converted_model_runs_on_gpu():
    net, x = _net("resnet18_v1", "float16")
    ref = net(x).asnumpy().astype(np.float32)
    sym = net(mx.sym.var("data"))
    aux_names = set(sym.list_auxiliary_states())
    params = {p.name: p.data() for p in net.collect_params().values()}
    args = {k: v for k, v in params.items() if k not in aux_names}
    aux = {k: v for k, v in params.items() if k in aux_names}
    new, new_args, new_aux = layout.convert_layout(sym, args, aux, {"data": x.shape},
                                                   input_dtypes={"data": "float16"}, ctx=mx.gpu(0))
    ctx = mx.gpu(0)
    exe = new.bind(ctx, dict({k: v.as_in_context(ctx) for k, v in new_args.items()}, data=x),
                   aux_states={k: v.as_in_context(ctx) for k, v in new_aux.items()})
    out = exe.forward(is_train=False)[0].asnumpy().astype(np.float32)
    _close(out, ref, TOLERANCE["float16"], "converted model output")
