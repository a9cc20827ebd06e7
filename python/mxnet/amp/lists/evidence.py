"""The evidence behind the lists: the bfloat16 value probe per AVX-512 CPU and on a CPU without AVX-512, the
per-op timings behind each CPU class's plan, and the speed of MXNet's bfloat16 kernels against float32 islands (JSON
files beside this module, written by ``tools/probe_bf16.py``, ``bench/bench_plan.py`` and
``bench/bench_op_speed.py``).
"""
import functools
import importlib
import json
import os
from typing import Any, FrozenSet, Mapping, Optional, Tuple

from ..base.op_names import ALL_OPS
from .groups import GPU_BUILD_ONLY
from .tables import dtype_table, native_lp16_ops, normalize_dtype

__all__ = ["natively_fed_ops", "BAD_VERDICTS", "native_evidence", "storage_evidence", "storage_ops", "storage_kernel",
           "cpu_op_evidence", "cpu_class_plan", "SPEED_MARGIN", "SPEED_VERDICTS", "op_speed_evidence",
           "speed_timed_ops", "op_speed_table", "float32_island_ops"]

_HERE = os.path.dirname(os.path.abspath(__file__))


def natively_fed_ops(dtype: Any, device_type: str) -> FrozenSet[str]:
    """Return the ops that receive ``dtype`` tensors when a graph runs natively on ``device_type``.

    Those are the dtype-neutral, widest-type and conditional ops (low precision values flow through them)
    and the low precision ops with a native kernel there (:func:`native_lp16_ops`). Their kernels must be
    right for ``dtype``: ``lists/native_bf16_cpu.json`` holds the value probe's verdict for each of them on
    an AVX-512 CPU (``tools/probe_bf16.py --values``), and a unit test keeps the two consistent.

    Ops of CUDA builds only (``groups.GPU_BUILD_ONLY``: GPU fusion and the like) never run on a CPU.

    Returns
    -------
    frozenset of str
    """
    table = dtype_table(dtype)
    flowing = [op for cat in ("neutral", "widest", "conditional_fp32") for op in table.by_category[cat]]
    fed = frozenset(flowing) | native_lp16_ops(dtype, device_type)
    return fed - frozenset(GPU_BUILD_ONLY) if device_type == "cpu" else fed


#: Value-probe verdicts that bar an op from receiving bfloat16 natively.
BAD_VERDICTS = ("mismatch", "error", "crash", "hang")


@functools.lru_cache(maxsize=None)
def native_evidence() -> dict:
    """Return the recorded bfloat16 value probe of AVX-512 CPUs (``native_bf16_cpu.json``).

    Returns
    -------
    dict
        ``{"verdicts": {verdict: meaning}, "runs": [{"meta": {cpu, mxnet, date, tolerance, command},
        "ops": {op: {"verdict", "cases", "rel" or "why"}}}, ...]}``, one run per CPU it was recorded on
        (``tools/probe_bf16.py --values --out ...`` adds or replaces this machine's run).
    """
    with open(os.path.join(_HERE, "native_bf16_cpu.json")) as f:
        return json.load(f)


@functools.lru_cache(maxsize=None)
def storage_evidence() -> dict:
    """Return the recorded bfloat16 value probe of a CPU without AVX-512 (``storage_bf16_cpu.json``).

    Returns
    -------
    dict
        As :func:`native_evidence`, one run: the ops of :func:`natively_fed_ops` on bfloat16 inputs with oneDNN on,
        where MXNet's oneDNN 2.4 creates no bfloat16 primitive (``tools/probe_bf16.py --storage --out ...``, on
        CPU class (a) or under ``DNNL_MAX_CPU_ISA=AVX2``).
    """
    with open(os.path.join(_HERE, "storage_bf16_cpu.json")) as f:
        return json.load(f)


@functools.lru_cache(maxsize=None)
def storage_ops(dtype: Any, device_type: str) -> FrozenSet[str]:
    """Return the MXNet ops that training graphs storing ``dtype`` on float32 arithmetic run on ``dtype`` data on
    ``device_type`` (:func:`mxnet.amp.lists.cpu_class_plan` for training: ``"storage"``): the ops that move values without
    arithmetic (the dtype module's ``STORAGE_MOVES``) whose kernels moved bfloat16 right without AVX-512 (verdict
    ``ok`` in :func:`storage_evidence`). The other dtype-neutral and widest-type ops of such graphs run in float32
    between casts.

    Returns
    -------
    frozenset of str
        Empty for float16 and for GPUs (no storage plan there).
    """
    moves = dtype_table(dtype).storage_moves
    if device_type not in moves:
        raise ValueError("Unknown device_type %r: expected one of %s" % (device_type, ", ".join(map(repr, moves))))
    return frozenset(op for run in storage_evidence()["runs"] for op, row in run["ops"].items()
                     if row["verdict"] == "ok" and op in moves[device_type])


def storage_kernel(dtype: Any, device_type: str, op: str, attrs: Mapping[str, str]) -> Optional[str]:
    """Return the library op that runs dtype-neutral ``op`` with attributes ``attrs`` on ``dtype`` data in training
    graphs storing ``dtype`` on float32 arithmetic on ``device_type`` (``Pooling`` -> ``amp_pooling`` for 2-D max
    pooling), or None where it has none or does not take those attributes.

    Raises
    ------
    ValueError
        For an unknown dtype or device type.
    """
    module = importlib.import_module("." + normalize_dtype(dtype), __package__)  # the dtype's data module
    if device_type not in module.STORAGE_KERNELS:
        raise ValueError("Unknown device_type %r: expected one of %s"
                         % (device_type, ", ".join(map(repr, sorted(module.STORAGE_KERNELS)))))
    kernel = module.STORAGE_KERNELS[device_type].get(op)
    if kernel is None:
        return None
    for key, takes in module.STORAGE_KERNEL_TAKES[kernel].items():
        if isinstance(takes, int):
            value = attrs.get(key, "()").strip("()[] ")
            if len([v for v in value.split(",") if v.strip()]) != takes:
                return None
        elif attrs.get(key, takes[0]) not in takes:
            return None
    return kernel


@functools.lru_cache(maxsize=None)
def cpu_op_evidence() -> dict:
    """Return the per-op timings behind the CPU classes' bfloat16 plans (``cpu_op_evidence.json``).

    Returns
    -------
    dict
        ``{"version": 1, "about": ..., "classes": {name: None or {"date", "cpu", "command", "ops": [{"label",
        "op", "native_ms", "emulated_ms"}]}}}``: per CPU class, one-op graphs timed with ``emulate=False`` and
        ``emulate=True`` (class (a) has no native kernels, hence no ``native_ms``); None where that class was
        not measured (``bench/bench_plan.py --record`` replaces the classes it ran).
    """
    with open(os.path.join(_HERE, "cpu_op_evidence.json")) as f:
        return json.load(f)


def cpu_class_plan(dtype: Any, class_name: str, training: bool = False) -> Tuple[str, str]:
    """Return ``(mode, why)``: how the default plan runs ``dtype``'s low precision ops on CPU class
    ``class_name`` (:mod:`mxnet.amp.cpu`): ``"native"`` (low precision kernels) or ``"emulated"`` (float32
    kernels on rounded values), and the measurements that chose it. ``training``: in training graphs, where the
    lists give those a plan of their own: ``"storage"`` (low precision tensors on float32 arithmetic).

    Raises
    ------
    ValueError
        For an unknown dtype or CPU class.
    """
    plans = dtype_table(dtype).cpu_class_plans
    if class_name not in plans:
        raise ValueError("Unknown CPU class %r: expected one of %s" % (class_name, ", ".join(map(repr, plans))))
    training_plans = dtype_table(dtype).cpu_class_training_plans if training else {}
    return training_plans.get(class_name, plans[class_name])


#: How much slower than a float32 island an op's bfloat16 kernel must be to get one: an island adds two casts to the
#: graph, and ops within 10% of it (Concat, copies) flip between runs of the bench on a quiet machine.
SPEED_MARGIN = 1.1

#: Verdicts of the op-speed table, per op: what the plan runs it in where bfloat16 reaches it natively.
SPEED_VERDICTS = {"bfloat16": "its bfloat16 kernel was at most SPEED_MARGIN times as slow as its float32 kernel "
                              "between two casts",
                  "float32": "its bfloat16 kernel was over SPEED_MARGIN times as slow as its float32 kernel between "
                             "two casts: a float32 island",
                  "untimed": "no call could be timed (its float32 or bfloat16 call failed at the bench's shapes): a "
                             "float32 island, since nothing shows bfloat16 is not slower"}


@functools.lru_cache(maxsize=None)
def op_speed_evidence() -> dict:
    """Return the recorded speed of MXNet's bfloat16 kernels per CPU class (``op_speed_bf16_cpu.json``).

    Returns
    -------
    dict
        ``{"version": 1, "about": ..., "classes": {name: None or {"date", "cpu",
        "commit", "command", "shape", "ops": {op: {"aliases", "float32_ms", "bfloat16_ms", "island_ms", "verdict"}
        or {"aliases", "verdict": "untimed", "why"}}}}}``: per CPU class of :mod:`mxnet.amp.core.cpu`, each op of
        :func:`speed_timed_ops` (one row per alias group, named by its first name) timed in float32, in bfloat16 and
        in float32 between casts from and to bfloat16 (``bench/bench_op_speed.py --record``).
    """
    with open(os.path.join(_HERE, "op_speed_bf16_cpu.json")) as f:
        return json.load(f)


@functools.lru_cache(maxsize=None)
def speed_timed_ops(dtype: Any, device_type: str) -> FrozenSet[str]:
    """Return the ops whose speed on ``dtype`` data the op-speed table must show: those that receive ``dtype`` when
    a graph runs natively (:func:`natively_fed_ops`) less the low precision ops with native kernels (the library's
    kernels replace them; ``cpu_op_evidence.json`` times those), the library's own ops and the dtype module's
    ``SPEED_UNTIMED``. Empty for
    float16 and for GPUs (no table there)."""
    if normalize_dtype(dtype) != "bfloat16" or device_type != "cpu":
        return frozenset()
    table = dtype_table(dtype)
    fed = natively_fed_ops(dtype, device_type) - native_lp16_ops(dtype, device_type) - table.speed_untimed
    return fed - frozenset(ALL_OPS)  # the library's kernels: its own benches time them


def op_speed_table(class_name: str) -> Tuple[Optional[str], Mapping[str, dict]]:
    """Return ``(measured class, {op: row})``: the op-speed rows that hold on CPU class ``class_name``, every alias
    of a row's op included; the class's own, else those of the nearest class below it that was measured, else
    those of the nearest above (MXNet's generic kernels are the same code on classes (c) and (d)); ``(None, {})``
    where no class was measured.

    Raises
    ------
    ValueError
        For an unknown CPU class.
    """
    classes = op_speed_evidence()["classes"]
    if class_name not in classes:
        raise ValueError("Unknown CPU class %r: expected one of %s" % (class_name, ", ".join(map(repr, classes))))
    order = sorted(classes)
    here = order.index(class_name)
    for name in order[here::-1] + order[here + 1:]:
        if classes[name]:
            rows = {}
            for op, row in classes[name]["ops"].items():
                rows.update(dict.fromkeys([op] + row.get("aliases", []), row))
            return name, rows
    return None, {}


@functools.lru_cache(maxsize=None)
def float32_island_ops(dtype: Any, class_name: str) -> FrozenSet[str]:
    """Return the ops that run in float32 between casts where ``dtype`` reaches them natively on CPU class
    ``class_name``: those of :func:`speed_timed_ops` whose row in :func:`op_speed_table` says ``float32`` or
    ``untimed``, or that have none (nothing shows their bfloat16 kernel is not slower).

    Raises
    ------
    ValueError
        For an unknown dtype or CPU class.
    """
    timed = speed_timed_ops(dtype, "cpu")
    _, rows = op_speed_table(class_name)
    return frozenset(op for op in timed if rows.get(op, {}).get("verdict") != "bfloat16")
