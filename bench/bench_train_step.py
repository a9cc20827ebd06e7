"""One ResNet-18 training step (32x3x64x64): fp32 vs mxnet.contrib.amp bf16 vs mxnet.amp bf16.

Each configuration runs in its own child process (contrib's ``init`` cannot be undone); the configurations
alternate and repeat, and the table shows the median step time and its ratio to fp32 (speed-up > 1 is faster).

    python bench/bench_train_step.py [--repeats 3] [--steps 5] [--batch 32] [--size 64]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CONFIGS = ("fp32", "contrib_bf16", "amp_bf16")


def _child(config, steps, batch, size):
    import mxnet as mx
    from mxnet import autograd, gluon
    from mxnet.gluon.model_zoo import vision
    if config == "contrib_bf16":
        from mxnet.contrib import amp as peer
        peer.init(target_dtype="bfloat16")
    elif config == "amp_bf16":
        from mxnet import amp
        amp.init("bfloat16")
    mx.random.seed(0)
    net = vision.resnet18_v1(classes=10)
    net.initialize(mx.init.Xavier())
    net.hybridize(static_alloc=True, static_shape=True)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.01, "momentum": 0.9})
    if config == "contrib_bf16":
        peer.init_trainer(trainer)
    elif config == "amp_bf16":
        amp.init_trainer(trainer)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    x = mx.nd.random.uniform(shape=(batch, 3, size, size))
    y = mx.nd.array(mx.nd.random.randint(0, 10, shape=(batch,)).asnumpy())

    def step():
        with autograd.record():
            loss = loss_fn(net(x), y)
            if config == "contrib_bf16":
                with peer.scale_loss(loss, trainer) as scaled:
                    autograd.backward(scaled)
            elif config == "amp_bf16":
                with amp.scale_loss(loss, trainer) as scaled:
                    autograd.backward(scaled)
            else:
                loss.backward()
        trainer.step(batch)
        mx.nd.waitall()
    step()  # warm-up: graph build, kernel selection
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _run_child(config, args):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", config, "--steps", str(args.steps),
           "--batch", str(args.batch), "--size", str(args.size)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    tail = (proc.stderr.strip().splitlines() or ["exit code %d" % proc.returncode])[-1]
    return {"config": config, "error": tail[:160]}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--child", choices=CONFIGS)
    args = parser.parse_args()
    if args.child:
        try:
            seconds = _child(args.child, args.steps, args.batch, args.size)
            print(json.dumps({"config": args.child, "seconds": seconds}))
        except Exception as err:  # report the peer's failure as a row instead of a traceback
            print(json.dumps({"config": args.child, "error": ("%s: %s" % (type(err).__name__, err))[:160]}))
        return
    results = {c: [] for c in CONFIGS}
    errors = {}
    for _ in range(args.repeats):
        for config in CONFIGS:
            row = _run_child(config, args)
            if "error" in row:
                errors[config] = row["error"]
            else:
                results[config].append(row["seconds"])
    base = statistics.median(results["fp32"]) if results["fp32"] else None
    print("ResNet-18 training step, batch %d x 3 x %d x %d, %d repeats x %d steps, %s"
          % (args.batch, args.size, args.size, args.repeats, args.steps, time.strftime("%Y-%m-%d")))
    print("%-14s %12s %16s" % ("config", "median s", "speed vs fp32"))
    for config in CONFIGS:
        if results[config]:
            med = statistics.median(results[config])
            ratio = "%.2fx" % (base / med) if base else "n/a"
            print("%-14s %12.4f %16s" % (config, med, ratio))
        else:
            print("%-14s %12s %16s  %s" % (config, "failed", "-", errors.get(config, "")))


if __name__ == "__main__":
    main()
