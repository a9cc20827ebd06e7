"""bfloat16 conversion of GluonCV model-zoo networks: does each convert and run, how far from float32, how fast.

For every model (random weights, ``pretrained=False``; with ``--bn-stats random`` BatchNorm's statistics and
scales are drawn away from 0 and 1, as in a trained net, and folding them into the convolutions matters; with
``default`` they keep Gluon's initial values), in a child process of its own per converter (a crash ends only
that row): the float32 output, then
``mxnet.amp.convert_hybrid_block(net, x, 'bfloat16')`` with default options and ``mxnet.contrib.amp``'s
``convert_hybrid_block`` (the peer we measure against). Prints the max deviation ``max|y - y_fp32| /
max|y_fp32|`` of the first output and the best of ``--repeat`` times, side by side. Detection outputs are
ranked and suppressed boxes, so their deviation is shown for information only; classifiers are the
accuracy comparison. Needs ``pip install gluoncv==0.10.5.post0 "opencv-python-headless<4.11" numpy==1.23.5``.

Usage: python bench/bench_zoo.py [--models a,b] [--repeat 3] [--bn-stats random|default]
"""
import argparse
import json
import os
import sys
import time

import numpy as np

#: name -> (input shape, kind)
MODELS = {
    "resnet18_v1": ((1, 3, 224, 224), "classifier"),
    "resnet50_v1b": ((1, 3, 224, 224), "classifier"),
    "resnet18_v2": ((1, 3, 224, 224), "classifier"),
    "mobilenet1.0": ((1, 3, 224, 224), "classifier"),
    "mobilenetv2_1.0": ((1, 3, 224, 224), "classifier"),
    "mobilenetv3_large": ((1, 3, 224, 224), "classifier"),
    "vgg11_bn": ((1, 3, 224, 224), "classifier"),
    "densenet121": ((1, 3, 224, 224), "classifier"),
    "darknet53": ((1, 3, 224, 224), "classifier"),
    "squeezenet1.1": ((1, 3, 224, 224), "classifier"),
    "inceptionv3": ((1, 3, 299, 299), "classifier"),
    "residualattentionnet56": ((1, 3, 224, 224), "classifier"),
    "se_resnet18_v1": ((1, 3, 224, 224), "classifier"),
    "cifar_wideresnet16_10": ((1, 3, 32, 32), "classifier"),
    "cifar_resnet56_v1": ((1, 3, 32, 32), "classifier"),
    "simple_pose_resnet18_v1b": ((1, 3, 256, 192), "pose"),
    "mobile_pose_mobilenetv2_1.0": ((1, 3, 256, 192), "pose"),
    "fcn_resnet50_voc": ((1, 3, 224, 224), "segmentation"),
    "ssd_300_vgg16_atrous_voc": ((1, 3, 300, 300), "detection"),
    "ssd_512_mobilenet1.0_voc": ((1, 3, 512, 512), "detection"),
    "yolo3_darknet53_voc": ((1, 3, 320, 320), "detection"),
    "yolo3_mobilenet1.0_voc": ((1, 3, 320, 320), "detection"),
}
CONVERTERS = ("ours", "contrib")


def build(name, bn_stats="random"):
    """Return ``(net, x)``: the model with deterministic random weights, hybridized, run once."""
    import mxnet as mx
    from gluoncv import model_zoo
    kwargs = {} if MODELS[name][1] == "classifier" else {"pretrained_base": False}
    net = model_zoo.get_model(name, pretrained=False, **kwargs)
    mx.random.seed(0)
    net.initialize()  # then Xavier for the weights (detectors have vectors without an initializer of their own)
    x = mx.nd.array(np.random.RandomState(0).uniform(0, 1, MODELS[name][0]))
    net(x)
    xavier = mx.init.Xavier(magnitude=2)
    for p in net.collect_params().values():
        if p.name.endswith("weight") and len(p.shape) >= 2:
            xavier(mx.init.InitDesc(p.name), p.data())
    rng = np.random.RandomState(1)
    for p in net.collect_params().values() if bn_stats == "random" else ():
        if p.name.endswith(("running_var", "gamma")):
            p.set_data(mx.nd.array(rng.uniform(0.5, 1.5, p.shape)))
        elif p.name.endswith(("running_mean", "beta")):
            p.set_data(mx.nd.array(rng.uniform(-0.2, 0.2, p.shape)))
    net.hybridize()
    return net, x


def _first(out):
    import mxnet as mx
    out = out[0] if isinstance(out, (list, tuple)) else out
    return (mx.nd.amp_cast(out, dtype="float32") if "bfloat16" in str(out.dtype) else out).asnumpy()


def child(name, converter, repeat, bn_stats):
    """Convert and time one model in this process; return a JSON-safe dict."""
    import warnings
    import mxnet as mx
    warnings.filterwarnings("ignore")
    net, x = build(name, bn_stats)
    ref = _first(net(x))
    fp32 = _best(lambda: _first(net(x)), repeat)
    if converter == "ours":
        from mxnet import amp
        low = amp.convert_hybrid_block(net, x, "bfloat16")
    else:
        from mxnet.contrib import amp as contrib_amp
        low = contrib_amp.convert_hybrid_block(net, target_dtype="bfloat16", ctx=mx.cpu())
    got = _first(low(x))
    dev = float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30)) if got.shape == ref.shape else None
    return {"dev": dev, "seconds": _best(lambda: _first(low(x)), repeat), "fp32_seconds": fp32}


def _best(func, repeat):
    func()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        best = min(best, time.perf_counter() - start)
    return best


def run_child(name, converter, repeat, timeout, bn_stats):
    from timing import child_json
    return child_json([sys.executable, os.path.abspath(__file__), "--child", name, converter, "--repeat", str(repeat),
                       "--bn-stats", bn_stats], timeout)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--timeout", type=int, default=900, help="seconds per model and converter")
    parser.add_argument("--bn-stats", choices=("random", "default"), default="random",
                        help="BatchNorm statistics and scales: drawn away from 0/1, or Gluon's initial ones")
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "CONVERTER"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.repeat, args.bn_stats)))
        return 0
    from mxnet.amp.core import support
    print("bfloat16 on this CPU: %s" % ("native oneDNN kernels (AVX-512)" if support.native_support("bfloat16", "cpu")
                                        else "emulated (no AVX-512): deviations only, speed is not bf16's"))
    print("BatchNorm statistics: %s; batch 1, best of %d" % (args.bn_stats, args.repeat))
    print("%-28s %-13s | %-22s | %-22s | %s" % ("model", "kind", "mxnet.amp dev / vs fp32",
                                                "contrib dev / vs fp32", "ours/contrib dev"))
    for name in args.models.split(","):
        res = {c: run_child(name, c, args.repeat, args.timeout, args.bn_stats) for c in CONVERTERS}
        cells = []
        for c in CONVERTERS:
            r = res[c]
            cells.append(r["error"][:22] if "error" in r else "%s / %.2fx" % (
                "%.1e" % r["dev"] if r["dev"] is not None else "n/a", r["fp32_seconds"] / r["seconds"]))
        ratio = (res["ours"]["dev"] / res["contrib"]["dev"]
                 if all("error" not in res[c] and res[c]["dev"] for c in CONVERTERS) else float("nan"))
        print("%-28s %-13s | %-22s | %-22s | %.2f" % (name, MODELS[name][1], cells[0], cells[1], ratio), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
