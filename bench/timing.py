"""Timing helpers shared by the benchmark scripts (run them as ``python bench/NAME.py``)."""
import statistics
import time


def timed(func, repeat, warmup=1):
    """Median wall time of ``func()`` over ``repeat`` runs after ``warmup`` runs; func waits for its results."""
    for _ in range(warmup):
        func()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def split(total, count):
    """``count`` sizes that add up to ``total`` (the last one takes the remainder)."""
    sizes = [total // count] * count
    sizes[-1] += total - sum(sizes)
    return sizes


def copy_seconds(total, repeat):
    """Time to copy ``total`` float32 values: the faster of MXNet ``copyto`` and ``numpy.copyto``."""
    import mxnet as mx
    import numpy as np
    src_np = np.ones(total, dtype=np.float32)
    dst_np = np.empty_like(src_np)
    src, dst = mx.nd.array(src_np), mx.nd.empty(total)

    def mx_copy():
        src.copyto(dst)
        dst.wait_to_read()

    return min(timed(mx_copy, repeat), timed(lambda: np.copyto(dst_np, src_np), repeat))


def best_of(variants, repeat, inner=3):
    """Seconds per call of each variant (best of ``repeat`` rounds of ``inner`` calls), variants alternating."""
    for func in variants.values():
        func()
    best = dict.fromkeys(variants, float("inf"))
    for _ in range(repeat):
        for name, func in variants.items():
            start = time.perf_counter()
            for _ in range(inner):
                func()
            best[name] = min(best[name], (time.perf_counter() - start) / inner)
    return best


def add_stand_in(parser):
    """Add ``--stand-in CLASS`` to a benchmark's options (see :func:`apply_stand_in`)."""
    parser.add_argument("--stand-in", choices=("a", "b", "c"), metavar="CLASS",
                        help="run as CPU class a, b or c, below this CPU's: oneDNN's ISA caps and "
                             "MXNET_AMP_CPU_CLASS for this process and its children (mxnet.amp.core.cpu.stand_in_env)")


def apply_stand_in(class_name):
    """Make this process and its children run as CPU class ``class_name`` (None: as the CPU's own); call it
    before any oneDNN primitive is created (oneDNN reads its ISA cap then)."""
    if class_name:
        import os
        from mxnet.amp.core import cpu
        os.environ.update(cpu.stand_in_env(class_name))


def cpu_banner():
    """Print the CPU (its class, bfloat16 / AMX flags, cores, load), MXNet and this project's oneDNN 3 kernels;
    return whether the CPU runs avx512_bf16 (its class, stand-ins included, is (c) or (d))."""
    import os
    import mxnet as mx
    from mxnet.amp.core import cpu, library
    from mxnet.amp.core.support import native_support
    flags, klass = cpu.flags(), cpu.cpu_class()
    print("CPU: %s, class (%s) %s%s; avx512_bf16 %s, amx_bf16 %s; %d cores; load %.1f" % (
        cpu.model_name(), klass.name, klass.title, " (%s)" % cpu.stand_in() if cpu.stand_in() else "",
        "yes" if "avx512_bf16" in flags else "no", "yes" if "amx_bf16" in flags else "no", os.cpu_count(),
        os.getloadavg()[0]))
    print("MXNet %s; bfloat16 natively: %s; this project's kernels: %s; MXNET_AMP_ONEDNN_THREADS=%s" % (
        mx.__version__, native_support("bfloat16", "cpu"), library.onednn()[1],
        os.environ.get("MXNET_AMP_ONEDNN_THREADS", "(unset)")))
    return klass.name in ("c", "d")


def print_gflops(title, rows, first, baselines=("mxnet fp32",)):
    """Print ``[(label, {variant: GFLOP/s})]`` as a table headed ``first``, with the ratio of 'ours bf16' to
    each of ``baselines``, and the harmonic mean of each column (layers weigh by their time)."""
    names = []
    for _, cols in rows:
        names += [c for c in cols if c not in names]
    print("\n%s (GFLOP/s; higher is better)" % title)
    print("%-28s | %s | %s" % (first, " | ".join("%15s" % c for c in names),
                               " | ".join("ours / %s" % b for b in baselines)))
    for label, cols in rows:
        ratios = [cols["ours bf16"] / cols[b] if "ours bf16" in cols and b in cols else float("nan")
                  for b in baselines]
        values = " | ".join("%15.1f" % cols[c] if c in cols else "%15s" % "-" for c in names)
        print("%-28s | %s | %s" % (label, values, " | ".join("%*.2fx" % (len("ours / %s" % b) - 1, r)
                                                             for b, r in zip(baselines, ratios))))
    if len(rows) > 1 and all(c in cols for _, cols in rows for c in names):
        print("%-28s | %s" % ("harmonic mean", " | ".join(
            "%15.1f" % (len(rows) / sum(1.0 / cols[c] for _, cols in rows)) for c in names)))


def child_json(cmd, timeout, env=None):
    """Run a benchmark's child process; return the JSON object it printed last, or ``{'error': why}``."""
    import json
    import subprocess
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": "timed out after %d s" % timeout}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and "activated" not in ln]
    return {"error": "failed (exit %d): %s" % (proc.returncode, (lines[-1] if lines else "")[:140])}
