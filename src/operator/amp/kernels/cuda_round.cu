/*!
 * \file cuda_round.cu
 * \brief CUDA kernel of round.h: a grid-stride loop over float32 values.
 */
#include <cuda_runtime.h>

#include "convert.h"
#include "round.h"

namespace mxnet_amp {
namespace {

template <bool kBf16>
__global__ void round_kernel(const float* in, float* out, int64_t size) {  // in may be out
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < size;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = in[i];
    out[i] = kBf16 ? bf16_bits_to_float(float_to_bf16_bits(v)) : half_bits_to_float(float_to_half_bits(v));
  }
}

}  // namespace

const char* cuda_round_to(const TensorRef& in, const TensorRef& out, int dtype, void* stream) {
  if (in.size == 0) return nullptr;
  constexpr int kThreads = 256;
  const int64_t wanted = (in.size + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(wanted < 65535 ? wanted : 65535);
  auto s = static_cast<cudaStream_t>(stream);
  const auto* src = static_cast<const float*>(in.data);
  auto* dst = static_cast<float*>(out.data);
  if (dtype == kBfloat16) {
    round_kernel<true><<<blocks, kThreads, 0, s>>>(src, dst, in.size);
  } else {
    round_kernel<false><<<blocks, kThreads, 0, s>>>(src, dst, in.size);
  }
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace mxnet_amp
