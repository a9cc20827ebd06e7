"""The CUDA kernels of libmxnet_amp through MXNet ops, against the CPU kernels.

Needs a GPU build of MXNet 1.9.1 and libmxnet_amp built with -DMXNET_AMP_CUDA=ON; skipped otherwise.
Without MXNet GPU, tests/cpp/cuda_harness.cu checks the same kernels directly.
"""
import mxnet as mx
import numpy as np
import pytest

from mxnet.amp.core import ops

from mxnet.amp.base.dtypes import BFLOAT16 as BF16

pytestmark = pytest.mark.skipif(mx.context.num_gpus() == 0,
                                reason="needs a GPU build of MXNet and a CUDA device")


def make_arrays(ctx, seed):
    rng = np.random.default_rng(seed)
    arrays = []
    for i, size in enumerate([0, 1, 3, 17, 1000, 65537, 300_001] + [5] * 1100):
        x = (rng.standard_normal(size) * 1000).astype(np.float32)
        dtype = ("float32", "float16", "float64")[i % 3]
        arrays.append(mx.nd.array(x, dtype=dtype, ctx=ctx))
    return arrays


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_multi_cast_gpu_matches_cpu(dtype):
    with mx.util.np_shape(True):
        outs = {}
        for ctx in (mx.cpu(), mx.gpu(0)):
            result = ops.multi_cast(make_arrays(ctx, 0), dtype)
            outs[ctx.device_type] = [r.asnumpy() for r in result]
        for got, ref in zip(outs["gpu"], outs["cpu"]):
            np.testing.assert_array_equal(got.view(np.uint8), ref.view(np.uint8))


def test_widest_cast_gpu_matches_cpu():
    with mx.util.np_shape(True):
        outs = {}
        for ctx in (mx.cpu(), mx.gpu(0)):
            outs[ctx.device_type] = [r.asnumpy() for r in ops.widest_cast(make_arrays(ctx, 1))]
        for got, ref in zip(outs["gpu"], outs["cpu"]):
            assert got.dtype == np.float64
            np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("inject", [False, True])
def test_unscale_and_check_gpu_matches_cpu(inject):
    with mx.util.np_shape(True):
        results = {}
        for ctx in (mx.cpu(), mx.gpu(0)):
            arrays = make_arrays(ctx, 2)
            if inject:
                arrays[6][70_000] = np.inf  # float32, 300 001 elements
            flag, sumsq = ops.unscale_and_check(arrays, 1.0 / 1024, sum_squares=True)
            results[ctx.device_type] = (flag.asnumpy()[0], sumsq.asnumpy()[0],
                                        [a.asnumpy() for a in arrays])
        assert results["gpu"][0] == results["cpu"][0] == (0.0 if inject else 1.0)
        if not inject:
            np.testing.assert_allclose(results["gpu"][1], results["cpu"][1], rtol=1e-5)
        for got, ref in zip(results["gpu"][2], results["cpu"][2]):
            np.testing.assert_array_equal(got, ref)


def test_arrays_on_different_devices_are_rejected():
    with pytest.raises(mx.MXNetError):
        ops.multi_cast([mx.nd.ones(2, ctx=mx.cpu()), mx.nd.ones(2, ctx=mx.gpu(0))], "float16")
        mx.nd.waitall()
