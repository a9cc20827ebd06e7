"""The block a conversion returns (mxnet.amp.inference.converted_block): inputs of a shape its operators refuse
give an error that names the shapes given and the shapes it was converted with."""
import re

import mxnet as mx
import pytest
from mxnet import amp, gluon

from mxnet.amp.inference.converted_block import ConvertedBlock, InputShapeError


def _net():
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(16), gluon.nn.Dense(4))
    net.initialize()
    return net


@pytest.mark.parametrize("dtype,kernels", [("bfloat16", "auto"), ("bfloat16", "mxnet"), ("float16", "auto")])
def test_a_refused_input_shape_names_the_given_and_converted_shapes(dtype, kernels):
    # float16 on CPU: emulated; bfloat16: the default plan (MXNet's bfloat16 kernels need AVX-512)
    low = amp.convert_hybrid_block(_net(), mx.nd.ones((2, 8)), dtype, kernels=kernels,
                                   emulate=True if dtype == "float16" else None)
    assert low(mx.nd.ones((5, 8))).shape == (5, 4)  # the batch size is free
    with pytest.raises(InputShapeError) as err:
        low(mx.nd.ones((2, 7)))
    message = str(err.value)
    assert "data (2, 7)" in message and "converted with data (2, 8)" in message, message
    assert re.search(r"\(16, ?7\)", message)  # what shape inference said: the weight that does not fit
    assert isinstance(err.value, mx.base.MXNetError) and isinstance(err.value, ValueError)


def test_a_block_imported_without_its_example_still_names_the_given_shape(tmp_path):
    low = amp.convert_hybrid_block(_net(), mx.nd.ones((2, 8)), "bfloat16")
    low.export(str(tmp_path / "m"))  # before any call: HybridBlock.export would write no parameters
    assert sorted(mx.nd.load(str(tmp_path / "m-0000.params"))) == sorted("arg:" + n for n in low.collect_params())
    again = type(low).imports(str(tmp_path / "m-symbol.json"), ["data"], str(tmp_path / "m-0000.params"))
    with pytest.raises(InputShapeError, match=r"inputs of shapes data \(2, 7\)\. MXNet's shape inference"):
        again(mx.nd.ones((2, 7)))


def test_other_errors_pass_unchanged():
    low = amp.convert_hybrid_block(_net(), mx.nd.ones((2, 8)), "bfloat16")
    with pytest.raises(ValueError, match="argument structure") as err:  # Gluon's own check of the arguments
        low(mx.nd.ones((2, 8)), mx.nd.ones((2, 8)))
    assert not isinstance(err.value, InputShapeError)


@pytest.mark.parametrize("contrib_form", [False, True])
def test_the_default_conversion_stores_weights_in_the_target_dtype_and_loads_float32_files(tmp_path, contrib_form):
    """The default stores the weights in bfloat16 (MXNet 2.0's form and contrib's): where the plan runs bfloat16
    natively no weight is cast at every call (an emulated plan reads them through an exact cast to float32);
    cast_params_offline=False keeps float32 weights, cast or rounded at every call; a converted block loads a float32
    file of the same names (rounded into the dtypes it stores) and then computes what the float32-weight block
    computes."""
    import json
    import numpy as np
    from mxnet.amp.base.dtypes import dtype_name
    from mxnet.amp.core.support import plans_native
    net, x = _net(), mx.nd.random.uniform(shape=(2, 8))
    if contrib_form:
        net.hybridize()
        net(x)
        default = amp.convert_hybrid_block(net, target_dtype="bfloat16")
        kept = amp.convert_hybrid_block(net, target_dtype="bfloat16", cast_params_offline=False)
    else:
        default = amp.convert_hybrid_block(net, x, "bfloat16")
        kept = amp.convert_hybrid_block(net, x, "bfloat16", cast_params_offline=False)
    weights = sorted(n for n in default.collect_params() if n.endswith("weight"))
    assert len(weights) == 2 and sorted(kept.collect_params()) == sorted(default.collect_params())
    assert {dtype_name(default.collect_params()[n].dtype) for n in weights} == {"bfloat16"}
    assert {dtype_name(kept.collect_params()[n].dtype) for n in weights} == {"float32"}

    def params_cast(block):
        nodes = json.loads(block._cached_graph[1].tojson(remove_amp_cast=False))["nodes"]
        return [n for n in nodes if n["op"] in ("amp_cast", "amp_multicast", "amp_round")
                and any(nodes[i]["name"] in weights for i, _, _ in n["inputs"])]
    assert params_cast(kept) and (params_cast(default) == [] or not plans_native("bfloat16", "cpu"))
    np.testing.assert_array_equal(default(x).asnumpy(), kept(x).asnumpy())
    for p in kept.collect_params().values():  # new float32 values, saved under the same names
        p.set_data(p.data() * 0.5)
    kept.collect_params().save(str(tmp_path / "f32.params"))  # the graph's parameter names
    default.load_parameters(str(tmp_path / "f32.params"))
    assert {dtype_name(default.collect_params()[n].dtype) for n in weights} == {"bfloat16"}
    np.testing.assert_array_equal(default(x).asnumpy(), kept(x).asnumpy())


def test_the_block_keeps_its_memory_between_calls_and_each_output_stays_the_caller_s(tmp_path):
    """Converted and imported blocks run with static_alloc (flat memory over inputs of many shapes); an output of
    one call is not overwritten by the next, of the same shape or another, and each matches a fresh float32 run."""
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(16, flatten=False), gluon.nn.Dense(4, flatten=False))
    net.initialize()
    low = amp.convert_hybrid_block(net, mx.nd.ones((2, 5, 8)), "bfloat16")
    low.export(str(tmp_path / "low"))
    imported = ConvertedBlock.imports(
        str(tmp_path / "low-symbol.json"), ["data"], str(tmp_path / "low-0000.params"))
    for block in (low, imported):
        assert dict(block._flags).get("static_alloc") is True
        inputs = [mx.nd.random.uniform(-1, 1, shape) for shape in ((2, 5, 8), (2, 5, 8), (3, 9, 8), (1, 2, 8))]
        outputs = [block(x) for x in inputs]
        for x, y in zip(inputs, outputs):
            assert y.shape == x.shape[:2] + (4,)
            ref = net(x).asnumpy()
            assert abs(y.asnumpy() - ref).max() <= 0.02 * abs(ref).max() + 1e-3
