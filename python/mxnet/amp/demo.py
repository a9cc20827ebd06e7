"""The main job: train a small ResNet-style CNN on scikit-learn's handwritten digits with AMP and in fp32.

Both runs use the same initial weights and batch order, so the table compares precision alone.
"""
from dataclasses import dataclass
import sys
import time

import numpy as np

__all__ = ["DemoConfig", "load_digits_split", "build_cnn", "train", "run_demo", "add_arguments", "run"]


@dataclass(frozen=True)
class DemoConfig:
    """Settings of the demo run."""

    epochs: int = 6
    batch_size: int = 64
    learning_rate: float = 0.1
    dtype: str = "bfloat16"
    seed: int = 0


def load_digits_split(seed=0, test_fraction=0.25):
    """Return ``(x_train, y_train, x_test, y_test)``: 8x8 digit images as float32 NCHW in [0, 1]."""
    from sklearn.datasets import load_digits
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    y = digits.target.astype(np.float32)
    order = np.random.RandomState(seed).permutation(len(x))
    cut = int(len(x) * (1 - test_fraction))
    train, test = order[:cut], order[cut:]
    return x[train], y[train], x[test], y[test]


def build_cnn():
    """A small ResNet-style CNN: conv-BN-relu stem, one residual block, pooling, dense head."""
    from mxnet.gluon import nn, HybridBlock

    class Residual(HybridBlock):
        def __init__(self, channels, **kwargs):
            super().__init__(**kwargs)
            with self.name_scope():
                self.body = nn.HybridSequential()
                self.body.add(nn.Conv2D(channels, 3, padding=1, use_bias=False), nn.BatchNorm(),
                              nn.Activation("relu"), nn.Conv2D(channels, 3, padding=1, use_bias=False),
                              nn.BatchNorm())

        def hybrid_forward(self, F, x):
            return F.relu(x + self.body(x))

    net = nn.HybridSequential()
    with net.name_scope():
        net.add(nn.Conv2D(16, 3, padding=1, use_bias=False), nn.BatchNorm(), nn.Activation("relu"),
                Residual(16), nn.MaxPool2D(2), nn.Flatten(), nn.Dense(64, activation="relu"), nn.Dense(10))
    return net


def _accuracy(net, x, y, batch_size):
    import mxnet as mx
    correct = 0
    for i in range(0, len(x), batch_size):
        out = net(mx.nd.array(x[i:i + batch_size]))
        pred = out.astype("float32").argmax(axis=1).asnumpy()
        correct += int((pred == y[i:i + batch_size]).sum())
    return correct / len(x)


def train(config, use_amp, data, log=print):
    """Train one model; return a dict of per-epoch loss, accuracy and seconds."""
    import mxnet as mx
    from mxnet import autograd, gluon
    from . import autocast

    x_train, y_train, x_test, y_test = data
    if use_amp:
        autocast.init(config.dtype)
    try:
        mx.random.seed(config.seed)
        np.random.seed(config.seed)
        net = build_cnn()
        net.initialize(mx.init.Xavier())
        net.hybridize()
        trainer = gluon.Trainer(net.collect_params(), "sgd",
                                {"learning_rate": config.learning_rate, "momentum": 0.9})
        loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
        history = {"loss": [], "accuracy": [], "seconds": []}
        order = np.random.RandomState(config.seed).permutation(len(x_train))
        for epoch in range(config.epochs):
            start, total, count = time.perf_counter(), 0.0, 0
            for i in range(0, len(order), config.batch_size):
                idx = order[i:i + config.batch_size]
                xb, yb = mx.nd.array(x_train[idx]), mx.nd.array(y_train[idx])
                with autograd.record():
                    loss = loss_fn(net(xb), yb)
                loss.backward()
                trainer.step(len(idx))
                total += float(loss.sum().asscalar())
                count += len(idx)
            seconds = time.perf_counter() - start
            acc = _accuracy(net, x_test, y_test, config.batch_size)
            history["loss"].append(total / count)
            history["accuracy"].append(acc)
            history["seconds"].append(seconds)
            log("  %-9s epoch %d  loss %.4f  test accuracy %.3f  %.2f s"
                % (config.dtype if use_amp else "float32", epoch + 1, total / count, acc, seconds))
        return history
    finally:
        if use_amp:
            autocast.reset()


def run_demo(config, out=sys.stdout):
    """Train fp32 then AMP with identical data and seeds; print a side-by-side table."""
    def log(line):
        print(line, file=out, flush=True)
    data = load_digits_split(config.seed)
    log("digits: %d train / %d test images, %d epochs, batch %d"
        % (len(data[0]), len(data[2]), config.epochs, config.batch_size))
    fp32 = train(config, False, data, log)
    amp = train(config, True, data, log)
    log("")
    log("%-6s | %-22s | %-22s" % ("epoch", "float32 loss / acc / s", "%s loss / acc / s" % config.dtype))
    for e in range(config.epochs):
        log("%-6d | %.4f / %.3f / %5.2f   | %.4f / %.3f / %5.2f"
            % (e + 1, fp32["loss"][e], fp32["accuracy"][e], fp32["seconds"][e],
               amp["loss"][e], amp["accuracy"][e], amp["seconds"][e]))
    return {"float32": fp32, config.dtype: amp}


def _positive_int(text):
    import argparse
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError("expected a positive integer, got %r" % text)
    return value


def add_arguments(parser):
    """Options of ``python -m mxnet.amp demo``."""
    parser.add_argument("--epochs", type=_positive_int, default=DemoConfig.epochs)
    parser.add_argument("--batch-size", type=_positive_int, default=DemoConfig.batch_size)
    parser.add_argument("--dtype", choices=("bfloat16", "float16"), default=DemoConfig.dtype)


def run(args):
    """Run the demo from parsed arguments; return the exit status."""
    run_demo(DemoConfig(epochs=args.epochs, batch_size=args.batch_size, dtype=args.dtype))
    return 0
