"""A Gluon trainer's kvstore as AMP needs it: set up before the first check, and refused where a skipped step
could not be exact (async or sparse training, updates on the servers of a distributed kvstore)."""
from mxnet import nd
from mxnet.gluon import Trainer

__all__ = ["ensure_kvstore", "on_kvstore", "check_kvstore_config"]


def ensure_kvstore(trainer: Trainer) -> None:
    """Initialise the trainer's kvstore and parameters, as its own ``step`` would first."""
    if not trainer._kv_initialized:
        trainer._init_kvstore()
    if trainer._params_to_init:
        trainer._init_params()
        if trainer._distributed:
            # MXNet race (seen with dist_sync on CPU): the first gradient push can reach the servers before
            # another worker's pull of the initial weights, which then receives the gradient sum. Waiting for
            # the pulls once, when parameters are first initialised, orders them.
            nd.waitall()


def on_kvstore(trainer: Trainer) -> bool:
    """Whether the trainer's parameters are updated on its kvstore."""
    return bool(trainer._kvstore and trainer._update_on_kvstore)


def check_kvstore_config(trainer: Trainer) -> None:
    """Refuse kvstore setups where a skipped step cannot be exact; pick update_on_kvstore=False for dist."""
    if trainer._contains_sparse_weight or trainer._contains_sparse_grad:
        raise ValueError("AMP loss scaling does not support sparse weights or gradients (row_sparse parameter "
                         "found); use dense parameters")
    if trainer._kv_initialized:
        distributed, on_servers = trainer._distributed, on_kvstore(trainer)
    else:
        config = trainer._kvstore_params
        kvstore = config["kvstore"]
        kv_type = kvstore if isinstance(kvstore, str) else getattr(kvstore, "type", "")
        distributed, on_servers = "dist" in kv_type, config["update_on_kvstore"]
        if distributed and "async" in kv_type:
            raise ValueError("AMP cannot skip steps exactly with an asynchronous kvstore (%r): the servers apply "
                             "each worker's update on arrival; use 'dist_sync'" % kv_type)
        if distributed and on_servers is None:
            config["update_on_kvstore"] = on_servers = False
    if distributed and on_servers:
        raise ValueError("AMP needs update_on_kvstore=False with a distributed kvstore: with updates on the "
                         "servers, a worker cannot skip a step the others take; create the Trainer with "
                         "update_on_kvstore=False (or leave it unset before amp.init_trainer)")
