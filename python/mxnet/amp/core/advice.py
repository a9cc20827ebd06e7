"""What low precision buys on this machine: ``target_dtype="auto"``, and a warning where bfloat16 is slow.

bfloat16 arithmetic exists only on classes (c) AVX512-BF16 and (d) AMX of :mod:`mxnet.amp.core.cpu`. On class (a)
MXNet has no bf16 kernels, and on class (b) oneDNN's bf16 kernels convert to float32 in registers, slower than
float32 in every framework: there the default plan emulates (float32 kernels on bf16-rounded values,
``mxnet.amp.lists.cpu_class_plan``). What each plan costs or gains per class is measured data
(``cpu_ratios.json`` beside this file, written by ``bench/bench_inference.py --record``), never a claim in
code.

``"auto"`` resolves to float16 where MXNet sees CUDA GPUs, to bfloat16 on CPU classes (c) and (d), and
elsewhere to no low precision at all (``None``): ``amp.init`` then leaves the model in float32 and the AMP
calls (``init_trainer``, ``scale_loss``, checkpoints) keep working, so one script runs on every machine.

Targeting bfloat16 explicitly on class (a) or (b) warns once per process with a :class:`SlowBfloat16Warning`
naming the class, the measured ratio and the choices; silence it with
``warnings.filterwarnings("ignore", category=amp.SlowBfloat16Warning)``.
"""
import functools
import json
import logging
import os
import warnings

from .. import lists
from . import cpu

__all__ = ["RATIOS_FILE", "FAST_BF16_CLASSES", "SlowBfloat16Warning", "default_plan", "ratios", "ratio_summary",
           "resolve", "warn_if_slow", "log_choice", "gpu_count"]

#: The target dtype that asks this module to choose.
AUTO = "auto"
#: Measured bfloat16/float32 speed ratios per CPU class.
RATIOS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cpu_ratios.json")
#: CPU classes where bfloat16 has hardware arithmetic.
FAST_BF16_CLASSES = ("c", "d")

_LOG = logging.getLogger("mxnet.amp")
_WARNED = set()  # what warn_if_slow has warned about in this process


class SlowBfloat16Warning(UserWarning):
    """bfloat16 was targeted on a CPU class without bf16 arithmetic ((a) or (b)): no speed from bfloat16 there."""


@functools.lru_cache(maxsize=None)
def _load(path):
    with open(path) as f:
        data = json.load(f)
    if data.get("version") != 1 or set(data.get("classes", {})) != {c.name for c in cpu.CLASSES}:
        raise ValueError("%s: expected version 1 and one entry per CPU class %s"
                         % (path, [c.name for c in cpu.CLASSES]))
    return data


def default_plan(class_name):
    """The default bfloat16 plan of a CPU class: ``"native"`` or ``"emulated"``."""
    return lists.cpu_class_plan("bfloat16", class_name)[0]


def ratios(class_name, plan=None):
    """The measured rows of one CPU class and plan (``"native"``, ``"emulated"``; None: the class's default
    plan), as stored."""
    plan = plan or default_plan(class_name)
    return [row for row in _load(RATIOS_FILE)["classes"][class_name] if row["variant"] == plan]


def ratio_summary(class_name, plan=None):
    """One phrase: the range of measured ratios of a class and plan (None: its default), with the workloads,
    dates and CPUs, or None when nothing was measured."""
    rows = ratios(class_name, plan)
    if not rows:
        return None
    low, high = min(r["ratio"][0] for r in rows), max(r["ratio"][1] for r in rows)
    each = "; ".join("%s %s" % (r["workload"], _span(r["ratio"])) for r in rows)
    where = "; ".join(sorted({"%s on %s" % (r["date"], r["cpu"]) for r in rows}))
    return "%s float32 (%s; measured %s)" % (_span([low, high]), each, where)


def _span(pair):
    return "%.2f×" % pair[0] if pair[0] == pair[1] else "%.2f–%.2f×" % tuple(pair)


def gpu_count() -> int:
    """How many CUDA GPUs MXNet sees."""
    import mxnet as mx
    return mx.context.num_gpus()


def resolve(target_dtype, device_type=None):
    """The dtype a target means here: ``"auto"`` chosen for this machine, anything else as given.

    Parameters
    ----------
    target_dtype : str or dtype
        ``"auto"``, or a dtype :func:`mxnet.amp.lists.normalize_dtype` accepts (returned unchanged).
    device_type : {'cpu', 'gpu', None}
        Where the model runs, when known (a conversion's context); None: GPUs when MXNet sees any.

    Returns
    -------
    (str or None, str)
        ``("float16" | "bfloat16" | None, why)``: None means no low precision.
    """
    if not (isinstance(target_dtype, str) and target_dtype == AUTO):
        return target_dtype, "given"
    if device_type == "gpu" or (device_type is None and gpu_count() > 0):
        return "float16", "target_dtype='auto': float16 on CUDA GPUs"
    klass = cpu.cpu_class()
    if klass.name in FAST_BF16_CLASSES:
        return "bfloat16", "target_dtype='auto': bfloat16 on CPU class (%s) %s" % (klass.name, klass.title)
    measured = ratio_summary(klass.name)
    return None, ("target_dtype='auto': no low precision on CPU class (%s) %s, where bfloat16 is %s%s; the "
                  "model runs in float32 and the AMP calls keep working"
                  % (klass.name, klass.title, klass.bf16, ": %s" % measured if measured else ""))


def warn_if_slow(target_dtype, device_type="cpu", stacklevel=3):
    """Warn once per process when bfloat16 is targeted on a CPU of class (a) or (b).

    Returns
    -------
    bool
        Whether a warning was issued by this call.
    """
    if target_dtype != "bfloat16" or device_type != "cpu" or "MXNET_AMP_EMULATE" in os.environ:
        return False  # MXNET_AMP_EMULATE overrides the detection: the user decided already
    klass = cpu.cpu_class()
    if klass.name in FAST_BF16_CLASSES or klass.name in _WARNED:
        return False
    _WARNED.add(klass.name)
    plan = default_plan(klass.name)
    measured = ratio_summary(klass.name)
    choices = ["target_dtype='auto' (float32 here, bfloat16 where the CPU has bf16 arithmetic, float16 on GPUs)"]
    if klass.name != "a":  # class (a) has no bf16 kernels to choose
        other = "emulated" if plan == "native" else "native"
        other_measured = ratio_summary(klass.name, other)
        choices.append("emulate=%s (%s%s)" % (
            other == "emulated", "float32 kernels on bf16-rounded values" if other == "emulated" else
            "oneDNN's bfloat16 kernels", ": measured " + other_measured if other_measured else ""))
    choices.append("keep bfloat16 for its numerics and silence this with "
                   "warnings.filterwarnings('ignore', category=mxnet.amp.SlowBfloat16Warning)")
    training, training_why = lists.cpu_class_plan("bfloat16", klass.name, training=True)
    warnings.warn(
        "mxnet.amp: this CPU is class (%s) %s: bfloat16 is %s here; AMP's default plan %s: %s%s. Choices: %s"
        % (klass.name, klass.title, klass.bf16, "runs its bf16 kernels" if plan == "native" else
           "emulates it (float32 kernels on bf16-rounded values, bf16 numerics)",
           "measured " + measured if measured else
           "not yet measured on this class (bench/bench_inference.py --record)",
           "; hybridized training graphs: %s (%s)" % (training, training_why) if training != plan else "",
           "; ".join(choices)),
        SlowBfloat16Warning, stacklevel=stacklevel)
    return True


def log_choice(why):
    """Log the one info line that says what ``"auto"`` chose and why."""
    _LOG.info("mxnet.amp: %s", why)
