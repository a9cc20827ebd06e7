"""Tests for the float32 floor of amp.init's graphs: graph.work's multiply-accumulate counts and the graphs kept out
of low precision (autocast.graphs), with the measured default (the test tiers set the floor to 0: conftest)."""
import json
import logging
import re

import mxnet as mx
import numpy as np
import pytest
from mxnet import amp, autograd, gluon
from mxnet.amp import lists
from mxnet.amp.autocast.graphs import FLOOR_ENV
from mxnet.amp.core.policy import make_policy
from mxnet.amp.graph.work import product_macs

pytestmark = pytest.mark.filterwarnings(r"ignore:amp.init\(\) was called after")
_LP16 = frozenset(lists.list_lp16_ops("bfloat16")).__contains__


@pytest.fixture
def measured_floor(monkeypatch):
    """amp.init's default floor, as users get it (not the tiers' 0)."""
    monkeypatch.delenv(FLOOR_ENV, raising=False)


def _macs(sym, **shapes):
    return product_macs(sym, shapes, _LP16)


def test_the_products_are_counted_from_the_inferred_shapes():
    x = mx.sym.var("x")
    fc = mx.sym.FullyConnected(x, num_hidden=5, name="fc")  # 3 x 7 -> 3 x 5
    assert _macs(fc, x=(3, 7)) == 3 * 5 * 7
    conv = mx.sym.Convolution(x, num_filter=4, kernel=(3, 3), pad=(1, 1), num_group=2, name="conv")
    assert _macs(conv, x=(2, 6, 5, 5)) == (2 * 4 * 5 * 5) * (3 * 3 * 3)  # 3 input channels per group
    deconv = mx.sym.Deconvolution(x, num_filter=4, kernel=(2, 2), stride=(2, 2), no_bias=True, name="deconv")
    assert _macs(deconv, x=(2, 3, 5, 5)) == (2 * 3 * 5 * 5) * (4 * 2 * 2)
    a, b = mx.sym.var("a"), mx.sym.var("b")
    assert _macs(mx.sym.batch_dot(a, b, transpose_a=True), a=(2, 9, 4), b=(2, 9, 6)) == 2 * 4 * 6 * 9
    assert _macs(mx.sym.dot(a, b), a=(4, 9), b=(9, 6)) == 4 * 6 * 9
    # products add up; ops that are not products count nothing
    two = mx.sym.FullyConnected(mx.sym.relu(fc), num_hidden=2, name="fc2")
    assert _macs(two, x=(3, 7)) == 3 * 5 * 7 + 3 * 2 * 5
    assert _macs(mx.sym.relu(x), x=(3, 7)) == 0


def test_numpy_products_and_recurrent_layers_are_counted():
    mx.npx.set_np()
    a, b = mx.sym.var("a").as_np_ndarray(), mx.sym.var("b").as_np_ndarray()
    assert _macs(mx.sym.np.matmul(a, b), a=(2, 3, 4), b=(2, 4, 5)) == 2 * 3 * 5 * 4
    assert _macs(mx.sym.np.einsum("bqk,bkd->bqd", a, b), a=(2, 3, 4), b=(2, 4, 5)) == 2 * 3 * 4 * 5
    mx.npx.reset_np()
    net = gluon.rnn.LSTM(8, input_size=3)
    net.initialize()
    net.hybridize()
    x = mx.nd.ones((5, 2, 3))  # TNC
    net(x)
    inputs, out = net._cached_graph
    params = 4 * 8 * (3 + 8) + 2 * 4 * 8  # the flat parameter vector of one LSTM layer
    assert product_macs(out, {inputs[0].name: x.shape}, _LP16) == params * 5 * 2


def test_an_unknown_product_or_an_unknown_shape_makes_the_count_unknown():
    x, w = mx.sym.var("x"), mx.sym.var("w")
    # a low precision op without a formula (tensordot) is not counted as nothing
    mx.npx.set_np()
    sym = mx.sym.np.tensordot(x.as_np_ndarray(), w.as_np_ndarray(), axes=1)
    assert product_macs(sym, {"x": (3, 4), "w": (4, 5)}, _LP16) is None
    mx.npx.reset_np()
    assert _macs(mx.sym.FullyConnected(x, num_hidden=5)) is None  # no input shape


def _dense_net(units, batch, in_units):
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(units, activation="relu"), gluon.nn.Dense(3))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    x = mx.nd.array(np.random.RandomState(0).randn(batch, in_units))
    return net, x


def _rewritten(net):
    """Whether the block's cached graph holds an op of AMP's (a cast or a library kernel)."""
    return any(node["op"].startswith("amp_") for node in json.loads(net._cached_graph[1].tojson())["nodes"])


def test_a_small_graph_stays_float32_and_says_so(measured_floor, caplog):
    net, x = _dense_net(16, 8, 12)
    want = net(x).asnumpy()
    amp.init("bfloat16")
    with caplog.at_level(logging.INFO, logger="mxnet.amp"):
        got = net(x)
    assert not _rewritten(net)
    np.testing.assert_array_equal(got.asnumpy(), want)  # exactly the float32 graph
    floor = lists.training_graph_floor("bfloat16", "cpu")
    message = [r.getMessage() for r in caplog.records if "multiply-accumulates" in r.getMessage()]
    assert message == ["amp: block %r does %d multiply-accumulates per forward pass, below the %d where bfloat16 "
                       "pays on cpu: it runs in float32 (amp.init(min_graph_macs=0) converts it anyway)"
                       % (net.name, 8 * 16 * 12 + 8 * 3 * 16, floor)]


def test_a_graph_above_the_floor_and_a_zero_floor_are_rewritten(measured_floor):
    floor = lists.training_graph_floor("bfloat16", "cpu")
    assert floor > 0
    units = 256
    batch = floor // (units * units) + 1  # the first layer alone passes the floor
    net, x = _dense_net(units, batch, units)
    amp.init("bfloat16")
    net(x)
    assert _rewritten(net)
    amp.reset()
    small, xs = _dense_net(16, 8, 12)
    amp.init("bfloat16", min_graph_macs=0)
    small(xs)
    assert _rewritten(small)


def test_the_floor_comes_from_the_argument_then_the_environment(measured_floor, monkeypatch):
    net, x = _dense_net(16, 8, 12)  # 1,920 multiply-accumulates
    monkeypatch.setenv(FLOOR_ENV, "1000")
    amp.init("bfloat16")
    net(x)
    assert _rewritten(net)
    amp.reset()
    amp.init("bfloat16", min_graph_macs=2000)  # the argument wins over the environment
    net(x)
    assert not _rewritten(net)


def test_training_a_small_graph_under_amp_matches_float32_exactly(measured_floor):
    def train(use_amp):
        mx.random.seed(3)
        net, x = _dense_net(16, 8, 12)
        y = mx.nd.array(np.arange(8) % 3)
        trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01})
        if use_amp:
            amp.init("bfloat16")
            amp.init_trainer(trainer)
        losses = []
        for _ in range(4):
            with autograd.record():
                loss = gluon.loss.SoftmaxCrossEntropyLoss()(net(x), y).mean()
                if use_amp:
                    with amp.scale_loss(loss, trainer) as scaled:
                        autograd.backward(scaled)
                else:
                    loss.backward()
            trainer.step(1)
            losses.append(float(loss.asscalar()))
        amp.reset()
        return losses

    assert train(True) == train(False)


def test_amp_reset_rebuilds_a_graph_kept_in_float32(measured_floor):
    net, x = _dense_net(16, 8, 12)
    amp.init("bfloat16")
    net(x)
    amp.reset()
    amp.init("bfloat16", min_graph_macs=0)  # the graph kept in float32 before must be rewritten now
    net(x)
    assert _rewritten(net)


@pytest.mark.parametrize("value", [-1, 2.5, True, "24M"])
def test_a_bad_floor_is_refused_with_the_valid_choices(value):
    with pytest.raises(ValueError, match=r"min_graph_macs must be None \(the measured floor\) or an int >= 0 .*got "
                       + re.escape(repr(value))):
        make_policy("bfloat16", min_graph_macs=value)
    assert not amp.is_enabled()


def test_a_bad_floor_in_the_environment_names_the_variable(monkeypatch):
    monkeypatch.setenv(FLOOR_ENV, "lots")
    net, x = _dense_net(16, 8, 12)
    amp.init("bfloat16")
    with pytest.raises(ValueError, match=r"MXNET_AMP_MIN_GRAPH_MACS='lots': expected an int >= 0"):
        net(x)
