/*!
 * \file cuda_kernels.h
 * \brief CUDA versions of the multi-tensor kernels (cuda_kernels.cu), callable from plain C++.
 *
 * Same arguments and results as multi_tensor.h, with device pointers and a cudaStream_t passed as
 * void*. finite_flag and sum_squares point to device memory; both are written (not accumulated).
 * Each returns nullptr on success or the CUDA error string of the failed launch.
 */
#ifndef MXNET_AMP_KERNELS_CUDA_KERNELS_H_
#define MXNET_AMP_KERNELS_CUDA_KERNELS_H_

#include "multi_tensor.h"

namespace mxnet_amp {

const char* cuda_multi_tensor_cast(int64_t chunk_size, const TensorRef* inputs,
                                   const TensorRef* outputs, int n, void* stream);

const char* cuda_multi_tensor_unscale_check(int64_t chunk_size, float* finite_flag,
                                            float* sum_squares, const TensorRef* tensors, int n,
                                            float inv_scale, void* stream);

}  // namespace mxnet_amp

#endif  // MXNET_AMP_KERNELS_CUDA_KERNELS_H_
