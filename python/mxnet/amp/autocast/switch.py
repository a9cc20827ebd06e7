"""``amp.init`` and ``amp.reset``: switch automatic mixed precision on for the process, and off completely.

``init`` builds the frozen policy, then installs the hooks of :mod:`.imperative` and :mod:`.graphs`, each
recorded in :data:`~mxnet.amp.base.patches.PATCHES`; ``reset`` undoes every recorded patch (those of
``init_trainer(optimizer)`` and of the ONNX registration too) and rebuilds rewritten graphs in float32.
"""
import gc
import warnings
from typing import Any, Optional, Sequence, Tuple

from mxnet.gluon import block as _gluon_block
from mxnet.symbol import symbol as _symbol_mod

from ..core import advice
from ..base.patches import PATCHES
from ..core.policy import Policy, make_policy
from . import graphs
from .context import STATE
from .imperative import GROUP, block_call, patch_frontends

__all__ = ["init", "reset"]


def init(target_dtype: Any = "float16", target_precision_ops: Optional[Sequence[str]] = None,
         conditional_fp32_ops: Optional[Sequence[Tuple[str, str, Sequence[str]]]] = None,
         fp32_ops: Optional[Sequence[str]] = None, emulate: Optional[bool] = None, layout_optimization: bool = False,
         *, extra_lp16_ops: Optional[Sequence[str]] = None, extra_fp32_ops: Optional[Sequence[str]] = None,
         keep_lp16_outputs: bool = False, kernels: str = "auto", min_graph_macs: Optional[int] = None) -> None:
    """Turn on automatic mixed precision for everything that runs afterwards.

    Call it before building the model. Calling it again with the same settings does nothing; with other
    settings it raises (call :func:`reset` first).

    Parameters
    ----------
    target_dtype : {'float16', 'bfloat16', 'auto'}
        The low precision type. ``'auto'`` chooses for this machine (:mod:`mxnet.amp.core.advice`): float16 where
        MXNet sees CUDA GPUs, bfloat16 on CPUs with bf16 arithmetic (classes (c) and (d)), elsewhere none: the
        model stays float32, one info line says why, and ``init_trainer``, ``scale_loss`` and checkpoints keep
        working. bfloat16 given explicitly on a CPU without bf16 arithmetic (classes (a) and (b)) warns once
        per process (:class:`mxnet.amp.SlowBfloat16Warning`).
    target_precision_ops : list of str, optional
        Replaces the built-in list of ops that run in ``target_dtype``, as in ``mxnet.contrib.amp``: ops of
        the built-in list missing from it follow their inputs (low precision when one arrives in low precision).
    conditional_fp32_ops : list of (str, str, list of str), optional
        ``(op, attribute, values)``: run ``op`` in float32 when ``attribute`` takes one of ``values``. Replaces
        the built-in entries (the ops they named follow their inputs unless listed again).
    fp32_ops : list of str, optional
        Replaces the built-in list of ops that run in float32 (loss outputs included); ops of the built-in
        list missing from it follow their inputs.
    emulate : bool, optional
        Force (True) or forbid (False) emulation: values are rounded to ``target_dtype`` around low precision
        ops while kernels run in float32. The default picks per op and device
        (:meth:`mxnet.amp.Policy.lp16_mode`): native where the kernel exists (GPUs for float16, CPUs
        with AVX-512 for bfloat16), plain float32 for ops without a kernel on such a device, emulated on
        devices without any (MXNet 1.9.1 has no CPU float16 kernels).
    layout_optimization : bool, optional
        Also rewrite hybridized graphs on GPU contexts to channels-last convolutions (tensor cores run low
        precision convolutions fastest in NHWC); on CPU skipped with a warning (MXNet 1.9.1: NCHW only).
    extra_lp16_ops, extra_fp32_ops : list of str, optional
        Ops to run in ``target_dtype`` / float32 *on top of* the lists (built-in or given); everything else
        keeps its treatment. Use these to adjust a few ops (``extra_fp32_ops=["FullyConnected"]``).
    keep_lp16_outputs : bool, optional
        Leave a hybridized graph's outputs in ``target_dtype`` where its last op ran in it; by default they
        come back in their original dtype (float32), as MXNet 2.0's AMP does.
    kernels : {'auto', 'mxnet'}, optional
        Whose kernels run the matrix products, convolutions and BatchNorm: ``'auto'`` uses this project's
        oneDNN 3 kernels where the device runs the target dtype natively and they are available
        (:meth:`mxnet.amp.Policy.library_kernel`), ``'mxnet'`` always MXNet's.
    min_graph_macs : int, optional
        Graphs whose products do fewer multiply-accumulates per forward pass stay float32 (an info line says so);
        default ``MXNET_AMP_MIN_GRAPH_MACS``, else :func:`mxnet.amp.lists.training_graph_floor`; 0 converts all.

    Raises
    ------
    ValueError
        Unknown dtype or op name, an op named in two overrides, or a bad ``min_graph_macs``.
    RuntimeError
        ``init`` was already called with different settings.

    Examples
    --------
    >>> amp.init("bfloat16"); amp.reset()    # on, then back to plain MXNet
    """
    resolved, why = advice.resolve(target_dtype)
    if resolved is None:  # "auto" where low precision does not pay: AMP stays off, its trainer calls work
        _choose_float32(why)
        return
    if why != "given":
        advice.log_choice(why)
    policy = make_policy(resolved, target_precision_ops, conditional_fp32_ops, fp32_ops, emulate=emulate,
                         layout_optimization=layout_optimization, extra_lp16_ops=extra_lp16_ops,
                         extra_fp32_ops=extra_fp32_ops, keep_lp16_outputs=keep_lp16_outputs, kernels=kernels,
                         min_graph_macs=min_graph_macs)
    if STATE.float32_by_choice:
        raise RuntimeError("amp.init(target_dtype='auto') chose float32 on this machine; call mxnet.amp.reset() "
                           "before initialising again with %r" % (policy,))
    if STATE.policy is not None:
        if STATE.policy == policy:
            return
        raise RuntimeError("amp.init() was already called with %r; call mxnet.amp.reset() before initialising "
                           "again with %r" % (STATE.policy, policy))
    _start(policy, emulate)


def _choose_float32(why: str) -> None:
    """``amp.init("auto")`` where low precision does not pay: no policy, the trainer calls keep working."""
    if STATE.policy is not None:
        raise RuntimeError("amp.init() was already called with %r; call mxnet.amp.reset() before initialising "
                           "again with target_dtype='auto'" % (STATE.policy,))
    if not STATE.float32_by_choice:
        advice.log_choice(why)
    STATE.float32_by_choice = True


def _start(policy: Policy, emulate: Optional[bool]) -> None:
    """Make ``policy`` the active one and install the hooks."""
    STATE.policy = policy
    if policy.target_dtype == "bfloat16" and emulate is not True and advice.gpu_count() == 0:
        advice.warn_if_slow("bfloat16", "cpu")
    patch_frontends(policy)
    PATCHES.wrap(_gluon_block.HybridBlock, "_get_graph", graphs.get_graph, GROUP)
    PATCHES.wrap(_gluon_block.Block, "__call__", block_call, GROUP)
    PATCHES.wrap(_gluon_block.HybridBlock, "export", graphs.export, GROUP)
    for method in ("bind", "simple_bind"):
        PATCHES.wrap(_symbol_mod.Symbol, method, lambda original, m=method: graphs.bind(original, m), GROUP)
    existing = [b for b in gc.get_objects() if isinstance(b, _gluon_block.Block)]
    if existing:
        for blk in existing:
            if isinstance(blk, _gluon_block.HybridBlock) and blk._cached_op is not None:
                blk._clear_cached_op()
        warnings.warn("amp.init() was called after %d Gluon blocks were created; AMP applies to everything "
                      "that runs from now on (hybridized blocks rebuild their graph on the next call), but "
                      "call amp.init() before building the model to be sure." % len(existing), stacklevel=3)


def reset() -> None:
    """Undo ``amp.init`` completely: restore every patched function and rebuild rewritten graphs in fp32.

    Every patch mxnet.amp made outside its own objects is undone (:data:`~mxnet.amp.base.patches.PATCHES`):
    ``amp.init``'s hooks, the ``Module.update`` / ``Module.backward`` wrappers of ``init_trainer(optimizer)``
    and the converters registered with ``mx.onnx.export_model`` (``amp.export_onnx`` registers them again when
    it runs). Parameters keep their values and dtypes (AMP casts on the fly and never changes them), except the
    bfloat16 weights of ``init_trainer(trainer, weights="bfloat16")``, which become float32 again (``w + c``). A
    ``gluon.Trainer`` given to ``init_trainer`` keeps its loss scaling (it lives on the instance); an optimizer
    of the Module API needs ``init_trainer`` again before ``scale_loss``.
    """
    PATCHES.restore()
    for blk in list(STATE.rewritten):
        graphs.forget_rewrite(blk)
    STATE.policy = None
    STATE.float32_by_choice = False
