/*!
 * \file dropout.cc
 * \brief The loops of dropout.h: chunks of the per-instruction-set loops (cpu_loops.h) on the call's team.
 */
#include "dropout.h"

#include <algorithm>

#include "cpu_loops.h"

namespace mxnet_amp {
namespace {

constexpr int64_t kChunk = 1 << 14;  // elements per task

float scale_of(float p) { return p < 1.f ? 1.f / (1.f - p) : 0.f; }

}  // namespace

void dropout_forward(void* y, const void* x, int dtype, uint8_t* mask, int64_t n, float p, uint64_t seed,
                     int threads) {
  // keep when the draw (32 bits) is below (1 - p) 2^32
  const uint64_t keep_below = static_cast<uint64_t>((1.0 - static_cast<double>(p)) * 4294967296.0);
  const float scale = scale_of(p);
  const CpuLoops& loops = cpu_loops();
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t c = 0; c < chunks; ++c) {
    loops.dropout(dtype, x, y, mask, c * kChunk, std::min(n, (c + 1) * kChunk), seed, keep_below, scale);
  }
}

void dropout_backward(void* dx, const void* dy, int dtype, const uint8_t* mask, int64_t n, float p, int threads) {
  const float scale = scale_of(p);
  const CpuLoops& loops = cpu_loops();
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t c = 0; c < chunks; ++c) {
    loops.dropout_grad(dtype, dy, dx, mask, c * kChunk, std::min(n, (c + 1) * kChunk), scale);
  }
}

}  // namespace mxnet_amp
