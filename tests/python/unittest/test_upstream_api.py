"""Code written for ``mxnet.contrib.amp`` (1.9.1) and MXNet 2.0's ``mxnet.amp`` runs against ``mxnet.amp``.

Written from the upstream documentation and API (not copied from upstream tests): Module-API use of converted
checkpoints, the v1.x keyword names and call forms, the list modules and their coverage, the override
semantics of ``target_dtype_ops`` / ``fp32_ops`` / ``conditional_fp32_ops``, fusion and offline casting,
``convert_bucketing_module`` and ``list_lp16_use_fp32_params``. Module-API training with an optimizer is in
``test_module_api.py``.

bfloat16 runs natively on CPUs with AVX-512 and emulated elsewhere (``MXNET_AMP_EMULATE=1`` forces that).
"""
import collections
import json
import warnings

import numpy as np
import pytest

import mxnet as mx
from mxnet import amp
from mxnet.gluon import nn
from mxnet.amp.lists import groups, symbol_bf16, symbol_fp16
from mxnet.amp.core.policy import FOLLOW, FP32, LP16, WIDEST
from mxnet.amp.core.support import native_support

from mxnet.amp.base.dtypes import BFLOAT16 as BF16
NATIVE_BF16 = native_support("bfloat16", "cpu")


def _nodes(sym):
    return json.loads(sym.tojson(remove_amp_cast=False))["nodes"]


def _casts_into(sym, name):
    """``{input position: cast dtype}`` of the amp_cast nodes feeding node ``name``."""
    nodes = _nodes(sym)
    node = next(n for n in nodes if n["name"] == name)
    return {i: nodes[src]["attrs"]["dtype"] for i, (src, _, _) in enumerate(node["inputs"])
            if nodes[src]["op"] == "amp_cast"}


def _cnn():
    data = mx.sym.var("data")
    h = mx.sym.Convolution(data, num_filter=4, kernel=(3, 3), pad=(1, 1), name="conv")
    h = mx.sym.Activation(h, act_type="relu", name="relu")
    return mx.sym.FullyConnected(h, num_hidden=3, name="fc")


def _checkpoint(sym, tmp_path, data_shape):
    """Write an fp32 checkpoint the v1.x way and load it back: ``(sym, arg_params, aux_params)``."""
    mod = mx.mod.Module(sym, label_names=None, context=mx.cpu())
    mod.bind(data_shapes=[("data", data_shape)], for_training=False)
    mx.random.seed(0)
    mod.init_params(mx.init.Uniform(0.5))
    prefix = str(tmp_path / "fp32")
    mod.save_checkpoint(prefix, 0)
    return mx.model.load_checkpoint(prefix, 0)


def _module_forward(sym, args, aux, x):
    mod = mx.mod.Module(sym, label_names=None, context=mx.cpu())
    mod.bind(data_shapes=[("data", x.shape)], for_training=False)
    mod.set_params(args, aux)
    mod.forward(mx.io.DataBatch([x]), is_train=False)
    return mx.nd.amp_cast(mod.get_outputs()[0], dtype="float32").asnumpy()


# --- Module API: converted checkpoints bind from the data shape alone -----------------------------------

@pytest.mark.parametrize("offline", [True, False])
def test_converted_checkpoint_binds_in_module(tmp_path, offline):
    x = mx.nd.array(np.random.RandomState(1).uniform(-1, 1, (1, 3, 8, 8)))
    sym, args, aux = _checkpoint(_cnn(), tmp_path, x.shape)
    ref = _module_forward(sym, args, aux, x)
    low, low_args, low_aux = amp.convert_model(sym, args, aux, "bfloat16", cast_params_offline=offline)
    prefix = str(tmp_path / "bf16")
    mx.model.save_checkpoint(prefix, 0, low, low_args, low_aux, remove_amp_cast=False)
    low, low_args, low_aux = mx.model.load_checkpoint(prefix, 0)
    marked = {n["name"]: n["attrs"]["__dtype__"] for n in _nodes(low) if n["op"] == "null" and
              "__dtype__" in n.get("attrs", {})}
    assert set(marked) == set(args), "every parameter variable carries its dtype, the data does not"
    assert {marked[k] for k in args} == ({"12"} if offline else {"0"})  # emulated too: stored in bfloat16
    out = _module_forward(low, low_args, low_aux, x)  # binds from data_shapes alone
    assert np.abs(out - ref).max() <= 2 ** -6 * np.abs(ref).max() + 1e-3
    assert np.abs(out - ref).max() > 0  # it really ran in bfloat16


def test_convert_symbol_marks_every_known_variable():
    low = amp.convert_symbol(_cnn(), "bfloat16", cast_params_offline=True, input_names=["data"], emulate=False)
    marked = {n["name"]: n.get("attrs", {}).get("__dtype__") for n in _nodes(low) if n["op"] == "null"}
    assert marked == {"data": None, "conv_weight": "12", "conv_bias": "12", "fc_weight": "12", "fc_bias": "12"}
    arg_types, _, _ = low.infer_type(data=np.float32)  # types follow from the data type alone
    assert [t == BF16 for t in arg_types] == [False, True, True, True, True]


# --- the v1.x keyword names and call forms --------------------------------------------------------------

def test_data_names_and_cast_optional_params_mean_the_new_names():
    sym = _cnn()
    new = amp.convert_symbol(sym, "bfloat16", input_names=["data"], cast_params_offline=True, emulate=False)
    with pytest.warns(DeprecationWarning, match="'data_names' is deprecated.*'input_names'"):
        old = amp.convert_symbol(sym, "bfloat16", data_names=["data"], cast_optional_params=True, emulate=False)
    assert old.tojson(remove_amp_cast=False) == new.tojson(remove_amp_cast=False)
    with pytest.warns(DeprecationWarning, match="cast_optional_params"):  # contrib's positional order
        positional = amp.convert_symbol(sym, "bfloat16", None, None, None, None, ["data"], True, emulate=False)
    assert positional.tojson(remove_amp_cast=False) == new.tojson(remove_amp_cast=False)
    with pytest.raises(TypeError, match="both 'input_names'.*'data_names'"):
        amp.convert_symbol(sym, "bfloat16", input_names=["x"], data_names=["data"])
    with pytest.raises(TypeError, match="unexpected keyword argument 'cast_params'"):
        amp.convert_symbol(sym, "bfloat16", cast_params=True)


def test_convert_model_cast_optional_params(tmp_path):
    sym, args, aux = _checkpoint(_cnn(), tmp_path, (1, 3, 8, 8))
    _, new_args, _ = amp.convert_model(sym, args, aux, "bfloat16", cast_params_offline=True)
    with pytest.warns(DeprecationWarning, match="'cast_optional_params' is deprecated.*'cast_params_offline'"):
        _, old_args, _ = amp.convert_model(sym, args, aux, "bfloat16", cast_optional_params=True)
    assert {k: v.dtype for k, v in old_args.items()} == {k: v.dtype for k, v in new_args.items()}
    for k in new_args:
        np.testing.assert_array_equal(mx.nd.amp_cast(old_args[k], dtype="float32").asnumpy(),
                                      mx.nd.amp_cast(new_args[k], dtype="float32").asnumpy())


class _Net(nn.HybridBlock):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2D(4, 3, padding=1)
        self.dense = nn.Dense(3)

    def hybrid_forward(self, F, x):
        return self.dense(F.relu(self.conv(x)))


def _net_and_data():
    net = _Net()
    net.initialize(mx.init.Uniform(0.5))
    return net, mx.nd.array(np.random.RandomState(2).uniform(-1, 1, (2, 3, 8, 8)))


def test_contrib_convert_hybrid_block_form_uses_the_cached_graph():
    net, x = _net_and_data()
    with pytest.raises(RuntimeError, match=r"without a data example.*hybridize\(\).*run it once"):
        amp.convert_hybrid_block(net, "bfloat16", ctx=mx.cpu())
    net.hybridize()
    net(x)
    master = amp.convert_hybrid_block(net, x, "bfloat16", device=mx.cpu(), cast_params_offline=True)
    contrib = amp.convert_hybrid_block(net, "bfloat16", None, None, None, None, mx.cpu(), False)
    with pytest.warns(DeprecationWarning, match="cast_optional_params"):
        contrib_offline = amp.convert_hybrid_block(net, "bfloat16", ctx=mx.cpu(), cast_optional_params=True)
    ours = amp.convert_hybrid_block(net, x, "bfloat16", ctx=mx.cpu(), cast_params_offline=False)
    contrib_default = amp.convert_hybrid_block(net, "bfloat16", ctx=mx.cpu())  # weights stored in bfloat16
    for a, b in ((master, contrib_offline), (ours, contrib), (master, contrib_default)):
        assert {k: p.dtype for k, p in a.collect_params().items()} == \
            {k: p.dtype for k, p in b.collect_params().items()}
        np.testing.assert_array_equal(mx.nd.amp_cast(a(x), dtype="float32").asnumpy(),
                                      mx.nd.amp_cast(b(x), dtype="float32").asnumpy())
    with pytest.raises(TypeError, match="layout needs a data example"):
        amp.convert_hybrid_block(net, "bfloat16", layout="NHWC")
    with pytest.raises(TypeError, match="both ctx=.*and device="):
        amp.convert_hybrid_block(net, x, "bfloat16", ctx=mx.cpu(0), device=mx.cpu(1))


# --- the list modules ------------------------------------------------------------------------------------

@pytest.mark.parametrize("module, lp, dtype", [(symbol_fp16, "FP16", "float16"), (symbol_bf16, "BF16", "bfloat16")])
def test_list_modules_cover_every_registered_op_once(module, lp, dtype):
    lists = {name: getattr(module, name) for name in (lp + "_FUNCS", lp + "_FP32_FUNCS", "FP32_FUNCS",
                                                      "WIDEST_TYPE_CASTS")}
    lists["CONDITIONAL_FP32_FUNCS"] = [op for op, _, _ in module.CONDITIONAL_FP32_FUNCS]
    for name, ops in lists.items():
        assert type(ops) is list, name  # plain lists, as upstream code expects
        assert not [op for op, n in collections.Counter(ops).items() if n > 1], name
    counts = collections.Counter(op for ops in lists.values() for op in set(ops))
    assert not [op for op, n in counts.items() if n > 1], "an op in two lists"
    required = {op for op in mx.operator.get_all_registered_operators() if not op.startswith("_backward")}
    if not mx.runtime.Features().is_enabled("CUDA"):
        required |= set(groups.GPU_BUILD_ONLY)  # the lists serve the mxnet-cu1xx wheels too
    assert set(counts) == required  # every registered forward op (this project's ops included) once
    assert set(module.LOSS_OUTPUT_FUNCTIONS) <= set(module.FP32_FUNCS)
    for op, attr, values in module.CONDITIONAL_FP32_FUNCS:
        assert isinstance(attr, str) and type(values) is list and attr in mx.operator.get_operator_arguments(op).names
    assert module.__dict__[lp + "_FUNCS"] == amp.list_lp16_ops(dtype)  # derived from one source of truth
    assert "FullyConnected" in module.__dict__[lp + "_FUNCS"] and "softmax" in module.FP32_FUNCS


def test_list_lp16_use_fp32_params():
    assert amp.list_lp16_use_fp32_params("float16") is None  # as MXNet 2.0
    params = amp.list_lp16_use_fp32_params("bfloat16")
    assert params["BatchNorm"] == ["", "gamma", "beta", "moving_mean", "moving_var"]
    assert symbol_bf16.BF16_USE_FP32_PARAMS == params
    data = mx.sym.var("data")
    bn = mx.sym.BatchNorm(data, name="bn")
    # what the list says is what MXNet's type inference asks for when the data is bfloat16
    from mxnet.amp.graph.infer import lp_input_dtypes
    node = next(n for n in _nodes(bn) if n["name"] == "bn")
    wants = lp_input_dtypes(node, "bfloat16")
    assert [w == "float32" for w in wants] == [bool(name) for name in params["BatchNorm"]]


# --- override semantics: the upstream names replace the built-in lists ------------------------------------

def test_target_precision_ops_replaces_the_built_in_list():
    amp.init("bfloat16", target_precision_ops=["exp"])
    policy = amp.current_policy()
    assert policy.action("exp") == LP16
    assert policy.action("FullyConnected") == FOLLOW    # dropped from the replaced list: follows its inputs
    assert policy.action("softmax") == FP32             # the other lists stay built-in
    assert policy.action("elemwise_add") == WIDEST
    x = mx.nd.array(np.random.RandomState(3).uniform(-1, 1, (4, 6)))
    w = mx.nd.array(np.random.RandomState(4).uniform(-1, 1, (5, 6)))
    out = mx.nd.FullyConnected(x, w, no_bias=True, num_hidden=5)
    with amp.disable():
        ref = mx.nd.FullyConnected(x, w, no_bias=True, num_hidden=5)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out.asnumpy(), ref.asnumpy())  # float32 inputs: plain float32, not rounded


@pytest.mark.skipif(not NATIVE_BF16, reason="runs oneDNN's bfloat16 FullyConnected (AVX-512)")
def test_dropped_ops_follow_low_precision_inputs_imperatively():
    amp.init("bfloat16", target_precision_ops=["exp"], emulate=False)
    x = mx.nd.exp(mx.nd.array(np.random.RandomState(3).uniform(-1, 1, (4, 6))))
    w = mx.nd.array(np.random.RandomState(4).uniform(-1, 1, (5, 6)))
    assert x.dtype == BF16
    out = mx.nd.FullyConnected(x, w, no_bias=True, num_hidden=5)  # the float32 weight is cast to bfloat16
    assert out.dtype == BF16


def test_dropped_ops_follow_low_precision_inputs_in_conversion():
    class Net(nn.HybridBlock):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2D(4, 3)
            self.deconv = nn.Conv2DTranspose(4, 3)
            self.dense = nn.Dense(4)

        def hybrid_forward(self, F, x):
            return self.dense(F.reshape(self.deconv(self.conv(x)), (0, -1)))

    net = Net()
    net.initialize(mx.init.Uniform(0.5))
    x = mx.nd.array(np.random.RandomState(6).uniform(-1, 1, (2, 3, 8, 8)))
    ref = net(x).asnumpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        low = amp.convert_hybrid_block(net, x, "bfloat16", target_dtype_ops=["Convolution"],
                                       fp32_ops=["FullyConnected"], cast_params_offline=True)
    dtypes = {k: p.dtype for k, p in low.collect_params().items()}
    stored = BF16  # as upstream; an emulated graph reads it through an exact cast to float32
    assert dtypes == {p.name: (np.float32 if p in (net.dense.weight, net.dense.bias) else stored)
                      for p in net.collect_params().values()}
    # Deconvolution is in neither given list: its input arrives in bfloat16, so it runs in bfloat16 too
    out = mx.nd.amp_cast(low(x), dtype="float32").asnumpy()
    assert 0 < np.abs(out - ref).max() <= 2 ** -6 * np.abs(ref).max()
    params = low.collect_params()
    np.testing.assert_array_equal(
        mx.nd.amp_cast(params[net.deconv.weight.name].data(), dtype="float32").asnumpy(),
        mx.nd.amp_cast(mx.nd.amp_cast(net.deconv.weight.data(), dtype=BF16), dtype="float32").asnumpy())


def test_empty_target_dtype_ops_leaves_fully_connected_in_float32():
    fc = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=4, name="fc")
    for fuse in (False, True):
        low = amp.convert_symbol(fc, "bfloat16", target_dtype_ops=[], emulate=False, fuse=fuse)
        assert not any(n["op"] in ("amp_cast", "amp_round") for n in _nodes(low)), fuse
        low = amp.convert_symbol(fc, "bfloat16", emulate=False, fuse=fuse)
        assert any(n["op"] == "amp_cast" and n["attrs"]["dtype"] == "bfloat16" for n in _nodes(low)), fuse


@pytest.mark.parametrize("emulate", [False, True])
def test_dropped_ops_follow_low_precision_through_neutral_ops(emulate):
    data = mx.sym.var("data")
    h = mx.sym.Convolution(data, num_filter=4, kernel=(3, 3), name="conv")
    h = mx.sym.Flatten(mx.sym.Pooling(h, kernel=(2, 2), pool_type="avg", name="pool"), name="flat")
    fc = mx.sym.FullyConnected(h, num_hidden=3, name="fc")
    out = mx.sym.FullyConnected(mx.sym.var("other"), num_hidden=3, name="fc_fp32") + fc
    low = amp.convert_symbol(out, "bfloat16", target_dtype_ops=["Convolution"], emulate=emulate, fuse=False)
    nodes = _nodes(low)
    fc_node = next(n for n in nodes if n["name"] == "fc")
    weight = nodes[fc_node["inputs"][1][0]]
    assert weight["op"] == ("amp_round" if emulate else "amp_cast") and weight["attrs"]["dtype"] == "bfloat16"
    fc32 = next(n for n in nodes if n["name"] == "fc_fp32")  # no low precision input: stays float32
    assert all(nodes[src]["op"] == "null" for src, _, _ in fc32["inputs"])


def test_fp32_ops_and_conditional_fp32_ops_replace_the_built_in_lists():
    data = mx.sym.var("data")
    h = mx.sym.FullyConnected(data, num_hidden=4, name="fc")
    out = mx.sym.softmax(mx.sym.Activation(h, act_type="softrelu", name="soft"), name="sm")
    default = amp.convert_symbol(out, "bfloat16", emulate=False, fuse=False, kernels="mxnet")
    assert _casts_into(default, "soft") == {0: "float32"} and _casts_into(default, "sm") == {}
    replaced = amp.convert_symbol(out, "bfloat16", fp32_ops=["Activation"], conditional_fp32_ops=[],
                                  emulate=False, fuse=False, kernels="mxnet")
    assert _casts_into(replaced, "soft") == {0: "float32"}  # named: float32
    sm = next(n for n in _nodes(replaced) if n["name"] == "sm")
    assert _nodes(replaced)[sm["inputs"][0][0]]["name"] == "soft"  # softmax dropped from fp32: follows (fp32)
    only_cond = amp.convert_symbol(out, "bfloat16", conditional_fp32_ops=[("softmax", "axis", ["-1"])],
                                   emulate=False, fuse=False, kernels="mxnet")
    assert _casts_into(only_cond, "soft") == {}  # softrelu entry replaced: follows the bfloat16 FullyConnected


def test_replacing_lists_are_validated_as_upstream():
    x, y = mx.sym.var("x"), mx.sym.var("y")
    res = mx.sym.FullyConnected(x, y, num_hidden=10, no_bias=True) + mx.sym.sin(y)
    with pytest.raises(ValueError, match=r"fp32_ops names '_plus'.*widest-type cast.*extra_fp32_ops"):
        amp.convert_symbol(res, "bfloat16", target_dtype_ops=["FullyConnected"], fp32_ops=["_plus"], kernels="mxnet")
    for kwargs in ({"fp32_ops": ["Activation"], "conditional_fp32_ops": [("Activation", "act_type", ["selu"])]},
                   {"target_dtype_ops": ["FullyConnected"], "fp32_ops": ["FullyConnected"]}):
        with pytest.raises(ValueError, match="named in both"):
            amp.convert_symbol(res, "bfloat16", **kwargs, kernels="mxnet")
    for kwargs in ({"fp32_ops": ["elemwise_add"]}, {"target_dtype_ops": ["FullyConnected"],
                                                    "fp32_ops": ["FullyConnected"]}):
        with pytest.raises(AssertionError) as err:  # what code and tests written for contrib catch
            amp.convert_symbol(res, "bfloat16", **kwargs, kernels="mxnet")
        assert isinstance(err.value, ValueError)
    low = amp.convert_symbol(res, "bfloat16", target_dtype_ops=["FullyConnected"], extra_fp32_ops=["_plus"],
                             emulate=False, fuse=False, kernels="mxnet")
    add = next(n for n in _nodes(low) if n["op"] == "elemwise_add")  # `+` is _plus, an alias
    assert set(_casts_into(low, add["name"]).values()) == {"float32"}  # the additive name may force it
    amp.init("bfloat16", fp32_ops=["_plus"])  # amp.init does not restrict the lists, as upstream's
    assert amp.current_policy().action("_plus") == FP32


def test_extra_ops_add_to_the_lists():
    data = mx.sym.var("data")
    h = mx.sym.Convolution(data, num_filter=4, kernel=(3, 3), name="conv")
    out = mx.sym.FullyConnected(mx.sym.exp(h, name="e"), num_hidden=3, name="fc")
    low = amp.convert_symbol(out, "bfloat16", extra_fp32_ops=["FullyConnected"], extra_lp16_ops=["exp"],
                             emulate=False, fuse=False)
    assert _casts_into(low, "conv") == {0: "bfloat16", 1: "bfloat16", 2: "bfloat16"}  # built-in: still lp16
    assert set(_casts_into(low, "fc").values()) == {"float32"}
    amp.init("bfloat16", extra_fp32_ops=["FullyConnected"])
    assert amp.current_policy().action("Convolution") == LP16
    assert amp.current_policy().action("FullyConnected") == FP32
    assert amp.current_policy().action("softmax") == FP32


# --- fusion and offline casting ---------------------------------------------------------------------------

def _fused(sym):
    return [n for n in _nodes(sym) if n["op"].startswith("_sg_mkldnn")]


def test_fused_nodes_honour_conditional_fp32_ops():
    data = mx.sym.var("data")
    fc = mx.sym.FullyConnected(data, num_hidden=4, no_bias=True, name="fc")
    plain = amp.convert_symbol(fc, "bfloat16", emulate=False, fuse=True, kernels="mxnet")
    assert _fused(plain) and set(_casts_into(plain, _fused(plain)[0]["name"]).values()) == {"bfloat16"}
    cond = amp.convert_symbol(fc, "bfloat16", conditional_fp32_ops=[("FullyConnected", "no_bias", ["True"])],
                              emulate=False, fuse=True, kernels="mxnet")
    fused = _fused(cond)
    assert fused and not any(n["op"] == "amp_cast" for n in _nodes(cond))  # the fused node stays float32
    soft = mx.sym.Activation(mx.sym.FullyConnected(data, num_hidden=4, name="fc"), act_type="softrelu")
    built_in = amp.convert_symbol(soft, "bfloat16", emulate=False, fuse=True, kernels="mxnet")
    assert _fused(built_in) and not any(n["op"] == "amp_cast" for n in _nodes(built_in))  # softrelu inside


def test_offline_casting_without_parameters_casts_the_variables_marked_with_a_dtype():
    x, w = mx.sym.var("x"), mx.sym.var("w", dtype="float32")  # contrib's rule: __dtype__ set = a parameter
    fc = mx.sym.FullyConnected(x, w, no_bias=True, num_hidden=4, name="fc")
    low = amp.convert_symbol(fc, "bfloat16", cast_params_offline=True, emulate=False, fuse=False)
    args, _, _ = low.infer_type(x="float32")
    assert dict(zip(low.list_arguments(), args)) == {"x": np.float32, "w": BF16}
    with pytest.warns(UserWarning, match="has none, so nothing is cast offline"):
        unmarked = amp.convert_symbol(_cnn(), "bfloat16", cast_params_offline=True, emulate=False, fuse=False)
    assert set(_casts_into(unmarked, "conv").values()) == {"bfloat16"}  # weights cast in the graph instead


def test_ops_after_a_residual_sum_know_their_dtype():
    # conv -> BN -> relu -> (+ shortcut conv) -> pool -> FC, only Convolution listed: FC follows the bfloat16
    # sum and its weights must be declared bfloat16 for the symbol to bind (ResNet checkpoints, v1.x style).
    data = mx.sym.var("data")
    h = mx.sym.Convolution(data, num_filter=4, kernel=(3, 3), pad=(1, 1), name="conv1")
    h = mx.sym.Activation(mx.sym.BatchNorm(h, name="bn1"), act_type="relu", name="relu1")
    h = mx.sym.Convolution(h, num_filter=4, kernel=(3, 3), pad=(1, 1), name="conv2")
    h = h + mx.sym.Convolution(data, num_filter=4, kernel=(1, 1), name="sc")
    h = mx.sym.BatchNorm(h + mx.sym.Convolution(h, num_filter=4, kernel=(1, 1), name="conv3"), name="bn2")
    h = mx.sym.Pooling(h, kernel=(2, 2), stride=(2, 2), pool_type="avg", name="pool")
    out = mx.sym.FullyConnected(mx.sym.flatten(h), num_hidden=3, name="fc")
    for offline in (False, True):
        low = amp.convert_symbol(out, "bfloat16", target_dtype_ops=["Convolution"], input_names=["data"],
                                 cast_params_offline=offline, emulate=False, fuse=False)
        exe = low.simple_bind(mx.cpu(), data=(1, 3, 8, 8), grad_req="null")
        dtypes = dict(zip(low.list_arguments(), (a.dtype for a in exe.arg_arrays)))
        assert dtypes["fc_weight"] == dtypes["fc_bias"] == BF16
        assert dtypes["conv1_weight"] == (BF16 if offline else np.float32)
        assert not [n for n in _nodes(low) if n["op"] == "amp_multicast"]  # both summands arrive in bfloat16


def test_offline_casting_follows_the_users_casts():
    data = mx.sym.var("data")
    w, b = mx.sym.var("w"), mx.sym.var("b")
    h = mx.sym.FullyConnected(data, mx.sym.amp_cast(w, dtype=BF16), no_bias=True, num_hidden=4, name="fc")
    h, b_low = mx.sym.amp_multicast(h, b, num_outputs=2, cast_narrow=True)
    out = mx.sym.broadcast_add(h, b_low, name="add")
    rng = np.random.RandomState(5)
    params = {"w": mx.nd.array(rng.uniform(-1, 1, (4, 6))), "b": mx.nd.array(rng.uniform(-1, 1, (1, 4)))}
    low, args, _ = amp.convert_model(out, params, {}, "bfloat16", cast_params_offline=True, emulate=False,
                                     fuse=False, kernels="mxnet")
    assert args["w"].dtype == BF16 and args["b"].dtype == BF16
    assert not any(n["op"] == "amp_cast" and n["inputs"][0][0] == i for n in _nodes(low)
                   for i, v in enumerate(_nodes(low)) if v["name"] == "w")  # the user's cast is gone
    np.testing.assert_array_equal(mx.nd.amp_cast(args["w"], dtype="float32").asnumpy(),
                                  mx.nd.amp_cast(mx.nd.amp_cast(params["w"], dtype=BF16), dtype="float32")
                                  .asnumpy())
    _, args16, _ = amp.convert_model(out, params, {}, "float16", cast_params_offline=True, emulate=False,
                                     kernels="mxnet")
    assert args16["w"].dtype == BF16  # the user's bfloat16 cast decides, whatever the target
    wide = mx.sym.amp_multicast(mx.sym.FullyConnected(data, w, no_bias=True, num_hidden=4), b, num_outputs=2)
    _, args_wide, _ = amp.convert_model(mx.sym.broadcast_add(wide[0], wide[1]), params, {}, "bfloat16",
                                        cast_params_offline=True, emulate=False, fuse=False, kernels="mxnet")
    assert args_wide["b"].dtype == np.float32  # widest of (bf16, fp32) is fp32: b is read in float32


def test_parameters_of_ops_that_follow_are_low_precision_without_offline_casting():
    data = mx.sym.var("data")
    h = mx.sym.BatchNorm(mx.sym.Convolution(data, num_filter=4, kernel=(2, 3), name="conv"), name="bn")
    out = mx.sym.FullyConnected(h, num_hidden=5, name="fc")
    arg_shapes, _, aux_shapes = out.infer_shape(data=(1, 3, 8, 8))
    rng = np.random.RandomState(7)
    args = {n: mx.nd.array(rng.uniform(-1, 1, s)) for n, s in zip(out.list_arguments(), arg_shapes) if n != "data"}
    aux = {n: mx.nd.array(rng.uniform(0.5, 1, s)) for n, s in zip(out.list_auxiliary_states(), aux_shapes)}
    _, low_args, low_aux = amp.convert_model(out, args, aux, "bfloat16", target_dtype_ops=["Convolution"],
                                             emulate=False, fuse=False)  # fused, BatchNorm would be folded
    # FullyConnected is in neither given list and reads the bfloat16 BatchNorm output: its parameters are
    # stored in bfloat16 (as mxnet.contrib.amp does); the convolution's keep float32 (cast in the graph)
    assert {k: v.dtype for k, v in low_args.items()} == {"conv_weight": np.float32, "conv_bias": np.float32,
                                                         "bn_gamma": np.float32, "bn_beta": np.float32,
                                                         "fc_weight": BF16, "fc_bias": BF16}
    assert all(v.dtype == np.float32 for v in low_aux.values())


def test_offline_casting_through_casts_that_are_outputs():
    data = mx.sym.var("data")
    both_low = mx.sym.Group([mx.sym.amp_cast(data, dtype=BF16), mx.sym.amp_cast(data, dtype=BF16)])
    mixed = mx.sym.Group([mx.sym.amp_cast(data, dtype=BF16), mx.sym.amp_cast(data, dtype="float32")])
    for sym, dtype in ((both_low, BF16), (mixed, np.float32)):
        low = amp.convert_symbol(sym, "bfloat16", input_names=[], cast_params_offline=True)
        exe = low.simple_bind(mx.cpu(), data=(1, 2))
        assert exe.arg_arrays[0].dtype == dtype


# --- convert_bucketing_module -----------------------------------------------------------------------------

def _bucketing_module():
    def sym_gen(length):
        data = mx.sym.var("data")
        emb = mx.sym.Embedding(data, input_dim=10, output_dim=6, name="emb")
        out = mx.sym.FullyConnected(emb, num_hidden=4, flatten=False, name="fc")
        return mx.sym.sum(out, axis=1), ("data",), None
    mod = mx.mod.BucketingModule(sym_gen, default_bucket_key=5, context=mx.cpu())
    mod.bind(data_shapes=[("data", (2, 5))], for_training=False)
    mx.random.seed(0)
    mod.init_params(mx.init.Uniform(0.5))
    return mod


def _bucket_forward(mod, length):
    x = mx.nd.array(np.random.RandomState(length).randint(0, 10, (2, length)))
    mod.forward(mx.io.DataBatch([x], bucket_key=length, provide_data=[mx.io.DataDesc("data", (2, length))]),
                is_train=False)
    return mx.nd.amp_cast(mod.get_outputs()[0], dtype="float32").asnumpy()


@pytest.mark.parametrize("offline", [True, False])
def test_convert_bucketing_module(offline):
    mod = _bucketing_module()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the emulation warning on CPUs without AVX-512
        low = amp.convert_bucketing_module(mod, "bfloat16", cast_params_offline=offline)
    assert isinstance(low, mx.mod.BucketingModule) and not low.binded and low.params_initialized
    dtypes = {k: v.dtype for k, v in low.get_params()[0].items()}
    assert dtypes["fc_weight"] == (BF16 if offline else np.float32)
    assert dtypes["emb_weight"] == np.float32  # Embedding is neutral: its weight is read in float32
    low.bind(data_shapes=[("data", (2, 5))], for_training=False)
    for length in (5, 3):  # the default bucket and one built on first use
        ref, out = _bucket_forward(mod, length), _bucket_forward(low, length)
        assert 0 < np.abs(out - ref).max() <= 2 ** -6 * np.abs(ref).max()
    assert any(n["op"] in ("amp_cast", "amp_round") and n["attrs"]["dtype"] == "bfloat16"
               for n in _nodes(low._buckets[3].symbol))  # the new bucket's symbol was converted too
    with pytest.raises(ValueError, match="must be bound"):
        amp.convert_bucketing_module(mx.mod.BucketingModule(mod._sym_gen, 5), "bfloat16")
    with pytest.raises(TypeError, match="BucketingModule"):
        amp.convert_bucketing_module(mx.mod.Module(_cnn()), "bfloat16")


def test_offline_casting_narrows_variables_that_meet_only_in_a_multicast():
    # mxnet.contrib.amp's rule: an amp_multicast of variables only gives them the target dtype (also when one
    # of them is the user's amp_cast to it); a multicast with a computed input keeps the widest dtype
    data, data3 = mx.sym.var("data", dtype="float32"), mx.sym.var("data3", dtype="float32")
    data2 = mx.sym.var("data2", dtype=BF16)
    both = mx.sym.Group([mx.sym.amp_multicast(data, data2, num_outputs=2), mx.sym.amp_cast(data, dtype=BF16)])
    low = amp.convert_symbol(both, "bfloat16", target_dtype_ops=[], fp32_ops=[], cast_params_offline=True)
    exe = low.simple_bind(mx.cpu(), data=(1, 2), data2=(1, 2), grad_req="null")
    assert [a.dtype for a in exe.arg_arrays] == [BF16, BF16]
    mixed = mx.sym.amp_multicast(data, mx.sym.elemwise_add(data2, data3), num_outputs=2)
    low = amp.convert_symbol(mixed, "bfloat16", target_dtype_ops=[], fp32_ops=[], cast_params_offline=True)
    exe = low.simple_bind(mx.cpu(), data=(1, 2), data2=(1, 2), data3=(1, 2), grad_req="null")
    assert exe.arg_arrays[0].dtype == np.float32
    conflict = mx.sym.Group([mx.sym.amp_cast(data, dtype=BF16), mx.sym.amp_cast(data, dtype="float32")])
    low = amp.convert_symbol(conflict, "bfloat16", cast_params_offline=True, input_names=[])
    assert low.simple_bind(mx.cpu(), data=(1, 2), grad_req="null").arg_arrays[0].dtype == np.float32


def test_convert_symbol_keeps_the_ops_and_convert_model_fuses():
    # upstream's convert_symbol only inserts casts: mx.test_utils.same_symbol_structure against a hand-built
    # graph holds wherever bfloat16 runs natively; convert_model and convert_hybrid_block fuse on CPU
    x, y = mx.sym.var("x"), mx.sym.var("y")
    res = mx.sym.FullyConnected(x, y, num_hidden=10, no_bias=True) + mx.sym.sin(y)
    low = amp.convert_symbol(res, target_dtype="bfloat16", target_dtype_ops=["FullyConnected"], fp32_ops=["sin"])
    expected = mx.sym.amp_cast(mx.sym.FullyConnected(mx.sym.amp_cast(x, dtype=BF16), mx.sym.amp_cast(y, dtype=BF16),
                                                     num_hidden=10, no_bias=True), dtype="float32") + mx.sym.sin(y)
    ops = [n["op"] for n in _nodes(low)]
    assert "FullyConnected" in ops and not any(op.startswith("_sg_mkldnn") for op in ops)
    if NATIVE_BF16:
        assert mx.test_utils.same_symbol_structure(low, expected)
    else:  # emulated: amp_round in place of the casts
        assert ops.count("amp_round") == 3
    if NATIVE_BF16 and mx.runtime.Features().is_enabled("MKLDNN"):
        fused = amp.convert_symbol(res, "bfloat16", target_dtype_ops=["FullyConnected"], fp32_ops=["sin"],
                                   fuse=True)
        assert "_sg_mkldnn_fully_connected" in [n["op"] for n in _nodes(fused)]


def test_conversion_targets_the_default_context():
    # mx.test_utils.set_default_context(mx.gpu(0)) (or `with mx.Context(...)`) makes float16 conversions
    # native, as upstream's GPU tests expect, without a GPU being needed to convert
    sym = _cnn()
    with mx.Context("gpu", 0):
        low = amp.convert_symbol(sym, "float16")
    ops = [n["op"] for n in _nodes(low)]
    if native_support("float16", "gpu"):  # (MXNET_AMP_EMULATE=1 emulates everywhere)
        assert "amp_round" not in ops and "amp_cast" in ops  # float16 runs natively on GPUs: no emulation
    assert "amp_round" in [n["op"] for n in _nodes(amp.convert_symbol(sym, "float16"))]  # CPU: emulated
