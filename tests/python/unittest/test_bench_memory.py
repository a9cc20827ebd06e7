"""``bench/bench_memory.py``'s pure helpers: the JIT-code and library counts of ``/proc/PID/smaps`` and the ratios."""
import os
import sys

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "bench")
sys.path.insert(0, BENCH)
import bench_memory as bm  # noqa: E402

_SMAPS = """\
55d0c0a00000-55d0c0c00000 r-xp 00000000 08:01 1234                       /usr/bin/python3.11
Size:               2048 kB
Rss:                1500 kB
7f0000000000-7f0000100000 rwxp 00000000 00:00 0 
Size:               1024 kB
Rss:                 600 kB
Pss:                 600 kB
7f0000200000-7f0000210000 r-xp 00000000 00:00 0
Size:                 64 kB
Rss:                  64 kB
7f0000300000-7f0000400000 rw-p 00000000 00:00 0
Size:               1024 kB
Rss:                1024 kB
7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0                          [vdso]
Size:                  8 kB
Rss:                   4 kB
VmFlags: rd ex mr mw me de sd
"""


def test_anon_exec_counts_only_anonymous_executable_mappings():
    assert bm.anon_exec_kb(_SMAPS) == 600 + 64  # not the binary, the data mapping nor the vdso
    assert bm.anon_exec_kb("") == 0


def test_library_counts_every_mapping_of_the_named_files():
    smaps = _SMAPS + (
        "7f1000000000-7f1002000000 r-xp 00000000 08:01 77                         /venv/lib/libdnnl.so.3\n"
        "Size:              32768 kB\nRss:               17920 kB\n"
        "7f1002000000-7f1002100000 r--p 02000000 08:01 77                         /venv/lib/libdnnl.so.3\n"
        "Size:               1024 kB\nRss:                 452 kB\n"
        "7f1003000000-7f1003100000 r-xp 00000000 08:01 78                         /venv/lib/libmxnet.so\n"
        "Size:               1024 kB\nRss:                1000 kB\n")
    assert bm.library_kb(smaps, "libdnnl") == 17920 + 452  # its text and data, not another library's
    assert bm.library_kb(_SMAPS, "libdnnl") == 0
    assert bm.anon_exec_kb(smaps) == 600 + 64


def test_ratios_are_counted_over_each_rows_own_base():
    ref = {"base_mb": 200.0, "peak_mb": 600.0}
    row = {"base_mb": 210.0, "peak_mb": 510.0}
    plain, over_base = bm.ratios(row, ref)
    assert plain == 510.0 / 600.0 and over_base == 300.0 / 400.0
    assert bm.ratios(row, None) is None
    assert bm.reference_of("torch-autocast") == "torch-fp32" and bm.reference_of("ours") == "fp32"
