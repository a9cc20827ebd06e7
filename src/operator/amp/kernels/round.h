/*!
 * \file round.h
 * \brief Rounding float32 values to float16 / bfloat16 precision while keeping float32 storage: the kernel
 *        behind emulated mixed precision (low precision numerics on hardware without such kernels).
 *
 * Same rounding as the casts (convert.h): out[i] == float(cast(in[i])) bit for bit. No MXNet headers.
 */
#ifndef MXNET_AMP_KERNELS_ROUND_H_
#define MXNET_AMP_KERNELS_ROUND_H_

#include "multi_tensor.h"

namespace mxnet_amp {

/*!
 * \brief out[i] = in[i] rounded to dtype (kFloat16 or kBfloat16), for i < in.size; in and out are float32
 *        tensors of equal size (they may be the same tensor). OpenMP over chunks of chunk_size elements.
 */
void cpu_round_to(int64_t chunk_size, const TensorRef& in, const TensorRef& out, int dtype);

/*! \brief CUDA version of cpu_round_to (device pointers, stream as void*); nullptr or the CUDA error. */
const char* cuda_round_to(const TensorRef& in, const TensorRef& out, int dtype, void* stream);

}  // namespace mxnet_amp

#endif  // MXNET_AMP_KERNELS_ROUND_H_
