"""The block a conversion returns (mxnet.amp.inference.converted_block): inputs of a shape its operators refuse
give an error that names the shapes given and the shapes it was converted with."""
import re

import mxnet as mx
import pytest
from mxnet import amp, gluon

from mxnet.amp.inference.converted_block import InputShapeError


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
