"""Inference conversion: parameter dtypes, cast elimination, summary numbers, runnable results (CPU).

float16 numerics need a GPU (MXNet's CPU float16 kernels are incomplete): see tests/python/gpu/.
bfloat16 runs emulated on CPUs without AVX-512 (float32 kernels, values rounded to bfloat16).
"""
import collections
import json
import warnings

import numpy as np
import pytest

import mxnet as mx
from mxnet.gluon import nn, HybridBlock
from mxnet.amp.inference import blocks, convert as C
from mxnet.amp.base.dtypes import dtype_name

from amp_testing import bf16_round

from mxnet.amp.base.dtypes import BFLOAT16 as BF16

DTYPES = ("float16", "bfloat16")


def _nodes(sym):
    return json.loads(sym.tojson(remove_amp_cast=False))["nodes"]


def _mlp_symbol():
    x = mx.sym.var("data")
    h = mx.sym.FullyConnected(x, num_hidden=16, name="fc1")
    h = mx.sym.Activation(h, act_type="relu", name="relu1")
    return mx.sym.FullyConnected(h, num_hidden=4, name="fc2")


def _params(sym, **shapes):
    arg_shapes, _, aux_shapes = sym.infer_shape(**shapes)
    rng = np.random.RandomState(0)
    args = {n: mx.nd.array(rng.normal(0, 0.5, s)) for n, s in zip(sym.list_arguments(), arg_shapes)
            if n not in shapes}
    aux = {n: mx.nd.array(rng.uniform(0.5, 1.5, s)) for n, s in zip(sym.list_auxiliary_states(), aux_shapes)}
    return args, aux


def _cnn_symbol():
    x = mx.sym.var("data")
    y = mx.sym.Convolution(x, num_filter=8, kernel=(3, 3), pad=(1, 1), name="conv1")
    y = mx.sym.BatchNorm(y, fix_gamma=False, name="bn1")
    y = mx.sym.Activation(y, act_type="relu", name="relu1")
    y = mx.sym.Pooling(y, global_pool=True, kernel=(1, 1), pool_type="avg", name="pool")
    y = mx.sym.Flatten(y, name="flat")
    return mx.sym.FullyConnected(y, num_hidden=5, name="fc")


def _forward(sym, args, aux, **data):
    feed = dict(args, **{k: mx.nd.array(v) for k, v in data.items()})
    exe = sym.bind(mx.cpu(), feed, aux_states=dict(aux), grad_req="null")
    return [o.astype("float32").asnumpy() for o in exe.forward(is_train=False)]


@pytest.mark.parametrize("dtype", DTYPES)
def test_offline_params_get_exactly_the_target_dtype(dtype):
    sym = _cnn_symbol()
    args, aux = _params(sym, data=(2, 3, 8, 8))
    out = C.convert(sym, args, aux, dtype, cast_params_offline=True, emulate=False, fuse=False)
    got = {k: dtype_name(v.dtype) for k, v in dict(out.arg_params, **out.aux_params).items()}
    # MXNet's contrib.amp stored bfloat16 models' weights as float16; here every lp16 weight is the target.
    assert got["conv1_weight"] == got["conv1_bias"] == got["fc_weight"] == got["fc_bias"] == dtype
    # BatchNorm parameters and statistics are read in float32: they stay float32.
    for name in ("bn1_gamma", "bn1_beta", "bn1_moving_mean", "bn1_moving_var"):
        assert got[name] == "float32", name
    np.testing.assert_array_equal(out.arg_params["fc_weight"].astype("float32").asnumpy(),
                                  _lp(args["fc_weight"].asnumpy(), dtype))
    # No cast reads a parameter that is now stored in the target dtype.
    nodes = _nodes(out.symbol)
    cast_params = {nodes[n["inputs"][0][0]]["name"] for n in nodes if n["op"] == "amp_cast"}
    assert not cast_params & {"conv1_weight", "conv1_bias", "fc_weight", "fc_bias"}
    s = out.summary
    assert s.params_cast == 4
    low = sum(args[n].size for n in ("conv1_weight", "conv1_bias", "fc_weight", "fc_bias"))
    assert s.param_bytes_before - s.param_bytes_after == 2 * low


def _lp(values, dtype):
    return bf16_round(values) if dtype == "bfloat16" else values.astype(np.float16).astype(np.float32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("emulate", [False, True])
def test_one_cast_per_tensor_and_dtype_no_chains(dtype, emulate):
    # data feeds three lp16 consumers and one fp32 consumer (softmax): one cast per (tensor, dtype).
    x = mx.sym.var("data")
    w = mx.sym.var("shared_weight")
    heads = [mx.sym.FullyConnected(x, w, num_hidden=4, no_bias=True, name="fc%d" % i) for i in range(3)]
    total = heads[0] + heads[1] + heads[2]
    sym = mx.sym.Group([mx.sym.softmax(total, name="sm"), mx.sym.softmax(x, name="sm_in")])
    out = C.convert_symbol(sym, dtype, emulate=emulate, fuse=False)
    nodes = _nodes(out)
    cast_ops = ("amp_cast", "amp_round")
    casts = [(n["op"], tuple(n["inputs"][0][:2]), n["attrs"]["dtype"]) for n in nodes if n["op"] in cast_ops]
    assert len(casts) == len(set(casts))
    readers_of_weight = [n for n in nodes if any(nodes[i]["name"] == "shared_weight" for i, _, _ in n["inputs"])]
    assert len(readers_of_weight) == 1
    assert readers_of_weight[0]["op"] == ("amp_round" if emulate else "amp_cast")
    for n in nodes:  # no chains: a cast never reads a cast
        if n["op"] in cast_ops:
            assert nodes[n["inputs"][0][0]]["op"] not in cast_ops, n["name"]


def _reordered(sym):
    """The same graph with another valid topological node order (latest-ready node first)."""
    g = json.loads(sym.tojson(remove_amp_cast=False))
    nodes = g["nodes"]
    deps = [{i for i, _, _ in n["inputs"]} for n in nodes]
    order, done = [], set()
    while len(order) < len(nodes):
        ready = [i for i in range(len(nodes)) if i not in done and deps[i] <= done]
        pick = max(ready, key=lambda i: (nodes[i]["op"] != "null", i))
        order.append(pick)
        done.add(pick)
    assert order != list(range(len(nodes)))
    new_id = {old: new for new, old in enumerate(order)}
    new_nodes = [dict(nodes[o], inputs=[[new_id[i], j, v] for i, j, v in nodes[o]["inputs"]]) for o in order]
    g2 = {"nodes": new_nodes, "heads": [[new_id[i], j, v] for i, j, v in g["heads"]],
          "arg_nodes": [i for i, n in enumerate(new_nodes) if n["op"] == "null"], "attrs": g.get("attrs", {})}
    return mx.sym.load_json(json.dumps(g2))


def _canonical(sym):
    nodes = _nodes(sym)
    return sorted((n["op"], n["name"], json.dumps(n.get("attrs", {}), sort_keys=True),
                   tuple((nodes[i]["name"], j) for i, j, _ in n["inputs"])) for n in nodes)


@pytest.mark.parametrize("dtype", DTYPES)
def test_result_does_not_depend_on_node_order(dtype):
    x = mx.sym.var("data")
    a = mx.sym.FullyConnected(x, num_hidden=4, name="fa")
    b = mx.sym.softmax(mx.sym.FullyConnected(x, num_hidden=4, name="fb"), name="sb")
    c = mx.sym.exp(x, name="ex")
    sym = mx.sym.Group([mx.sym.elemwise_add(a, b, name="add"), c])
    first = C.convert_symbol(sym, dtype, emulate=False, fuse=False)
    second = C.convert_symbol(_reordered(sym), dtype, emulate=False, fuse=False)
    assert _canonical(first) == _canonical(second)


def test_bf16_mlp_matches_numpy_reference():
    sym = _mlp_symbol()
    args, aux = _params(sym, data=(3, 8))
    x = np.random.RandomState(1).uniform(-1, 1, (3, 8)).astype(np.float32)
    out = C.convert(sym, args, aux, "bfloat16", cast_params_offline=True, emulate=True)
    y = _forward(out.symbol, out.arg_params, out.aux_params, data=x)[0]
    p = {k: v.asnumpy() for k, v in args.items()}
    r = bf16_round
    h = r(r(x) @ r(p["fc1_weight"]).T + r(p["fc1_bias"]))
    h = np.maximum(h, 0)
    ref = r(r(h) @ r(p["fc2_weight"]).T + r(p["fc2_bias"]))
    np.testing.assert_allclose(y, ref, rtol=2 ** -7, atol=1e-6)
    assert out.summary.emulated and out.summary.params_cast == 4


def test_bf16_cnn_fused_by_default_and_close_to_fp32():
    sym = _cnn_symbol()
    args, aux = _params(sym, data=(2, 3, 8, 8))
    x = np.random.RandomState(2).uniform(-1, 1, (2, 3, 8, 8)).astype(np.float32)
    out = C.convert(sym, args, aux, "bfloat16", cast_params_offline=True)
    ops = {n["op"] for n in _nodes(out.symbol)}
    # oneDNN-fused: MXNet's fused convolution, or this project's oneDNN 3 one where it runs
    assert out.summary.fused and ("_sg_mkldnn_conv" in ops) != ("amp_convolution" in ops)
    ref = _forward(sym, args, aux, data=x)[0]
    y = _forward(out.symbol, out.arg_params, out.aux_params, data=x)[0]
    np.testing.assert_allclose(y, ref, atol=0.03 * np.abs(ref).max())
    unfused = C.convert(sym, args, aux, "bfloat16", fuse=False)
    assert not unfused.summary.fused and "_sg_mkldnn_conv" not in {n["op"] for n in _nodes(unfused.symbol)}


@pytest.mark.parametrize("dtype", DTYPES)
def test_summary_counts_casts_ops_and_bytes(dtype):
    sym = _mlp_symbol()
    args, aux = _params(sym, data=(3, 8))
    out = C.convert(sym, args, aux, dtype, emulate=False, fuse=False, kernels="mxnet")
    nodes = _nodes(out.symbol)
    s = out.summary
    # data, 2 weights, 2 biases, and the output back to float32
    assert s.casts == sum(n["op"] == "amp_cast" for n in nodes) == 6
    assert dict(s.ops) == {"lp16": 2, "neutral": 1} and dict(s.lp16_modes) == {"native": 2}
    assert s.param_bytes_before == s.param_bytes_after == 4 * sum(a.size for a in args.values())
    assert json.loads(json.dumps(s.as_dict())) == s.as_dict()
    assert "6 amp_cast" in s.format() and "2 native, 0 emulated, 0 in float32" in s.format()


class _Cell(HybridBlock):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.dense = nn.Dense(6, in_units=6)

    def hybrid_forward(self, F, x):
        return F.tanh(self.dense(x))


class _Recursive(HybridBlock):
    """One cell applied three times (weights shared), two inputs and two outputs, nested blocks."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.cell = _Cell()
            self.head = nn.HybridSequential()
            self.head.add(nn.Dense(3, in_units=6))

    def hybrid_forward(self, F, x, y):
        h = x
        for _ in range(3):
            h = self.cell(h + y)
        return self.head(h), F.softmax(h)


@pytest.mark.parametrize("dtype", DTYPES)
def test_recursive_block_stores_and_casts_each_weight_once(dtype):
    net = _Recursive()
    net.initialize(mx.init.Xavier())
    x, y = mx.nd.ones((2, 6)), mx.nd.ones((2, 6))
    inputs, sym, params = blocks.block_graph(net, [x, y])
    args = {k: v for k, v in params.items() if k in sym.list_arguments()}
    for offline in (False, True):
        out = C.convert(sym, args, {}, dtype, cast_params_offline=offline, emulate=False, fuse=False,
                        input_names=[s.name for s in inputs], kernels="mxnet")
        nodes = _nodes(out.symbol)
        weight = net.cell.dense.weight.name
        readers = [n for n in nodes if any(nodes[i]["name"] == weight for i, _, _ in n["inputs"])]
        if offline:
            assert dtype_name(out.arg_params[weight].dtype) == dtype
            assert {n["op"] for n in readers} == {"FullyConnected"} and len(readers) == 3
        else:
            assert len(readers) == 1 and readers[0]["op"] == "amp_cast"
        assert sum(n["name"] == weight for n in nodes) == 1


def test_recursive_block_runs_bf16_with_two_outputs():
    net = _Recursive()
    net.initialize(mx.init.Xavier())
    rng = np.random.RandomState(3)
    x, y = (mx.nd.array(rng.uniform(-1, 1, (2, 6))) for _ in range(2))
    ref = [o.asnumpy() for o in net(x, y)]
    low = blocks.convert_hybrid_block(net, [x, y], "bfloat16", cast_params_offline=True)
    got = [o.astype("float32").asnumpy() for o in low(x, y)]
    assert len(got) == 2
    for r, g in zip(ref, got):
        np.testing.assert_allclose(g, r, atol=0.05 * np.abs(r).max())


def test_numpy_mode_block_converts_and_runs():
    mx.npx.set_np()
    try:
        net = nn.HybridSequential()
        net.add(nn.Dense(8, activation="relu"), nn.Dense(3))
        net.initialize()
        x = mx.np.array(np.random.RandomState(4).uniform(-1, 1, (2, 5)).astype(np.float32))
        ref = net(x).asnumpy()
        low = blocks.convert_hybrid_block(net, x, "bfloat16", cast_params_offline=True)
        out = low(x)
        assert isinstance(out, mx.np.ndarray)
        np.testing.assert_allclose(out.astype("float32").asnumpy(), ref, atol=0.03 * np.abs(ref).max())
    finally:
        mx.npx.reset_np()


@pytest.mark.parametrize("dtype", DTYPES)
def test_native_graph_structure_and_param_dtypes_of_block(dtype):
    net = nn.HybridSequential()
    net.add(nn.Dense(8, activation="relu"), nn.BatchNorm(), nn.Dense(3))
    net.initialize()
    low = blocks.convert_hybrid_block(net, mx.nd.ones((2, 5)), dtype, cast_params_offline=True, emulate=False)
    got = {k: dtype_name(p.dtype) for k, p in low.collect_params().items()}
    assert {got[k] for k in got if k.endswith(("weight", "bias"))} == {dtype}
    assert {got[k] for k in got if "batchnorm" in k} == {"float32"}


def _resnet_graph():
    from mxnet.gluon.model_zoo import vision
    net = vision.resnet18_v1(classes=10)
    net.initialize(mx.init.Xavier())
    inputs, sym, params = blocks.block_graph(net, [mx.nd.ones((1, 3, 32, 32))])
    assert [s.name for s in inputs] == ["data"]
    rng = np.random.RandomState(5)
    for name, arr in params.items():  # BatchNorm statistics that bfloat16 cannot hold exactly
        if "batchnorm" in name:
            arr[:] = rng.uniform(0.5, 1.5, arr.shape)
    args = {k: v for k, v in params.items() if k in sym.list_arguments()}
    aux = {k: v for k, v in params.items() if k in sym.list_auxiliary_states()}
    return sym, args, aux


@pytest.mark.parametrize("dtype, fuse, lp16_ops", [("bfloat16", True, None), ("bfloat16", False, None),
                                                   ("bfloat16", False, ["BatchNorm"]),
                                                   ("float16", False, None)])
def test_native_params_have_the_dtypes_type_inference_wants(dtype, fuse, lp16_ops):
    # oneDNN fuses conv + BatchNorm (+ relu, + residual sum) for bfloat16; the fused kernel folds BatchNorm
    # into the weights in float32, so gamma, beta and the statistics must arrive in float32 even though the
    # fused node runs in bfloat16. The same holds for BatchNorm itself when forced to low precision.
    sym, args, aux = _resnet_graph()
    out = C.convert(sym, args, aux, dtype, extra_lp16_ops=lp16_ops, cast_params_offline=True, emulate=False,
                    fuse=fuse, kernels="mxnet")
    assert out.summary.fused == fuse and not out.summary.emulated
    arg_types, _, aux_types = out.symbol.infer_type(data="float32")  # raises on a dtype conflict
    wanted = dict(zip(out.symbol.list_arguments() + out.symbol.list_auxiliary_states(), arg_types + aux_types))
    stored = {k: dtype_name(v.dtype) for k, v in dict(out.arg_params, **out.aux_params).items()}
    assert stored == {k: dtype_name(wanted[k]) for k in stored}
    # Fusion folds BatchNorm into the convolutions first (in float64): no BatchNorm parameter is left.
    assert {v for k, v in stored.items() if "batchnorm" in k} == (set() if fuse else {"float32"})
    assert {v for k, v in stored.items() if "conv" in k or "dense" in k} == {dtype}
    nodes = _nodes(out.symbol)
    casts = [n for n in nodes if n["op"] == "amp_cast"]
    assert [n["name"] for n in casts[:1]] == ["data_amp_cast_%s" % dtype]
    cast_dtypes = collections.Counter(n["attrs"]["dtype"] for n in casts[1:])
    if dtype == "bfloat16" and not fuse and lp16_ops is None:  # BatchNorm runs in float32 between casts
        bns = sum(n["op"] == "BatchNorm" for n in nodes)
        assert bns and cast_dtypes == {"float32": bns + 1, "bfloat16": bns}
    else:
        assert cast_dtypes == {"float32": 1}  # the output, back to float32
    assert nodes[json.loads(out.symbol.tojson(remove_amp_cast=False))["heads"][0][0]]["op"] == "amp_cast"
    if fuse:
        assert sum(n["op"] == "_sg_mkldnn_conv" for n in nodes) == 20


def test_emulated_fused_graph_rounds_folded_weights_once():
    # emulated: the folded weights are stored in bfloat16 (as upstream stores them) and read through an exact
    # cast to float32; no parameter is rounded in the graph
    from mxnet.amp.graph.fold import fold_batchnorm
    sym, args, aux = _resnet_graph()
    out = C.convert(sym, args, aux, "bfloat16", cast_params_offline=True, emulate=True)
    assert out.summary.fused and out.summary.emulated
    _, folded_args, folded_aux = fold_batchnorm(sym, args, aux)
    got = dict(out.arg_params, **out.aux_params)
    assert sorted(got) == sorted(dict(folded_args, **folded_aux))
    for name, arr in dict(folded_args, **folded_aux).items():
        assert got[name].dtype == BF16, name
        np.testing.assert_array_equal(mx.nd.amp_cast(got[name], dtype="float32").asnumpy(),
                                      bf16_round(arr.asnumpy()), err_msg=name)
    nodes = _nodes(out.symbol)
    rounded = {nodes[n["inputs"][0][0]]["name"] for n in nodes if n["op"] == "amp_round"}
    assert {name for name in rounded if name in set(out.symbol.list_inputs())} == {"data"}  # no parameter


@pytest.mark.parametrize("dtype", DTYPES)
def test_emulation_rounds_after_ops_that_commute_with_rounding(dtype):
    # conv -> relu -> max pool -> flatten -> fc: rounding the conv's output after the max pooling gives the same
    # values as rounding it right away (pooled tensors are smaller; on CPU the oneDNN layout stays unbroken).
    x = mx.sym.var("data")
    y = mx.sym.Convolution(x, num_filter=4, kernel=(3, 3), name="conv")
    y = mx.sym.Activation(y, act_type="relu", name="act")
    y = mx.sym.Pooling(y, kernel=(2, 2), stride=(2, 2), name="pool")  # pool_type defaults to max
    y = mx.sym.Flatten(y, name="flat")
    sym = mx.sym.FullyConnected(y, num_hidden=3, name="fc")
    args, aux = _params(sym, data=(2, 3, 9, 9))
    out = C.convert(sym, args, aux, dtype, emulate=True, fuse=False)
    nodes = _nodes(out.symbol)
    rounded = [nodes[n["inputs"][0][0]]["name"] for n in nodes if n["op"] == "amp_round"]
    assert sorted(rounded) == sorted(["data", "conv_weight", "conv_bias", "flat", "fc_weight", "fc_bias", "fc"])
    # Bit-identical to rounding every emulated op's output where it is made.
    r = {name: mx.sym.amp_round(mx.sym.var(name), dtype=dtype) for name in sym.list_inputs()}
    eager = mx.sym.amp_round(mx.sym.Convolution(r["data"], r["conv_weight"], r["conv_bias"], num_filter=4,
                                                kernel=(3, 3)), dtype=dtype)
    eager = mx.sym.Flatten(mx.sym.Pooling(mx.sym.Activation(eager, act_type="relu"), kernel=(2, 2), stride=(2, 2)))
    eager = mx.sym.amp_round(mx.sym.FullyConnected(mx.sym.amp_round(eager, dtype=dtype), r["fc_weight"],
                                                   r["fc_bias"], num_hidden=3), dtype=dtype)
    x = np.random.RandomState(6).uniform(-1, 1, (2, 3, 9, 9)).astype(np.float32)
    np.testing.assert_array_equal(_forward(out.symbol, args, aux, data=x)[0], _forward(eager, args, aux, data=x)[0])
    # An average pooling does not commute: the conv output is rounded before it.
    conv = mx.sym.Convolution(mx.sym.var("data"), num_filter=4, kernel=(3, 3), name="conv")
    avg = C.convert_symbol(mx.sym.Pooling(conv, kernel=(2, 2), pool_type="avg"), dtype, emulate=True, fuse=False)
    nodes = _nodes(avg)
    assert "conv" in [nodes[n["inputs"][0][0]]["name"] for n in nodes if n["op"] == "amp_round"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_training_rewrite_defers_only_past_moves_with_identical_gradients(dtype):
    # Training graphs: a max pooling's gradient depends on ties that rounding creates, so rounding stays
    # before it; reshapes and transposes only move values (and gradients), so rounding may follow them.
    from mxnet.amp.graph.rewrite import rewrite_symbol
    from mxnet.amp.core.policy import make_policy
    x = mx.sym.var("data")
    y = mx.sym.Convolution(x, num_filter=4, kernel=(3, 3), name="conv")
    y = mx.sym.Pooling(y, kernel=(3, 3), stride=(2, 2), name="pool")
    y = mx.sym.FullyConnected(y, num_hidden=6, flatten=True, name="fc1")
    y = mx.sym.SwapAxis(mx.sym.reshape(y, shape=(0, 2, 3), name="resh"), dim1=1, dim2=2, name="tr")
    sym = mx.sym.FullyConnected(y, num_hidden=2, flatten=False, name="fc2")
    low, _ = rewrite_symbol(sym, make_policy(dtype, emulate=True), "cpu")
    nodes = _nodes(low)
    rounded = sorted(nodes[n["inputs"][0][0]]["name"] for n in nodes if n["op"] == "amp_round")
    assert rounded == sorted(["data", "conv_weight", "conv_bias", "conv", "pool", "fc1_weight", "fc1_bias", "tr",
                              "fc2_weight", "fc2_bias", "fc2"])
    r = {name: mx.sym.amp_round(mx.sym.var(name), dtype=dtype) for name in sym.list_inputs()}
    eager = mx.sym.amp_round(mx.sym.Convolution(r["data"], r["conv_weight"], r["conv_bias"], num_filter=4,
                                                kernel=(3, 3)), dtype=dtype)
    eager = mx.sym.amp_round(mx.sym.Pooling(eager, kernel=(3, 3), stride=(2, 2)), dtype=dtype)
    eager = mx.sym.FullyConnected(eager, r["fc1_weight"], r["fc1_bias"], num_hidden=6)
    eager = mx.sym.SwapAxis(mx.sym.reshape(mx.sym.amp_round(eager, dtype=dtype), shape=(0, 2, 3)), dim1=1, dim2=2)
    eager = mx.sym.amp_round(mx.sym.FullyConnected(eager, r["fc2_weight"], r["fc2_bias"], num_hidden=2,
                                                   flatten=False), dtype=dtype)
    args, _ = _params(sym, data=(2, 3, 9, 9))
    args["data"] = mx.nd.array(np.random.RandomState(8).uniform(-1, 1, (2, 3, 9, 9)))
    head = mx.nd.array(np.random.RandomState(9).uniform(-1, 1, (2, 3, 2)))
    results = []
    for s in (low, eager):
        exe = s.bind(mx.cpu(), {k: v.copy() for k, v in args.items()},
                     args_grad={k: mx.nd.zeros(v.shape) for k, v in args.items()})
        results.append([exe.forward(is_train=True)[0].asnumpy()])
        exe.backward(head)
        results[-1] += [exe.grad_dict[k].asnumpy() for k in sorted(args)]
    for got, want in zip(*results):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_emulation_is_announced_unless_asked_for(dtype, monkeypatch):
    sym = _mlp_symbol()
    monkeypatch.setenv("MXNET_AMP_EMULATE", "1")
    with pytest.warns(UserWarning, match="no %s kernels on this CPU.*emulate=False" % dtype):
        assert C.convert(sym, None, None, dtype, fuse=False).summary.emulated
    for emulate in (True, False):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert C.convert(sym, None, None, dtype, fuse=False, emulate=emulate).summary.emulated == emulate
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")  # as on a CPU with AVX-512; float16 has no CPU kernels at all
    with warnings.catch_warnings():
        warnings.simplefilter("error" if dtype == "bfloat16" else "ignore")
        assert C.convert(sym, None, None, dtype, fuse=False).summary.emulated == (dtype == "float16")
    if dtype == "bfloat16":  # batch_dot has no bfloat16 kernel even there: plain float32, nothing rounded
        att = mx.sym.batch_dot(mx.sym.var("a"), mx.sym.FullyConnected(mx.sym.var("b"), num_hidden=4,
                                                                      flatten=False, name="fc"), name="bd")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out = C.convert(att, None, None, dtype, fuse=False, kernels="mxnet")
        assert dict(out.summary.lp16_modes) == {"native": 1, "float32": 1} and not out.summary.emulated
        nodes = _nodes(out.symbol)
        bd = next(n for n in nodes if n["name"] == "bd")
        assert [nodes[i]["op"] for i, _, _ in bd["inputs"]] == ["null", "amp_cast"]
        assert nodes[bd["inputs"][1][0]]["attrs"]["dtype"] == "float32"
        assert not any(n["op"] == "amp_round" for n in nodes)
    monkeypatch.setenv("MXNET_AMP_EMULATE", "1")
    with pytest.warns(UserWarning) as record:
        C.convert(sym, None, None, dtype, fuse=False)
    assert record[0].filename == __file__  # points at the caller, not at mxnet.amp


def test_excluded_names_and_fp32_ops_stay_float32():
    sym = _mlp_symbol()
    out = C.convert_symbol(sym, "bfloat16", excluded_sym_names=["fc2"], emulate=False, fuse=False)
    nodes = _nodes(out)
    fc2 = next(n for n in nodes if n["name"] == "fc2")
    assert all(nodes[i]["op"] != "amp_cast" or nodes[i]["attrs"]["dtype"] == "float32"
               for i, _, _ in fc2["inputs"])
    sym = _cnn_symbol()
    args, aux = _params(sym, data=(2, 3, 8, 8))
    out = C.convert(sym, args, aux, "bfloat16", fp32_ops=["Convolution"])
    conv = next(n for n in _nodes(out.symbol) if n["op"] == "_sg_mkldnn_conv")
    assert "bfloat16" not in json.dumps([_nodes(out.symbol)[i] for i, _, _ in conv["inputs"]])


def test_convert_symbol_offline_marks_variables():
    out = C.convert_symbol(_mlp_symbol(), "bfloat16", cast_params_offline=True, emulate=False,
                           input_names=["data"])
    attrs = {n["name"]: n.get("attrs", {}).get("__dtype__") for n in _nodes(out) if n["op"] == "null"}
    assert attrs["fc1_weight"] == attrs["fc2_bias"] == "12" and attrs["data"] is None
    _, out_types, _ = out.infer_type(data="float32")
    assert dtype_name(out_types[0]) == "float32"  # outputs back in their original dtype by default
    kept = C.convert_symbol(_mlp_symbol(), "bfloat16", cast_params_offline=True, emulate=False,
                            input_names=["data"], keep_lp16_outputs=True)
    assert dtype_name(kept.infer_type(data="float32")[1][0]) == "bfloat16"


def test_errors_name_the_problem():
    sym = _mlp_symbol()
    with pytest.raises(ValueError, match="int8"):
        C.convert_symbol(sym, "int8")
    with pytest.raises(TypeError, match="Symbol"):
        C.convert_symbol("net.json", "float16")
    with pytest.raises(ValueError, match="fuse=True with float16"):
        C.convert_symbol(sym, "float16", fuse=True)
    with pytest.raises(ValueError, match="gpu"):
        C.convert_symbol(sym, "bfloat16", ctx=mx.gpu(0), fuse=True)
    with pytest.raises(TypeError, match="fc1_weight"):
        C.convert_model(sym, {"fc1_weight": np.zeros((16, 8))}, {}, "bfloat16")
    with pytest.raises(ValueError, match="Unknown operator"):
        C.convert_symbol(sym, "bfloat16", fp32_ops=["FullyConected"])
    with pytest.raises(TypeError, match="HybridBlock"):
        blocks.convert_hybrid_block(nn.Block(), mx.nd.ones((1, 2)), "bfloat16")


def test_emulated_low_precision_weights_are_read_through_the_librarys_cast_on_cpu():
    # MXNet's bfloat16 amp_cast is ~170x slower than the library's without AVX-512, and an emulated model reads
    # every stored weight once per call: the read is amp_multi_cast there, with the same values as amp_cast
    sym = _mlp_symbol()
    args, aux = _params(sym, data=(3, 8))
    out = C.convert(sym, args, aux, "bfloat16", cast_params_offline=True, emulate=True, fuse=False)
    nodes = _nodes(out.symbol)
    weight = next(i for i, n in enumerate(nodes) if n["name"] == "fc1_weight")
    readers = [n for n in nodes if any(e[0] == weight for e in n["inputs"])]
    assert [(n["op"], n["attrs"]["dtype"]) for n in readers] == [("amp_multi_cast", "float32")]
    assert dtype_name(out.arg_params["fc1_weight"].dtype) == "bfloat16"
    slow = json.loads(out.symbol.tojson(remove_amp_cast=False))
    for n in slow["nodes"]:
        if n["op"] == "amp_multi_cast":
            n["op"], n["attrs"] = "amp_cast", {"dtype": "float32"}
    x = mx.nd.array(np.random.RandomState(3).uniform(-1, 1, (3, 8)).astype(np.float32))
    feed = dict(out.arg_params, data=x)
    fast_y = out.symbol.bind(mx.cpu(), feed, aux_states=out.aux_params).forward()[0].asnumpy()
    slow_y = mx.sym.load_json(json.dumps(slow)).bind(mx.cpu(), feed, aux_states=out.aux_params).forward()[0]
    np.testing.assert_array_equal(fast_y, slow_y.asnumpy())
    gpu = C.convert(sym, args, aux, "bfloat16", cast_params_offline=True, emulate=True, fuse=False, ctx=mx.gpu(0))
    assert "amp_multi_cast" not in {n["op"] for n in _nodes(gpu.symbol)}  # GPUs: MXNet's amp_cast is fast there
