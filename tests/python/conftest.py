"""For every tier: a closing table of what did not run here, by reason, and the machine it ran on.

A green run on a CPU without AVX-512, or without a GPU, skips whole tiers; the table says which, so that a pass
here is not read as a pass there.

The tests check the graph rewrite on tiny models, which ``amp.init`` keeps in float32 by default (their products do
too little arithmetic for low precision to pay: ``amp.init(min_graph_macs=...)``). Every tier runs with the floor at
0 unless a test says otherwise, in its process and in the children it starts; test_small_graphs.py tests the
default, and the documentation's code blocks run without this setting (test_docs.py).
"""
import collections
import os

from mxnet.amp.autocast.graphs import FLOOR_ENV

os.environ.setdefault(FLOOR_ENV, "0")


def _reason(report):
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).replace("Skipped: ", "", 1)
    return str(longrepr)


def pytest_terminal_summary(terminalreporter):
    """Print the summaries tests recorded (``record_property("summary", text)``: the checkpoint fuzz's seed and
    case count), the skipped tests grouped by reason (count, files), and the CPU class of this machine."""
    summaries = [value for key in ("passed", "failed") for report in terminalreporter.stats.get(key, [])
                 for name, value in getattr(report, "user_properties", ()) if name == "summary"]
    if summaries:
        terminalreporter.section("summaries")
        for text in summaries:
            terminalreporter.write_line(text)
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if r.when in ("setup", "call")]
    from mxnet.amp.core import cpu
    klass = cpu.cpu_class()
    terminalreporter.section("what did not run here")
    terminalreporter.write_line("machine: %s, CPU class (%s) %s: bfloat16 %s; %d cores" % (
        cpu.model_name(), klass.name, klass.title, klass.bf16, os.cpu_count()))
    if not skipped:
        terminalreporter.write_line("every collected test ran")
        return
    groups = collections.OrderedDict()
    for report in sorted(skipped, key=lambda r: r.nodeid):
        groups.setdefault(_reason(report), []).append(report.nodeid.split("::")[0].rsplit("/", 1)[-1])
    for reason, files in sorted(groups.items(), key=lambda item: -len(item[1])):
        counts = collections.Counter(files)
        where = ", ".join("%s (%d)" % (f, n) if n > 1 else f for f, n in sorted(counts.items()))
        terminalreporter.write_line("%4d skipped: %s" % (len(files), reason))
        terminalreporter.write_line("       in %s" % where)
    terminalreporter.write_line("%4d skipped in all" % len(skipped))
