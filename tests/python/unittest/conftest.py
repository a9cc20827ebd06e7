"""Shared fixtures: every test starts and ends with AMP off and legacy (non-numpy) semantics."""
import mxnet as mx
import pytest
from mxnet import amp


@pytest.fixture(autouse=True)
def clean_amp():
    """AMP off before and after the test, numpy mode reset after it."""
    amp.reset()
    yield
    amp.reset()
    mx.npx.reset_np()


@pytest.fixture
def class_c(tmp_path, monkeypatch):
    """The policy believes it runs on CPU class (c), where the default plan runs bfloat16 natively (the stand-in
    variables that would lower the class cleared: tests that use it build graphs and run no kernel)."""
    from mxnet.amp.core import cpu
    from amp_testing import cpuinfo_of_class
    for env in ("MXNET_AMP_EMULATE", cpu.CLASS_ENV) + cpu.ISA_CAP_ENVS:
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setenv(cpu.CPUINFO_ENV, cpuinfo_of_class(tmp_path, "c"))
