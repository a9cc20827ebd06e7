#!/usr/bin/env bash
# Builds the standalone CUDA harness (tests/cpp/cuda_harness.cu) with g++ and nvcc alone, and runs it: every
# CUDA kernel against the CPU kernels, then each kernel's bandwidth. Needs no MXNet, no Python and no CMake, so it
# runs on a bare GPU machine; on one without a GPU the harness prints "SKIP: no CUDA device" and exits 0.
#
# The compile flags are CMakeLists.txt's (amp_kernels, amp_loops_<isa>, amp_kernels_cuda); keep them in step.
# Two harnesses are linked: one with the CUDA kernels as shipped (nvcc contracts multiply-adds, so the fused
# update is checked to a tolerance) and one whose cuda_update.cu is compiled with -fmad=false, run with
# --exact-update and no benchmark: there every kernel must give the CPU's bits.
#
# Usage: bash tools/gpu_check.sh [harness arguments, e.g. --bench-elements 10000000]
# Env:   CUDA_ARCH  compute capabilities to build for, e.g. "90" or "80 90" (default: the first GPU's, from
#                   nvidia-smi; 90 when there is none)
#        NVCC, CXX  compilers (default: nvcc on PATH or /usr/local/cuda/bin/nvcc; g++)
#        BUILD_DIR  default build/gpu_check;  JOBS  parallel compiles (default: nproc)
# Exit status: the first failing harness's, else 0.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kernels="$root/src/operator/amp/kernels"
build="${BUILD_DIR:-$root/build/gpu_check}"
jobs="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
cxx="${CXX:-g++}"
nvcc="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
if [[ ! -x "$nvcc" ]]; then
  echo "gpu_check: nvcc not found (set NVCC=/path/to/nvcc)" >&2
  exit 1
fi

arch="${CUDA_ARCH:-}"
if [[ -z "$arch" ]]; then
  cap="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .' || true)"
  if [[ "$cap" =~ ^[0-9]+$ ]]; then
    arch="$cap"
  else
    arch=90
    echo "gpu_check: nvidia-smi gave no compute capability; building for sm_90"
  fi
fi
gencode=()
for a in ${arch//;/ }; do gencode+=("-gencode" "arch=compute_$a,code=[sm_$a,compute_$a]"); done

# CMakeLists.txt: Release (-O3 -DNDEBUG), C++17; kernels with OpenMP; the loops once per instruction set.
cxx_flags=(-std=c++17 -O3 -DNDEBUG)
loop_flags=(-fopenmp-simd -ffp-contract=off -fno-math-errno)
nvcc_flags=(-std=c++17 -O3 -DNDEBUG -ccbin "$cxx" "${gencode[@]}")
if [[ "$(uname -m)" =~ ^(x86_64|AMD64|amd64)$ ]]; then
  isas=(baseline avx2 avx512)
  declare -A isa_flags=([baseline]="-march=x86-64-v2" [avx2]="-march=x86-64-v3"
                        [avx512]="-march=x86-64-v4 -mprefer-vector-width=512")
  kernel_flags=(-fopenmp -march=x86-64-v2 -DAMP_HAVE_X86_ISAS)
else
  isas=(baseline)
  declare -A isa_flags=([baseline]="")
  kernel_flags=(-fopenmp)
fi

mkdir -p "$build"
echo "gpu_check: $("$nvcc" --version | tail -n 1); $("$cxx" --version | head -n 1); sm ${arch}; $jobs job(s)"
start=$(date +%s)

# Runs up to $jobs compiles at once; finish waits for all and fails if any did.
running=0
failed=0
spawn() {
  "$@" &
  running=$((running + 1))
  if ((running >= jobs)); then
    wait -n || failed=1
    running=$((running - 1))
  fi
}
finish() {
  while ((running > 0)); do
    wait -n || failed=1
    running=$((running - 1))
  done
  if ((failed)); then
    echo "gpu_check: a compile failed (see above)" >&2
    exit 1
  fi
}

cpu_objects=()
for src in "$kernels"/*.cc; do
  [[ "$(basename "$src")" == cpu_loops_isa.cc ]] && continue
  obj="$build/$(basename "$src" .cc).o"
  spawn "$cxx" "${cxx_flags[@]}" "${kernel_flags[@]}" -c "$src" -o "$obj"
  cpu_objects+=("$obj")
done
for isa in "${isas[@]}"; do
  obj="$build/cpu_loops_$isa.o"
  # shellcheck disable=SC2086  # isa_flags holds several flags
  spawn "$cxx" "${cxx_flags[@]}" -DAMP_ISA="$isa" ${isa_flags[$isa]} "${loop_flags[@]}" \
    -c "$kernels/cpu_loops_isa.cc" -o "$obj"
  cpu_objects+=("$obj")
done
cuda_objects=()
for src in "$kernels"/*.cu; do
  obj="$build/$(basename "$src" .cu).o"
  spawn "$nvcc" "${nvcc_flags[@]}" -c "$src" -o "$obj"
  cuda_objects+=("$obj")
done
spawn "$nvcc" "${nvcc_flags[@]}" -fmad=false -c "$kernels/cuda_update.cu" -o "$build/cuda_update_nofma.o"
spawn "$nvcc" "${nvcc_flags[@]}" -c "$root/tests/cpp/cuda_harness.cu" -o "$build/cuda_harness.o"
finish

exact_objects=()
for obj in "${cuda_objects[@]}"; do
  [[ "$obj" == "$build/cuda_update.o" ]] && obj="$build/cuda_update_nofma.o"
  exact_objects+=("$obj")
done
link=("$nvcc" -ccbin "$cxx" "${gencode[@]}" -Xcompiler -fopenmp)
spawn "${link[@]}" "$build/cuda_harness.o" "${cuda_objects[@]}" "${cpu_objects[@]}" -o "$build/amp_cuda_harness"
spawn "${link[@]}" "$build/cuda_harness.o" "${exact_objects[@]}" "${cpu_objects[@]}" \
  -o "$build/amp_cuda_harness_exact"
finish

echo "gpu_check: built in $(($(date +%s) - start)) s, in $build:"
echo "  CPU references: $(cd "$build" && echo "${cpu_objects[@]##*/}") (g++ ${cxx_flags[*]}; loops ${isas[*]})"
echo "  CUDA kernels:   $(cd "$build" && echo "${cuda_objects[@]##*/}") (nvcc ${nvcc_flags[*]:0:3}, sm ${arch})"
echo "  amp_cuda_harness        the CUDA kernels as shipped"
echo "  amp_cuda_harness_exact  cuda_update.cu with -fmad=false"

status=0
echo "gpu_check: amp_cuda_harness $*"
"$build/amp_cuda_harness" "$@" || status=$?
echo "gpu_check: amp_cuda_harness_exact --exact-update --bench-elements 0"
exact_status=0
"$build/amp_cuda_harness_exact" --exact-update --bench-elements 0 || exact_status=$?
((status != 0)) || status=$exact_status
echo "gpu_check: exit status $status"
exit "$status"
