"""``python -m mxnet.amp doctor``: where a saved model breaks in low precision (:mod:`mxnet.amp.training.diagnosis`
does the work: ``amp.diagnose``).

    python -m mxnet.amp doctor --symbol net-symbol.json --params net-0000.params --input-shape 8,3,32,32
"""
import numpy as np

from .. import lists
from ..training.diagnosis import diagnose

__all__ = ["add_arguments", "run"]


def add_arguments(parser):
    """Options of ``python -m mxnet.amp doctor``."""
    from .convert import shape_arg
    parser.add_argument("--symbol", required=True, help="NET-symbol.json")
    parser.add_argument("--params", required=True, help="NET-0000.params")
    parser.add_argument("--input-shape", action="append", type=shape_arg, default=None,
                        help="shape of one input, e.g. 1,3,224,224 (repeat for several inputs, in the model's "
                             "order); the batch is standard normal values")
    parser.add_argument("--data", help="the batch instead: .npy (one input) or .npz (one array per input name)")
    parser.add_argument("--dtype", choices=lists.DTYPES, default="float16")
    parser.add_argument("--loss-scale", type=float, help="head gradient scale (default 65536 for float16)")


def _batch(args, inputs):
    """The batch by input name, from ``--data`` or random values of ``--input-shape``; ValueError if they
    do not fit the model's ``inputs``."""
    shapes = args.input_shape or []
    if not args.data and not shapes:
        raise ValueError("give --input-shape (one per input: %s) or --data" % ", ".join(inputs))
    if shapes and len(shapes) != len(inputs):
        raise ValueError("%d --input-shape given but the model has %d inputs (%s)"
                         % (len(shapes), len(inputs), ", ".join(inputs)))
    if not args.data:
        rng = np.random.RandomState(0)
        return {n: rng.standard_normal(s).astype(np.float32) for n, s in zip(inputs, shapes)}
    loaded = np.load(args.data)
    if isinstance(loaded, np.ndarray):
        if len(inputs) != 1:
            raise ValueError("--data %s holds one array but the model has %d inputs (%s): save them with "
                             "numpy.savez" % (args.data, len(inputs), ", ".join(inputs)))
        batch = {inputs[0]: loaded}
    else:
        batch = dict(loaded.items())
        if sorted(batch) != sorted(inputs):
            raise ValueError("--data %s holds %s but the model's inputs are %s"
                             % (args.data, ", ".join(sorted(batch)), ", ".join(inputs)))
    for name, shape in zip(inputs, shapes):
        if batch[name].shape != shape:
            raise ValueError("--data has shape %s for %s but --input-shape is %s"
                             % (batch[name].shape, name, shape))
    return batch


def run(args):
    """Load the model, diagnose it, print the report; return the exit status."""
    import os
    import mxnet as mx
    from .convert import load_model
    if args.data and not os.path.isfile(args.data):
        raise FileNotFoundError("no such file: %s" % args.data)
    sym, arg, aux = load_model(args.symbol, args.params)
    batch = _batch(args, [n for n in sym.list_inputs() if n not in arg and n not in aux])
    with mx.util.np_shape(isinstance(sym, mx.sym.np._Symbol)):
        print(diagnose(sym, arg, aux, batch, args.dtype, args.loss_scale).format())
    return 0
