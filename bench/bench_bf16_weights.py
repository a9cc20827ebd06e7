"""bf16-true weights: loss curves of a BERT-style encoder trained in float32 and with bfloat16 weights.

The model: token and position embeddings, ``--layers`` post-LN encoder blocks (``bench_inference._encoder``:
attention and a ReLU feed-forward), mean pooling and a Dense classifier. The task: the synthetic sequence task of
``bench_parity.py`` (label: token 1 occurs before token 2 in a random sequence; position matters, so the
attention has to learn it), with 10% of the training labels flipped so that the loss levels off near 0.33 and
relative deviations stay meaningful; AdamW, hybridized. Configurations, each in its own child process with the same seeds,
initial weights and batch order:

- ``fp32``: no ``amp.init``, float32 everything;
- ``amp_bf16``: ``amp.init('bfloat16')``, float32 weights (the default of ``init_trainer``);
- ``bf16w_kahan``: ``amp.init('bfloat16')`` and ``init_trainer(trainer, weights='bfloat16')``: weights, gradients
  and optimizer states in bfloat16 with the Kahan compensation;
- ``bf16w_sr``: ``init_trainer(trainer, weights='bfloat16', rounding='stochastic')``: the same storage,
  stochastically rounded weights and optimizer states, no compensation;
- ``bf16w_round``: the same storage, compensation off (``bf16_weights.use_plain_rounding``): the control.

The table gives the final loss (mean of the last 20 steps), the test accuracy and the largest relative
deviation of the smoothed loss curve (moving mean over 20 steps) from fp32's. ``--plot`` writes a PNG.

    python bench/bench_bf16_weights.py [--steps 400] [--lr 1e-4] [--plot docs/img/bf16_weights.png]
"""
import argparse
import json
import os
import subprocess
import sys
import time

CONFIGS = ("fp32", "amp_bf16", "bf16w_kahan", "bf16w_sr", "bf16w_round")
SMOOTH = 20
NOISE = 0.1  # fraction of flipped training labels


def _sequence_data(seed, n, length, vocab):
    import numpy as np
    rs = np.random.RandomState(seed)
    x = rs.randint(3, vocab, (n, length))
    for row in x:  # tokens 1 and 2 at two distinct random places; label: 1 comes first
        i, j = rs.choice(length, 2, replace=False)
        row[i], row[j] = 1, 2
    y = (np.argmax(x == 1, axis=1) < np.argmax(x == 2, axis=1)).astype(np.float32)
    return x.astype(np.float32), y


def _build(args):
    from mxnet import gluon
    from mxnet.gluon import nn
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_inference import _encoder

    class Classifier(gluon.HybridBlock):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            with self.name_scope():
                self.embed = nn.Embedding(args.vocab, args.units)
                self.pos = self.params.get("pos", shape=(1, args.seq, args.units))
                self.body = nn.HybridSequential()
                for _ in range(args.layers):
                    self.body.add(_encoder(units=args.units, heads=args.heads, hidden=4 * args.units, seq=args.seq))
                self.fc = nn.Dense(2)

        def hybrid_forward(self, F, tokens, pos):
            h = self.body(F.broadcast_add(self.embed(tokens), pos))
            return self.fc(F.mean(h, axis=1))

    return Classifier()


def _child(config, args):
    import mxnet as mx
    import numpy as np
    from mxnet import amp, autograd, gluon
    from mxnet.amp.training import adamw  # noqa: F401  (registers the optimizer)
    from mxnet.amp.training.bf16_weights import use_plain_rounding
    mx.random.seed(0)
    np.random.seed(0)
    if config != "fp32":
        amp.init("bfloat16")
    x, y = _sequence_data(0, args.batch * args.steps + 512, args.seq, args.vocab)
    x_test, y_test = mx.nd.array(x[-512:]), y[-512:]
    flip = np.random.RandomState(1).rand(len(y)) < NOISE
    y = np.where(flip, 1 - y, y)
    net = _build(args)
    net.initialize(mx.init.Xavier())
    net.hybridize(static_alloc=True)
    net(mx.nd.array(x[:args.batch]))
    trainer = gluon.Trainer(net.collect_params(), "adamw", {"learning_rate": args.lr, "wd": 0.01})
    amp.init_trainer(trainer, weights="bfloat16" if config.startswith("bf16w") else "float32",
                     rounding="stochastic" if config == "bf16w_sr" else "kahan")
    if config == "bf16w_round":
        use_plain_rounding(trainer)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    n_train = len(x) - 512
    losses, start = [], time.time()
    for step in range(args.steps):
        idx = np.random.RandomState(step).choice(n_train, args.batch, replace=False)
        data, label = mx.nd.array(x[idx]), mx.nd.array(y[idx])
        with autograd.record():
            loss = loss_fn(net(data).astype("float32"), label).mean()
            with amp.scale_loss(loss, trainer) as scaled:
                autograd.backward(scaled)
        trainer.step(1)
        losses.append(float(loss.asscalar()))
    seconds = time.time() - start
    pred = net(x_test).astype("float32").asnumpy().argmax(axis=1)
    return {"losses": losses, "accuracy": float((pred == y_test).mean()), "seconds": seconds}


def _smooth(values):
    import numpy as np
    v = np.asarray(values)
    kernel = np.ones(SMOOTH) / SMOOTH
    return np.convolve(v, kernel, mode="valid")


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as info:
            flags = next((line for line in info if line.startswith("flags")), "")
    except OSError:
        return "unknown CPU"
    return "CPU with avx512_bf16" if " avx512_bf16" in flags else "CPU without avx512_bf16"


def _plot(results, path, args):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    styles = {"fp32": "-", "amp_bf16": "--", "bf16w_kahan": ":", "bf16w_sr": "-.", "bf16w_round": "-"}
    for config, res in results.items():
        if "losses" in res:
            ax.plot(range(SMOOTH, len(res["losses"]) + 1), _smooth(res["losses"]), styles.get(config, "-"),
                    label=config, linewidth=2 if config in ("bf16w_kahan", "bf16w_sr") else 1.2)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (moving mean of %d)" % SMOOTH)
    ax.set_title("encoder %dx%d, AdamW lr %g: bf16-true weights vs float32" % (args.layers, args.units, args.lr))
    ax.text(0.01, 0.01, "%s, %s; python bench/bench_bf16_weights.py --steps %d --lr %g"
            % (time.strftime("%Y-%m-%d"), _cpu_name(), args.steps, args.lr), transform=ax.transAxes, fontsize=7)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--units", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq", type=int, default=16)
    parser.add_argument("--vocab", type=int, default=10)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--plot", default=None, help="write the loss curves to this PNG")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, args)))
        return
    results = {}
    for config in args.configs.split(","):
        argv = [sys.executable, os.path.abspath(__file__), "--child", config] + [
            "--%s=%s" % (k, getattr(args, k)) for k in ("steps", "lr", "batch", "layers", "units", "heads", "seq",
                                                        "vocab")]
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode:
            results[config] = {"error": proc.stderr.strip().splitlines()[-1]}
        else:
            results[config] = json.loads(proc.stdout.strip().splitlines()[-1])
    base = _smooth(results["fp32"]["losses"]) if "losses" in results.get("fp32", {}) else None
    print("encoder %d x %d units, %d heads, seq %d, batch %d, AdamW lr %g wd 0.01, %d steps"
          % (args.layers, args.units, args.heads, args.seq, args.batch, args.lr, args.steps))
    print("%-12s %11s %9s %16s %8s" % ("config", "final loss", "test acc", "max rel dev fp32", "s/run"))
    for config, res in results.items():
        if "error" in res:
            print("%-12s failed: %s" % (config, res["error"]))
            continue
        smooth = _smooth(res["losses"])
        dev = float((abs(smooth - base) / base).max()) if base is not None else float("nan")
        print("%-12s %11.4f %9.3f %15.2f%% %8.1f" % (config, sum(res["losses"][-SMOOTH:]) / SMOOTH, res["accuracy"],
                                                    100 * dev, res["seconds"]))
    if args.plot:
        _plot(results, args.plot, args)
        print("plot:", args.plot)


if __name__ == "__main__":
    main()
