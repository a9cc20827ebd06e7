"""The finite check of a step's gradients (mxnet.amp.training.checks): one fused call per device, unscaled in
place, flags combined by their product without a host sync."""
import mxnet as mx
import numpy as np
import pytest

from mxnet.amp.training.checks import all_finite, check_gradients


@pytest.mark.parametrize("bad", [None, np.inf, -np.inf, np.nan])
def test_check_unscales_in_place_and_flags_any_non_finite_value(bad):
    grads = [[mx.nd.array([2.0, 4.0]), mx.nd.array([[8.0]])], [mx.nd.array([6.0, 2.0]), mx.nd.array([[4.0]])]]
    if bad is not None:
        grads[1][1][0, 0] = bad
    flag = check_gradients(grads, 0.5)
    assert flag.shape == (1,) and flag.dtype == np.float32
    assert flag.asscalar() == (1.0 if bad is None else 0.0)
    np.testing.assert_array_equal(grads[0][0].asnumpy(), [1.0, 2.0])  # unscaled in place
    pure = [[mx.nd.array([3.0])]]
    assert check_gradients(pure, 1.0).asscalar() == 1.0 and pure[0][0].asscalar() == 3.0


def test_flags_combine_by_product():
    ones, zero = mx.nd.ones((1,)), mx.nd.zeros((1,))
    assert all_finite([ones]).asscalar() == 1.0
    assert all_finite([ones, ones, ones]).asscalar() == 1.0
    assert all_finite([ones, zero, ones]).asscalar() == 0.0
