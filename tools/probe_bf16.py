"""Probe which MXNet operator kernels accept bfloat16 / float16 inputs, or compute bfloat16 right, here.

Every forward operator (one name per alias group) is invoked imperatively on small
inputs three times: in float32, float16 and bfloat16.  An op "supports" a dtype
when the float32 call succeeds and the low-precision call succeeds too; when the
float32 call itself fails the probe could not build a valid call and reports
``unprobed``.  Ops run in batches in child processes, so a kernel that crashes
the process (e.g. bf16 ``transpose`` under oneDNN on CPUs without AVX-512) only
marks that op as ``crash``.

By default oneDNN is disabled (``MXNET_MKLDNN_ENABLED=0``) so the native kernels
are probed.  With ``--mkldnn`` oneDNN stays on: an op whose bf16 call reaches a
oneDNN primitive that this CPU cannot create (bf16 primitives need AVX-512) is
reported as ``onednn:...``, which shows that MXNet routes bf16 to oneDNN for it.
Some oneDNN bf16 kernels crash instead of failing on such CPUs (``transpose``),
hence the child processes.  The results feed the op lists in
``python/mxnet/amp/lists``.

``--values`` (for CPUs with AVX-512, where oneDNN runs bfloat16) checks values instead: every op the bfloat16
lists feed bfloat16 natively (dtype-neutral, widest-type, native low precision and conditional ops) runs with
oneDNN on, on bfloat16 inputs, for several shapes and ranks (``VALUE_CASES``) and with positive and signed
inputs, and is compared with its float32 kernel on the same bfloat16-rounded values. An op whose relative
deviation ``max|y - y_fp32| / max|y_fp32|`` exceeds ``VALUE_TOLERANCE`` is a ``mismatch``; one that kills
its child process is a ``crash``, one that stops answering a ``hang``. The result is the evidence file that
``python/mxnet/amp/lists/native_bf16_cpu.json`` holds and the lists are tested against.

``--storage`` is the same value probe where MXNet's oneDNN creates no bfloat16 primitive (CPU class (a), or any CPU
under ``DNNL_MAX_CPU_ISA=AVX2``): the ops found right there (MXNet's mshadow kernels) are those that training graphs
storing bfloat16 on float32 arithmetic run on bfloat16 data (``python/mxnet/amp/lists/storage_bf16_cpu.json``,
``mxnet.amp.lists.storage_ops``).

Usage::

    python tools/probe_bf16.py --values --out python/mxnet/amp/lists/native_bf16_cpu.json   # AVX-512 only
    DNNL_MAX_CPU_ISA=AVX2 python tools/probe_bf16.py --storage --out python/mxnet/amp/lists/storage_bf16_cpu.json
    python tools/probe_bf16.py --out probe.json          # all ops, one row per alias group
    python tools/probe_bf16.py --ops exp,take,Pooling    # a few, printed as a table
    python tools/probe_bf16.py --ops exp,take --json     # a few, JSON on stdout
    python tools/probe_bf16.py --mkldnn                  # probe with oneDNN on
"""
import argparse
import json
import os

from mxnet.amp.cli.probe import op_groups, probe, probe_values

from mxnet.amp.cli.probe_specs import DTYPES, EVIDENCE_VERDICTS, VALUE_TOLERANCE


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", help="comma-separated op names (default: every forward op)")
    parser.add_argument("--out", help="write the JSON result here instead of printing a table")
    parser.add_argument("--json", action="store_true", help="print JSON rows keyed by the names asked for")
    parser.add_argument("--mkldnn", action="store_true", help="keep oneDNN enabled")
    parser.add_argument("--values", action="store_true",
                        help="value probe of the ops the bfloat16 lists feed bfloat16 natively (AVX-512 CPUs)")
    parser.add_argument("--storage", action="store_true",
                        help="the value probe where MXNet's oneDNN has no bfloat16 primitives (class (a) CPUs)")
    args = parser.parse_args()
    if args.values or args.storage:
        _main_values(args, parser)
        return
    groups = op_groups()
    canonical = {name: g[0] for g in groups for name in g}
    asked = args.ops.split(",") if args.ops else [g[0] for g in groups]
    unknown = [name for name in asked if name not in canonical]
    if unknown:
        parser.error("not registered forward operators: %s" % ", ".join(unknown))
    results = probe(sorted({canonical[name] for name in asked}), mkldnn=args.mkldnn)
    rows = {name: dict(results[canonical[name]], op=name, probed_as=canonical[name]) for name in asked}
    if args.out or args.json:
        text = json.dumps(rows, indent=1, sort_keys=True)
        if args.out:
            with open(args.out, "w") as f:
                f.write(text)
        else:
            print(text)
        return
    for name in asked:
        print(f"{name:45s} " + "  ".join(f"{d}={rows[name][d][:40]}" for d in DTYPES))


def _main_values(args, parser):
    """``--values``: probe, then write the evidence file (``--out``) or print a verdict per op."""
    import datetime
    import platform
    import mxnet as mx
    from mxnet.amp import lists
    from mxnet.amp.core.support import native_support
    if args.storage == native_support("bfloat16", "cpu"):
        parser.error("--storage needs a CPU where MXNet's oneDNN has no bfloat16 primitives (no AVX-512, or "
                     "DNNL_MAX_CPU_ISA=AVX2)" if args.storage else
                     "--values needs a CPU where oneDNN runs bfloat16 (AVX-512); this one would only report "
                     "oneDNN's missing primitives (--storage probes it)")
    from mxnet.amp.core import library
    recorded_bad = set()
    if args.out and os.path.exists(args.out):  # probe the ops found bad before again: kernels get fixed
        with open(args.out) as f:
            recorded_bad = {op for run in json.load(f)["runs"] for op, row in run["ops"].items()
                            if row["verdict"] in lists.BAD_VERDICTS}
    fed = lists.natively_fed_ops("bfloat16", "cpu") - set(library.OP_NAMES)  # ours: test_kernels.py
    asked = args.ops.split(",") if args.ops else sorted(fed | recorded_bad)
    try:
        rows = probe_values(asked)
    except ValueError as err:
        parser.error(str(err))
    if not args.out:
        for name in asked:
            row = rows[name]
            print("%-45s %-8s %s" % (name, row["verdict"], row.get("why", "rel %.2g" % row.get("rel", 0))))
        return
    with open("/proc/cpuinfo") as f:
        model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), platform.machine())
    meta = {"cpu": model, "mxnet": mx.__version__, "date": datetime.date.today().isoformat(),
            "tolerance": VALUE_TOLERANCE,
            "command": "DNNL_MAX_CPU_ISA=%s python tools/probe_bf16.py --storage" % os.environ["DNNL_MAX_CPU_ISA"]
            if args.storage and "DNNL_MAX_CPU_ISA" in os.environ else
            "python tools/probe_bf16.py --%s" % ("storage" if args.storage else "values")}
    runs = []
    if os.path.exists(args.out) and not args.storage:  # keep the runs recorded on other CPUs (--storage: one)
        with open(args.out) as f:
            runs = [r for r in json.load(f)["runs"] if r["meta"]["cpu"] != model]
    evidence = {"verdicts": EVIDENCE_VERDICTS, "runs": runs + [{"meta": meta, "ops": rows}]}
    with open(args.out, "w") as f:
        json.dump(evidence, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
