"""The vision architectures that Gluon's model zoo and torchvision share, in float32 and bfloat16, against PyTorch.

For each architecture and batch size, five configurations, each in a child process of its own (random weights,
224x224 images, 299x299 for Inception v3), best of ``--repeat`` forwards after a warm-up:

* ``mxnet fp32``: the hybridized Gluon model;
* ``ours``: ``mxnet.amp.convert_hybrid_block(net, x, "bfloat16")``, the default call;
* ``contrib``: ``mxnet.contrib.amp.convert_hybrid_block(net, target_dtype="bfloat16")``, the predecessor;
* ``torch fp32`` and ``torch autocast``: torchvision's model of the same architecture in eval mode under
  ``torch.inference_mode()``, in float32 and under ``torch.autocast("cpu", torch.bfloat16)``, run by
  ``--torch-python`` (default: this interpreter) in a process that never imports MXNet.

The architectures: resnet18, resnet50, mobilenet_v2, densenet121, squeezenet1.1, vgg11_bn, inception_v3, alexnet
(``mxnet.gluon.model_zoo.vision``), and mobilenet_v3_large from GluonCV where it imports (Gluon's own zoo has no
MobileNet v3). Prints milliseconds per batch, ours against MXNet float32, contrib and PyTorch autocast, the median
of ours against PyTorch autocast and the slowest row of each column.

    python bench/bench_vision.py [--models resnet50,mobilenet_v2] [--batches 1,16] [--repeat 5]
        [--torch-python PATH]
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import best_of, child_json, cpu_banner  # noqa: E402

#: name -> (Gluon model-zoo name, or "gluoncv:NAME"; torchvision name; image size)
MODELS = {
    "resnet18": ("resnet18_v1", "resnet18", 224),
    "resnet50": ("resnet50_v1", "resnet50", 224),
    "mobilenet_v2": ("mobilenetv2_1.0", "mobilenet_v2", 224),
    "mobilenet_v3": ("gluoncv:mobilenetv3_large", "mobilenet_v3_large", 224),
    "densenet121": ("densenet121", "densenet121", 224),
    "squeezenet": ("squeezenet1.1", "squeezenet1_1", 224),
    "vgg11_bn": ("vgg11_bn", "vgg11_bn", 224),
    "inception_v3": ("inceptionv3", "inception_v3", 299),
    "alexnet": ("alexnet", "alexnet", 224),
}
MXNET_CONFIGS = ("mxnet fp32", "ours", "contrib")
TORCH_CONFIGS = ("torch fp32", "torch autocast")


def mxnet_child(model, config, batch, repeat):
    """Seconds per forward of one MXNet configuration."""
    import warnings
    import mxnet as mx
    import numpy as np
    warnings.filterwarnings("ignore")
    gluon_name, _, size = MODELS[model]
    if gluon_name.startswith("gluoncv:"):
        from gluoncv import model_zoo
        net = model_zoo.get_model(gluon_name.split(":", 1)[1], pretrained=False)
    else:
        net = mx.gluon.model_zoo.vision.get_model(gluon_name)
    mx.random.seed(0)
    net.initialize(mx.init.Xavier(magnitude=2))
    net.hybridize()
    x = mx.nd.array(np.random.RandomState(0).uniform(0, 1, (batch, 3, size, size)))
    net(x).wait_to_read()
    if config == "ours":
        from mxnet import amp
        net = amp.convert_hybrid_block(net, x, "bfloat16")
    elif config == "contrib":
        from mxnet.contrib import amp as contrib_amp
        net = contrib_amp.convert_hybrid_block(net, target_dtype="bfloat16", ctx=mx.cpu())
    return {"seconds": best_of({config: lambda: net(x).wait_to_read()}, repeat, inner=1)[config]}


TORCH_SCRIPT = """
import json, sys, time
import torch, torchvision
name, size, batch, repeat, autocast = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
torch.manual_seed(0)
kwargs = {"aux_logits": False, "init_weights": True} if name == "inception_v3" else {}
net = getattr(torchvision.models, name)(**kwargs).eval()
x = torch.rand(batch, 3, size, size)
def forward():
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast == "1"):
        net(x)
forward()
best = float("inf")
for _ in range(repeat):
    start = time.perf_counter(); forward(); best = min(best, time.perf_counter() - start)
print(json.dumps({"seconds": best, "threads": torch.get_num_threads(), "version": torch.__version__}))
"""


def run(model, config, batch, repeat, timeout, torch_python):
    if config in TORCH_CONFIGS:
        _, name, size = MODELS[model]
        return child_json([torch_python, "-c", TORCH_SCRIPT, name, str(size), str(batch), str(repeat),
                           "1" if config == "torch autocast" else "0"], timeout)
    return child_json([sys.executable, os.path.abspath(__file__), "--child", model, config, "--batches", str(batch),
                       "--repeat", str(repeat)], timeout)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--timeout", type=int, default=900, help="seconds per configuration")
    parser.add_argument("--torch-python", default=sys.executable, help="interpreter with torch and torchvision")
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "CONFIG"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    if args.child:
        print(json.dumps(mxnet_child(args.child[0], args.child[1], batches[0], args.repeat)))
        return 0
    cpu_banner()
    print("best of %d; ms per batch; ratios > 1: ours is faster" % args.repeat)
    configs = MXNET_CONFIGS + TORCH_CONFIGS
    print("%-14s %5s | %s | %8s %8s %8s" % ("model", "batch", " | ".join("%14s" % c for c in configs), "vs fp32",
                                             "vs contrib", "vs torch"))
    rows = []
    for model in args.models.split(","):
        for batch in batches:
            res = {c: run(model, c, batch, args.repeat, args.timeout, args.torch_python) for c in configs}
            ms = {c: res[c]["seconds"] * 1e3 for c in configs if "error" not in res[c]}
            ratio = {base: ms[base] / ms["ours"] if "ours" in ms and base in ms else float("nan")
                     for base in ("mxnet fp32", "contrib", "torch autocast")}
            rows.append((model, batch, ratio))
            print("%-14s %5d | %s | %7.2fx %7.2fx %7.2fx" % (
                model, batch, " | ".join("%14.1f" % ms[c] if c in ms else "%14s" % res[c]["error"][:14]
                                         for c in configs),
                ratio["mxnet fp32"], ratio["contrib"], ratio["torch autocast"]), flush=True)
            for c in configs:
                if "error" in res[c]:
                    print("    %s: %s" % (c, res[c]["error"]))
    for base in ("mxnet fp32", "contrib", "torch autocast"):
        known = [(r[base], m, b) for m, b, r in rows if r[base] == r[base]]
        if known:
            low = min(known)
            print("ours against %s: median %.2fx, slowest %s batch %d at %.2fx, rows below 1.0x: %d of %d" % (
                base, statistics.median(k[0] for k in known), low[1], low[2], low[0],
                sum(k[0] < 1 for k in known), len(known)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
