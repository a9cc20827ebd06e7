"""``python -m mxnet.amp hardware``: which low precision dtypes run natively on this machine, and how each op runs.

For every target dtype and device (the CPU, and the GPUs of a GPU build of MXNet) the report says whether the
device has kernels for the dtype (native) or AMP emulates it, and lists the low precision ops that run in
float32 instead (native device, no kernel for the op) and the ops kept away from the dtype because their
kernel failed the native value probe (``lists/native_bf16_cpu.json``). ``--probe`` runs that value probe on this
machine (a minute or two; AVX-512 CPUs only) and gives a verdict: whether the recorded evidence holds here.
"""
import textwrap

from .. import lists
from ..core import advice, cpu, library
from ..core.policy import EMULATED, FLOAT32, NATIVE, make_policy
from ..core.support import native_support, plans_native

__all__ = ["add_arguments", "run", "probe_verdict"]

_CPU_FLAGS = ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16", "amx_bf16", "avx512_fp16", "amx_fp16")


def add_arguments(parser):
    """Options of ``python -m mxnet.amp hardware``."""
    parser.add_argument("--dtype", choices=lists.DTYPES, help="one target dtype (default: both)")
    parser.add_argument("--probe", action="store_true",
                        help="also run the bfloat16 value probe of every natively fed op here (AVX-512 CPUs)")


def _devices():
    import mxnet as mx
    return ["cpu"] + (["gpu"] if mx.context.num_gpus() > 0 else [])


def _cpu_line():
    flags, klass, stand_in = cpu.flags(), cpu.cpu_class(), cpu.stand_in()
    return "CPU: %s, class (%s) %s%s; %s" % (
        cpu.model_name(), klass.name, klass.title, " (%s)" % stand_in if stand_in else "",
        ", ".join("%s %s" % (f, "yes" if f in flags else "no") for f in _CPU_FLAGS))


def _class_lines():
    """What bfloat16 costs or gains on this CPU class (measured figures), and its float16 hardware."""
    klass = cpu.cpu_class()
    plan, why = lists.cpu_class_plan("bfloat16", klass.name)
    lines = ["bfloat16 on this CPU class: %s; the default plan: %s (%s); measured: %s" % (
        klass.bf16, plan, why, advice.ratio_summary(klass.name) or
        "not yet on this class (bench/bench_inference.py --record)")]
    if klass.name != "a":
        other = "emulated" if plan == "native" else "native"
        measured = advice.ratio_summary(klass.name, other)
        if measured:
            lines.append("    with emulate=%s (%s): %s" % (other == "emulated", other, measured))
    fp16 = [f for f in ("avx512_fp16", "amx_fp16") if f in cpu.flags()]
    lines.append("float16 hardware on this CPU: %s (MXNet 1.9.1 has no CPU float16 kernels: float16 is emulated)"
                 % (", ".join(fp16) or "none"))
    return lines


def _wrap(title, names):
    text = "%s (%d): %s" % (title, len(names), ", ".join(sorted(names)) or "none")
    return textwrap.wrap(text, 100, initial_indent="    ", subsequent_indent="      ")


def _onednn_info():
    return library.onednn()[1]


def format_report(dtypes=lists.DTYPES):
    """Return the report as text (no probe run)."""
    import mxnet as mx
    features = mx.runtime.Features()
    lines = [_cpu_line(), "MXNet %s (%s build), oneDNN %s, GPUs: %d; library CUDA kernels: %s" % (
        mx.__version__, "CUDA" if features.is_enabled("CUDA") else "CPU", "on" if features.is_enabled("MKLDNN")
        else "off", mx.context.num_gpus(), "built" if library.cuda_kernels() else "not built")] + _class_lines()
    cache = library.onednn_cache()
    if cache is not None:
        lines.append("oneDNN 3 primitive cache: %(entries)d entries (at most %(capacity)d per kind: "
                     "MXNET_AMP_ONEDNN_CACHE_SIZE; oneDNN's own cache at most %(onednn_capacity)d), %(hits)d "
                     "hits, %(misses)d misses, %(evictions)d evicted; scratch buffers %(buffer_bytes)d bytes" % cache)
    for dtype in dtypes:
        policy = make_policy(dtype)
        lp16 = [op for op in lists.list_lp16_ops(dtype) if op in lists.registered_forward_ops()]
        for device in _devices():
            native, planned = native_support(dtype, device), plans_native(dtype, device)
            lines.append("%s on %s: %s" % (dtype, device.upper(), "native kernels" if planned else (
                "emulated by default: MXNet's kernels exist but have no bf16 arithmetic here, and float32 kernels "
                "on rounded values ran faster (emulate=False runs them)" if native else
                "emulated (float32 kernels on values rounded to %s)" % dtype)))
            modes = {mode: [op for op in lp16 if policy.lp16_mode(op, device) == mode]
                     for mode in (NATIVE, FLOAT32, EMULATED)}
            if planned:
                lines += _wrap("low precision ops with a native kernel", modes[NATIVE])
                routed = ["%s -> %s" % (op, policy.library_kernel(op, device)) for op in modes[NATIVE]
                          if policy.library_kernel(op, device)]
                if routed:
                    lines += _wrap("of which on this project's oneDNN 3 kernels (%s)" % _onednn_info(), routed)
                lines += _wrap("low precision ops in float32 here (no %s kernel)" % dtype, modes[FLOAT32])
                islands = policy.float32_islands(device)
                if islands:
                    measured = lists.op_speed_table(cpu.cpu_class().name)[0]
                    lines += _wrap("dtype-neutral ops in float32 between casts (their %s kernels measured slower; "
                                   "op-speed table of class (%s))" % (dtype, measured), islands)
            else:
                lines.append("    every low precision op is emulated (%d)" % len(modes[EMULATED]))
                routed = ["%s -> %s" % (op, policy.emulation_kernel(op, device)) for op in modes[EMULATED]
                          if policy.emulation_kernel(op, device)]
                if routed:
                    lines += _wrap("of which on this project's oneDNN 3 float32 kernels (%s)" % _onednn_info(),
                                   routed)
        if dtype == "bfloat16":
            bad = sorted({op for run in lists.native_evidence()["runs"] for op, row in run["ops"].items()
                          if row["verdict"] in lists.BAD_VERDICTS})
            lines += _wrap("kept in float32: bfloat16 kernel failed the value probe", bad)
    return "\n".join(lines)


def probe_verdict(rows):
    """Return ``(ok, text)``: whether the probe ``rows`` ``{op: row}`` agree with the bfloat16 lists."""
    fed = lists.natively_fed_ops("bfloat16", "cpu")
    bad = {op: row for op, row in rows.items() if row["verdict"] in lists.BAD_VERDICTS and op in fed}
    counts = {}
    for row in rows.values():
        counts[row["verdict"]] = counts.get(row["verdict"], 0) + 1
    summary = ", ".join("%d %s" % (n, v) for v, n in sorted(counts.items()))
    if not bad:
        return True, "verdict: OK: every op the lists feed bfloat16 natively matches float32 here (%s)" % summary
    detail = "; ".join("%s: %s %s" % (op, row["verdict"], row.get("why", "rel %.2g" % row.get("rel", 0)))
                       for op, row in sorted(bad.items()))
    return False, ("verdict: FAILED: the lists feed bfloat16 to ops whose kernel is wrong here (%s); add them "
                   "to fp32_ops and report it: %s" % (summary, detail))


def run(args):
    """Print the report (and the probe's verdict); return 0, or 1 when the probe found a bad kernel."""
    dtypes = (args.dtype,) if args.dtype else lists.DTYPES
    print(format_report(dtypes))
    if not args.probe:
        return 0
    if not native_support("bfloat16", "cpu"):
        raise ValueError("--probe needs a CPU where oneDNN runs bfloat16 natively (AVX-512: avx512f, avx512bw, "
                         "avx512vl, avx512dq); this one emulates bfloat16, so there is no native kernel to probe")
    from .probe import probe_values
    print("probing %d ops (each in a child process; about a minute)..." % len(
        lists.natively_fed_ops("bfloat16", "cpu")), flush=True)
    ok, text = probe_verdict(probe_values(sorted(lists.natively_fed_ops("bfloat16", "cpu") - set(library.OP_NAMES))))
    print(text)
    return 0 if ok else 1
