#!/usr/bin/env bash
# One entry point for a fresh machine: creates ./.venv (Python 3.11), installs MXNet 1.9.1 and this package
# (which builds the C++ library), then runs the requested job.
#   bash tools/run.sh demo [demo options]   the main job: AMP vs fp32 training on the digits data set
#   bash tools/run.sh test [pytest options] the whole test suite, then again on the mxnet-cu117 wheel
#                                           (tools/gpu_wheel_tier.sh; MXNET_AMP_GPU_TIER=0 skips that tier)
set -euo pipefail
cd "$(dirname "$0")/.."
job="${1:-}"; shift || true
case "$job" in demo|test) ;; *) echo "usage: bash tools/run.sh {demo|test} [options]" >&2; exit 2 ;; esac

PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt
.venv/bin/python -m pip install -q --disable-pip-version-check .
root="$PWD"
if [ "$job" = test ]; then
  # Horovod 0.28.1 with Gloo for the distributed tests (tests/python/unittest/test_horovod.py): built from
  # source against this MXNet, about 8 minutes on 2 cores the first time; pip's wheel cache makes reruns take
  # seconds.
  .venv/bin/python -m pip install -q --disable-pip-version-check wheel
  HOROVOD_WITH_MXNET=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 HOROVOD_WITHOUT_TENSORFLOW=1 \
    HOROVOD_WITHOUT_PYTORCH=1 MAKEFLAGS="-j$(nproc)" \
    .venv/bin/python -m pip install -q --disable-pip-version-check --no-build-isolation horovod==0.28.1
  # C++ kernels under AddressSanitizer, and the CUDA build when nvcc is present (compile only).
  PATH="$root/.venv/bin:$PATH" PYTHON="$root/.venv/bin/python" bash tools/ci_native.sh
fi
if [ "$job" = demo ]; then  # the report folder (amp_report/ by default) lands in the repository root
  exec .venv/bin/python -m mxnet.amp demo "$@"
fi
cd "$(mktemp -d)"  # test the installed package, never the source tree
status=0
"$root/.venv/bin/python" -m pytest "$root/tests/python" -p no:cacheprovider "$@" || status=$?
if [ "${MXNET_AMP_GPU_TIER:-1}" != 0 ]; then
  # The same suite on the mxnet-cu117 wheel (CPU-only machines included: a stand-in driver, 0 GPUs).
  # MXNET_AMP_GPU_TIER=0 leaves it out.
  bash "$root/tools/gpu_wheel_tier.sh" "$@" || status=$?
fi
exit "$status"
