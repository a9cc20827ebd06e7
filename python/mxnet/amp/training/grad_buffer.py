"""Contiguous gradients: every parameter's gradient becomes a view of one buffer per (device, dtype).

MXNet's fixed cost of one op call grows with the number of arrays (about 18 ms for 10,000), which dominates
the fused unscale + finite check of models with many small parameters. With the gradients laid out in one
buffer per device and dtype, the check is one kernel call over one array whatever the parameter count.
Backward writes into the views exactly as into separate arrays (``autograd.mark_variables``), and
``zero_grad``, kvstores and optimizers see ordinary NDArrays.

A parameter whose gradient arrays are replaced later (``Parameter.cast``, ``reset_ctx``, re-initialisation)
no longer points into the buffer; :meth:`GradBuffers.current` notices and lays the buffers out again.

A static CachedOp (``hybridize(static_alloc=True, static_shape=True)``) keeps the gradient arrays of its first
backward and writes into them ever after, whatever autograd was told since: left alone, every later step would
update with the gradients of the step before the layout. Laying out drops the CachedOp of every block that reads
the parameters (as ``HybridBlock.cast`` does), and their next call builds one on the views.
"""
import gc

import numpy as np

from mxnet import autograd
from mxnet import ndarray as nd
from mxnet import numpy as _mx_np
from mxnet.gluon import HybridBlock

__all__ = ["GradBuffers"]

_FLAT_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


class GradBuffers:
    """The gradient buffers of a list of dense parameters with gradients (all initialised).

    Parameters
    ----------
    params : list of Parameter
        Parameters with ``grad_req != 'null'``; their current gradient values are kept.
    """

    def __init__(self, params):
        self.params = list(params)
        groups = {}  # (device index, dtype) -> [param]
        self.views = []
        self.buffers = {}  # device index -> [flat buffer per dtype (and any bfloat16 gradient as it is)]
        for param in self.params:
            for i, grad in enumerate(param.list_grad()):
                if np.dtype(grad.dtype) in _FLAT_DTYPES:
                    groups.setdefault((i, grad.dtype), []).append(param)
                else:  # bfloat16 gradients (rare: bf16 parameters) stay separate arrays
                    self.buffers.setdefault(i, []).append(grad)
                    self.views.append((param, i, grad))
        with autograd.pause():
            for (i, dtype), members in groups.items():
                grads = [p.list_grad()[i] for p in members]
                flat = nd.zeros((sum(g.size for g in grads),), ctx=grads[0].context, dtype=dtype)
                offset = 0
                for param, old in zip(members, grads):
                    view = flat[offset:offset + old.size].reshape(old.shape)
                    offset += old.size
                    old.as_nd_ndarray().copyto(view)
                    if isinstance(old, _mx_np.ndarray):
                        view = view.as_np_ndarray()
                    param._grad[i] = view
                    self.views.append((param, i, view))
                self.buffers.setdefault(i, []).append(flat)
        for param in self.params:  # re-marking resets "fresh gradient" flags: keep this step's
            fresh = [data._fresh_grad for data in param.list_data()]
            autograd.mark_variables(param.list_data(), param.list_grad(), param.grad_req)
            for data, flag in zip(param.list_data(), fresh):
                data._fresh_grad = flag
        _drop_cached_ops(self.params)

    def current(self, params):
        """Whether ``params`` are still exactly the parameters whose gradients live in these buffers."""
        return params == self.params and all(param._grad[i] is view for param, i, view in self.views)

    def per_device(self):
        """The flat buffers, one list per device (in the parameters' device order)."""
        return [self.buffers[i] for i in sorted(self.buffers)]


def _drop_cached_ops(params):
    """Drop the CachedOp of every live HybridBlock that reads one of ``params``: its next call builds a new one
    on the parameters' current gradient arrays (the graph is kept)."""
    ids = {id(param) for param in params}
    for obj in gc.get_objects():
        if (isinstance(obj, HybridBlock) and getattr(obj, "_cached_op", None) is not None
                and any(not is_arg and id(arg) in ids for is_arg, arg in obj._cached_op_args)):
            obj._cached_op = None
