"""Parameter-only computations folded at conversion (fold_params=True): the same outputs, fewer nodes, no weight
stored twice, casts alone and anything random left, and without the switch every parameter kept."""
import json

import numpy as np
import pytest

import mxnet as mx
from mxnet import amp
from mxnet.amp.base.dtypes import BFLOAT16 as BF16
from mxnet.amp.inference.constant_fold import fold_parameter_ops

from amp_testing import lp_round

RNG = np.random.RandomState(0)


def _values(*shape):
    return mx.nd.array(RNG.uniform(-1, 1, shape).astype(np.float32))


def _interleaved_projection():
    """GluonNLP's attention projection: query, key and value weights (and biases) interleaved per head at
    every call, one FullyConnected over the result."""
    x = mx.sym.var("data")
    ws = [mx.sym.reshape(mx.sym.var("%s_weight" % p), shape=(2, 1, 4, 8)) for p in "qkv"]
    bs = [mx.sym.reshape(mx.sym.var("%s_bias" % p), shape=(2, 4)) for p in "qkv"]
    weight = mx.sym.reshape(mx.sym.concat(*ws, dim=1), shape=(-1, 8))
    bias = mx.sym.reshape(mx.sym.stack(*bs, axis=1), shape=(-1,))
    out = mx.sym.FullyConnected(x, weight, bias, num_hidden=24, flatten=False, name="qkv")
    params = {"%s_weight" % p: _values(8, 8) for p in "qkv"}
    params.update({"%s_bias" % p: _values(8) for p in "qkv"})
    return out, params


def _ops(sym):
    return [n["op"] for n in json.loads(sym.tojson(remove_amp_cast=False))["nodes"] if n["op"] != "null"]


def _run(sym, args, aux, x):
    return sym.bind(mx.cpu(), dict(args, data=x), aux_states=aux).forward()[0].astype("float32").asnumpy()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_offline_conversion_folds_the_weight_concatenation(dtype):
    sym, params = _interleaved_projection()
    x = _values(5, 2, 8)
    folded, args, aux = amp.convert_model(sym, params, {}, dtype, cast_params_offline=True, fold_params=True)
    default, dargs, daux = amp.convert_model(sym, params, {}, dtype, cast_params_offline=True)
    ops = _ops(folded)
    assert not {"Concat", "stack", "Reshape"} & set(ops), ops
    assert {"Concat", "stack"} <= set(_ops(default))
    assert sorted(dargs) == sorted(params)  # without fold_params every parameter keeps its name
    assert not set(params) & set(args) and len(args) == 2  # the six parameters became the two folded ones
    np.testing.assert_array_equal(_run(folded, args, aux, x), _run(default, dargs, daux, x))
    for arr in args.values():  # stored in the target dtype, or rounded to it where the graph emulates it
        values = arr.astype("float32").asnumpy()
        np.testing.assert_array_equal(lp_round(values, dtype), values)


def test_a_parameter_read_elsewhere_is_not_stored_twice():
    """Tied weights: w feeds one product directly and another transposed; folding the transpose would keep two
    copies of w, so nothing computed from w is folded."""
    x, w = mx.sym.var("data"), mx.sym.var("w")
    h = mx.sym.FullyConnected(x, w, no_bias=True, num_hidden=6, name="enc")
    sym = mx.sym.FullyConnected(h, mx.sym.transpose(w), no_bias=True, num_hidden=6, name="dec")
    graph = json.loads(sym.tojson())
    out, args, aux, count = fold_parameter_ops(graph, {"w": _values(6, 6)}, {})
    assert count == 0 and out is graph and list(args) == ["w"]


def test_random_ops_and_data_paths_are_not_folded():
    x, w = mx.sym.var("data"), mx.sym.var("w")
    noisy = mx.sym.Dropout(w, p=0.5, mode="always")
    sym = mx.sym.FullyConnected(x, noisy * 2, no_bias=True, num_hidden=4)
    graph = json.loads(sym.tojson())
    out, args, _, count = fold_parameter_ops(graph, {"w": _values(4, 3)}, {})
    assert count == 0 and list(args) == ["w"]
    scaled = mx.sym.FullyConnected(x, w * 2, no_bias=True, num_hidden=4)  # w * 2 folds, x does not
    weight = _values(4, 3)
    out, args, _, count = fold_parameter_ops(json.loads(scaled.tojson()), {"w": weight}, {})
    assert count == 1 and list(args) == ["_mulscalar1_folded"]
    assert [n["op"] for n in out["nodes"]] == ["null", "null", "FullyConnected"]
    np.testing.assert_array_equal(args["_mulscalar1_folded"].asnumpy(), 2 * weight.asnumpy())


def test_casts_alone_stay_for_the_storage_rules():
    """A weight read only through a cast is stored by inference.params' rules (here in the user's bfloat16), not
    replaced by its cast to the target dtype."""
    data, w = mx.sym.var("data"), mx.sym.var("w")
    sym = mx.sym.FullyConnected(data, mx.sym.amp_cast(w, dtype=BF16), no_bias=True, num_hidden=4)
    _, args, _ = amp.convert_model(sym, {"w": _values(4, 6)}, {}, "float16", cast_params_offline=True,
                                   emulate=False, kernels="mxnet", fold_params=True)
    assert list(args) == ["w"] and args["w"].dtype == BF16
