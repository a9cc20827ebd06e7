#!/usr/bin/env bash
# Builds the standalone CPU kernel harness (tests/cpp) with AddressSanitizer + UBSan and runs it:
# every tensor lives in its own exact-size heap block, so any out-of-bounds read or write fails.
# Takes about a minute on 2 cores. Usage: bash tools/asan_check.sh   (env BUILD_DIR, PYTHON)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${BUILD_DIR:-$root/build/asan}"
python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -x /tmp/venv/bin/python ]]; then python=/tmp/venv/bin/python; else python="$(command -v python3)"; fi
fi
cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMXNET_AMP_ASAN=ON \
  -DMXNET_AMP_TESTS=ON -DPython3_EXECUTABLE="$python" -DMXNET_AMP_OUTPUT_DIR="$build_dir/lib" >/dev/null
cmake --build "$build_dir" --target amp_kernel_tests --parallel "$(nproc 2>/dev/null || echo 2)" >/dev/null
ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
  OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" "$build_dir/tests/cpp/amp_kernel_tests"
