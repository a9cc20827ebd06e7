"""bfloat16 conversion of GluonCV model-zoo networks: does each convert and run, how far from float32, how fast.

For every model (random weights, ``pretrained=False``; with ``--bn-stats random`` BatchNorm's statistics and
scales are drawn away from 0 and 1, as in a trained net, and folding them into the convolutions matters; with
``default`` they keep Gluon's initial values) and batch size, in a child process of its own per converter (a crash
ends only that row): the float32 output, then ``mxnet.amp.convert_hybrid_block(net, x, 'bfloat16')`` with default
options or ``mxnet.contrib.amp``'s ``convert_hybrid_block`` (the peer we measure against), the float32 and the
converted model timed alternately in that process. Prints, per model and batch, the milliseconds of float32, ours
and contrib (best of ``--repeat``; float32 from ours' process), ours against float32 and against contrib, and the max
deviation ``max|y - y_fp32| / max|y_fp32|`` of the first output. Detectors run without their NMS (``set_nms(0)``:
MXNet's ``box_nms`` is float32 in every configuration), so their outputs are the raw boxes and scores; classifiers
are the accuracy comparison. The last lines name the slowest row against float32 and against contrib. Needs
``pip install gluoncv==0.10.5.post0 "opencv-python-headless<4.11" numpy==1.23.5``.

Usage: python bench/bench_zoo.py [--models a,b] [--batches 1,8] [--repeat 5] [--bn-stats random|default]
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import best_of, child_json, cpu_banner  # noqa: E402

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
    "squeezenet1.0": ((1, 3, 224, 224), "classifier"),
    "squeezenet1.1": ((1, 3, 224, 224), "classifier"),
    "inceptionv3": ((1, 3, 299, 299), "classifier"),
    "residualattentionnet56": ((1, 3, 224, 224), "classifier"),
    "se_resnet18_v1": ((1, 3, 224, 224), "classifier"),
    "cifar_wideresnet16_10": ((1, 3, 32, 32), "classifier"),
    "cifar_resnet20_v1": ((1, 3, 32, 32), "classifier"),
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


def build(name, bn_stats="random", batch=1):
    """Return ``(net, x)``: the model with deterministic random weights, hybridized, run once (detectors without
    their NMS)."""
    import mxnet as mx
    from gluoncv import model_zoo
    kwargs = {} if MODELS[name][1] == "classifier" else {"pretrained_base": False}
    net = model_zoo.get_model(name, pretrained=False, **kwargs)
    if MODELS[name][1] == "detection":
        net.set_nms(nms_thresh=0)  # GluonCV's detectors skip box_nms outside (0, 1)
    mx.random.seed(0)
    net.initialize()  # then Xavier for the weights (detectors have vectors without an initializer of their own)
    x = mx.nd.array(np.random.RandomState(0).uniform(0, 1, (batch,) + MODELS[name][0][1:]))
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


def child(name, converter, repeat, bn_stats, batch):
    """Convert and time one model in this process; return a JSON-safe dict."""
    import warnings
    import mxnet as mx
    warnings.filterwarnings("ignore")
    net, x = build(name, bn_stats, batch)
    ref = _first(net(x))
    if converter == "ours":
        from mxnet import amp
        low = amp.convert_hybrid_block(net, x, "bfloat16")
    else:
        from mxnet.contrib import amp as contrib_amp
        low = contrib_amp.convert_hybrid_block(net, target_dtype="bfloat16", ctx=mx.cpu())
    got = _first(low(x))
    dev = float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30)) if got.shape == ref.shape else None
    best = best_of({"fp32": lambda: _first(net(x)), "low": lambda: _first(low(x))}, repeat, inner=1)
    return {"dev": dev, "seconds": best["low"], "fp32_seconds": best["fp32"]}


def run_child(name, converter, repeat, timeout, bn_stats, batch):
    return child_json([sys.executable, os.path.abspath(__file__), "--child", name, converter, "--repeat", str(repeat),
                       "--bn-stats", bn_stats, "--batches", str(batch)], timeout)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--batches", default="1,8", help="comma-separated batch sizes")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--timeout", type=int, default=900, help="seconds per model and converter")
    parser.add_argument("--bn-stats", choices=("random", "default"), default="random",
                        help="BatchNorm statistics and scales: drawn away from 0/1, or Gluon's initial ones")
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "CONVERTER"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.repeat, args.bn_stats, batches[0])))
        return 0
    cpu_banner()
    print("BatchNorm statistics: %s; best of %d; detectors without NMS; %s"
          % (args.bn_stats, args.repeat, time.strftime("%Y-%m-%d")))
    print("%-28s %5s | %9s %9s %9s | %8s %10s | %-9s %-9s" % (
        "model", "batch", "fp32 ms", "ours ms", "contrib", "vs fp32", "vs contrib", "ours dev", "contrib dev"))
    rows = []
    for name in args.models.split(","):
        for batch in batches:
            res = {c: run_child(name, c, args.repeat, args.timeout, args.bn_stats, batch) for c in CONVERTERS}
            ours, contrib = res["ours"], res["contrib"]
            if "error" in ours:
                print("%-28s %5d | ours failed: %s" % (name, batch, ours["error"]), flush=True)
                continue
            vs_fp32 = ours["fp32_seconds"] / ours["seconds"]
            # against contrib: the two speed-ups over float32, each measured in its own process (drift cancels)
            vs_contrib = (vs_fp32 / (contrib["fp32_seconds"] / contrib["seconds"]) if "error" not in contrib
                          else float("nan"))
            rows.append((name, batch, vs_fp32, vs_contrib))
            print("%-28s %5d | %9.1f %9.1f %9s | %7.2fx %9.2fx | %-9s %-9s" % (
                name, batch, ours["fp32_seconds"] * 1e3, ours["seconds"] * 1e3,
                "%.1f" % (contrib["seconds"] * 1e3) if "error" not in contrib else "failed",
                vs_fp32, vs_contrib, "%.1e" % ours["dev"] if ours["dev"] is not None else "n/a",
                ("%.1e" % contrib["dev"] if contrib.get("dev") is not None else "n/a") if "error" not in contrib
                else contrib["error"][:24]), flush=True)
    if rows:
        slow = min(rows, key=lambda r: r[2])
        print("\n%d rows; slowest against float32: %s batch %d, %.2fx; rows below 1.0x float32: %d"
              % (len(rows), slow[0], slow[1], slow[2], sum(r[2] < 1 for r in rows)))
        against = [r for r in rows if r[3] == r[3]]
        if against:
            slow = min(against, key=lambda r: r[3])
            print("slowest against contrib: %s batch %d, %.2fx; rows below 1.0x contrib: %d"
                  % (slow[0], slow[1], slow[3], sum(r[3] < 1 for r in against)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
