"""The ground floor (mxnet.amp.base): dtype facts against MXNet's own, the library's op names against the
registry, operator handles and aliases, and where warnings point."""
import json
import warnings

import mxnet as mx
import numpy as np
import pytest

from mxnet.amp import lists
from mxnet.amp.base import callers, dtypes, op_names, registry


@pytest.mark.parametrize("name", sorted(dtypes.TYPE_CODES))
def test_type_codes_are_mxnets(name):
    var = mx.sym.var("x", dtype=dtypes.mx_dtype(name))
    assert json.loads(var.tojson())["nodes"][0]["attrs"]["__dtype__"] == dtypes.TYPE_CODES[name]
    assert dtypes.DTYPE_OF_CODE[dtypes.TYPE_CODES[name]] == name


def test_dtype_names_and_the_bfloat16_object():
    bf16 = mx.nd.amp_cast(mx.nd.ones(2), dtype=dtypes.BFLOAT16)
    assert bf16.dtype == dtypes.BFLOAT16 and dtypes.dtype_name(bf16.dtype) == "bfloat16"
    assert dtypes.dtype_name(np.float16) == "float16" and dtypes.dtype_name(None) is None
    assert dtypes.mx_dtype("float32") == np.float32
    ranks = dtypes.FLOAT_RANK
    assert ranks["float16"] == ranks["bfloat16"] < ranks["float32"] < ranks["float64"]


def test_the_library_registers_exactly_its_op_names():
    registered = set(mx.operator.get_all_registered_operators())
    assert set(op_names.ALL_OPS) <= registered
    assert not {n for n in registered if n.startswith("amp_")} - set(op_names.ALL_OPS) - {"amp_cast", "amp_multicast"}
    assert set(lists.groups.PROJECT_MATMUL) == set(op_names.MATMUL_OPS)  # the lists read the same names


def test_aliases_share_a_handle_and_group_together():
    assert registry.op_handle("FullyConnected") == registry.op_handle("_npx_fully_connected")
    groups = registry.group_by_operator(["_npx_fully_connected", "FullyConnected", "relu"])
    assert groups == (("FullyConnected", "_npx_fully_connected"), ("relu",))
    with pytest.raises(mx.base.MXNetError, match="not registered"):
        registry.op_handle("no_such_op")
    assert "FullyConnected" in registry.registered_ops()


def test_warnings_point_outside_the_package():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn("here", stacklevel=callers.stacklevel_outside_package())
    assert caught[0].filename == __file__  # this test file is outside mxnet/amp/
