/*!
 * \file batch_norm.h
 * \brief Batch normalisation on CPU for float32, float16 and bfloat16 data, with float32 statistics and
 *        parameters: MXNet's BatchNorm, computed in float32 whatever the data's storage type. No MXNet headers.
 *
 * The data is [outer, channels, inner] (MXNet's axis: outer = the dimensions before it, inner = after it).
 * Training normalises with the batch's mean and (biased) variance and moves the moving statistics towards them
 * (moving = moving * momentum + batch * (1 - momentum)); inference normalises with the moving statistics.
 */
#ifndef MXNET_AMP_KERNELS_BATCH_NORM_H_
#define MXNET_AMP_KERNELS_BATCH_NORM_H_

#include <stdint.h>

namespace mxnet_amp {

struct BatchNormShape {
  int64_t outer, channels, inner;
};

struct BatchNormForward {
  BatchNormShape shape;
  int dtype;                    /*!< of x and y */
  const void* x;
  void* y;
  const float* gamma;           /*!< nullptr: a scale of 1 (fix_gamma) */
  const float* beta;
  float* moving_mean;           /*!< updated in training */
  float* moving_var;
  float* saved_mean;            /*!< [channels]: the mean used (batch or moving) */
  float* saved_invstd;          /*!< [channels]: 1 / sqrt(variance used + eps) */
  const void* addend;           /*!< nullptr, or a tensor of x's dtype and shape added to the normalised data */
  float eps, momentum;
  bool training;
  bool relu;                    /*!< y = min(max(0, normalised (+ addend)), relu_max): a fused ReLU */
  float relu_max;               /*!< where relu: INFINITY (ReLU) or 6 (ReLU6) */
  int threads;                  /*!< OpenMP team */
};

struct BatchNormBackward {
  BatchNormShape shape;
  int dtype;                    /*!< of dy, x and dx */
  const void* dy;
  const void* x;
  const void* y;                /*!< the forward's output, read where relu */
  void* dx;
  void* daddend;                /*!< nullptr, or the addend's gradient: dy (masked where relu) */
  const float* gamma;           /*!< nullptr: a scale of 1 (fix_gamma: dgamma is 0) */
  const float* saved_mean;
  const float* saved_invstd;
  float* dgamma;
  float* dbeta;
  bool training;                /*!< whether the forward used the batch's statistics */
  bool relu;                    /*!< the forward fused a ReLU: dy counts where 0 < y < relu_max (masked first, into
                                     daddend or else dx) */
  float relu_max;               /*!< where relu: INFINITY (ReLU) or 6 (ReLU6) */
  int threads;
};

/*! \brief y, the saved statistics and (training) the moving statistics. */
void cpu_batch_norm_forward(const BatchNormForward& args);

/*! \brief dx, dgamma and dbeta. */
void cpu_batch_norm_backward(const BatchNormBackward& args);

}  // namespace mxnet_amp

#endif  // MXNET_AMP_KERNELS_BATCH_NORM_H_
