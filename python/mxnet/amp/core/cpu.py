"""Which class of x86 CPU this is, for low precision: the flags that matter, read from ``/proc/cpuinfo``.

The classes, as plain data (:data:`CLASSES`), from the weakest up:

========  =============================  =======================================================================
class     flags                          bfloat16 there
========  =============================  =======================================================================
``a``     no AVX-512 (F, BW, VL, DQ)     emulated: float32 kernels on bf16-rounded values
``b``     AVX-512, no ``avx512_bf16``    oneDNN runs bf16 by converting to float32 in registers (Skylake-SP,
                                         Cascade Lake, Ice Lake)
``c``     ``avx512_bf16``, no AMX        bf16 dot products in hardware (Cooper Lake, Zen 4/5)
``d``     ``amx_bf16``                   AMX tiles: where the library's oneDNN 3 kernels are fastest (Sapphire
                                         Rapids and later)
========  =============================  =======================================================================

The class :func:`cpu_class` reports is the CPU's, lowered by two things that change what actually runs:

* oneDNN's ISA caps, ``DNNL_MAX_CPU_ISA`` (MXNet's oneDNN 2.4; the library's oneDNN 3 reads it too) and
  ``ONEDNN_MAX_CPU_ISA`` (oneDNN 3): a CPU capped to ``AVX512_CORE_VNNI`` runs as class (b) (:data:`ISA_CAPS`);
* ``MXNET_AMP_CPU_CLASS``: the class the policy plans for, at most the CPU's. With the caps of
  :func:`stand_in_env` it makes a CPU stand in for a lower class, in benchmarks and tests: ISA caps can lower
  what oneDNN runs, never raise it (a cap above the CPU's ISA crashes MXNet's wheel), so asking for a class
  above the CPU's is an error.

``MXNET_AMP_CPUINFO`` names a file read instead of ``/proc/cpuinfo``: mocked flags for tests of the policy
itself. It changes what the policy believes, not what the CPU runs.
"""
from collections import namedtuple
import functools
import os

__all__ = ["CLASSES", "AVX512_CORE", "CPUINFO_ENV", "CLASS_ENV", "ISA_CAP_ENVS", "ISA_CAPS", "STAND_IN_ISA",
           "read_flags", "flags", "classify", "hardware_class", "cpu_class", "by_name", "stand_in_env", "stand_in",
           "model_name"]

#: The AVX-512 subsets oneDNN's ``avx512_core`` needs: MXNet's oneDNN runs bfloat16 only with all four.
AVX512_CORE = frozenset(("avx512f", "avx512bw", "avx512vl", "avx512dq"))

#: Environment variable naming a cpuinfo file to read instead of ``/proc/cpuinfo``.
CPUINFO_ENV = "MXNET_AMP_CPUINFO"

#: Environment variable naming the class the policy plans for: at most the CPU's own (a stand-in lowers it).
CLASS_ENV = "MXNET_AMP_CPU_CLASS"

#: oneDNN's ISA caps: MXNet's oneDNN 2.4 reads the first (the library's oneDNN 3 too), oneDNN 3 the second.
ISA_CAP_ENVS = ("DNNL_MAX_CPU_ISA", "ONEDNN_MAX_CPU_ISA")

#: The highest class a CPU runs as under each ISA cap (oneDNN 2.4 and 3.2 names; unknown values cap nothing,
#: as oneDNN ignores them too).
ISA_CAPS = {
    "SSE41": "a", "AVX": "a", "AVX2": "a", "AVX2_VNNI": "a", "AVX2_VNNI_2": "a", "AVX512_MIC": "a",
    "AVX512_MIC_4OPS": "a",
    "AVX512_CORE": "b", "AVX512_CORE_VNNI": "b",
    "AVX512_CORE_BF16": "c", "AVX512_CORE_FP16": "c",
    "AVX512_CORE_AMX": "d", "AVX512_CORE_AMX_FP16": "d", "ALL": "d", "DEFAULT": "d",
}

#: The ISA cap that makes a CPU of a higher class run as each class (both oneDNNs): the stand-ins.
STAND_IN_ISA = {"a": "AVX2", "b": "AVX512_CORE_VNNI", "c": "AVX512_CORE_BF16"}

CpuClass = namedtuple("CpuClass", "name title requires bf16")
CpuClass.__doc__ = """One CPU class: its letter, a title, the flags it needs (beyond the class below) and what
bfloat16 does there."""

#: The classes from the weakest up; a CPU belongs to the last one whose ``requires`` it has.
CLASSES = (
    CpuClass("a", "no AVX-512", frozenset(), "emulated (float32 kernels on bf16-rounded values)"),
    CpuClass("b", "AVX-512 without bf16 arithmetic", AVX512_CORE,
             "converted to float32 in registers by oneDNN (no faster than float32)"),
    CpuClass("c", "AVX512-BF16", AVX512_CORE | {"avx512_bf16"}, "bf16 dot products in hardware"),
    CpuClass("d", "AMX-BF16", AVX512_CORE | {"avx512_bf16", "amx_bf16"}, "AMX tiles"),
)


def _cpuinfo_path():
    return os.environ.get(CPUINFO_ENV) or "/proc/cpuinfo"


@functools.lru_cache(maxsize=None)
def _read(path):
    """``(flags, model name)`` of the first processor in a cpuinfo file; empty when it cannot be read."""
    found, model = None, ""
    try:
        with open(path) as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "flags" and found is None:
                    found = frozenset(value.split())
                elif key == "model name" and not model:
                    model = value.strip()
                if found is not None and model:
                    break
    except OSError:
        pass
    return found or frozenset(), model


def read_flags(path):
    """The CPU flags of the first processor listed in the cpuinfo file ``path`` (empty if unreadable)."""
    return _read(path)[0]


def flags():
    """This machine's CPU flags (from ``MXNET_AMP_CPUINFO`` when set, else ``/proc/cpuinfo``)."""
    return read_flags(_cpuinfo_path())


def model_name():
    """This machine's CPU model name, or ``"unknown CPU"``."""
    return _read(_cpuinfo_path())[1] or "unknown CPU"


def classify(cpu_flags):
    """The :class:`CpuClass` of a CPU with the given flags (an iterable of flag names)."""
    cpu_flags = frozenset(cpu_flags)
    return [c for c in CLASSES if c.requires <= cpu_flags][-1]


def by_name(name, source="class"):
    """The :class:`CpuClass` named ``name`` ("a" to "d"); ``source`` names where the name came from in the
    error.

    Raises
    ------
    ValueError
        For any other name.
    """
    for klass in CLASSES:
        if klass.name == name:
            return klass
    raise ValueError("%s=%r is not a CPU class: expected one of %s"
                     % (source, name, ", ".join(repr(c.name) for c in CLASSES)))


def hardware_class():
    """The :class:`CpuClass` of this machine's CPU flags, before any ISA cap or stand-in."""
    return classify(flags())


def _rank(klass):
    return CLASSES.index(klass)


def cpu_class():
    """This machine's :class:`CpuClass` as MXNet and the library run it: the CPU's, lowered by oneDNN's ISA
    caps and by ``MXNET_AMP_CPU_CLASS`` (see the module's text).

    Raises
    ------
    ValueError
        When ``MXNET_AMP_CPU_CLASS`` is not a class, or names one above the CPU's.
    """
    real = hardware_class()
    klass = real
    for env in ISA_CAP_ENVS:
        capped = ISA_CAPS.get(os.environ.get(env, "").strip().upper())
        if capped and _rank(by_name(capped)) < _rank(klass):
            klass = by_name(capped)
    wanted = os.environ.get(CLASS_ENV, "").strip()
    if wanted:
        asked = by_name(wanted, CLASS_ENV)
        if _rank(asked) > _rank(real):
            raise ValueError("%s=%r: this CPU is class (%s) %s, and a stand-in can only lower the class (oneDNN "
                             "cannot run an ISA the CPU lacks); expected one of %s"
                             % (CLASS_ENV, wanted, real.name, real.title,
                                ", ".join(repr(c.name) for c in CLASSES[:_rank(real) + 1])))
        klass = min(klass, asked, key=_rank)
    return klass


def stand_in_env(class_name):
    """The environment variables under which a new process on this machine runs as CPU class ``class_name``:
    oneDNN's ISA caps (:data:`STAND_IN_ISA`) and ``MXNET_AMP_CPU_CLASS``; empty for the CPU's own class.

    Raises
    ------
    ValueError
        For an unknown class, or one above this CPU's (caps cannot raise an ISA).

    Example
    -------
    >>> env = dict(os.environ, **stand_in_env("b"))   # an AVX-512 CPU without bf16 arithmetic
    """
    klass, real = by_name(class_name, "stand-in class"), hardware_class()
    if _rank(klass) > _rank(real):
        raise ValueError("cannot stand in for class (%s) on this class (%s) CPU: ISA caps only lower what oneDNN "
                         "runs; expected one of %s" % (klass.name, real.name,
                                                       ", ".join(repr(c.name) for c in CLASSES[:_rank(real) + 1])))
    if klass == real:
        return {}
    isa = STAND_IN_ISA[klass.name]
    return {CLASS_ENV: klass.name, ISA_CAP_ENVS[0]: isa, ISA_CAP_ENVS[1]: isa}


def stand_in():
    """A phrase naming the caps that lower this process's class below the CPU's, or None when it runs as the
    CPU's own class."""
    real, klass = hardware_class(), cpu_class()
    if klass == real:
        return None
    set_ = ["%s=%s" % (k, os.environ[k]) for k in ISA_CAP_ENVS + (CLASS_ENV,) if os.environ.get(k)]
    return "class (%s) stand-in on a class (%s) CPU (%s)" % (klass.name, real.name, ", ".join(set_))
