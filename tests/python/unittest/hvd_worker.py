"""One rank of the Horovod AMP tests (run by test_horovod.py under ``horovodrun --gloo``; not a test module).

Each rank trains the same model (broadcast from rank 0) on rank-specific data with ``hvd.DistributedTrainer``
and AMP; the ranks listed in ``POISON`` for a step put an inf into one gradient there. After ``CHECKPOINT``
steps every rank saves its parameters and trainer states, trains on, then loads the checkpoint into a fresh
model and trainer and trains the same steps again. Each rank writes what it saw to ``<out>/rank<rank>.json``:
which steps were applied, the loss scaler's state, and its trainable parameters, uninterrupted and resumed,
as hex bytes (so that the test compares them bit for bit).

    python hvd_worker.py OUT {mlp,cnn} {float16,bfloat16}
"""
import json
import os
import sys
import warnings

import numpy as np

STEPS = 6
CHECKPOINT = 2  # steps before the checkpoint
POISON = {1: (1,), 3: (0,), 4: (0, 1)}  # step -> the ranks that put an inf into a gradient


def build(model):
    """The model, its input shape and number of classes."""
    from mxnet import gluon
    net = gluon.nn.HybridSequential()
    if model == "mlp":
        net.add(gluon.nn.Dense(32, activation="relu", in_units=16), gluon.nn.Dense(4, in_units=32))
        return net, (8, 16)
    net.add(gluon.nn.Conv2D(32, 3, padding=1, in_channels=3), gluon.nn.BatchNorm(in_channels=32),
            gluon.nn.Activation("relu"), gluon.nn.Conv2D(32, 3, padding=1, in_channels=32),
            gluon.nn.BatchNorm(in_channels=32), gluon.nn.Activation("relu"), gluon.nn.GlobalAvgPool2D(),
            gluon.nn.Dense(4, in_units=32))
    return net, (8, 3, 16, 16)


def trainable(net):
    """Hex bytes of every trainable parameter, by its name without the block prefix."""
    return {name.split("_", 1)[1]: p.data().asnumpy().tobytes().hex()
            for name, p in sorted(net.collect_params().items()) if p.grad_req != "null"}


def make(model, hvd, mx, amp):
    from mxnet import gluon
    net, shape = build(model)
    net.initialize(mx.init.Xavier(rnd_type="gaussian"))
    net.hybridize()
    net(mx.nd.zeros(shape))  # shapes known before the broadcast
    params = net.collect_params()
    hvd.broadcast_parameters(params, root_rank=0)
    trainer = hvd.DistributedTrainer(params, "sgd", {"learning_rate": 0.05, "momentum": 0.9})
    # float16: dynamic scaling from 2**8, growing after 2 finite steps; bfloat16: the default static scale 1
    amp.init_trainer(trainer, amp.LossScaler(init_scale=2.0 ** 8, growth_interval=2)
                     if amp.target_dtype() == "float16" else None)
    return net, trainer, shape


def train(net, trainer, shape, steps, rank, mx, amp):
    from mxnet import autograd, gluon
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    applied = []
    for step in steps:
        rng = np.random.RandomState(1000 * step + rank)
        x = mx.nd.array(rng.uniform(-1, 1, shape))
        y = mx.nd.array(rng.randint(0, 4, shape[0]))
        with autograd.record():
            loss = loss_fn(net(x), y)
            with amp.scale_loss(loss, trainer) as scaled:
                autograd.backward(scaled)
        if rank in POISON.get(step, ()):
            grad = net[0].weight.grad()
            grad[0] = np.inf
        applied.append(bool(trainer.step(shape[0])))
    return applied


def main(out, model, dtype):
    import mxnet as mx
    import horovod.mxnet as hvd
    from mxnet import amp
    warnings.simplefilter("ignore", amp.SlowBfloat16Warning)
    hvd.init()
    rank = hvd.rank()
    amp.init(dtype)
    net, trainer, shape = make(model, hvd, mx, amp)
    applied = train(net, trainer, shape, range(CHECKPOINT), rank, mx, amp)
    prefix = os.path.join(out, "rank%d" % rank)
    net.save_parameters(prefix + ".params")
    trainer.save_states(prefix + ".states")
    applied += train(net, trainer, shape, range(CHECKPOINT, STEPS), rank, mx, amp)
    result = {"rank": rank, "size": hvd.size(), "applied": applied,
              "scaler": amp.get_loss_scaler(trainer).state_dict(), "params": trainable(net)}
    net, trainer, shape = make(model, hvd, mx, amp)
    net.load_parameters(prefix + ".params")
    trainer.load_states(prefix + ".states")
    resumed = train(net, trainer, shape, range(CHECKPOINT, STEPS), rank, mx, amp)
    result.update(resumed_applied=resumed, resumed_scaler=amp.get_loss_scaler(trainer).state_dict(),
                  resumed_params=trainable(net))
    with open(prefix + ".json", "w") as dst:
        json.dump(result, dst)


if __name__ == "__main__":
    main(*sys.argv[1:])
