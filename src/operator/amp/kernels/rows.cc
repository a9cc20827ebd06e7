/*!
 * \file rows.cc
 * \brief Drivers of the row kernels (rows.h): rows in parallel, each through cpu_loops().
 */
#include "rows.h"

#include <cstddef>
#include <vector>

#include "cpu_loops.h"
#include "multi_tensor.h"

namespace mxnet_amp {
namespace {

// Below this many elements a call runs on one thread: a team costs more than it saves.
constexpr int64_t kParallelElements = int64_t(1) << 15;

int team_for(int64_t rows, int64_t cols, int threads) {
  return rows * cols < kParallelElements || rows < 2 ? 1 : threads;
}

int64_t valid_length(const SoftmaxRows& s, int64_t r) {
  if (s.lengths == nullptr) return s.cols;
  const int64_t n = s.length_bytes == 8 ? static_cast<const int64_t*>(s.lengths)[r]
                                        : static_cast<const int32_t*>(s.lengths)[r];
  return n < 0 ? 0 : n > s.cols ? s.cols : n;
}

const char* row_at(const void* base, int dtype, int64_t cols, int64_t r) {
  return static_cast<const char*>(base) + r * cols * dtype_bytes(dtype);
}

char* row_at(void* base, int dtype, int64_t cols, int64_t r) {
  return static_cast<char*>(base) + r * cols * dtype_bytes(dtype);
}

}  // namespace

void cpu_row_moments(const void* x, int dtype, int64_t rows, int64_t cols, float* mean, float* var, int threads) {
  const CpuLoops& l = cpu_loops();
#pragma omp parallel for schedule(static) num_threads(team_for(rows, cols, threads))
  for (int64_t r = 0; r < rows; ++r) l.row_moments(dtype, row_at(x, dtype, cols, r), cols, &mean[r], &var[r]);
}

void cpu_softmax_forward(const SoftmaxRows& s) {
  const CpuLoops& l = cpu_loops();
  const float scale = 1.0f / s.temperature;
#pragma omp parallel num_threads(team_for(s.rows, s.cols, s.threads))
  {
    std::vector<float> tmp(static_cast<size_t>(s.cols));  // this thread's row of exponentials
#pragma omp for schedule(static)
    for (int64_t r = 0; r < s.rows; ++r) {
      l.softmax_row(s.src_dtype, row_at(s.src, s.src_dtype, s.cols, r), s.dst_dtype,
                    row_at(s.dst, s.dst_dtype, s.cols, r), valid_length(s, r), s.cols, scale, s.log, tmp.data());
    }
  }
}

void cpu_softmax_backward(const SoftmaxRows& s) {
  const CpuLoops& l = cpu_loops();
  const float scale = 1.0f / s.temperature;
#pragma omp parallel for schedule(static) num_threads(team_for(s.rows, s.cols, s.threads))
  for (int64_t r = 0; r < s.rows; ++r) {
    l.softmax_grad_row(s.dst_dtype, row_at(s.dst, s.dst_dtype, s.cols, r),
                       row_at(s.diff_dst, s.dst_dtype, s.cols, r), s.src_dtype,
                       row_at(s.diff_src, s.src_dtype, s.cols, r), valid_length(s, r), s.cols, scale, s.log);
  }
}

}  // namespace mxnet_amp
