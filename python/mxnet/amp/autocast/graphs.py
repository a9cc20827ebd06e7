"""How the policy reaches graphs: hybridized Gluon blocks, ``SymbolBlock`` and ``Symbol.bind``/``simple_bind``.

The symbol is rewritten once by :func:`mxnet.amp.graph.rewrite.rewrite_symbol` when the cached graph is built,
so a hybridized block pays nothing per call and each weight is cast once however often the block is applied.
Each function here makes the hook that replaces one MXNet method, given the original.
"""
import functools
import logging
import os
import warnings
from typing import Callable, Iterable, Iterator, Mapping, Sequence

import mxnet as mx

from .. import lists
from ..core.policy import LP16, Policy
from ..graph import layout
from ..graph.rewrite import rewrite_symbol
from ..graph.symbol_json import drop_rounding, to_graph, to_symbol, with_var_dtypes
from ..graph.work import product_macs
from .context import STATE, active_policy

__all__ = ["FLOOR_ENV", "get_graph", "export", "bind", "forget_rewrite"]

_LOG = logging.getLogger("mxnet.amp")
#: The default of ``amp.init(min_graph_macs=...)`` where set: an int >= 0 (0 rewrites every graph).
FLOOR_ENV = "MXNET_AMP_MIN_GRAPH_MACS"


def _is_array(x) -> bool:
    return isinstance(x, mx.nd.NDArray)


def _flatten(args: Iterable) -> Iterator:
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from _flatten(a)
        else:
            yield a


def _device_type(arrays, default="cpu"):
    return next((a.context.device_type for a in arrays if _is_array(a)), default)


def _graph_floor(policy: Policy, device_type: str) -> int:
    """The multiply-accumulates per forward pass below which a graph on ``device_type`` stays float32: the policy's
    ``min_graph_macs``, else :data:`FLOOR_ENV`, else the measured floor (``lists.training_graph_floor``).

    Raises
    ------
    ValueError
        :data:`FLOOR_ENV` is set to anything but an int >= 0.
    """
    if policy.min_graph_macs is not None:
        return policy.min_graph_macs
    text = os.environ.get(FLOOR_ENV, "").strip()
    if not text:
        return lists.training_graph_floor(policy.target_dtype, device_type)
    if not text.isdigit():
        raise ValueError("%s=%r: expected an int >= 0 (multiply-accumulates per forward pass; 0 rewrites every "
                         "graph)" % (FLOOR_ENV, text))
    return int(text)


def _stays_float32(sym, policy: Policy, device_type: str, var_shapes: Mapping[str, Sequence[int]], what: str) -> bool:
    """Whether ``sym`` does too little arithmetic for low precision to pay (:func:`_graph_floor`): it is not
    rewritten, and one info line says so."""
    floor = _graph_floor(policy, device_type)
    if floor == 0 or not var_shapes:
        return False
    macs = product_macs(sym, var_shapes, lambda op: policy.action(op) == LP16)
    if macs is None or macs >= floor:
        return False
    _LOG.info("amp: %s does %d multiply-accumulates per forward pass, below the %d where %s pays on %s: it runs in "
              "float32 (amp.init(min_graph_macs=0) converts it anyway)", what, macs, floor, policy.target_dtype,
              device_type)
    return True


def get_graph(original: Callable) -> Callable:
    """The ``HybridBlock._get_graph`` hook: rewrite the cached graph once, when it is (re)built under AMP."""
    @functools.wraps(original)
    def _get_graph(self, *args):
        inputs, out = original(self, *args)
        policy = active_policy()
        if policy is None or out is getattr(self, "_amp_graph", None):
            return inputs, out
        flat = [a for a in _flatten(args) if a is not None]
        var_dtypes = {p.name: p.dtype for p in self.collect_params().values()}
        var_dtypes.update({s.name: a.dtype for s, a in zip(inputs, flat) if _is_array(a)})
        var_shapes = {s.name: a.shape for s, a in zip(inputs, flat) if _is_array(a)}
        before = inputs, out
        device_type = _device_type(flat)
        if not _stays_float32(out, policy, device_type, var_shapes, "block %r" % self.name):
            out, _ = rewrite_symbol(out, policy, device_type, var_dtypes, var_shapes)
            if policy.layout_optimization:
                out = _channels_last(out, inputs, flat)
        self._cached_graph = inputs, out
        self._amp_graph = out
        self.__dict__.setdefault("_amp_original", before)
        STATE.rewritten.add(self)
        return inputs, out
    return _get_graph


def forget_rewrite(blk) -> None:
    """Give ``blk`` back the graph it had before AMP rewrote it and clear its CachedOp: its next call traces and
    rewrites anew (after ``amp.reset``, or when parameter dtypes changed)."""
    if "_amp_original" in blk.__dict__:
        blk._cached_graph = blk.__dict__.pop("_amp_original")  # a SymbolBlock keeps its graph when cleared
        del blk._amp_graph
    STATE.rewritten.discard(blk)
    blk._clear_cached_op()


def export(original: Callable) -> Callable:
    """The ``HybridBlock.export`` hook: with ``remove_amp_cast`` (the default) the file holds the plain float32
    graph.

    MXNet removes ``amp_cast``/``amp_multicast`` itself; the emulation rounding (``amp_round``, an op of this
    project's library) goes too, so the exported model loads in MXNet without ``mxnet.amp``.
    """
    @functools.wraps(original)
    def _export(self, path, epoch=0, remove_amp_cast=True):
        if not remove_amp_cast or not self._cached_graph:
            return original(self, path, epoch, remove_amp_cast)
        inputs, out = self._cached_graph
        self._cached_graph = inputs, to_symbol(drop_rounding(to_graph(out)), like=out)
        try:
            return original(self, path, epoch, remove_amp_cast)
        finally:
            self._cached_graph = inputs, out
    return _export


def _channels_last(out, inputs, arrays):
    """The ``amp_layout`` pass on a graph that runs on a GPU; on CPU a warning with the reason."""
    ctx = next((a.context for a in arrays if _is_array(a)), mx.cpu())
    refusal = layout.layout_refusal(ctx)
    if refusal is not None:
        warnings.warn("amp layout_optimization skipped: %s" % refusal, stacklevel=4)
        return out
    pairs = [(s.name, a) for s, a in zip(inputs, arrays) if _is_array(a)]
    return layout.optimize_layout(out, input_shapes={n: a.shape for n, a in pairs},
                                  input_dtypes={n: a.dtype for n, a in pairs}, ctx=ctx)


def bind(original: Callable, method: str) -> Callable:
    """The ``Symbol.bind`` (``method="bind"``) or ``Symbol.simple_bind`` hook: bind the rewritten symbol."""
    @functools.wraps(original)
    def _bind(self, ctx, *args, **kwargs):
        policy = active_policy()
        if policy is None:
            return original(self, ctx, *args, **kwargs)
        names = self.list_arguments()
        arrays = kwargs.get("args", args[0] if args and method == "bind" else None)
        if isinstance(arrays, (list, tuple)):
            arrays = dict(zip(names, arrays))
        if isinstance(arrays, dict):
            dtypes = {k: v.dtype for k, v in arrays.items()}
            shapes = {k: v.shape for k, v in arrays.items()}
        else:  # simple_bind(ctx, grad_req, type_dict, stype_dict, group2ctx, ..., **shapes)
            dtypes = _inferred_dtypes(self, kwargs.get("type_dict") or {})
            shapes = {k: v for k, v in kwargs.items() if k in names}
        if _stays_float32(self, policy, ctx.device_type, shapes, "symbol %r" % self.name):
            return original(self, ctx, *args, **kwargs)
        sym, _ = rewrite_symbol(self, policy, ctx.device_type, dtypes, shapes)
        if not isinstance(arrays, dict):
            # a cast between a parameter and its reader hides the parameter's type from simple_bind's inference
            graph = to_graph(sym)
            sym = to_symbol(dict(graph, nodes=with_var_dtypes(graph["nodes"], dtypes)), like=sym)
        return original(sym, ctx, *args, **kwargs)
    return _bind


def _inferred_dtypes(sym, type_dict):
    """``type_dict`` completed with the dtypes the original graph infers from it (the parameters', say)."""
    try:
        arg_types, _, aux_types = sym.infer_type_partial(**type_dict)
    except mx.base.MXNetError:
        return dict(type_dict)
    names = sym.list_arguments() + sym.list_auxiliary_states()
    found = {k: t for k, t in zip(names, (arg_types or []) + (aux_types or [])) if t is not None}
    return dict(found, **type_dict)
