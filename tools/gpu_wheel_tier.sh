#!/usr/bin/env bash
# The GPU-wheel tier of the test command, on a CPU-only machine: the whole test suite on mxnet-cu117==1.9.1.
#   bash tools/gpu_wheel_tier.sh [pytest options]
# 1. A venv of its own (.venv-cu117, or $GPU_TIER_VENV) with mxnet-cu117, the CUDA 11 libraries from PyPI and
#    the test requirements (requirements.txt less its mxnet line: naming mxnet would replace the GPU wheel).
# 2. A stand-in libcuda.so.1 (tests/gpu_wheel/cuda_stub.c: every call answers "no device"), and the CUDA
#    libraries' lib/ folders on LD_LIBRARY_PATH: MXNet imports with CUDA enabled and 0 GPUs.
# 3. `pip install .`, as docs/install.md says; then libmxnet.so must be byte-identical, CUDA still enabled, and
#    the library (with its CUDA kernels where nvcc exists) loaded.
# 4. The whole suite from an empty folder; GPU tests skip with their reason.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv="${GPU_TIER_VENV:-$root/.venv-cu117}"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null || PY=python3
start=$(date +%s)
[ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
grep -v '^mxnet==' requirements.txt > "$venv/requirements-gpu-tier.txt"
"${pip[@]}" mxnet-cu117==1.9.1 nvidia-cuda-runtime-cu11 nvidia-cublas-cu11 'nvidia-cudnn-cu11==8.9.*' \
  nvidia-cufft-cu11 nvidia-curand-cu11 nvidia-cusolver-cu11 nvidia-cusparse-cu11 nvidia-cuda-nvrtc-cu11 \
  nvidia-nccl-cu11 nvidia-nvtx-cu11 -r "$venv/requirements-gpu-tier.txt"

site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
mkdir -p "$venv/stub"
cc -shared -fPIC -O2 -Wl,-soname,libcuda.so.1 -o "$venv/stub/libcuda.so.1" tests/gpu_wheel/cuda_stub.c
cuda_libs="$(ls -d "$site"/nvidia/*/lib | tr '\n' ':')"
export LD_LIBRARY_PATH="${cuda_libs}$venv/stub${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

libmxnet="$site/mxnet/libmxnet.so"
before="$(sha256sum "$libmxnet" | cut -d' ' -f1)"
"${pip[@]}" .
after="$(sha256sum "$libmxnet" | cut -d' ' -f1)"
if [ "$before" != "$after" ]; then
  echo "GPU-wheel tier: pip install . replaced the GPU wheel's libmxnet.so ($before -> $after)" >&2
  exit 1
fi
expect_cuda=$(command -v nvcc >/dev/null && echo 1 || echo 0)
(cd / && "$venv/bin/python" - "$expect_cuda" <<'PY'
import sys
import mxnet as mx
from mxnet.amp.core import library
cuda = mx.runtime.Features().is_enabled("CUDA")
print("GPU-wheel tier: MXNet %s, CUDA %s, %d GPUs; libmxnet.so unchanged; library %s, CUDA kernels %s" % (
    mx.__version__, "on" if cuda else "OFF", mx.context.num_gpus(), library.LIBRARY_PATH,
    "built" if library.cuda_kernels() else "not built"))
assert cuda, "the GPU wheel lost its CUDA build"
assert library.cuda_kernels() == (sys.argv[1] == "1"), "CUDA kernels built: %s, nvcc here: %s" % (
    library.cuda_kernels(), sys.argv[1])
PY
)
echo "GPU-wheel tier: set up in $(( $(date +%s) - start )) s"
cd "$(mktemp -d)"
exec "$venv/bin/python" -m pytest "$root/tests/python" -p no:cacheprovider "$@"
