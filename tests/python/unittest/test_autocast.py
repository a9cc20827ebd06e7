"""amp.init / reset / disable on imperative nd, np/npx, Gluon (legacy and numpy mode) and mx.sym code."""
import json
import threading
import warnings

import mxnet as mx
import numpy as np
import pytest
from mxnet import amp, autograd, gluon
from mxnet.gluon import nn

from amp_testing import bf16_round, lp_round

from mxnet.amp.base.dtypes import BFLOAT16 as BF16


def _data(shape, seed):
    return np.random.RandomState(seed).uniform(-1, 1, size=shape).astype(np.float32)


def _emulated_fc(x, w, dtype):
    """Low precision FullyConnected as the hardware does it: rounded inputs, fp32 sums, rounded output."""
    acc = lp_round(x, dtype).astype(np.float64) @ lp_round(w, dtype).astype(np.float64).T
    return lp_round(acc.astype(np.float32), dtype)


def _casts(sym):
    nodes = json.loads(sym.tojson(remove_amp_cast=False))["nodes"]
    return [n for n in nodes if n["op"] in ("amp_cast", "amp_multicast", "amp_round")]


def _graph_of(block):
    return block._cached_graph[1]


# --- imperative --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_imperative_lp16_op_emulated_matches_numpy(dtype):
    x, w = _data((16, 32), 0), _data((8, 32), 1)
    amp.init(dtype, emulate=True)
    out = mx.nd.FullyConnected(mx.nd.array(x), mx.nd.array(w), num_hidden=8, no_bias=True)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out.asnumpy(), _emulated_fc(x, w, dtype), rtol=2 ** -7, atol=1e-6)
    assert np.abs(out.asnumpy() - x @ w.T).max() > 1e-4  # the rounding really happened


def test_imperative_native_casts_follow_categories():
    amp.init("bfloat16", extra_lp16_ops=["exp"], emulate=False)
    x = mx.nd.array(_data((4, 5), 2))
    low = mx.nd.exp(x)                       # forced to low precision: runs in bf16
    assert low.dtype == BF16
    np.testing.assert_allclose(mx.nd.amp_cast(low, dtype="float32").asnumpy(),
                               bf16_round(np.exp(bf16_round(x.asnumpy()))), rtol=2 ** -7)
    assert mx.nd.softmax(low).dtype == np.float32          # fp32 list: bf16 input cast up
    assert mx.nd.elemwise_add(low, x).dtype == np.float32  # widest type: bf16 + fp32 -> fp32
    assert mx.nd.relu(low).dtype == BF16                   # neutral: runs in what arrives


def test_numpy_mode_imperative_ops_are_cast():
    mx.npx.set_np()
    amp.init("bfloat16", extra_lp16_ops=["_npi_exp"], emulate=False)
    a = mx.np.array(_data((3, 4), 3))
    assert mx.np.exp(a).dtype == BF16
    amp.reset()
    amp.init("bfloat16", emulate=True)
    b = mx.np.array(_data((4, 6), 4))
    for out in (mx.np.matmul(a, b), a @ b, mx.np.dot(a, b)):
        assert out.dtype == np.float32
        ref = lp_round((bf16_round(a.asnumpy()).astype(np.float64) @ bf16_round(b.asnumpy())).astype(np.float32),
                       "bfloat16")
        np.testing.assert_allclose(out.asnumpy(), ref, rtol=2 ** -7, atol=1e-6)
    fc = mx.npx.fully_connected(a, b.T, num_hidden=6, no_bias=True)
    np.testing.assert_allclose(fc.asnumpy(), _emulated_fc(a.asnumpy(), b.T.asnumpy(), "bfloat16"), rtol=2 ** -7,
                               atol=1e-6)


# --- Gluon ---------------------------------------------------------------------------------------------------

class _Recursive(gluon.HybridBlock):
    """One Dense layer applied ``depth`` times: its weight must be cast once per forward, not ``depth`` times."""

    def __init__(self, depth=4, **kwargs):
        super().__init__(**kwargs)
        self.depth = depth
        with self.name_scope():
            self.fc = nn.Dense(8, in_units=8)

    def hybrid_forward(self, F, x):
        relu = F.npx.relu if mx.util.is_np_array() else F.relu
        for _ in range(self.depth):
            x = relu(self.fc(x))
        return x


@pytest.mark.parametrize("numpy_mode", [False, True])
def test_gluon_hybridized_and_imperative_agree(numpy_mode):
    if numpy_mode:
        mx.npx.set_np()
    amp.init("bfloat16", emulate=True)
    mx.random.seed(0)
    net = _Recursive()
    net.initialize()
    x = (mx.np if numpy_mode else mx.nd).array(_data((2, 8), 5))
    imperative = net(x).asnumpy()
    net.hybridize()
    hybrid = net(x).asnumpy()
    np.testing.assert_array_equal(imperative, hybrid)
    net.hybridize(active=False)
    with amp.disable():
        fp32 = net(x).asnumpy()
    assert 0 < np.abs(hybrid - fp32).max() < 0.05


def test_block_applied_many_times_casts_weight_once():
    amp.init("float16", emulate=False)
    net = _Recursive(depth=5)
    net.initialize()
    net.hybridize()
    with pytest.raises(mx.base.MXNetError):  # CPU float16 FullyConnected is missing in MXNet 1.9.1
        net(mx.nd.ones((2, 8))).wait_to_read()
    casts = _casts(_graph_of(net))
    sources = [n["name"] for n in casts if "weight" in n["name"] or "bias" in n["name"]]
    assert len(sources) == 2, sources  # one cast for the weight, one for the bias, used by all 5 applications


def test_imperative_block_reuses_parameter_casts(monkeypatch):
    from mxnet.amp.autocast import imperative
    amp.init("bfloat16", emulate=True)
    net = _Recursive(depth=5)
    net.initialize()
    x = mx.nd.array(_data((2, 8), 6))
    calls = []
    real = imperative._AMP_ROUND

    def counting(arr, **kwargs):
        calls.append(arr.shape)
        return real(arr, **kwargs)
    monkeypatch.setattr(imperative, "_AMP_ROUND", counting)
    with autograd.record():
        net(x)
    weight_casts = [s for s in calls if s == (8, 8)]
    assert len(weight_casts) == 1, calls  # the weight is rounded once for all 5 applications
    assert len(calls) == 1 + 1 + 2 * 5, calls  # weight, bias, and per application the input and the output


def test_graph_cast_placement_float16_structure():
    from mxnet.amp.graph.rewrite import rewrite_symbol
    from mxnet.amp.core.policy import make_policy
    data, weight = mx.sym.var("data"), mx.sym.var("w")
    h = data
    for i in range(3):
        h = mx.sym.Activation(mx.sym.FullyConnected(h, weight, num_hidden=4, no_bias=True, name="fc%d" % i),
                              act_type="relu")
    out = mx.sym.softmax(h + data, name="prob")
    sym, stats = rewrite_symbol(out, make_policy("float16", emulate=False))
    nodes = json.loads(sym.tojson(remove_amp_cast=False))["nodes"]
    by_name = {n["name"]: n for n in nodes}
    casts = [n for n in nodes if n["op"] == "amp_cast"]
    assert sorted(n["name"] for n in casts) == ["data_amp_cast_float16", "w_amp_cast_float16"]
    assert all(n["attrs"]["dtype"] == "float16" for n in casts)
    add = next(n for n in nodes if n["op"] == "elemwise_add")
    multicast = nodes[add["inputs"][0][0]]
    assert multicast["op"] == "amp_multicast" and multicast["attrs"]["num_outputs"] == "2"
    assert nodes[by_name["prob"]["inputs"][0][0]]["op"] == "elemwise_add"  # fp32 already: no cast added
    assert stats.as_dict() == {"casts": 2, "multicasts": 1, "ops": {"lp16": 3, "neutral": 3, "widest": 1,
                                                                    "fp32": 1}, "lp16_modes": {"native": 3},
                               "kernels": {}}
    arg_types, out_types, _ = sym.infer_type(data=np.float32, w=np.float32)
    assert out_types == [np.float32]


def test_symbol_bind_is_rewritten():
    amp.init("bfloat16", emulate=True)
    data, weight = mx.sym.var("data"), mx.sym.var("w")
    out = mx.sym.FullyConnected(data, weight, num_hidden=3, no_bias=True)
    x, w = _data((4, 6), 7), _data((3, 6), 8)
    exe = out.bind(mx.cpu(), {"data": mx.nd.array(x), "w": mx.nd.array(w)})
    np.testing.assert_allclose(exe.forward()[0].asnumpy(), _emulated_fc(x, w, "bfloat16"), rtol=2 ** -7, atol=1e-6)
    exe2 = out.simple_bind(mx.cpu(), data=(4, 6), w=(3, 6))
    exe2.arg_dict["data"][:] = x
    exe2.arg_dict["w"][:] = w
    np.testing.assert_allclose(exe2.forward()[0].asnumpy(), _emulated_fc(x, w, "bfloat16"), rtol=2 ** -7,
                               atol=1e-6)


# --- lifecycle -----------------------------------------------------------------------------------------------

def test_init_after_model_warns_and_applies():
    net = _Recursive(depth=1)
    net.initialize()
    net.hybridize()
    x = mx.nd.array(_data((2, 8), 9))
    before = net(x).asnumpy()
    with pytest.warns(UserWarning, match="after .* Gluon blocks"):
        amp.init("bfloat16", emulate=True)
    after = net(x).asnumpy()
    assert _casts(_graph_of(net)), "the cached graph was rebuilt with casts"
    assert np.abs(after - before).max() > 0


def test_init_twice():
    amp.init("bfloat16", fp32_ops=["relu"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        amp.init("bfloat16", fp32_ops=["relu"])  # same settings: no-op
    with pytest.raises(RuntimeError, match=r"amp\.reset\(\)"):
        amp.init("float16")


@pytest.mark.parametrize("kwargs, message", [
    ({"target_dtype": "float8"}, r"float8.*bfloat16.*float16|float8.*float16.*bfloat16"),
    ({"fp32_ops": ["FullyConected"]}, r"FullyConected.*fp32_ops.*FullyConnected"),
    ({"target_precision_ops": ["exp"], "fp32_ops": ["exp"]}, r"'exp'.*target_precision_ops.*fp32_ops"),
    ({"conditional_fp32_ops": [("Activation", "act_type")]}, r"conditional_fp32_ops entries"),
    ({"fp32_ops": "relu"}, r"list of operator names"),
])
def test_bad_overrides_raise(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        amp.init(**kwargs)
    assert not amp.is_enabled()


def test_disable_is_nestable_and_per_thread():
    amp.init("bfloat16", emulate=True)
    x, w = mx.nd.array(_data((4, 8), 10)), mx.nd.array(_data((3, 8), 11))
    exact = x.asnumpy() @ w.asnumpy().T
    seen = {}

    def other_thread():
        seen["enabled"] = amp.is_enabled()
    with amp.disable():
        with amp.disable():
            assert not amp.is_enabled()
        assert not amp.is_enabled()
        out = mx.nd.FullyConnected(x, w, num_hidden=3, no_bias=True).asnumpy()
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
        net = _Recursive(depth=2)
        net.initialize()
        net.hybridize()
        net(mx.nd.ones((1, 8)))
    np.testing.assert_allclose(out, exact, rtol=1e-5, atol=1e-6)
    assert seen["enabled"] is True
    assert amp.is_enabled()
    net(mx.nd.ones((1, 8)))  # built inside disable(): stays fp32 when called outside
    assert not _casts(_graph_of(net))


def test_reset_restores_everything():
    original = mx.nd.FullyConnected, mx.np.matmul, mx.sym.Symbol.bind, gluon.HybridBlock._get_graph
    net = _Recursive(depth=2)
    net.initialize()
    net.hybridize()
    x = mx.nd.array(_data((2, 8), 12))
    fp32 = net(x).asnumpy()
    with pytest.warns(UserWarning):
        amp.init("bfloat16", emulate=True)
    assert mx.nd.FullyConnected is not original[0]
    assert np.abs(net(x).asnumpy() - fp32).max() > 0
    amp.reset()
    assert (mx.nd.FullyConnected, mx.np.matmul, mx.sym.Symbol.bind, gluon.HybridBlock._get_graph) == original
    assert amp.target_dtype() is None and not amp.is_enabled()
    np.testing.assert_array_equal(net(x).asnumpy(), fp32)
    assert not _casts(_graph_of(net))
    amp.init("float16", emulate=True)  # a new setting is allowed after reset
    assert amp.target_dtype() == "float16"


def test_conditional_fp32_follows_the_attribute():
    amp.init("bfloat16", extra_lp16_ops=["exp"], conditional_fp32_ops=[("clip", "a_min", ["0.0"])],
             emulate=False)
    low = mx.nd.exp(mx.nd.array(_data((2, 3), 13)))
    assert low.dtype == BF16
    assert mx.nd.clip(low, a_min=0.0, a_max=2.0).dtype == np.float32  # the attribute matches: fp32
    assert mx.nd.clip(low, a_min=0.5, a_max=2.0).dtype == BF16        # otherwise neutral
    data = mx.sym.var("data")
    out = mx.sym.Activation(mx.sym.Activation(data, act_type="softrelu", name="soft"), act_type="tanh", name="t")
    from mxnet.amp.graph.rewrite import rewrite_symbol
    sym, _ = rewrite_symbol(out, amp.current_policy(), var_dtypes={"data": BF16})
    nodes = json.loads(sym.tojson(remove_amp_cast=False))["nodes"]
    soft = next(n for n in nodes if n["name"] == "soft")  # the given list replaced the built-in entries
    assert nodes[soft["inputs"][0][0]]["name"] == "data"
    amp.reset()
    amp.init("bfloat16", emulate=False)
    sym, _ = rewrite_symbol(out, amp.current_policy(), var_dtypes={"data": BF16})
    nodes = json.loads(sym.tojson(remove_amp_cast=False))["nodes"]
    soft = next(n for n in nodes if n["name"] == "soft")  # built-in entry: Activation(softrelu) in fp32
    assert nodes[soft["inputs"][0][0]]["attrs"]["dtype"] == "float32"
    tanh = next(n for n in nodes if n["name"] == "t")     # Activation(tanh): neutral, no cast
    assert nodes[tanh["inputs"][0][0]]["name"] == "soft"


def test_export_writes_the_plain_float32_graph(tmp_path):
    amp.init("bfloat16", emulate=True)
    net = _Recursive(depth=2)
    net.initialize()
    net.hybridize()
    x = mx.nd.array(_data((2, 8), 14))
    net(x)
    assert any(n["op"] == "amp_round" for n in _casts(_graph_of(net)))
    prefix = str(tmp_path / "net")
    net.export(prefix)
    saved = json.load(open(prefix + "-symbol.json"))
    assert not [n["op"] for n in saved["nodes"] if n["op"] in ("amp_cast", "amp_multicast", "amp_round")]
    assert _casts(_graph_of(net)), "the block keeps its AMP graph"
    amp.reset()
    loaded = gluon.SymbolBlock.imports(prefix + "-symbol.json", ["data"], prefix + "-0000.params")
    net.hybridize(active=False)
    np.testing.assert_allclose(loaded(x).asnumpy(), net(x).asnumpy(), rtol=1e-6, atol=1e-7)


def test_module_api_trains_under_amp():
    amp.init("bfloat16", emulate=True)
    data = mx.sym.var("data")
    out = mx.sym.LinearRegressionOutput(mx.sym.FullyConnected(data, num_hidden=2, name="fc"), name="lro")
    mod = mx.mod.Module(out, data_names=["data"], label_names=["lro_label"])
    mod.bind(data_shapes=[("data", (4, 3))], label_shapes=[("lro_label", (4, 2))])  # partial type_dict
    mod.init_params(mx.init.Xavier())
    mod.init_optimizer(optimizer_params={"learning_rate": 0.1})
    batch = mx.io.DataBatch([mx.nd.array(_data((4, 3), 15))], [mx.nd.array(_data((4, 2), 16))])
    mod.forward_backward(batch)
    mod.update()
    weight = mod.get_params()[0]["fc_weight"].asnumpy()
    x = batch.data[0].asnumpy()
    mod.forward(batch, is_train=False)
    got = mod.get_outputs()[0].asnumpy()
    ref = _emulated_fc(x, weight, "bfloat16") + mod.get_params()[0]["fc_bias"].asnumpy()
    np.testing.assert_allclose(got, bf16_round(ref), rtol=2 ** -6, atol=1e-5)


def test_reset_restores_an_imported_symbol_block(tmp_path):
    net = _Recursive(depth=2)
    net.initialize()
    net.hybridize()
    x = mx.nd.array(_data((2, 8), 17))
    fp32 = net(x).asnumpy()
    net.export(str(tmp_path / "plain"))
    amp.init("bfloat16", emulate=True)
    block = gluon.SymbolBlock.imports(str(tmp_path / "plain-symbol.json"), ["data"],
                                      str(tmp_path / "plain-0000.params"))
    assert np.abs(block(x).asnumpy() - fp32).max() > 0 and _casts(_graph_of(block))
    amp.reset()
    np.testing.assert_array_equal(block(x).asnumpy(), fp32)
    assert not _casts(_graph_of(block))
    amp.init("float16", emulate=True)
    block(x)
    assert {n["attrs"]["dtype"] for n in _casts(_graph_of(block))} == {"float16"}


def test_conditional_attribute_given_positionally_and_out_argument():
    amp.init("bfloat16", extra_lp16_ops=["exp"], conditional_fp32_ops=[("clip", "a_min", ["0.0"])],
             emulate=False)
    low = mx.nd.exp(mx.nd.array(_data((2, 3), 18)))
    assert mx.nd.clip(low, 0.0, 2.0).dtype == np.float32  # positional a_min matches the entry
    amp.reset()
    amp.init("bfloat16", emulate=True)
    x, w = _data((4, 8), 19), _data((3, 8), 20)
    out = mx.nd.empty((4, 3))
    returned = mx.nd.FullyConnected(mx.nd.array(x), mx.nd.array(w), num_hidden=3, no_bias=True, out=out)
    assert returned is out
    np.testing.assert_allclose(out.asnumpy(), _emulated_fc(x, w, "bfloat16"), rtol=2 ** -7, atol=1e-6)
    np.testing.assert_array_equal(out.asnumpy(), bf16_round(out.asnumpy()))  # rounded in place


def test_conditional_attribute_typo_is_rejected():
    with pytest.raises(ValueError, match=r"'Activation' has no attribute 'act_typo' \(did you mean 'act_type'\?\)"):
        amp.init("bfloat16", conditional_fp32_ops=[("Activation", "act_typo", ["softrelu"])])


def test_emulated_rounding_of_a_tensor_of_unknown_dtype():
    from mxnet.amp.graph.rewrite import rewrite_graph
    from mxnet.amp.core.policy import make_policy
    data = mx.sym.var("data")
    graph = json.loads(mx.sym.FullyConnected(data, num_hidden=2, no_bias=True, name="fc")
                       .tojson(remove_amp_cast=False))
    new, _ = rewrite_graph(graph, make_policy("bfloat16", emulate=True), "cpu", {})  # no dtypes known
    nodes = new["nodes"]
    fc = next(n for n in nodes if n["name"] == "fc")
    back = nodes[fc["inputs"][0][0]]
    low = nodes[back["inputs"][0][0]]
    assert (back["op"], back["attrs"]["dtype"], low["op"], low["attrs"]["dtype"]) == (
        "amp_cast", "float32", "amp_cast", "bfloat16")  # a real round trip, not a cast of the source
