"""The graph room: symbol-JSON plumbing (graph.symbol_json), MXNet's type inference (graph.infer), the cast builder
(graph.builder), the per-node plan (graph.plan), the post-op passes (graph.postops) and the rewrite loop
(graph.rewrite), each against hand-built graphs whose answer is known."""
import json

import mxnet as mx
import numpy as np
import pytest

from mxnet.amp import lists
from mxnet.amp.base.dtypes import mx_dtype
from mxnet.amp.core.policy import EMULATED, FLOAT32, FP32, LP16, NATIVE, NEUTRAL, WIDEST, make_policy
from mxnet.amp.graph.builder import CastBuilder
from mxnet.amp.graph.infer import infer_entry_dtypes, lp_input_dtypes, output_dtypes
from mxnet.amp.graph.plan import plan_node
from mxnet.amp.graph.postops import (drop_noop_casts, float32_library_outputs, fuse_activation, fuse_hard_activations,
                                     fuse_scale, fuse_sum)
from mxnet.amp.graph.builder import RewriteStats
from mxnet.amp.graph.rewrite import rewrite_graph, rewrite_symbol, route_library_kernels
from mxnet.amp.graph.symbol_json import (assemble, compact, drop_rounding, entry_uses, is_mode_node, num_outputs,
                                         to_graph, to_symbol, with_var_dtypes)

BF16 = "bfloat16"


def _ops(graph):
    return [n["op"] for n in graph["nodes"]]


def _chain():
    """data -> FullyConnected -> relu -> softmax, as symbol-JSON."""
    x = mx.sym.var("data")
    h = mx.sym.FullyConnected(x, num_hidden=4, name="fc")
    h = mx.sym.Activation(h, act_type="relu", name="act")
    return mx.sym.softmax(h, name="sm")


# ---- symbol_json ----------------------------------------------------------------------------------------------
def test_round_trip_keeps_numpy_mode_and_casts():
    sym = mx.sym.amp_cast(mx.sym.var("x"), dtype="float16")
    graph = to_graph(sym)
    assert _ops(graph) == ["null", "amp_cast"]  # tojson() would drop the cast
    assert isinstance(to_symbol(graph, like=sym.as_np_ndarray()), mx.sym.np._Symbol)
    assert not isinstance(to_symbol(graph, like=sym), mx.sym.np._Symbol)


def test_num_outputs_from_row_pointers_and_from_uses():
    split = mx.sym.split(mx.sym.var("x"), num_outputs=3, axis=0)
    graph = to_graph(mx.sym.Group([split[0], split[2]]))
    assert num_outputs(graph) == [1, 3]
    del graph["node_row_ptr"]
    assert num_outputs(graph) == [1, 3]  # the highest output read: index 2


def test_compact_follows_alias_chains_and_renumbers():
    x = mx.sym.var("x")
    a = mx.sym.amp_cast(x, dtype="float32", name="a")
    b = mx.sym.amp_cast(a, dtype="float32", name="b")
    graph = to_graph(mx.sym.relu(b, name="r"))
    out = compact(graph, {1, 2}, {(1, 0): (0, 0), (2, 0): (1, 0)})
    assert _ops(out) == ["null", "relu"] and out["nodes"][1]["inputs"] == [[0, 0, 0]]
    assert out["heads"] == [[1, 0, 0]] and out["arg_nodes"] == [0] and out["node_row_ptr"] == [0, 1, 2]


def test_assemble_and_entry_uses():
    graph = to_graph(_chain())
    uses = entry_uses(graph)
    assert uses[(0, 0)] == 1 and uses[(len(graph["nodes"]) - 1, 0)] == 1  # data read once; the head counted
    again = assemble(graph, graph["nodes"], num_outputs(graph), graph["heads"])
    assert again["node_row_ptr"] == graph["node_row_ptr"]


def test_drop_rounding_by_dtype():
    x = mx.sym.var("x")
    graph = to_graph(mx.sym.amp_round(mx.sym.amp_round(x, dtype="float16"), dtype="bfloat16"))
    assert _ops(drop_rounding(graph, "float16")) == ["null", "amp_round"]
    assert _ops(drop_rounding(graph)) == ["null"]


def test_with_var_dtypes_writes_codes_and_shapes():
    nodes = to_graph(mx.sym.relu(mx.sym.var("x")))["nodes"]
    out = with_var_dtypes(nodes, {"x": np.dtype([("bfloat16", np.uint16)])}, {"x": (2, 3)})
    assert out[0]["attrs"] == {"__dtype__": "12", "__shape__": "(2, 3)"} and "attrs" not in nodes[0]


def test_mode_nodes_are_recognised_by_name_and_op():
    assert is_mode_node({"name": "amp_mode", "op": "Dropout"}) and is_mode_node({"name": "amp_mode_ones2",
                                                                                 "op": "_ones"})
    assert not is_mode_node({"name": "amp_mode", "op": "relu"}) and not is_mode_node({"name": "x", "op": "Dropout"})


# ---- infer ------------------------------------------------------------------------------------------------------
def test_entry_dtypes_come_from_mxnet_type_inference():
    graph = to_graph(mx.sym.amp_cast(mx.sym.relu(mx.sym.var("x")), dtype="float16"))
    dtypes = infer_entry_dtypes(graph, {"x": np.float32})
    assert dtypes == {(0, 0): "float32", (1, 0): "float32", (2, 0): "float16"}
    assert set(infer_entry_dtypes(graph, {}).values()) <= {None, "float16"}  # unknown stays unknown


def test_entry_dtypes_of_a_graph_mxnet_cannot_type_keep_the_variables_dtypes():
    # bfloat16 data beside a float32 weight: FullyConnected wants one dtype for both, so MXNet types nothing
    fc = mx.sym.FullyConnected(mx.sym.var("x"), mx.sym.var("w"), num_hidden=2, no_bias=True)
    graph = to_graph(mx.sym.relu(fc))
    dtypes = infer_entry_dtypes(graph, {"x": mx_dtype(BF16), "w": np.float32})
    assert dtypes == {(0, 0): BF16, (1, 0): "float32", (2, 0): None, (3, 0): None}


def test_lp_input_dtypes_keep_batchnorm_parameters_float32():
    bn = to_graph(mx.sym.BatchNorm(mx.sym.var("x"), name="bn"))["nodes"][-1]
    assert lp_input_dtypes(bn, BF16) == [BF16, "float32", "float32", "float32", "float32"]
    fc = to_graph(mx.sym.FullyConnected(mx.sym.var("x"), num_hidden=2))["nodes"][-1]
    assert lp_input_dtypes(fc, "float16") == ["float16"] * 3
    assert output_dtypes(fc, ["float16", "float16", "float16"]) == ("float16",)


# ---- builder ----------------------------------------------------------------------------------------------------
def test_casts_are_memoised_and_look_through_casts():
    build = CastBuilder(["x"])
    x = (build.add({"op": "null", "name": "x", "inputs": []}, 1, ["float32"]), 0)
    low = build.cast(x, BF16)
    assert build.cast(x, BF16) == low and build.stats.casts == 1
    assert build.cast(low, "float32") == x  # a cast of a cast reads the original
    assert build.cast(x, "float32") == x and build.stats.casts == 1


def test_round_trips_round_float32_once_and_widest_picks_float32_for_mixed_halves():
    build = CastBuilder(["x", "y"])
    x = (build.add({"op": "null", "name": "x", "inputs": []}, 1, ["float32"]), 0)
    y = (build.add({"op": "null", "name": "y", "inputs": []}, 1, ["float16"]), 0)
    r = build.round_trip(x, BF16)
    assert build.nodes[r[0]]["op"] == "amp_round" and build.round_trip(r, BF16) == r and build.is_low(r, BF16)
    h = (build.add({"op": "null", "name": "h", "inputs": []}, 1, [BF16]), 0)
    routed = build.widest([y, h])
    multicast = build.nodes[routed[0][0]]
    assert multicast["op"] == "amp_multicast" and build.dtype[routed[0]] == "float32"  # f16 + bf16 -> f32
    assert build.widest([x, x]) == [x, x] and build.stats.multicasts == 1


def test_the_mode_flag_is_one_dropout_of_ones():
    build = CastBuilder([])
    flag = build.mode_flag()
    assert build.mode_flag() == flag and [n["op"] for n in build.nodes] == ["_ones", "Dropout"]
    assert all(is_mode_node(n) for n in build.nodes)


# ---- plan -------------------------------------------------------------------------------------------------------
def _node(sym):
    return to_graph(sym)["nodes"][-1]


@pytest.mark.parametrize("emulate,mode", [(True, EMULATED), (False, NATIVE)])
def test_low_precision_nodes_get_their_mode_and_kernel(monkeypatch, emulate, mode):
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")
    policy = make_policy(BF16, emulate=emulate)
    plan = plan_node(_node(mx.sym.FullyConnected(mx.sym.var("x"), num_hidden=2)), policy, "cpu", False,
                     ["float32"] * 3, False)
    assert (plan.action, plan.mode) == (LP16, mode) and plan.emulated == (mode == EMULATED)
    assert plan.op == (policy.kernel("FullyConnected", "cpu", mode) or "FullyConnected")


def test_float32_mode_and_follow_and_widest_plans(monkeypatch):
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")
    policy = make_policy(BF16, kernels="mxnet")
    bd = _node(mx.sym.batch_dot(mx.sym.var("a"), mx.sym.var("b")))
    plan = plan_node(bd, policy, "cpu", False, ["float32"] * 2, False)
    assert (plan.action, plan.mode, plan.op) == (FP32, FLOAT32, "batch_dot")  # no MXNet bf16 batch_dot
    follow = make_policy(BF16, lp16_ops=["Convolution"])  # FullyConnected now follows
    fc = _node(mx.sym.FullyConnected(mx.sym.var("x"), num_hidden=2))
    assert plan_node(fc, follow, "cpu", False, [BF16] * 3, True).followed
    assert plan_node(fc, follow, "cpu", False, ["float32"] * 3, False).action == NEUTRAL
    add = _node(mx.sym.elemwise_add(mx.sym.var("a"), mx.sym.var("b")))
    assert plan_node(add, policy, "cpu", False, ["float32", BF16], True).action == WIDEST


def test_neutral_plans_kernel_island_and_substitute(monkeypatch):
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")
    policy = make_policy(BF16)
    bn = _node(mx.sym.BatchNorm(mx.sym.var("x")))
    train = plan_node(bn, policy, "cpu", False, [BF16] + ["float32"] * 4, True)
    assert train.neutral_kernel and train.op == "amp_batch_norm"
    infer = plan_node(bn, policy, "cpu", True, [BF16] + ["float32"] * 4, True)
    assert infer.neutral_kernel and infer.op == "amp_batch_norm"  # inference graphs too (lists.neutral_kernels)
    mxnet = plan_node(bn, make_policy(BF16, kernels="mxnet"), "cpu", True, [BF16] + ["float32"] * 4, True)
    assert mxnet.float32_island and mxnet.op == "BatchNorm"  # MXNet's kernels: float32 between casts
    relu = plan_node(_node(mx.sym.relu(mx.sym.var("x"))), policy, "cpu", False, [BF16], True)
    assert (relu.op, relu.attrs) == ("Activation", {"act_type": "relu"})
    cast = plan_node(_node(mx.sym.amp_cast(mx.sym.var("x"), dtype="float16")), policy, "cpu", False, ["float32"],
                     False)
    assert (cast.action, cast.op) == (NEUTRAL, "amp_cast")


def test_training_graphs_on_cpus_read_a_tensor_read_twice_through_fanout_copies(monkeypatch):
    """MXNet's add_n has no bfloat16 kernel on CPUs (lists.fanout_copies): a bfloat16 tensor read by two products of
    a training graph is read through one amp_fanout's two copies; inference graphs, emulation, MXNet's kernels and
    GPUs read it as it is."""
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")
    h = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=8, name="fc0")
    sym = mx.sym.Group([mx.sym.FullyConnected(h, num_hidden=4, name="fc1"),
                        mx.sym.FullyConnected(h, num_hidden=4, name="fc2")])

    def fanouts(policy, inference=False, device_type="cpu"):
        out, _ = rewrite_symbol(sym, policy, device_type, var_shapes={"data": (2, 6)}, inference=inference)
        nodes = json.loads(out.tojson(remove_amp_cast=False))["nodes"]
        return [(n["attrs"]["num_outputs"], nodes[n["inputs"][0][0]]["name"]) for n in nodes if n["op"] == "amp_fanout"]
    assert [n for n, _ in fanouts(make_policy(BF16))] == ["2"]
    assert fanouts(make_policy(BF16), inference=True) == []
    assert fanouts(make_policy(BF16, kernels="mxnet")) == []
    assert fanouts(make_policy(BF16, emulate=True)) == []
    assert fanouts(make_policy("float16"), device_type="gpu") == []
    assert lists.fanout_copies(BF16, "cpu") and not lists.fanout_copies(BF16, "gpu")
    assert not lists.fanout_copies("float16", "cpu")
    with pytest.raises(ValueError, match="Unknown device_type 'tpu': expected one of 'cpu', 'gpu'"):
        lists.fanout_copies(BF16, "tpu")


# ---- postops ----------------------------------------------------------------------------------------------------
def test_noop_casts_are_dropped_and_counted():
    graph = to_graph(mx.sym.relu(mx.sym.amp_cast(mx.sym.var("x"), dtype="float32")))
    stats = RewriteStats(casts=1)
    out = drop_noop_casts(graph, {"x": np.float32}, stats)
    assert _ops(out) == ["null", "relu"] and stats.casts == 0


def _library_graph(extra):
    x, w = mx.sym.var("x"), mx.sym.var("w")
    y = mx.sym.amp_fully_connected(x, w, num_hidden=4, no_bias=True, name="fc")
    return to_graph(extra(y))


def test_relu_after_a_product_becomes_its_post_op_only_when_it_is_the_sole_reader():
    fused = fuse_activation(_library_graph(lambda y: mx.sym.Activation(y, act_type="relu")))
    assert _ops(fused) == ["null", "null", "amp_fully_connected"] and fused["nodes"][-1]["attrs"]["act_type"] == "relu"
    kept = fuse_activation(_library_graph(lambda y: mx.sym.Group([mx.sym.Activation(y, act_type="relu"), y])))
    assert "Activation" in _ops(kept)


def _conv_graph(extra):
    x, w = mx.sym.var("x"), mx.sym.var("w")
    return to_graph(extra(mx.sym.amp_convolution(x, w, kernel=(1, 1), num_filter=2, no_bias=True, name="conv")))


@pytest.mark.parametrize("training", [False, True])
def test_a_clip_to_0_and_6_after_a_convolution_becomes_its_relu6(training):
    fused = fuse_activation(_conv_graph(lambda y: mx.sym.clip(y, 0, 6)), training=training)
    assert _ops(fused) == ["null", "null", "amp_convolution"] and fused["nodes"][-1]["attrs"]["act_type"] == "relu6"
    for other in (lambda y: mx.sym.clip(y, 0, 5), lambda y: mx.sym.clip(y, -1, 6),
                  lambda y: mx.sym.Group([mx.sym.clip(y, 0, 6), y])):
        assert "clip" in _ops(fuse_activation(_conv_graph(other), training=training))


def _hard_swish(y):
    return y * (mx.sym.clip(y + 3, 0, 6) / 6)


def test_mobilenet_v3_hard_activations_after_a_convolution_become_its_act_type():
    """In inference graphs clip(y + 3, 0, 6) / 6 after a convolution's output y becomes act_type="hard_sigmoid", and
    y times it "hard_swish"; another reader of a step, other constants or a training graph leave the ops."""
    dtypes = {"x": np.float32, "w": np.float32}
    for extra, act in ((lambda y: mx.sym.clip(y + 3, 0, 6) / 6, "hard_sigmoid"), (_hard_swish, "hard_swish"),
                       (lambda y: mx.sym.broadcast_mul(mx.sym.clip(y + 3, 0, 6) / 6, y), "hard_swish")):
        fused = fuse_hard_activations(_conv_graph(extra), dtypes, RewriteStats())
        assert _ops(fused) == ["null", "null", "amp_convolution"] and fused["nodes"][-1]["attrs"]["act_type"] == act
    for kept in (lambda y: mx.sym.clip(y + 2, 0, 6) / 6, lambda y: mx.sym.clip(y + 3, 0, 6) / 5,
                 lambda y: mx.sym.Group([_hard_swish(y), y + 3]),
                 lambda y: mx.sym.Group([mx.sym.clip(y + 3, 0, 6) / 6, y])):
        assert "clip" in _ops(fuse_hard_activations(_conv_graph(kept), dtypes, RewriteStats()))


def test_residual_sum_becomes_the_convolution_with_sum():
    x, w = mx.sym.var("x"), mx.sym.var("w")
    c = mx.sym.amp_convolution(x, w, kernel=(1, 1), num_filter=2, no_bias=True, name="conv")
    graph = to_graph(mx.sym.elemwise_add(x, c))
    fused = fuse_sum(graph, {"x": np.float32, "w": np.float32})
    conv = fused["nodes"][-1]
    assert conv["op"] == "amp_convolution" and conv["attrs"]["with_sum"] == "True" and len(conv["inputs"]) == 3


def test_a_float32_residual_added_through_a_widest_cast_makes_the_product_write_float32():
    x, w = mx.sym.var("x"), mx.sym.var("w")
    fc = mx.sym.amp_fully_connected(mx.sym.amp_cast(x, dtype=mx_dtype(BF16)), w, num_hidden=4, no_bias=True,
                                    flatten=False, param_dtype="float32", name="fc")
    widened = mx.sym.amp_multicast(x, fc, num_outputs=2)
    dtypes = {"x": np.float32, "w": np.float32}
    fused = fuse_sum(to_graph(mx.sym.elemwise_add(widened[0], widened[1])), dtypes)
    assert _ops(fused) == ["null", "amp_cast", "null", "amp_fully_connected"]  # the cast and the sum gone
    node = fused["nodes"][-1]
    assert node["attrs"]["with_sum"] == "True" and node["attrs"]["out_dtype"] == "float32"
    assert fused["nodes"][node["inputs"][-1][0]]["name"] == "x"  # the float32 residual itself
    # the widened copies read elsewhere too, or a low precision residual through the cast: left as they are
    kept = fuse_sum(to_graph(mx.sym.Group([mx.sym.elemwise_add(widened[0], widened[1]), widened[0]])), dtypes)
    assert "amp_multicast" in _ops(kept) and "with_sum" not in kept["nodes"][3].get("attrs", {})
    low = mx.sym.amp_multicast(mx.sym.amp_cast(x, dtype=mx_dtype(BF16)), fc, num_outputs=2)
    assert "amp_multicast" in _ops(fuse_sum(to_graph(mx.sym.elemwise_add(low[0], low[1])), dtypes))


def test_residual_sum_and_gelu_fuse_into_the_fully_connected_layer():
    x, w = mx.sym.var("x"), mx.sym.var("w")
    fc = mx.sym.amp_fully_connected(x, w, num_hidden=4, no_bias=True, flatten=False, name="fc")
    fused = fuse_sum(to_graph(mx.sym.elemwise_add(fc, x)), {"x": np.float32, "w": np.float32})
    node = fused["nodes"][-1]
    assert node["op"] == "amp_fully_connected" and node["attrs"]["with_sum"] == "True" and len(node["inputs"]) == 3
    gelu = fuse_activation(_library_graph(lambda y: mx.sym.LeakyReLU(y, act_type="gelu")))
    assert _ops(gelu) == ["null", "null", "amp_fully_connected"] and gelu["nodes"][-1]["attrs"]["act_type"] == "gelu"
    # a convolution has no GELU post-op here; a leaky ReLU is no GELU
    c = mx.sym.amp_convolution(x, w, kernel=(1, 1), num_filter=2, no_bias=True)
    assert "LeakyReLU" in _ops(fuse_activation(to_graph(mx.sym.LeakyReLU(c, act_type="gelu"))))
    assert "LeakyReLU" in _ops(fuse_activation(_library_graph(lambda y: mx.sym.LeakyReLU(y, act_type="leaky"))))


def test_scalar_scales_fold_into_the_product_only_when_it_is_the_sole_reader():
    a, b = mx.sym.var("a"), mx.sym.var("b")
    scores = mx.sym.amp_batch_dot(a, b, transpose_b=True, name="qk")
    fused = fuse_scale(to_graph(scores / 8.0))
    assert _ops(fused) == ["null", "null", "amp_batch_dot"] and float(fused["nodes"][-1]["attrs"]["alpha"]) == 0.125
    twice = fuse_scale(to_graph((scores * 0.5) * 3.0))  # the second scale stays: one alpha per product
    assert _ops(twice) == ["null", "null", "amp_batch_dot", "_mul_scalar"]
    assert float(twice["nodes"][2]["attrs"]["alpha"]) == 0.5
    kept = fuse_scale(to_graph(mx.sym.Group([scores / 8.0, scores])))
    assert "_div_scalar" in _ops(kept) and "alpha" not in kept["nodes"][2].get("attrs", {})
    fc = mx.sym.amp_fully_connected(a, b, num_hidden=4, no_bias=True)  # no scale on a fully connected layer
    assert "_mul_scalar" in _ops(fuse_scale(to_graph(fc * 2.0)))


def test_products_read_only_as_float32_write_float32(monkeypatch):
    policy = make_policy(BF16)
    graph = _library_graph(lambda y: mx.sym.amp_cast(y / 2, dtype="float32"))
    out = float32_library_outputs(graph, policy, {})
    assert out["nodes"][2]["attrs"]["out_dtype"] == "float32"
    head = float32_library_outputs(_library_graph(lambda y: y), policy, {})
    assert "out_dtype" not in head["nodes"][2]["attrs"]  # a head keeps its dtype


# ---- rewrite ----------------------------------------------------------------------------------------------------
def test_rewrite_casts_inputs_and_outputs_back_and_counts(monkeypatch):
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")
    low, stats = rewrite_symbol(_chain(), make_policy("float16", emulate=False), "gpu", {"data": np.float32})
    graph = to_graph(low)
    fc = next(n for n in graph["nodes"] if n["op"] == "FullyConnected")
    assert all(graph["nodes"][i]["op"] == "amp_cast" and graph["nodes"][i]["attrs"]["dtype"] == "float16"
               for i, _, _ in fc["inputs"])
    assert stats.actions[LP16] == 1 and stats.actions[FP32] == 1 and stats.casts == 4  # x, w, b; act -> softmax
    assert infer_entry_dtypes(graph, {"data": np.float32})[tuple(graph["heads"][0][:2])] == "float32"


def test_emulated_rewrite_rounds_around_the_float32_kernel():
    low, stats = rewrite_graph(to_graph(_chain()), make_policy(BF16, emulate=True, kernels="mxnet"), "cpu",
                               {"data": np.float32})
    assert stats.lp16_modes == {"emulated": 1} and _ops(low).count("amp_round") == 4  # x, w, b, the output
    assert "amp_cast" not in _ops(low)


def test_route_library_kernels_renames_only_what_the_policy_routes(monkeypatch):
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")
    sym = _chain()
    routed = route_library_kernels(sym, make_policy(BF16), "cpu")
    expected = "amp_fully_connected" if make_policy(BF16).library_kernel("FullyConnected", "cpu") else "FullyConnected"
    assert expected in _ops(to_graph(routed))
    assert route_library_kernels(sym, make_policy(BF16, kernels="mxnet"), "cpu") is sym


def test_rewritten_graph_computes_what_the_float32_graph_does_within_bf16_rounding():
    rng = np.random.RandomState(0)
    feed = {"data": rng.uniform(-1, 1, (3, 5)), "fc_weight": rng.uniform(-1, 1, (4, 5)),
            "fc_bias": rng.uniform(-1, 1, 4)}
    feed = {k: mx.nd.array(v) for k, v in feed.items()}
    sym = _chain()
    ref = sym.bind(mx.cpu(), dict(feed)).forward()[0].asnumpy()
    low, _ = rewrite_symbol(sym, make_policy(BF16, emulate=True), "cpu", {k: np.float32 for k in feed})
    got = low.bind(mx.cpu(), dict(feed)).forward()[0].asnumpy()
    assert got.dtype == np.float32 and np.abs(got - ref).max() <= 2 ** -7 and not np.array_equal(got, ref)
    assert json.loads(sym.tojson()) == json.loads(_chain().tojson())  # the input symbol is not modified
