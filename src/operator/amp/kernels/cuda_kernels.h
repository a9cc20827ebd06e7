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
#include "scaler_rule.h"

namespace mxnet_amp {

const char* cuda_multi_tensor_cast(int64_t chunk_size, const TensorRef* inputs,
                                   const TensorRef* outputs, int n, void* stream);

const char* cuda_multi_tensor_unscale_check(int64_t chunk_size, float* finite_flag,
                                            float* sum_squares, const TensorRef* tensors, int n,
                                            float inv_scale, void* stream);

/*!
 * \brief cpu_multi_tensor_update on the GPU (cuda_update.cu), skipped on the device: finite_flag and
 *        scaler_state are device pointers; the gradient multiplier is rescale_grad / scaler_state[0] and
 *        hyper.rescale_grad is ignored. previous_applied (device, or null) is the previous step's *applied:
 *        where it is 0, each set's lr_if_skipped and eta_if_skipped replace its lr and eta. *applied (device)
 *        receives 1.0f if the update ran, else 0.0f.
 */
const char* cuda_multi_tensor_update(int64_t chunk_size, const UpdateHyper& hyper, const UpdateSet* sets, int n,
                                     const float* finite_flag, const double* scaler_state, double rescale_grad,
                                     const float* previous_applied, float* applied, void* stream);

/*! \brief scaler_step on the device state (kScalerStateSize doubles); *scale receives the new scale. */
const char* cuda_scaler_update(const ScalerRule& rule, double* state, const float* finite_flag, float* scale,
                               void* stream);

}  // namespace mxnet_amp

#endif  // MXNET_AMP_KERNELS_CUDA_KERNELS_H_
