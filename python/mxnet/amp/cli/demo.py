"""The main job: train a small ResNet-style CNN on scikit-learn's handwritten digits with AMP and in fp32.

Both runs use the same initial weights and batch order, so the table compares precision alone.

The digits are 8x8 images; a CNN that small spends its time in per-op overheads, not arithmetic, and bfloat16
cannot make it faster (measured on an AVX-512-BF16 Xeon: 0.16 s per epoch against fp32's 0.07). The demo
therefore upsamples them to 16x16 (each pixel repeated) and uses 64 channels, a size at which the convolutions
dominate and native bfloat16 trains faster than float32 (README: measured figures); ``--image-size 8
--channels 16`` runs the original.
"""
import argparse
import dataclasses
import sys
import time
import warnings

import numpy as np

__all__ = ["DemoConfig", "load_digits_split", "build_cnn", "train", "run_demo", "add_arguments", "run"]


@dataclasses.dataclass(frozen=True)
class DemoConfig:
    """Settings of the demo run."""

    epochs: int = 12  # both runs converge (at 6 a bfloat16 run can sit in a transient dip: 0.85 vs 0.97)
    batch_size: int = 64
    image_size: int = 16  # the 8x8 digits, each pixel repeated (a multiple of 8)
    channels: int = 64
    learning_rate: float = 0.005  # SGD with momentum 0.9; the 64-channel net diverges at 0.02 in float32
    dtype: str = None  # None: float16 when MXNet has a GPU, else bfloat16
    seed: int = 0
    out_dir: str = "amp_report"


def load_digits_split(seed=0, test_fraction=0.25, image_size=8):
    """Return ``(x_train, y_train, x_test, y_test)``: digit images as float32 NCHW in [0, 1].

    ``image_size`` (a multiple of 8) repeats each of the 8x8 pixels ``image_size // 8`` times both ways.
    """
    from sklearn.datasets import load_digits
    if not isinstance(image_size, int) or image_size < 8 or image_size % 8:
        raise ValueError("image_size must be a multiple of 8 (8, 16, 24...), got %r" % (image_size,))
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    repeat = image_size // 8
    x = np.kron(x, np.ones((1, 1, repeat, repeat), dtype=np.float32)) if repeat > 1 else x
    y = digits.target.astype(np.float32)
    order = np.random.RandomState(seed).permutation(len(x))
    cut = int(len(x) * (1 - test_fraction))
    train, test = order[:cut], order[cut:]
    return x[train], y[train], x[test], y[test]


def build_cnn(channels=16):
    """A small ResNet-style CNN: conv-BN-relu stem, one residual block of ``channels``, pooling, dense head."""
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
        net.add(nn.Conv2D(channels, 3, padding=1, use_bias=False), nn.BatchNorm(), nn.Activation("relu"),
                Residual(channels), nn.MaxPool2D(2), nn.Flatten(), nn.Dense(64, activation="relu"), nn.Dense(10))
    return net


def _accuracy(net, x, y, batch_size, ctx=None):
    import mxnet as mx
    correct = 0
    for i in range(0, len(x), batch_size):
        out = net(mx.nd.array(x[i:i + batch_size], ctx=ctx or mx.cpu()))
        pred = out.astype("float32").argmax(axis=1).asnumpy()
        correct += int((pred == y[i:i + batch_size]).sum())
    return correct / len(x)


class _Progress:
    """A one-line progress bar on a terminal; nothing otherwise (the epoch lines say enough)."""

    def __init__(self, out, label, total):
        self.out, self.label, self.total, self.done = out, label, total, 0
        self.live = hasattr(out, "isatty") and out.isatty()

    def advance(self):
        self.done += 1
        if self.live:
            filled = int(30 * self.done / self.total)
            self.out.write("\r  %-9s [%s%s] %d/%d steps" % (self.label, "#" * filled, "." * (30 - filled),
                                                            self.done, self.total))
            self.out.flush()

    def clear(self):
        if self.live:
            self.out.write("\r" + " " * 70 + "\r")


def _new_model(config, use_amp, ctx):
    """Network and trainer; with AMP a dynamic loss scaler (the demo shows its history and checkpointing)."""
    import mxnet as mx
    from mxnet import gluon
    from ..training import trainer as amp_trainer
    from ..training.loss_scaler import LossScaler
    net = build_cnn(config.channels)
    net.initialize(mx.init.Xavier(), ctx=ctx)
    net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), "sgd",
                            {"learning_rate": config.learning_rate, "momentum": 0.9})
    if use_amp:
        amp_trainer.init_trainer(trainer, LossScaler(init_scale=2.0 ** 12, growth_interval=20))
    return net, trainer


def train(config, use_amp, data, log=print, ctx=None):
    """Train one model; with AMP, save a checkpoint half-way and resume from it in a new net and Trainer.

    Returns
    -------
    dict
        Per-epoch ``loss``, ``accuracy``, ``seconds``; per-step ``scales`` and the ``skipped`` step indices;
        ``resumed_at`` (step), ``scale_saved``/``scale_loaded``, the whole scaler state and the optimizer's update
        count at the save and after the load (``scaler_saved``/``scaler_loaded``, ``updates_saved``/``updates_loaded``),
        and the final ``net``.
    """
    import mxnet as mx
    from mxnet import autograd, gluon
    from ..autocast import switch as autocast
    from ..training import trainer as amp_trainer

    ctx = ctx or mx.cpu()
    x_train, y_train, x_test, y_test = data
    label = config.dtype if use_amp else "float32"
    if use_amp:
        with warnings.catch_warnings():  # the float32 run's model still exists; this run builds its own
            warnings.filterwarnings("ignore", message="amp.init.. was called after")
            autocast.init(config.dtype)
    try:
        mx.random.seed(config.seed)
        net, trainer = _new_model(config, use_amp, ctx)
        loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
        hist = {"loss": [], "accuracy": [], "seconds": [], "scales": [], "skipped": [], "resumed_at": None}
        order = np.random.RandomState(config.seed).permutation(len(x_train))
        steps_per_epoch = (len(order) + config.batch_size - 1) // config.batch_size
        for epoch in range(config.epochs):
            if use_amp and epoch == config.epochs // 2 and epoch > 0:
                net, trainer = _resume(config, net, trainer, hist, ctx)
                log("  %-9s checkpoint saved and reloaded into a new Trainer: loss scale %g -> %g"
                    % (label, hist["scale_saved"], hist["scale_loaded"]))
            bar = _Progress(sys.stderr, label, steps_per_epoch)
            start, total, count = time.perf_counter(), 0.0, 0
            for i in range(0, len(order), config.batch_size):
                idx = order[i:i + config.batch_size]
                xb, yb = mx.nd.array(x_train[idx], ctx=ctx), mx.nd.array(y_train[idx], ctx=ctx)
                with autograd.record():
                    loss = loss_fn(net(xb), yb)
                    if use_amp:
                        hist["scales"].append(amp_trainer.get_loss_scaler(trainer).scale)
                        with amp_trainer.scale_loss(loss, trainer) as scaled:
                            autograd.backward(scaled)
                if not use_amp:
                    loss.backward()
                if not trainer.step(len(idx)):  # reading the result waits for the step (the loss is read anyway)
                    hist["skipped"].append(len(hist["scales"]) - 1)
                total += float(loss.sum().asscalar())
                count += len(idx)
                bar.advance()
            bar.clear()
            hist["seconds"].append(time.perf_counter() - start)
            hist["loss"].append(total / count)
            hist["accuracy"].append(_accuracy(net, x_test, y_test, config.batch_size, ctx))
            log("  %-9s epoch %d/%d  loss %.4f  test accuracy %.3f  %.2f s"
                % (label, epoch + 1, config.epochs, hist["loss"][-1], hist["accuracy"][-1], hist["seconds"][-1]))
        hist["net"] = net
        hist["graph"] = net._cached_graph[1]  # the rewritten training graph (reset() discards it)
        return hist
    finally:
        if use_amp:
            autocast.reset()


def _resume(config, net, trainer, hist, ctx):
    """Save parameters and trainer states, then continue in a new net and Trainer loaded from the files."""
    import os
    from ..training import trainer as amp_trainer
    os.makedirs(config.out_dir, exist_ok=True)
    params = os.path.join(config.out_dir, "checkpoint.params")
    states = os.path.join(config.out_dir, "checkpoint.states")
    net.save_parameters(params)
    trainer.save_states(states)
    saved = amp_trainer.get_loss_scaler(trainer)
    hist["scale_saved"], hist["scaler_saved"] = saved.scale, saved.state_dict()
    hist["updates_saved"] = trainer.optimizer.num_update
    hist["resumed_at"] = len(hist["scales"])
    new_net, new_trainer = _new_model(config, True, ctx)
    new_net.load_parameters(params, ctx=ctx)
    new_trainer.load_states(states)
    loaded = amp_trainer.get_loss_scaler(new_trainer)
    hist["scale_loaded"], hist["scaler_loaded"] = loaded.scale, loaded.state_dict()
    hist["updates_loaded"] = new_trainer.optimizer.num_update
    return new_net, new_trainer


def _param_bytes(net):
    return sum(p.data().size * np.dtype(p.data().dtype).itemsize for p in net.collect_params().values())


def _inference(config, net, data, ctx):
    """Convert the trained net for inference, export it to ONNX and run that in onnxruntime."""
    import os
    import mxnet as mx
    import onnxruntime
    from ..inference import blocks as amp_convert, onnx as amp_onnx
    x_test, y_test = data[2], data[3]
    example = mx.nd.array(x_test[:config.batch_size], ctx=ctx)
    with warnings.catch_warnings():  # emulation, if any, was announced in the demo's first line
        warnings.filterwarnings("ignore", message="convert: MXNet has no")
        low = amp_convert.convert_hybrid_block(net, example, config.dtype, cast_params_offline=True)
        exportable = amp_convert.convert_hybrid_block(net, example, config.dtype, cast_params_offline=True,
                                                      fuse=False)
    result = {"accuracy": _accuracy(low, x_test, y_test, config.batch_size, ctx), "bytes": _param_bytes(low)}
    path = amp_onnx.export_onnx(exportable, None, [(len(x_test),) + x_test.shape[1:]],
                                os.path.join(config.out_dir, "model.onnx"))
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    logits = session.run(None, {session.get_inputs()[0].name: x_test})[0]
    reference = exportable(mx.nd.array(x_test, ctx=ctx)).astype("float32").asnumpy()
    result["onnx_accuracy"] = float((logits.argmax(axis=1) == y_test).mean())
    result["onnx_deviation"] = float(np.abs(logits - reference).max() / np.abs(reference).max())
    result["onnx_path"] = path
    return result


def _cpu_class_line():
    """The demo's first line on a CPU: its class and what bfloat16 costs or gains there (measured)."""
    from ..core import advice, cpu
    klass = cpu.cpu_class()
    measured = advice.ratio_summary(klass.name)
    line = "CPU class (%s) %s: bfloat16 is %s here; AMP's default plan is %s%s" % (
        klass.name, klass.title, klass.bf16, advice.default_plan(klass.name),
        ", measured " + measured if measured else "")
    if klass.name not in advice.FAST_BF16_CLASSES:
        line += "; no bf16 arithmetic on this class: target_dtype='auto' would train in float32 here"
    return line


def run_demo(config, out=sys.stdout):
    """Train fp32, then AMP with a checkpoint resume, with identical data and seeds; convert the AMP model for
    inference and check its ONNX export in onnxruntime; print a table and write the report folder (PNG plots).
    Returns the two histories and the inference results."""
    import os
    from . import plots
    from ..graph.precision_map import precision_map
    from ..core.policy import make_policy
    from ..core.support import plans_native

    import mxnet as mx
    ctx = mx.gpu() if mx.context.num_gpus() > 0 else mx.cpu()
    if config.dtype is None:
        config = dataclasses.replace(config, dtype="float16" if ctx.device_type == "gpu" else "bfloat16")

    def log(line):
        print(line, file=out, flush=True)
    if config.dtype == "bfloat16" and ctx.device_type == "cpu":
        log(_cpu_class_line())
    data = load_digits_split(config.seed, image_size=config.image_size)
    log("digits: %d train / %d test images (%dx%d), %d channels, %d epochs, batch %d, AMP dtype %s on %s%s"
        % (len(data[0]), len(data[2]), config.image_size, config.image_size, config.channels, config.epochs,
           config.batch_size, config.dtype, ctx,
           "" if plans_native(config.dtype, ctx.device_type) else
           " (emulated: float32 kernels on values rounded to %s)" % config.dtype))
    fp32 = train(config, False, data, log, ctx)
    amp = train(config, True, data, log, ctx)
    os.makedirs(config.out_dir, exist_ok=True)
    infer = _inference(config, amp["net"], data, ctx)
    log("  %-9s converted for inference; ONNX model checked in onnxruntime: %s"
        % (config.dtype, infer["onnx_path"]))
    rows = [("final test accuracy", "%.3f" % fp32["accuracy"][-1], "%.3f" % amp["accuracy"][-1]),
            ("final training loss", "%.4f" % fp32["loss"][-1], "%.4f" % amp["loss"][-1]),
            ("seconds per epoch (median)", "%.2f" % np.median(fp32["seconds"]), "%.2f" % np.median(amp["seconds"])),
            ("skipped steps", "0", "%d" % len(amp["skipped"])),
            ("loss scale at save / after load", "-", "%g / %g" % (amp["scale_saved"], amp["scale_loaded"])),
            ("parameter bytes (training)", "%d" % _param_bytes(fp32["net"]), "%d" % _param_bytes(amp["net"])),
            ("converted model: test accuracy", "-", "%.3f" % infer["accuracy"]),
            ("converted model: parameter bytes", "-", "%d" % infer["bytes"]),
            ("ONNX in onnxruntime: accuracy", "-", "%.3f" % infer["onnx_accuracy"]),
            ("ONNX vs MXNet: max rel. deviation", "-", "%.1e" % infer["onnx_deviation"])]
    log("")
    log("%-32s %14s %14s" % ("", "float32", config.dtype))
    for row in rows:
        log("%-32s %14s %14s" % row)
    plots.plot_losses({"float32": fp32, config.dtype: amp}, os.path.join(config.out_dir, "loss.png"))
    plots.plot_loss_scale(amp["scales"], amp["skipped"], os.path.join(config.out_dir, "loss_scale.png"),
                          amp["resumed_at"])
    plots.plot_precision_map(precision_map(amp["graph"], make_policy(config.dtype)),
                             os.path.join(config.out_dir, "precision_map.png"),
                             "precision map of the training graph (%s)" % config.dtype)
    log("")
    log("report written to %s/: loss.png, loss_scale.png, precision_map.png, model.onnx" % config.out_dir)
    return {"float32": fp32, config.dtype: amp, "inference": infer}


def _positive_int(text):
    import argparse
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError("expected a positive integer, got %r" % text)
    return value


def _image_size(text):
    value = _positive_int(text)
    if value % 8:
        raise argparse.ArgumentTypeError("expected a multiple of 8 (8, 16, 24...), got %r" % text)
    return value


def add_arguments(parser):
    """Options of ``python -m mxnet.amp demo``."""
    parser.add_argument("--epochs", type=_positive_int, default=DemoConfig.epochs)
    parser.add_argument("--batch-size", type=_positive_int, default=DemoConfig.batch_size)
    parser.add_argument("--image-size", type=_image_size, default=DemoConfig.image_size,
                        help="digits upsampled to this size, a multiple of 8 (default: %(default)s; 8: as they are)")
    parser.add_argument("--channels", type=_positive_int, default=DemoConfig.channels,
                        help="width of the CNN (default: %(default)s)")
    parser.add_argument("--dtype", choices=("bfloat16", "float16"), default=DemoConfig.dtype,
                        help="low precision type (default: float16 with a GPU build of MXNet, else bfloat16; "
                             "float16 runs emulated on CPU)")
    parser.add_argument("--out", default=DemoConfig.out_dir, help="report folder (default: %(default)s)")


def run(args):
    """Run the demo from parsed arguments; return the exit status."""
    run_demo(DemoConfig(epochs=args.epochs, batch_size=args.batch_size, image_size=args.image_size,
                        channels=args.channels, dtype=args.dtype, out_dir=args.out))
    return 0
