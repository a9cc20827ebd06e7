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
