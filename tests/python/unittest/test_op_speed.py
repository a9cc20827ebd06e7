"""The op-speed table (lists/op_speed_bf16_cpu.json, bench/bench_op_speed.py) and the plan's float32 islands: no op
receives bfloat16 natively where its bfloat16 kernel was measured slower than float32 between casts.

The plan tests mock CPU class (c) (cpuinfo files): they rewrite graphs and run no bfloat16 kernel, so they hold on
every class.
"""
import json

import mxnet as mx
import numpy as np
import pytest
from mxnet.gluon.model_zoo import vision

from mxnet.amp import lists
from mxnet.amp.base.dtypes import mx_dtype
from mxnet.amp.base.registry import group_by_operator
from mxnet.amp.cli.probe import op_spec
from mxnet.amp.core import cpu
from mxnet.amp.core.policy import make_policy
from mxnet.amp.graph.infer import infer_entry_dtypes
from mxnet.amp.graph.rewrite import rewrite_graph, rewrite_symbol
from mxnet.amp.graph.symbol_json import CAST_OPS, to_graph
from mxnet.amp.inference.convert import convert

from amp_testing import bf16_round, requires_native_plan

MEASURED = sorted(name for name, table in lists.op_speed_evidence()["classes"].items() if table)


def natively_slow(graph, var_dtypes, class_name="c"):
    """``[(node, op, verdict)]`` of the MXNet ops of ``graph`` that read bfloat16 but whose row in the op-speed table
    of ``class_name`` does not say ``bfloat16`` (the library's ops and the casts read it themselves)."""
    dtypes = infer_entry_dtypes(graph, var_dtypes)
    _, rows = lists.op_speed_table(class_name)
    timed = lists.speed_timed_ops("bfloat16", "cpu")
    slow = []
    for nid, node in enumerate(graph["nodes"]):
        op = node["op"]
        if op == "null" or op in CAST_OPS or op.startswith("amp_") or op not in timed:
            continue
        if any(dtypes.get((src, idx)) == "bfloat16" for src, idx, _ in node["inputs"]):
            verdict = rows.get(op, {}).get("verdict", "missing")
            if verdict != "bfloat16":
                slow.append((node["name"], op, verdict))
    return slow


def test_the_table_has_a_class_measured_and_every_row_follows_its_own_times():
    assert MEASURED, "op_speed_bf16_cpu.json has no measured class: run python bench/bench_op_speed.py --record"
    data = lists.op_speed_evidence()
    assert data["version"] == 1 and set(data["classes"]) == {c.name for c in cpu.CLASSES}
    for name in MEASURED:
        table = data["classes"][name]
        assert {"date", "cpu", "command", "commit", "ops"} <= set(table), name
        for op, row in table["ops"].items():
            assert row["verdict"] in lists.SPEED_VERDICTS, (name, op)
            if row["verdict"] == "untimed":
                assert row["why"], (name, op)
                continue
            assert all(row[k] > 0 for k in ("float32_ms", "bfloat16_ms", "island_ms")), (name, op)
            want = "bfloat16" if row["bfloat16_ms"] <= lists.SPEED_MARGIN * row["island_ms"] else "float32"
            assert row["verdict"] == want, (name, op, row)  # a hand edit of a verdict fails here


@pytest.mark.parametrize("name", MEASURED)
def test_every_op_bfloat16_reaches_natively_has_a_row(name):
    _, rows = lists.op_speed_table(name)
    missing = sorted(lists.speed_timed_ops("bfloat16", "cpu") - set(rows))
    assert not missing, "no speed row for %s: rerun python bench/bench_op_speed.py --record" % missing[:10]


def test_islands_follow_the_table_and_the_classes_without_one_borrow_the_nearest():
    measured, rows = lists.op_speed_table("c")
    assert measured in MEASURED
    islands = lists.float32_island_ops("bfloat16", "c")
    assert islands == {op for op in lists.speed_timed_ops("bfloat16", "cpu")
                       if rows.get(op, {}).get("verdict") != "bfloat16"}
    assert "clip" in islands and "Activation" not in islands  # MXNet's generic clip; oneDNN's eltwise
    assert lists.op_speed_table("d")[0] in MEASURED
    assert lists.float32_island_ops("float16", "c") == frozenset() == lists.speed_timed_ops("bfloat16", "gpu")
    with pytest.raises(ValueError, match="Unknown CPU class 'e': expected one of 'a', 'b', 'c', 'd'"):
        lists.op_speed_table("e")


def test_untimed_ops_are_the_ones_an_island_makes_no_sense_for():
    untimed = lists.natively_fed_ops("bfloat16", "cpu") - lists.speed_timed_ops("bfloat16", "cpu")
    assert {"_foreach", "amp_cast", "sgd_update", "_random_uniform"} <= untimed
    assert not {"clip", "Concat", "elemwise_add", "BatchNorm", "Pooling"} & untimed


def _one_op_graph(group):
    """The symbol-JSON graph of one call of an alias group's op on bfloat16 variables (the probe's call), and its
    variables' dtypes; None where MXNet has no symbol function for it."""
    spec = op_spec(sorted(group))
    if spec is None:
        return None
    creator = next((f for n in sorted(group) for f in (getattr(mx.sym, n, None), getattr(mx.sym._internal, n, None))
                    if f is not None), None)
    if creator is None:
        return None
    names, dtypes = [], {}
    for k, shape in enumerate(spec[0]):
        kind = shape[0] if isinstance(shape[0], str) else "bfloat16"
        names.append("in%d" % k)
        dtypes["in%d" % k] = {"lengths": "bfloat16", "int32": np.int32, "bool": np.bool_}.get(kind, kind)
    try:
        sym = creator(*[mx.sym.var(n) for n in names], name="op", **spec[1])
    except Exception:  # an op whose symbol function wants its inputs by keyword: not reachable this way
        return None
    dtypes = {n: (mx_dtype(d) if isinstance(d, str) else d) for n, d in dtypes.items()}
    return to_graph(sym), dtypes


def test_no_single_op_graph_runs_a_slow_bfloat16_kernel(class_c):
    """Every op bfloat16 reaches natively, alone on bfloat16 inputs, rewritten for inference and for training: each
    MXNet op left reading bfloat16 is one the table shows no slower (substitutes included: relu runs as oneDNN's
    Activation, transpose as SwapAxis)."""
    policy = make_policy("bfloat16")
    built, islands = 0, 0
    timed = lists.speed_timed_ops("bfloat16", "cpu")
    for group in group_by_operator(timed):
        made = _one_op_graph(group)
        if made is None:
            continue
        graph, dtypes = made
        for inference in (True, False):
            try:
                out, _ = rewrite_graph(graph, policy, "cpu", dtypes, inference=inference)
            except Exception:  # graphs MXNet cannot type or that need shapes: no plan to check
                continue
            assert natively_slow(out, dtypes) == [], group
            built += 1
            islands += any(n["name"].startswith("op_amp_cast_in") for n in out["nodes"])
    assert built > 200 and islands > 20, (built, islands)


def _model(name, shape):
    net = vision.get_model(name, classes=10)
    net.initialize()
    x = mx.nd.zeros(shape)
    net(x)
    sym = net(mx.sym.var("data"))
    params = {p.name: p.data() for p in net.collect_params().values()}
    return sym, params, x


@pytest.mark.parametrize("name,shape", [("mobilenetv2_1.0", (1, 3, 64, 64)), ("densenet121", (1, 3, 224, 224)),
                                        ("squeezenet1.1", (1, 3, 224, 224)), ("resnet18_v2", (1, 3, 32, 32)),
                                        ("inceptionv3", (1, 3, 299, 299))])
def test_zoo_graphs_run_no_slow_bfloat16_kernel_in_inference_or_training(class_c, name, shape):
    sym, params, _ = _model(name, shape)
    args = {k: v for k, v in params.items() if k in sym.list_arguments()}
    aux = {k: v for k, v in params.items() if k in sym.list_auxiliary_states()}
    out = convert(sym, args, aux, "bfloat16", input_names=["data"])
    graph = json.loads(out.symbol.tojson(remove_amp_cast=False))
    dtypes = {n: a.dtype for n, a in dict(out.arg_params, **out.aux_params).items()}
    assert natively_slow(graph, dict(dtypes, data=np.float32)) == []
    train, _ = rewrite_symbol(sym, make_policy("bfloat16"), "cpu", {k: v.dtype for k, v in params.items()})
    assert natively_slow(json.loads(train.tojson(remove_amp_cast=False)), {k: v.dtype for k, v in params.items()}) == []


def test_a_slow_kernel_put_back_into_the_plan_is_caught(class_c, monkeypatch):
    """The planted break: a plan without its float32 islands runs an unfused clip on MXNet's slow bfloat16 kernel, and
    the check names it."""
    sym = mx.sym.clip(mx.sym.Activation(mx.sym.var("data"), act_type="relu"), 0, 5, name="clip5")
    dtypes = {"data": mx_dtype("bfloat16")}
    graph = to_graph(sym)
    out, _ = rewrite_graph(graph, make_policy("bfloat16"), "cpu", dtypes, inference=True)
    assert natively_slow(out, dtypes) == []
    monkeypatch.setattr(type(make_policy("bfloat16")), "float32_islands", lambda self, device_type: frozenset())
    broken, _ = rewrite_graph(graph, make_policy("bfloat16"), "cpu", dtypes, inference=True)
    assert natively_slow(broken, dtypes) == [("clip5", "clip", "float32")]


def test_islands_come_after_the_fusions(class_c):
    """A clip to [0, 6] after a convolution fuses into it (no island, no clip); one to [0, 5] stays, in float32."""
    data, w = mx.sym.var("data"), mx.sym.var("w")
    conv = mx.sym.Convolution(data, w, kernel=(1, 1), num_filter=2, no_bias=True, name="conv")
    for bounds, fused in (((0, 6), True), ((0, 5), False)):
        sym = mx.sym.clip(conv, *bounds, name="c")
        dtypes = {"data": np.float32, "w": np.float32}
        out, _ = rewrite_graph(to_graph(sym), make_policy("bfloat16"), "cpu", dtypes, inference=True)
        ops = [n["op"] for n in out["nodes"]]
        if "amp_convolution" not in ops:
            pytest.skip("the library's convolution is not routed here (oneDNN 3 unavailable)")
        assert ("clip" not in ops) == fused, ops
        assert natively_slow(out, dtypes) == []


@requires_native_plan
def test_amp_init_runs_slow_ops_imperatively_in_float32_between_casts(monkeypatch):
    """Under amp.init, a front-end call of an op the table marks slow on bfloat16 arrays (clip: dtype-neutral;
    broadcast_add: widest-type) runs in float32 between casts and returns bfloat16 with the values of the rounded
    float32 result; an op the table marks fast (Activation) keeps its bfloat16 kernel, and mixed inputs keep the
    widest type (float32)."""
    from mxnet import amp
    from mxnet.amp.core.policy import Policy
    islanded = []
    real = Policy.imperative_in_float32

    def spy(self, op, device_type):
        if real(self, op, device_type):
            islanded.append(op)
            return True
        return False
    monkeypatch.setattr(Policy, "imperative_in_float32", spy)
    rng = np.random.RandomState(0)
    x32, b32 = mx.nd.array(rng.uniform(-8, 8, (2, 3, 4))), mx.nd.array(rng.uniform(-1, 1, (1, 3, 1)))
    amp.init("bfloat16")
    try:
        assert {"clip", "broadcast_add"} <= lists.float32_island_ops("bfloat16", cpu.cpu_class().name)
        x, b = (mx.nd.amp_cast(a, dtype=mx_dtype("bfloat16")) for a in (x32, b32))
        rx, rb = (mx.nd.amp_cast(a, dtype="float32").asnumpy() for a in (x, b))
        clipped = mx.nd.clip(x, 0, 5)
        summed = mx.nd.broadcast_add(x, b)
        mixed = mx.nd.broadcast_add(x, b32)
        act = mx.nd.Activation(x, act_type="relu")
    finally:
        amp.reset()
    groups = {op: g for g in lists.alias_groups() for op in g}  # the front ends name an op by any of its aliases
    assert {tuple(sorted(set(groups[op]) & {"clip", "broadcast_add"})) for op in islanded} == {("clip",),
                                                                                               ("broadcast_add",)}
    assert clipped.dtype == summed.dtype == act.dtype == mx_dtype("bfloat16") and mixed.dtype == np.float32
    np.testing.assert_array_equal(mx.nd.amp_cast(clipped, dtype="float32").asnumpy(), np.clip(rx, 0, 5))
    np.testing.assert_array_equal(mx.nd.amp_cast(summed, dtype="float32").asnumpy(), bf16_round(rx + rb))
