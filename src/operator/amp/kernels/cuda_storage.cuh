/*!
 * \file cuda_storage.cuh
 * \brief Element types of the CUDA kernels: storage type, load to float32 and store from float32.
 */
#ifndef MXNET_AMP_KERNELS_CUDA_STORAGE_CUH_
#define MXNET_AMP_KERNELS_CUDA_STORAGE_CUH_

#include "convert.h"

namespace mxnet_amp {
namespace cuda {

struct F32 {
  using storage = float;
  static __device__ __forceinline__ float load(float v) { return v; }
  static __device__ __forceinline__ float store(float v) { return v; }
};
struct F16 {
  using storage = uint16_t;
  static __device__ __forceinline__ float load(uint16_t v) { return half_bits_to_float(v); }
  static __device__ __forceinline__ uint16_t store(float v) { return float_to_half_bits(v); }
};
struct BF16 {
  using storage = uint16_t;
  static __device__ __forceinline__ float load(uint16_t v) { return bf16_bits_to_float(v); }
  static __device__ __forceinline__ uint16_t store(float v) { return float_to_bf16_bits(v); }
};
struct F64 {
  using storage = double;
  static __device__ __forceinline__ float load(double v) { return static_cast<float>(v); }
  static __device__ __forceinline__ double store(float v) { return v; }
};

}  // namespace cuda
}  // namespace mxnet_amp

#endif  // MXNET_AMP_KERNELS_CUDA_STORAGE_CUH_
