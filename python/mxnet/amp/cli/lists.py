"""``python -m mxnet.amp lists``: the operator categories as a table, or one operator's category and why."""
import textwrap

from .. import lists
from ..core import library
from ..core.policy import make_policy
from ..core.support import plans_native

__all__ = ["add_arguments", "run"]

_TITLES = {"lp16": "low precision", "fp32": "float32", "neutral": "dtype-neutral", "widest": "widest type",
           "conditional_fp32": "conditional float32", "loss_output": "loss output"}


def add_arguments(parser):
    """Options of ``python -m mxnet.amp lists``."""
    parser.add_argument("--dtype", choices=lists.DTYPES, help="one target dtype (default: both)")
    parser.add_argument("--op", metavar="NAME", help="show one operator's category per dtype and the reason")


def format_table(dtype, width=100):
    """Return the categories of ``dtype`` as text: a count line per category followed by its ops."""
    lines = ["%s: %d operators" % (dtype, sum(len(_names(dtype, c)) for c in lists.CATEGORIES))]
    for cat in lists.CATEGORIES:
        names = _names(dtype, cat)
        lines.append("  %-20s %4d" % (_TITLES[cat], len(names)))
        lines.extend(textwrap.wrap(", ".join(names), width, initial_indent=" " * 4, subsequent_indent=" " * 4))
    return "\n".join(lines)


def _names(dtype, cat):
    if cat == "conditional_fp32":
        return sorted({op for op, _, _ in lists.list_conditional_fp32_ops(dtype)})
    return sorted(lists.registered_forward_ops() & set(getattr(lists, _QUERY[cat])(dtype)))


_QUERY = {"lp16": "list_lp16_ops", "fp32": "list_fp32_ops", "neutral": "list_lp16_fp32_ops",
          "widest": "list_widest_type_cast", "loss_output": "list_loss_output_functions"}


def format_op(op, dtypes=lists.DTYPES):
    """Return one operator's category per dtype with the reason (ValueError for an unknown name)."""
    lines = [op]
    for dtype in dtypes:
        cat = lists.category(op, dtype)
        line = "  %-9s %s" % (dtype, _TITLES[cat])
        if cat == "conditional_fp32":
            rules = lists.conditional_fp32(dtype)[op]
            line += " (float32 when %s; otherwise dtype-neutral)" % " or ".join(
                "%s in {%s}" % (attr, ", ".join(sorted(values))) for attr, values in rules)
        if cat == "lp16":
            line += " (%s)" % _how_it_runs_here(op, dtype)
        lines.append(line)
        for dev, kernels in ((d, lists.library_kernels(dtype, d)) for d in ("cpu", "gpu")):
            if op in kernels:
                lines.append(" " * 12 + "library kernel on %s: %s (%s)" % (dev.upper(), kernels[op],
                                                                           _library_here(op, dtype, dev)))
        lines.extend(textwrap.wrap(lists.reason(op, dtype), 96, initial_indent=" " * 12,
                                   subsequent_indent=" " * 12))
    return "\n".join(lines)


_MODE_TEXT = {"native": "native %s kernel", "emulated": "emulated: float32 kernel on values rounded to %s",
              "float32": "plain float32: the device runs %s natively but has no kernel for this op"}


def _how_it_runs_here(op, dtype):
    """How ``op`` runs on this machine's devices under default settings (see Policy.lp16_mode)."""
    import mxnet as mx
    policy = make_policy(dtype)
    devices = ["cpu"] + (["gpu"] if mx.context.num_gpus() > 0 else [])
    return "; ".join("here on %s: %s" % (dev.upper(), _MODE_TEXT[policy.lp16_mode(op, dev)] % dtype)
                     for dev in devices)


def _library_here(op, dtype, device_type):
    """Whether ``op`` runs on this project's library kernel here under default settings, and why not."""
    policy = make_policy(dtype)
    if policy.library_kernel(op, device_type):
        return "used here: %s; kernels='mxnet' keeps MXNet's" % library.onednn()[1]
    if not plans_native(dtype, device_type):
        return ("used here in float32 (%s is emulated on this device): %s" % (dtype, library.onednn()[1])
                if policy.emulation_kernel(op, device_type) else
                "not used here: this device emulates %s" % dtype)
    return "not used here: %s" % library.onednn()[1]


def run(args):
    """Print the table or the operator; return the exit status."""
    dtypes = (args.dtype,) if args.dtype else lists.DTYPES
    if args.op:
        print(format_op(args.op, dtypes))
    else:
        print("\n\n".join(format_table(d) for d in dtypes))
    return 0
