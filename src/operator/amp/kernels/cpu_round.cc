/*!
 * \file cpu_round.cc
 * \brief CPU kernel of round.h: branch-free conversions from convert.h, vectorised by the compiler.
 */
#include "round.h"

#include "convert.h"

namespace mxnet_amp {
namespace {

template <typename Round>
void round_loop(int64_t chunk_size, const float* in, float* out, int64_t size, Round round) {
  const int64_t chunks = (size + chunk_size - 1) / chunk_size;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t end = c * chunk_size + chunk_size < size ? c * chunk_size + chunk_size : size;
#pragma omp simd
    for (int64_t i = c * chunk_size; i < end; ++i) {
      out[i] = round(in[i]);
    }
  }
}

}  // namespace

void cpu_round_to(int64_t chunk_size, const TensorRef& in, const TensorRef& out, int dtype) {
  const float* src = static_cast<const float*>(in.data);
  float* dst = static_cast<float*>(out.data);
  if (dtype == kBfloat16) {
    round_loop(chunk_size, src, dst, in.size, [](float v) { return bf16_bits_to_float(float_to_bf16_bits(v)); });
  } else {
    round_loop(chunk_size, src, dst, in.size, [](float v) { return half_bits_to_float(float_to_half_bits(v)); });
  }
}

}  // namespace mxnet_amp
