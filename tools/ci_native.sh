#!/usr/bin/env bash
# Native-code checks for CI (the Python tests build the library through `pip install .`):
#  1. the standalone CPU kernel harness under AddressSanitizer + UBSan (tools/asan_check.sh);
#  2. when nvcc is on PATH (or CUDACXX is set): compile the CUDA kernels for sm_80/sm_90, the
#     CUDA-enabled libmxnet_amp.so and the CUDA harness (compile only: no GPU is needed).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/tools/asan_check.sh"
nvcc="${CUDACXX:-$(command -v nvcc || true)}"
if [[ -n "$nvcc" ]]; then
  BUILD_DIR="$root/build/cuda" bash "$root/tools/build_dev.sh" -DMXNET_AMP_CUDA=ON -DMXNET_AMP_TESTS=ON \
    -DCMAKE_CUDA_COMPILER="$nvcc" -DMXNET_AMP_OUTPUT_DIR="$root/build/cuda/lib"
  echo "CUDA kernels compiled (sm_80, sm_90)"
else
  echo "nvcc not found: CUDA compile check skipped"
fi
