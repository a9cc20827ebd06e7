"""No C++ exception crosses from libmxnet_amp into libmxnet.so: every lib_api callback the library registers is
guarded (``AMP_GUARDED`` in src/operator/amp/ops/glue.h), so a failed allocation or a bad input becomes an
MXNetError that names the op and says what happened, and the process lives on.
"""
import os
import subprocess
import sys

import mxnet as mx
import pytest

_OUT_OF_MEMORY = r"""
import resource
import mxnet as mx
from mxnet import autograd
import mxnet.amp
# amp_matmul's backward sums a broadcast gradient through a float32 scratch of 64 x 4096 x 256 values (256 MB)
a, b = mx.nd.ones((1, 4096, 256)), mx.nd.ones((64, 256, 1))
a.attach_grad()
b.attach_grad()
with autograd.record():
    y = mx.nd.amp_matmul(a, b)
y.wait_to_read()
with open("/proc/self/status") as f:
    size = next(int(l.split()[1]) for l in f if l.startswith("VmSize")) * 1024
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
resource.setrlimit(resource.RLIMIT_AS, (size + (100 << 20), hard))  # 100 MB more address space, no more
try:
    y.backward()
    a.grad.wait_to_read()
    print("no error")
except mx.base.MXNetError as err:
    print("ERROR " + " ".join(str(err).split()))
resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
print("alive %s" % (mx.nd.ones(3) * 2).asnumpy().tolist())
"""


def test_an_impossible_allocation_is_an_mxnet_error_and_the_process_lives_on():
    proc = subprocess.run([sys.executable, "-c", _OUT_OF_MEMORY], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[-1] == "alive [2.0, 2.0, 2.0]"
    error = lines[-2]
    assert error.startswith("ERROR ") and "custom operator 'amp_matmul'" in error, error
    assert "out of memory (std::bad_alloc) in libmxnet_amp" in error, error


@pytest.mark.parametrize("call,message", [
    (lambda: mx.nd.amp_matmul(mx.nd.ones((2, 3)), mx.nd.ones((4, 5))), "inner dimensions differ \\(3 vs 4\\)"),
    (lambda: mx.nd.amp_multi_cast(mx.nd.ones(2), num_args=1, dtype="int8"), "dtype"),
    (lambda: mx.nd.amp_round(mx.nd.ones(2), dtype="float64"), "float16.*bfloat16|bfloat16.*float16"),
])
def test_bad_input_is_an_mxnet_error_naming_the_op(call, message):
    import mxnet.amp  # noqa: F401  (registers the library's ops)
    with pytest.raises(mx.base.MXNetError, match=message):
        call().wait_to_read()
    assert (mx.nd.ones(2) + 1).asnumpy().tolist() == [2.0, 2.0]  # MXNet goes on
