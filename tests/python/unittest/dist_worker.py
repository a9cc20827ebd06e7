"""One process of the dist_sync AMP test (run by test_dist.py with DMLC_ROLE set; not a test module itself).

Workers train a linear model with ``kvstore='dist_sync'`` on worker-specific data; the worker ranked ``rank``
poisons its gradients at the steps listed for it. Each worker writes what it saw to ``<out>/worker<rank>.json``.
Scheduler and server processes only import mxnet, which runs their service loop and exits.
"""
import json
import os
import sys

import numpy as np

import mxnet as mx

POISON = {0: (4,), 1: (1, 2)}   # step numbers each worker poisons (worker 1 twice in a row: two backoffs)
STEPS = 6


def main(out):
    from mxnet import autograd, gluon
    from mxnet.amp.training.loss_scaler import LossScaler
    from mxnet.amp.training.trainer import get_loss_scaler, init_trainer, scale_loss

    kv = mx.kv.create("dist_sync")
    rank = kv.rank
    rng = np.random.RandomState(100 + rank)
    data = rng.uniform(-1, 1, (STEPS, 5, 4)).astype(np.float32)
    target = rng.uniform(-1, 1, (STEPS, 5, 3)).astype(np.float32)
    net = gluon.nn.Dense(3, in_units=4)
    net.initialize(mx.init.Constant(0.25))
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore=kv)
    init_trainer(trainer, LossScaler(init_scale=2.0 ** 8, growth_interval=2))
    applied = []
    for step in range(STEPS):
        with autograd.record():
            loss = (net(mx.nd.array(data[step])) * mx.nd.array(target[step])).sum()
            with scale_loss(loss, trainer) as scaled:
                scaled.backward()
        if step in POISON[rank]:
            net.weight.grad()[0, 0] = np.inf if rank else np.nan
        applied.append(bool(trainer.step(10)))
    result = {"rank": rank, "applied": applied, "update_on_kvstore": trainer._update_on_kvstore,
              "scaler": get_loss_scaler(trainer).state_dict(),
              "weight": net.weight.data().asnumpy().tolist(), "bias": net.bias.data().asnumpy().tolist(),
              "data": data.tolist(), "target": target.tolist()}
    with open(os.path.join(out, "worker%d.json" % rank), "w") as dst:
        json.dump(result, dst)


if __name__ == "__main__":
    if os.environ.get("DMLC_ROLE") == "worker":
        main(sys.argv[1])
