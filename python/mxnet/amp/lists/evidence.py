"""The evidence behind the lists: the bfloat16 value probe per AVX-512 CPU and on a CPU without AVX-512, and the
per-op timings behind each CPU class's plan (JSON files beside this module, written by ``tools/probe_bf16.py`` and
``bench/bench_plan.py``).
"""
import functools
import importlib
import json
import os
from typing import Any, FrozenSet, Mapping, Optional, Tuple

from .groups import GPU_BUILD_ONLY
from .tables import dtype_table, native_lp16_ops, normalize_dtype

__all__ = ["natively_fed_ops", "BAD_VERDICTS", "native_evidence", "storage_evidence", "storage_ops", "storage_kernel",
           "cpu_op_evidence", "cpu_class_plan"]

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
