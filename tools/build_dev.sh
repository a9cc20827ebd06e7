#!/usr/bin/env bash
# Dev build of libmxnet_amp.so into python/mxnet/amp/_lib/ (Release, -O3, OpenMP, run-time ISA dispatch).
# Usage: bash tools/build_dev.sh [extra cmake args, e.g. -DMXNET_AMP_CUDA=ON -DMXNET_AMP_TESTS=ON]
# Env: PYTHON (interpreter whose mxnet provides lib_api; default /tmp/venv/bin/python if present),
#      BUILD_DIR (default build/dev).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -x /tmp/venv/bin/python ]]; then python=/tmp/venv/bin/python; else python="$(command -v python3)"; fi
fi
build_dir="${BUILD_DIR:-$root/build/dev}"
cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$python" "$@" >/dev/null
cmake --build "$build_dir" --parallel "$(nproc 2>/dev/null || echo 2)"
echo "built in $build_dir"
