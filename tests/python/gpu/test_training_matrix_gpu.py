"""The training matrix's float16-on-GPU column: every row of tests/python/unittest/matrix_models.py trained
for 8 steps in float32 and under ``amp.init('float16')`` (native float16 kernels, dynamic loss scaling) on the
first GPU, hybridized and imperative. Assertions and tolerance as in test_training_matrix.py: finite, decreasing
loss, final loss within K * 2^-11 * L0 of float32 (K = 4)."""
import os
import sys
import warnings

import mxnet as mx
import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "unittest"))
import matrix_models  # noqa: E402

pytestmark = pytest.mark.skipif(mx.context.num_gpus() == 0, reason="needs a GPU build of MXNet and a GPU")

K_FACTOR = 4
U_FLOAT16 = 2.0 ** -11


@pytest.mark.parametrize("hybridize", [True, False], ids=["hybrid", "imperative"])
@pytest.mark.parametrize("row", list(matrix_models.ROWS))
def test_training_cell_float16_gpu(row, hybridize):
    ctx = mx.gpu(0)
    reference = matrix_models.train(row, hybridize, ctx=ctx)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        losses = matrix_models.train(row, hybridize, "float16", None, ctx=ctx)
    assert np.isfinite(losses).all(), losses
    assert losses[-1] < losses[0], losses
    assert abs(losses[-1] - reference[-1]) <= K_FACTOR * U_FLOAT16 * reference[0], (losses, reference)
