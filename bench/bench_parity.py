"""Accuracy parity: two models trained to convergence in float32 and bfloat16, side by side with contrib.

Models: the digits CNN of ``python -m mxnet.amp demo`` (scikit-learn's handwritten digits, conv/BN/residual) and
a synthetic sequence-classification LSTM (Embedding -> LSTM -> Dense; the label says whether token 1 occurs
before token 2 in a random sequence). Configurations: float32; ``mxnet.amp`` bfloat16 with the machine's
default (native oneDNN kernels with AVX-512); ``mxnet.amp`` bfloat16 emulated (``emulate=True``, what machines
without AVX-512 run); ``mxnet.contrib.amp`` bfloat16 (the peer, only measured). Every configuration runs in its
own child process (contrib's ``init`` cannot be undone) with the same seeds, initial weights and batch order;
a configuration that fails reports its error instead of numbers. Hybridized, Adam. The configurations alternate
and repeat (``--repeats``); the table shows the first run's accuracy and loss (the runs are deterministic) and the
median time per epoch (the first epoch, which builds the graph, left out).

    python bench/bench_parity.py [--epochs-cnn 12] [--epochs-lstm 12] [--repeats 2] [--models digits_cnn,seq_lstm]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CONFIGS = ("fp32", "amp_bf16", "amp_bf16_emulated", "contrib_bf16")
MODELS = ("digits_cnn", "seq_lstm")


def _sequence_data(seed, n_train=2048, n_test=512, length=16, vocab=10):
    import numpy as np
    rs = np.random.RandomState(seed)
    x = rs.randint(3, vocab, (n_train + n_test, length))
    for row in x:  # tokens 1 and 2 at two distinct random places; label: 1 comes first
        i, j = rs.choice(length, 2, replace=False)
        row[i], row[j] = 1, 2
    y = (np.argmax(x == 1, axis=1) < np.argmax(x == 2, axis=1)).astype(np.float32)
    x = x.astype(np.float32)
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


def _build_lstm():
    from mxnet import gluon
    from mxnet.gluon import nn, rnn

    class SeqLSTM(gluon.HybridBlock):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            with self.name_scope():
                self.embed = nn.Embedding(10, 16)
                self.rnn = rnn.LSTM(32, layout="NTC", input_size=16)
                self.fc = nn.Dense(2)

        def hybrid_forward(self, F, tokens):
            return self.fc(F.mean(self.rnn(self.embed(tokens)), axis=1))

    return SeqLSTM()


def _child(model, config, epochs):
    import mxnet as mx
    import numpy as np
    from mxnet import autograd, gluon
    from mxnet.amp.cli.demo import build_cnn, load_digits_split
    amp_mod = None
    if config == "contrib_bf16":
        from mxnet.contrib import amp as amp_mod
        amp_mod.init(target_dtype="bfloat16")
    elif config.startswith("amp_"):
        from mxnet import amp as amp_mod
        amp_mod.init("bfloat16", emulate=True if config == "amp_bf16_emulated" else None)
    if model == "digits_cnn":
        data, net, lr, batch = load_digits_split(0), build_cnn(), 0.003, 64
    else:
        data, net, lr, batch = _sequence_data(0), _build_lstm(), 0.01, 64
    x_train, y_train, x_test, y_test = data
    mx.random.seed(0)
    net.initialize(mx.init.Xavier())
    net.hybridize(static_alloc=True)
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": lr})
    if amp_mod is not None:
        amp_mod.init_trainer(trainer)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    order_rs = np.random.RandomState(1)

    def as_f32(y):
        return mx.nd.amp_cast(y, dtype="float32").asnumpy()

    epoch_times, losses = [], []
    for _ in range(epochs):
        order = order_rs.permutation(len(x_train))
        start, total = time.perf_counter(), 0.0
        for i in range(0, len(order) - batch + 1, batch):
            idx = order[i:i + batch]
            xb, yb = mx.nd.array(x_train[idx]), mx.nd.array(y_train[idx])
            with autograd.record():
                loss = loss_fn(net(xb), yb)
                if amp_mod is None:
                    loss.backward()
                else:
                    with amp_mod.scale_loss(loss, trainer) as scaled:
                        autograd.backward(scaled)
            trainer.step(batch)
            total += float(as_f32(loss).mean())
        epoch_times.append(time.perf_counter() - start)
        losses.append(total / (len(order) // batch))
    correct = 0
    for i in range(0, len(x_test), 256):
        pred = as_f32(net(mx.nd.array(x_test[i:i + 256]))).argmax(axis=1)
        correct += int((pred == y_test[i:i + 256]).sum())
    return {"accuracy": correct / len(x_test), "final_loss": losses[-1],
            "epoch_s": statistics.median(epoch_times[1:] or epoch_times)}


def _run_child(model, config, epochs):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", model, config, str(epochs)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = [ln for ln in (proc.stderr or "").strip().splitlines() if ln.strip()][-1:]
        return {"error": "exit %d: %s" % (proc.returncode, tail[0][:120] if tail else "")}
    return json.loads(lines[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs-cnn", type=int, default=12)
    parser.add_argument("--epochs-lstm", type=int, default=12)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        model, config, epochs = args.child
        print(json.dumps(_child(model, config, int(epochs))))
        return
    models = args.models.split(",")
    for model in models:
        if model not in MODELS:
            parser.error("unknown model %r; choose from %s" % (model, ", ".join(MODELS)))
    runs = {(m, c): [] for m in models for c in CONFIGS}
    for _ in range(args.repeats):
        for model in models:
            for config in CONFIGS:
                runs[model, config].append(
                    _run_child(model, config, args.epochs_cnn if model == "digits_cnn" else args.epochs_lstm))
    print("%-11s %-18s %9s %11s %9s %8s" % ("model", "config", "accuracy", "final loss", "s/epoch", "vs fp32"))
    for model in models:
        base = None
        for config in CONFIGS:
            r = runs[model, config]
            if "error" in r[0]:
                print("%-11s %-18s fails: %s" % (model, config, r[0]["error"]))
                continue
            epoch_s = statistics.median(x["epoch_s"] for x in r)
            base = base or epoch_s
            print("%-11s %-18s %9.4f %11.4f %9.3f %7.2fx" % (model, config, r[0]["accuracy"], r[0]["final_loss"],
                                                             epoch_s, base / epoch_s), flush=True)


if __name__ == "__main__":
    main()
