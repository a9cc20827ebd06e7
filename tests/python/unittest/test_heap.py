"""Tests for mxnet.amp.core.heap: the free heap handed back once per AMP step (glibc's malloc_trim)."""
import json
import os
import platform
import subprocess
import sys

import numpy as np
import pytest

import mxnet as mx
from mxnet import autograd, gluon

from mxnet import amp
from mxnet.amp.core import heap
from mxnet.amp.training import step as step_module

# A heap that keeps freed memory: a 12 MB block, mmapped and freed, raises glibc's mmap threshold to 12 MB and its
# trim threshold to 24 MB; 16 blocks of 1 MB then come from the heap and, freed, stay resident below that threshold.
_RETAINED_CHILD = r"""
import ctypes, json, sys
from mxnet.amp.core import heap
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
def rss_mb():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:")) / 1024.0
big = libc.malloc(12 << 20)
ctypes.memset(big, 1, 12 << 20)
libc.free(big)
blocks = [libc.malloc(1 << 20) for _ in range(16)]
for b in blocks:
    ctypes.memset(b, 1, 1 << 20)
for b in blocks:
    libc.free(b)
before = rss_mb()
returned = heap.trim_free_heap()
print(json.dumps({"before": before, "after": rss_mb(), "returned": returned}))
"""


def _child(code, **env):
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, **env))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's: this C library has none")
def test_trim_gives_the_retained_free_heap_back():
    out = _child(_RETAINED_CHILD)
    assert out["returned"] is True
    assert out["before"] - out["after"] > 12, out  # most of the 16 MB freed but resident


def test_the_switch_turns_the_trim_off():
    out = _child(_RETAINED_CHILD, **{heap.TRIM_ENV: "0"})
    assert out["returned"] is False and out["before"] - out["after"] < 4, out


def _train(steps, fused=True):
    net = gluon.nn.Dense(3, in_units=4)
    net.initialize()
    trainer = gluon.Trainer(net.collect_params(), "sgd" if fused else "rmsprop", {"learning_rate": 0.1})
    amp.init_trainer(trainer)
    x = mx.nd.array(np.arange(8, dtype=np.float32).reshape(2, 4))
    for _ in range(steps):
        with autograd.record():
            loss = net(x).sum()
            with amp.scale_loss(loss, trainer) as scaled:
                scaled.backward()
        trainer.step(2)
    mx.nd.waitall()


@pytest.mark.parametrize("fused", [True, False], ids=["fused update", "MXNet's update"])
def test_every_amp_step_asks_for_a_trim_once(monkeypatch, fused):
    calls = []
    monkeypatch.setattr(step_module, "trim_between_steps", lambda: calls.append(1) or True)
    _train(3, fused)
    assert len(calls) == 3


def test_the_trim_is_paced_to_its_cost_share(monkeypatch):
    """A trim that took 2 ms waits 2 / COST_SHARE = 200 ms of steps before the next one runs."""
    trims, now = [], [0.0]

    def fake_trim():
        trims.append(now[0])
        now[0] += 0.002
        return True

    monkeypatch.setattr(heap, "trim_free_heap", fake_trim)
    monkeypatch.setattr(heap, "_PACE", {"end": float("-inf"), "cost": 0.0})
    returned = []
    for _ in range(300):  # 1 ms steps
        returned.append(heap.trim_between_steps(clock=lambda: now[0]))
        now[0] += 0.001
    gaps = np.diff(trims)
    assert len(trims) == 2 and sum(returned) == 2
    assert gaps[0] == pytest.approx(0.002 + 0.002 / heap.COST_SHARE, abs=0.0011), gaps  # its cost, then 200 ms
