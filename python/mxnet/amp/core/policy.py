"""Frozen AMP settings: the target dtype, the user's list overrides and how each op is treated.

A :class:`Policy` is built once by :func:`make_policy` (which validates every user input) and never mutated;
variants are made with :func:`dataclasses.replace`. The per-node decision lives in :meth:`Policy.action`, the
single place that combines the built-in lists with the user's overrides.
"""
from dataclasses import dataclass, field, replace
import difflib
from typing import Dict, FrozenSet, Optional, Tuple

import mxnet as mx

from .. import lists
from . import cpu
from .support import library_ready, plans_native, plans_storage

__all__ = ["Policy", "make_policy", "KERNELS", "DISABLED_ATTR", "LP16", "FP32", "NEUTRAL", "WIDEST", "FOLLOW", "NATIVE",
           "EMULATED", "FLOAT32"]

# Actions a node can get. Loss outputs and satisfied conditional entries resolve to FP32; the rest to NEUTRAL.
# FOLLOW (ops of a built-in list the user replaced): low precision when a floating input arrives in low precision
# (the other inputs cast as the op's type inference wants), otherwise as it is: what upstream's conversion pass
# does with an op of no list.
LP16, FP32, NEUTRAL, WIDEST, FOLLOW = "lp16", "fp32", "neutral", "widest", "follow"

#: Node attribute that marks graph nodes built inside ``amp.disable()``: the rewriter leaves them in fp32.
DISABLED_ATTR = "__amp_disabled__"

# How a low precision (LP16) op runs on a device: see Policy.lp16_mode.
NATIVE, EMULATED, FLOAT32 = "native", "emulated", "float32"

#: Whose kernels run the matrix products, convolutions, LayerNorm and softmax, and (in training graphs) BatchNorm:
#: "auto" -- this project's where the lists map the op to one (``lists.library_kernels``, ``lists.stats_kernels``,
#: ``lists.neutral_kernels``), the device runs the dtype natively and the library's oneDNN 3 is loaded, else
#: MXNet's; "mxnet" -- always MXNet's.
KERNELS = ("auto", "mxnet")

_CATEGORY_ACTION = {"lp16": LP16, "fp32": FP32, "neutral": NEUTRAL, "widest": WIDEST, "loss_output": FP32}


@dataclass(frozen=True)
class Policy:
    """How AMP treats every operator for one target dtype.

    The built-in lists (:mod:`mxnet.amp.lists`) decide unless the user overrides them, in one of two ways:

    * **replacing** a built-in list, as ``mxnet.contrib.amp`` and MXNet 2.0 do (``lp16_ops``, ``fp32_ops``,
      ``conditional_fp32_ops`` not None): the given list is the whole list, and the ops the built-in list
      held that the given one lacks follow their inputs (``FOLLOW``: low precision when a floating input
      arrives in low precision, else float32), the widest type casts and the other lists staying as they are;
    * **adding** to the built-in lists (``extra_lp16_ops``, ``extra_fp32_ops``): those ops move to that
      category, everything else keeps its built-in treatment.

    Parameters
    ----------
    target_dtype : {'float16', 'bfloat16'}
        The low precision dtype that ``lp16`` ops run in.
    lp16_ops : tuple of str or None
        Replaces the built-in low precision list (None: the built-in one).
    fp32_ops : tuple of str or None
        Replaces the built-in float32 list, loss outputs included (None: the built-in one).
    conditional_fp32_ops : tuple of (str, str, tuple of str) or None
        ``(op, attribute, values)``: the op runs in float32 when ``attribute`` has one of ``values``. Replaces the
        built-in conditional entries (None: the built-in ones).
    extra_lp16_ops, extra_fp32_ops : tuple of str
        Ops forced to run in ``target_dtype`` / float32 on top of the lists above.
    excluded_sym_names : tuple of str
        Node names kept in float32 whatever their op (used by model conversion).
    emulate : bool or None
        ``True`` rounds values to ``target_dtype`` at low precision op boundaries and computes in float32
        (numerics of mixed precision on hardware without fast kernels), ``False`` casts to ``target_dtype``
        for every low precision op (a graph for a runtime that has the kernels), ``None`` decides per op and
        device (:meth:`lp16_mode`).
    layout_optimization : bool
        Rewrite hybridized graphs on GPU contexts to channels-last convolutions (the ``amp_layout`` pass).
    keep_lp16_outputs : bool
        Leave graph outputs in ``target_dtype`` where the last op ran in it. By default every output comes
        back in its original dtype (float32), as from the float32 graph.
    kernels : {'auto', 'mxnet'}
        Whose kernels run the matrix products, convolutions, LayerNorm, softmax and BatchNorm (:data:`KERNELS`,
        :meth:`library_kernel`, :meth:`stats_kernel`, :meth:`neutral_kernel`).
    storage : bool
        The policy of a training graph on a CPU that stores the target dtype on float32 arithmetic (made by
        :meth:`for_graph`, never by users; :func:`mxnet.amp.core.support.plans_storage`): low precision ops run on
        the library's kernels (which widen their operands) or in float32, MXNet's dtype-neutral ops on low precision
        data only where they move values without arithmetic (``lists.storage_ops``), in float32 between casts
        elsewhere (:func:`mxnet.amp.graph.postops.float32_islands`).
    min_graph_macs : int or None
        ``amp.init`` keeps a graph whose products do fewer multiply-accumulates per forward pass in float32 (None:
        ``MXNET_AMP_MIN_GRAPH_MACS``, else ``lists.training_graph_floor``; 0 rewrites every graph).
    """

    target_dtype: str
    lp16_ops: Optional[Tuple[str, ...]] = None
    fp32_ops: Optional[Tuple[str, ...]] = None
    conditional_fp32_ops: Optional[Tuple[Tuple[str, str, Tuple[str, ...]], ...]] = None
    extra_lp16_ops: Tuple[str, ...] = ()
    extra_fp32_ops: Tuple[str, ...] = ()
    excluded_sym_names: Tuple[str, ...] = ()
    emulate: Optional[bool] = None
    layout_optimization: bool = False
    keep_lp16_outputs: bool = False
    kernels: str = "auto"
    storage: bool = False
    min_graph_macs: Optional[int] = None
    _conditions: dict = field(init=False, repr=False, compare=False, hash=False)
    _replaced: frozenset = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self):
        if self.conditional_fp32_ops is None:
            conditions = {op: list(rules) for op, rules in lists.conditional_fp32(self.target_dtype).items()}
        else:
            conditions = {}
            for op, attr, values in self.conditional_fp32_ops:
                conditions.setdefault(op, []).append((attr, frozenset(values)))
        replaced = {cat for cats, given in ((("lp16",), self.lp16_ops), (("fp32", "loss_output"), self.fp32_ops),
                                            (("conditional_fp32",), self.conditional_fp32_ops))
                    if given is not None for cat in cats}
        object.__setattr__(self, "_conditions", conditions)
        object.__setattr__(self, "_replaced", frozenset(replaced))

    def action(self, op: str, attrs: Optional[Dict[str, str]] = None, name: Optional[str] = None) -> str:
        """Return what AMP does at a node: one of ``LP16``, ``FP32``, ``NEUTRAL``, ``WIDEST``, ``FOLLOW``.

        Parameters
        ----------
        op : str
            Registered operator name.
        attrs : dict, optional
            The node's attributes as strings (consulted for conditional fp32 entries and for
            the ``amp.disable()`` marker).
        name : str, optional
            The node's name (consulted for ``excluded_sym_names``).
        """
        attrs = attrs or {}
        if attrs.get(DISABLED_ATTR) == "1":
            return NEUTRAL
        if name is not None and name in self.excluded_sym_names:
            return FP32
        if op in self.extra_fp32_ops:
            return FP32
        if op in self.extra_lp16_ops:
            return LP16
        if self.fp32_ops is not None and op in self.fp32_ops:
            return FP32
        if self.lp16_ops is not None and op in self.lp16_ops:
            return LP16
        if self.conditional_fp32_applies(op, attrs):
            return FP32
        category = lists.category(op, self.target_dtype)
        if category in self._replaced and not lists.is_library_kernel(op):
            return FOLLOW
        return _CATEGORY_ACTION.get(category, NEUTRAL)

    def conditional_fp32_applies(self, op: str, attrs: Optional[Dict[str, str]] = None) -> bool:
        """Whether a conditional float32 entry (built-in or given) matches op ``op`` with ``attrs``."""
        return any((attrs or {}).get(attr) in values for attr, values in self._conditions.get(op, ()))

    def is_conditional(self, op: str) -> bool:
        """Whether ``op``'s action depends on its attributes (a conditional fp32 entry)."""
        return op in self._conditions

    def for_graph(self, device_type: str, inference: bool) -> "Policy":
        """The policy a graph on ``device_type`` is rewritten with: this one, with ``storage=True`` for a training
        graph where the default plan stores the target dtype on float32 arithmetic there
        (:func:`~mxnet.amp.core.support.plans_storage`; ``emulate=None``, ``kernels="auto"``)."""
        if (inference or self.storage or self.emulate is not None or self.kernels != "auto"
                or not plans_storage(self.target_dtype, device_type)):
            return self
        return replace(self, storage=True)

    def lp16_mode(self, op: str, device_type: str) -> str:
        """How low precision op ``op`` runs on ``device_type`` ('cpu' or 'gpu').

        Returns
        -------
        str
            ``NATIVE``: inputs cast to the target dtype, its kernel runs. ``EMULATED``: the float32 kernel
            on inputs rounded to the target dtype, output rounded too: the numerics of mixed precision on a
            device with no kernels for the dtype at all (bfloat16 on CPUs without AVX-512, float16 on CPU).
            ``FLOAT32``: the device runs the dtype natively, but MXNet 1.9.1 has no kernel for this op
            there (``batch_dot`` on AVX-512 CPUs, say): plain float32, since rounding would cost time and
            add error without buying speed. ``emulate=True`` makes every op ``EMULATED``,
            ``emulate=False`` every op ``NATIVE``; the default follows :func:`plans_native` (on CPUs, the
            plan of the CPU class: ``lists.cpu_class_plan``). A ``storage`` policy runs the ops of library kernels
            ``NATIVE`` (the kernels widen the operands) and the others ``FLOAT32``.
        """
        if self.emulate is not None:
            return EMULATED if self.emulate else NATIVE
        if self.storage:
            return NATIVE if self.library_kernel(op, device_type) else FLOAT32
        if not plans_native(self.target_dtype, device_type):
            return EMULATED
        if op in lists.native_lp16_ops(self.target_dtype, device_type) or self.library_kernel(op, device_type):
            return NATIVE
        return FLOAT32

    def library_kernel(self, op: str, device_type: str) -> Optional[str]:
        """The op of this project's library that runs low precision op ``op`` on ``device_type``, or None.

        Where ``lists.library_kernels`` maps ``op`` to one, the policy has ``kernels="auto"`` and no forced
        emulation, the device runs the target dtype natively and the library's oneDNN 3 kernels loaded
        and take the dtype here (:func:`mxnet.amp.core.support.library_ready`; if they do not, one warning says
        why and MXNet's kernels run); or the policy is a ``storage`` one (the kernels widen the operands).
        """
        name = lists.library_kernels(self.target_dtype, device_type).get(op)
        if (name is None or self.kernels != "auto" or self.emulate is True
                or (self.emulate is None and not self.storage and not plans_native(self.target_dtype, device_type))):
            return None
        return name if library_ready(self.target_dtype) else None

    def kernel(self, op: str, device_type: str, mode: str) -> Optional[str]:
        """The library op that runs low precision op ``op`` on ``device_type`` in ``mode`` (see
        :meth:`lp16_mode`): :meth:`library_kernel` when native, :meth:`emulation_kernel` when emulated; None
        where MXNet's own kernel runs it."""
        if mode == NATIVE:
            return self.library_kernel(op, device_type)
        if mode == EMULATED:
            return self.emulation_kernel(op, device_type)
        return None

    def _runs_native(self, device_type: str) -> bool:
        """Whether graphs on ``device_type`` keep the target dtype's tensors (``emulate=False``, the default plan
        there, or a ``storage`` policy)."""
        return self.emulate is False or (self.emulate is None and (
            self.storage or plans_native(self.target_dtype, device_type)))

    def native_substitute(self, op: str, device_type: str) -> Optional[Tuple[str, Dict[str, str]]]:
        """``(op, attributes)`` replacing dtype-neutral ``op`` on low precision inputs on ``device_type``
        (``lists.native_substitutes``) where the graph runs natively there, or None (``storage``: the substitutes
        are oneDNN kernels, which have no low precision primitives there)."""
        if self.storage or not self._runs_native(device_type):
            return None
        return lists.native_substitutes(self.target_dtype, device_type).get(op)

    def transpose_swap(self, op: str, device_type: str) -> Optional[str]:
        """The op swapping two axes that runs transpose ``op`` on low precision data on ``device_type``
        (``lists.transpose_swaps``) where the graph runs natively there (``storage``: where that op is one of
        ``lists.storage_ops``), or None."""
        if not self._runs_native(device_type):
            return None
        swap = lists.transpose_swaps(self.target_dtype, device_type).get(op)
        return None if self.storage and swap not in lists.storage_ops(self.target_dtype, device_type) else swap

    def neutral_kernel(self, op: str, device_type: str, name: Optional[str] = None,
                       inference: bool = False) -> Optional[str]:
        """The library op that runs ``op`` in its data's dtype in a training graph on ``device_type``, told the
        graph's mode (``lists.neutral_kernels``: ``BatchNorm`` -> ``amp_batch_norm``, ``Dropout`` ->
        ``amp_dropout``), or in an inference graph those of them it uses too (``amp_batch_norm``), where the graph
        runs natively there and ``kernels="auto"``, or None; never for an op (or node ``name``) the user keeps in
        float32 (``extra_fp32_ops``, ``fp32_ops``, ``excluded_sym_names``)."""
        if (not self._runs_native(device_type) or self.kernels != "auto" or op in self.extra_fp32_ops
                or op in (self.fp32_ops or ()) or name in self.excluded_sym_names):
            return None
        return lists.neutral_kernels(self.target_dtype, device_type, inference).get(op)

    def inference_kernel(self, op: str, device_type: str) -> Optional[str]:
        """The library op that runs dtype-neutral or widest-type ``op`` on target-dtype inputs in an inference graph on
        ``device_type`` (``lists.inference_kernels``: ``Concat`` -> ``amp_concat``) where the graph runs natively there
        and ``kernels="auto"``, or None (``storage`` policies are training ones)."""
        if self.storage or self.kernels != "auto" or not self._runs_native(device_type):
            return None
        return lists.inference_kernels(self.target_dtype, device_type).get(op)

    def fanout_copies(self, device_type: str) -> bool:
        """Whether a training graph on ``device_type`` reads a target-dtype tensor read more than once through the
        library's ``amp_fanout`` copies (``graph.postops.fanout_copies``): a ``storage`` policy, or where the graph
        runs natively there, ``kernels="auto"`` and ``lists.fanout_copies`` says MXNet cannot add the dtype's
        gradients well there."""
        return self.storage or (self.kernels == "auto" and self._runs_native(device_type)
                                and lists.fanout_copies(self.target_dtype, device_type))

    def stats_kernel(self, op: str, device_type: str, name: Optional[str] = None) -> Optional[str]:
        """The library op that runs float32-list op ``op`` on target-dtype data with float32 statistics on
        ``device_type`` (``lists.stats_kernels``: ``LayerNorm`` -> ``amp_layer_norm``, ``softmax`` ->
        ``amp_softmax``), or None.

        Where the graph runs natively there, ``kernels="auto"`` and the library's oneDNN 3 takes the target dtype
        (:func:`mxnet.amp.core.support.library_ready`), or the policy is a ``storage`` one; never for an op (or node
        ``name``) the user keeps in float32 (``extra_fp32_ops``, a given ``fp32_ops``, ``excluded_sym_names``).
        """
        kernel = lists.stats_kernels(self.target_dtype, device_type).get(op)
        if (kernel is None or self.kernels != "auto" or not self._runs_native(device_type)
                or op in self.extra_fp32_ops or self.fp32_ops is not None or name in self.excluded_sym_names):
            return None
        return kernel if library_ready(self.target_dtype) else None

    def neutral_in_float32(self, op: str, device_type: str) -> bool:
        """Whether dtype-neutral op ``op`` runs in float32 between casts on ``device_type`` (``lists.float32_kernels``:
        its low precision kernel is slower) where the graph runs natively there: ``emulate=False``, or the default
        where the device runs the target dtype natively. (A ``storage`` policy's graphs get their float32 islands
        after the fusions: :func:`mxnet.amp.graph.postops.float32_islands`.)"""
        return op in lists.float32_kernels(self.target_dtype, device_type) and self._runs_native(device_type)

    def float32_islands(self, device_type: str) -> FrozenSet[str]:
        """The dtype-neutral, widest-type and conditional ops that run in float32 between casts where the target dtype
        reaches them in a graph on ``device_type``, made after the fusions
        (:func:`mxnet.amp.graph.postops.float32_islands`): on CPUs where the graph runs natively, the ops whose
        MXNet kernel the op-speed table of this CPU's class measured slower on bfloat16 than in float32 between casts
        (``lists.float32_island_ops``). Empty elsewhere: GPUs, float16, emulated graphs, and ``storage`` graphs (which
        keep the target dtype only through ``lists.storage_ops``)."""
        if device_type != "cpu" or self.storage or not self._runs_native(device_type):
            return frozenset()
        return lists.float32_island_ops(self.target_dtype, cpu.cpu_class().name)

    def imperative_in_float32(self, op: str, device_type: str) -> bool:
        """Whether a front-end call of dtype-neutral or widest-type ``op`` on target-dtype arrays runs in float32
        between casts on ``device_type`` under ``amp.init`` (the imperative path has no fusions to wait for): where
        :meth:`neutral_in_float32` says so, or the op is one of :meth:`float32_islands`."""
        return self.neutral_in_float32(op, device_type) or op in self.float32_islands(device_type)

    def emulation_kernel(self, op: str, device_type: str) -> Optional[str]:
        """The op of this project's library that runs emulated op ``op`` on ``device_type`` (float32 on
        rounded values: ``lists.emulation_kernels``, where MXNet's kernel fails on them), or None.

        Needs ``kernels="auto"`` and the library's oneDNN 3 kernels loaded.
        """
        name = lists.emulation_kernels(self.target_dtype, device_type).get(op)
        if name is None or self.kernels != "auto":
            return None
        return name if library_ready("float32") else None

    def emulates(self, op: str, device_type: str) -> bool:
        """Whether low precision op ``op`` on ``device_type`` is emulated (see :meth:`lp16_mode`)."""
        return self.lp16_mode(op, device_type) == EMULATED


class OverrideError(ValueError, AssertionError):
    """Override lists that ``mxnet.contrib.amp`` rejects with an assertion (an op in two of them, a widest-type
    cast in ``target_dtype_ops`` or ``fp32_ops``): a ``ValueError`` that is also an ``AssertionError``, so code
    and tests written for contrib that expect one still catch it."""


def _check_ops(ops, where):
    known = lists.registered_forward_ops()
    for op in ops:
        if not isinstance(op, str):
            raise TypeError("%s must hold operator names (str), got %r" % (where, op))
        if op not in known:
            close = difflib.get_close_matches(op, sorted(known), n=3)
            hint = (" Did you mean %s?" % ", ".join(repr(c) for c in close)) if close else ""
            raise ValueError("Unknown operator %r in %s: it is not registered in MXNet %s.%s "
                             "(see mxnet.operator.get_all_registered_operators())"
                             % (op, where, mx.__version__, hint))


def _as_tuple(value, where):
    if value is None:
        return ()
    if isinstance(value, str):
        raise TypeError("%s must be a list of operator names, got the string %r" % (where, value))
    return tuple(value)


def _check_conditional(entries):
    out = []
    for entry in entries:
        if not (isinstance(entry, (tuple, list)) and len(entry) == 3):
            raise ValueError("conditional_fp32_ops entries must be (op_name, attribute, [values]), got %r"
                             % (entry,))
        op, attr, values = entry
        if isinstance(values, str) or not all(isinstance(v, str) for v in values):
            raise TypeError("conditional_fp32_ops values for %r must be a list of strings, got %r" % (op, values))
        out.append((op, str(attr), tuple(values)))
    _check_ops([e[0] for e in out], "conditional_fp32_ops")
    for op, attr, _ in out:
        names = mx.operator.get_operator_arguments(op).names
        if attr not in names:
            close = difflib.get_close_matches(attr, names, n=1)
            raise ValueError("conditional_fp32_ops: operator %r has no attribute %r%s; its arguments are %s"
                             % (op, attr, " (did you mean %r?)" % close[0] if close else "", ", ".join(names)))
    return tuple(out)


def make_policy(target_dtype="float16", lp16_ops=None, conditional_fp32_ops=None, fp32_ops=None,
                excluded_sym_names=None, emulate=None, layout_optimization=False, extra_lp16_ops=None,
                extra_fp32_ops=None, where="target_precision_ops", replace_widest=True, keep_lp16_outputs=False,
                kernels="auto", min_graph_macs=None):
    """Validate user settings and return a frozen :class:`Policy` (see it for what each list means).

    An override names an operator, so it applies to all its registered aliases (``exp`` and ``_npi_exp``...
    when they are one operator). ``where`` is the caller's name of ``lp16_ops`` (``target_precision_ops``
    in :func:`mxnet.amp.init`, ``target_dtype_ops`` in conversion), used in error messages. With
    ``replace_widest=False`` (conversion, as upstream's ``convert_symbol``) the replacing lists may not name
    widest-type casts; ``extra_lp16_ops``/``extra_fp32_ops`` always may.

    Raises
    ------
    ValueError
        For an unknown dtype or operator name (the message lists the valid choices or close matches),
        or an operator named in two overrides.
    TypeError
        For arguments of the wrong type.
    """
    dtype = lists.normalize_dtype(target_dtype)
    given = {}
    for name, value in ((where, lp16_ops), ("fp32_ops", fp32_ops), ("extra_lp16_ops", extra_lp16_ops),
                        ("extra_fp32_ops", extra_fp32_ops)):
        given[name] = None if value is None else _as_tuple(value, name)
        _check_ops(given[name] or (), name)
    conditional = None if conditional_fp32_ops is None else \
        _check_conditional(_as_tuple(conditional_fp32_ops, "conditional_fp32_ops"))
    named = {}
    for name, ops in list(given.items()) + [("conditional_fp32_ops", [c[0] for c in conditional or ()])]:
        for op in ops or ():
            if named.get(op, name) != name:
                raise OverrideError("Operator %r is named in both %s and %s; each op may be overridden once"
                                    % (op, named[op], name))
            named[op] = name
    if not replace_widest:
        for name in (where, "fp32_ops"):
            widest = [op for op in given[name] or () if lists.category(op, dtype) == "widest"]
            if widest:
                raise OverrideError("%s names %s, which %s a widest-type cast (inputs cast to the widest type "
                                    "among them); as in mxnet.contrib.amp, only low precision, float32, dtype-neutral "
                                    "and conditional ops may be listed there. Use extra_fp32_ops / extra_lp16_ops to "
                                    "force such an op" % (name, ", ".join(map(repr, widest)),
                                                          "is" if len(widest) == 1 else "are"))
    aliases = {name: group for group in lists.alias_groups() for name in group}

    def with_aliases(ops):
        return None if ops is None else tuple(a for op in ops for a in aliases.get(op, (op,)))
    if conditional is not None:
        conditional = tuple((a, attr, values) for op, attr, values in conditional for a in aliases.get(op, (op,)))
    excluded = _as_tuple(excluded_sym_names, "excluded_sym_names")
    if emulate not in (None, True, False):
        raise ValueError("emulate must be None (auto), True or False, got %r" % (emulate,))
    if layout_optimization not in (True, False):
        raise ValueError("layout_optimization must be True or False, got %r" % (layout_optimization,))
    if keep_lp16_outputs not in (True, False):
        raise ValueError("keep_lp16_outputs must be True or False, got %r" % (keep_lp16_outputs,))
    if not isinstance(kernels, str) or kernels not in KERNELS:
        raise ValueError("kernels must be one of %s, got %r" % (", ".join(repr(k) for k in KERNELS), kernels))
    if min_graph_macs is not None and (isinstance(min_graph_macs, bool) or not isinstance(min_graph_macs, int)
                                       or min_graph_macs < 0):
        raise ValueError("min_graph_macs must be None (the measured floor) or an int >= 0 (0: rewrite every "
                         "graph), got %r" % (min_graph_macs,))
    return Policy(dtype, with_aliases(given[where]), with_aliases(given["fp32_ops"]), conditional,
                  with_aliases(given["extra_lp16_ops"]) or (), with_aliases(given["extra_fp32_ops"]) or (),
                  excluded, emulate, bool(layout_optimization), bool(keep_lp16_outputs), kernels,
                  min_graph_macs=min_graph_macs)
