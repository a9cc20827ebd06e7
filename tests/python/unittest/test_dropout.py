"""The library's Dropout (amp_dropout): the mask's statistics, exact scaling and gradients against NumPy, the mode
input (training or not), reproducibility, and its place in amp.init training graphs."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import mxnet as mx
from mxnet import amp, autograd, gluon
from mxnet.amp.base.dtypes import BFLOAT16
from mxnet.amp.core import library  # noqa: F401  (loads the library's ops)

from amp_testing import bf16_round, requires_onednn3_bf16

TRAINING, INFERENCE = mx.nd.array([2.0]), mx.nd.array([1.0])
RNG = np.random.RandomState(0)


def _data(shape, dtype):
    values = RNG.uniform(-2, 2, shape).astype(np.float32)
    arr = mx.nd.array(values)
    return (mx.nd.amp_cast(arr, dtype=BFLOAT16), bf16_round(values)) if dtype == "bfloat16" else (arr, values)


def _scale(p):
    """1 / (1 - p) in float32 arithmetic, as MXNet's Dropout computes it."""
    return np.float32(1) / (np.float32(1) - np.float32(p))


def _np(arr):
    return mx.nd.amp_cast(arr, dtype=np.float32).asnumpy()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_kept_elements_are_scaled_exactly_and_the_rate_is_p(dtype, p):
    x, values = _data((300, 1001), dtype)  # an odd size: the last chunk is partial
    y, mask = mx.nd.amp_dropout(x, TRAINING, p=p)
    got, keep = _np(y), mask.asnumpy()
    assert y.dtype == x.dtype and mask.dtype == np.uint8 and set(np.unique(keep)) <= {0, 1}
    n = keep.size
    assert abs(keep.mean() - (1 - p)) < 6 * np.sqrt(p * (1 - p) / n)  # binomial: 6 standard deviations
    scaled = values * _scale(p)
    want = np.where(keep == 1, bf16_round(scaled) if dtype == "bfloat16" else scaled, 0)
    np.testing.assert_array_equal(got, want)
    assert abs(np.corrcoef(keep[:, :-1].ravel(), keep[:, 1:].ravel())[0, 1]) < 0.01  # neighbours independent


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gradient_is_the_mask_scaled(dtype):
    x, _ = _data((64, 33), dtype)
    head, head_values = _data((64, 33), dtype)
    x.attach_grad()
    with autograd.record():
        y, mask = mx.nd.amp_dropout(x, TRAINING, p=0.25)
    y.backward(head)
    want = np.where(mask.asnumpy() == 1, head_values * _scale(0.25), 0)
    np.testing.assert_array_equal(_np(x.grad), bf16_round(want) if dtype == "bfloat16" else want)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("mode", ["training", "inference"])
def test_dropout_written_over_its_input_is_the_same(dtype, mode):
    """MXNet's memory plan may give the output its input's storage (nnvm/inplace.cc): the same values and mask as a
    separate output's (the mask is a function of the seed and the index)."""
    x, _ = _data((300, 1001), dtype)
    flag = TRAINING if mode == "training" else INFERENCE
    mx.random.seed(7)
    y, mask = mx.nd.amp_dropout(x, flag, p=0.5)
    same, same_mask = x.copy(), mx.nd.zeros(mask.shape, dtype=np.uint8)
    mx.random.seed(7)
    mx.nd.amp_dropout(same, flag, p=0.5, out=[same, same_mask])
    np.testing.assert_array_equal(_np(same), _np(y))
    np.testing.assert_array_equal(same_mask.asnumpy(), mask.asnumpy())
    assert (mask.asnumpy() == 0).any() == (mode == "training")


def test_mode_input_always_and_the_extremes():
    x, values = _data((50, 40), "float32")
    y, mask = mx.nd.amp_dropout(x, INFERENCE, p=0.5)  # not training: the identity
    np.testing.assert_array_equal(y.asnumpy(), values)
    assert (mask.asnumpy() == 1).all()
    y, mask = mx.nd.amp_dropout(x, INFERENCE, p=0.5, mode="always")
    assert 0.4 < mask.asnumpy().mean() < 0.6
    np.testing.assert_array_equal(mx.nd.amp_dropout(x, TRAINING, p=0.0)[0].asnumpy(), values)
    y, mask = mx.nd.amp_dropout(x, TRAINING, p=1.0)
    assert (y.asnumpy() == 0).all() and (mask.asnumpy() == 0).all()


def test_masks_follow_mx_random_seed_and_differ_between_calls():
    x = mx.nd.ones((100, 100))
    mx.random.seed(7)
    first = mx.nd.amp_dropout(x, TRAINING, p=0.5)[1].asnumpy()
    second = mx.nd.amp_dropout(x, TRAINING, p=0.5)[1].asnumpy()
    mx.random.seed(7)
    np.testing.assert_array_equal(mx.nd.amp_dropout(x, TRAINING, p=0.5)[1].asnumpy(), first)
    assert (first != second).mean() > 0.3


def test_the_mask_does_not_depend_on_the_thread_count():
    code = ("import mxnet as mx, numpy as np; from mxnet.amp.core import library; mx.random.seed(3); "
            "m = mx.nd.amp_dropout(mx.nd.ones((1000, 999)), mx.nd.array([2.0]), p=0.3)[1].asnumpy(); "
            "print(int(np.packbits(m).astype(np.uint64).dot(np.arange(m.size // 8 + 1, dtype=np.uint64)"
            "[:np.packbits(m).size])))")
    sums = set()
    for threads in ("1", "2"):
        env = dict(os.environ, MXNET_AMP_ONEDNN_THREADS=threads)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        sums.add(out.stdout.strip().splitlines()[-1])
    assert len(sums) == 1


@pytest.mark.parametrize("attrs, message", [
    ({"p": 1.5}, "amp_dropout: attribute p must be in \\[0, 1\\] \\(got 1.5\\)"),
    ({"p": 0.5, "mode": "eval"}, "amp_dropout: attribute mode must be 'training' or 'always' \\(got 'eval'\\)"),
    ({"p": 0.5, "axes": (1,)}, "amp_dropout: attribute axes must be empty \\(got '\\(1,\\)'\\)"),
])
def test_bad_attributes_name_the_value_and_the_choices(attrs, message):
    with pytest.raises(mx.base.MXNetError, match=message):
        mx.nd.amp_dropout(mx.nd.ones((2, 3)), TRAINING, **attrs)[0].wait_to_read()


class _Net(gluon.HybridBlock):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.fc1 = gluon.nn.Dense(64, flatten=False)
            self.drop = gluon.nn.Dropout(0.5)
            self.fc2 = gluon.nn.Dense(8, flatten=False)

    def hybrid_forward(self, F, x):  # pylint: disable=arguments-differ
        return self.fc2(self.drop(self.fc1(x)))


@requires_onednn3_bf16
@pytest.mark.filterwarnings("ignore:amp.init\\(\\) was called after")
def test_amp_init_training_graphs_drop_with_the_library_kernel(monkeypatch):
    """Training calls drop, inference calls of the same hybridized net do not; MXNet's Dropout is left only as the
    graph's mode flag."""
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")
    amp.init("bfloat16")
    try:
        mx.random.seed(0)
        net = _Net()
        net.initialize(mx.init.Xavier())
        net.hybridize()
        x = mx.nd.array(RNG.uniform(-1, 1, (4, 16, 32)))
        plain = net(x).asnumpy()  # not training: no dropout
        with autograd.record():
            trained = net(x)
        trained.backward()
        nodes = json.loads(net._cached_graph[1].tojson())["nodes"]  # pylint: disable=protected-access
        ops = [n["op"] for n in nodes]
        assert "amp_dropout" in ops and ops.count("Dropout") == 1  # the mode flag's
        assert not np.allclose(trained.astype("float32").asnumpy(), plain)
        np.testing.assert_allclose(net(x).asnumpy(), plain)  # inference again: the identity
        assert np.abs(net.fc2.weight.grad().astype("float32").asnumpy()).sum() > 0
    finally:
        amp.reset()


def test_routing_follows_the_policy(monkeypatch):
    """amp_dropout replaces Dropout in bfloat16 training graphs on native CPUs, on bfloat16 or float32 data; not where
    the user keeps the node or op in float32, with kernels='mxnet', in inference graphs, or for shared masks."""
    from mxnet.amp.core.policy import make_policy
    from mxnet.amp.graph.rewrite import rewrite_symbol
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")
    x = mx.sym.var("data")
    h = mx.sym.FullyConnected(x, num_hidden=8, name="fc")
    sym = mx.sym.Dropout(h, p=0.3, name="drop") + mx.sym.Dropout(x, p=0.3, name="raw")  # bf16 and float32 data

    def ops(policy, inference=False):
        low, _ = rewrite_symbol(sym, policy, "cpu", inference=inference)
        return [n["op"] for n in json.loads(low.tojson(remove_amp_cast=False))["nodes"]]
    assert ops(make_policy("bfloat16")).count("amp_dropout") == 2
    assert ops(make_policy("bfloat16", excluded_sym_names=["drop"])).count("amp_dropout") == 1
    assert "amp_dropout" not in ops(make_policy("bfloat16", extra_fp32_ops=["Dropout"]))
    assert "amp_dropout" not in ops(make_policy("bfloat16", kernels="mxnet"))
    assert "amp_dropout" not in ops(make_policy("bfloat16"), inference=True)
    shared = mx.sym.Dropout(mx.sym.FullyConnected(x, num_hidden=8), p=0.3, axes=(1,))
    low, _ = rewrite_symbol(shared, make_policy("bfloat16"), "cpu")
    assert "amp_dropout" not in low.tojson()
