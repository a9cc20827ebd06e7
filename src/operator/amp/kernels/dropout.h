/*!
 * \file dropout.h
 * \brief Dropout on float32 or bfloat16 data: a keep mask from a counter-based generator (each element's draw a
 *        hash of the call's seed and its index: the same mask whatever the team), and its gradient.
 *
 * Plain C++ and OpenMP on raw pointers (dtype codes as lib_api's: 0 float32, 12 bfloat16); no MXNet headers.
 */
#ifndef MXNET_AMP_KERNELS_DROPOUT_H_
#define MXNET_AMP_KERNELS_DROPOUT_H_

#include <stdint.h>

namespace mxnet_amp {

/*!
 * \brief y = x * mask / (1 - p), mask[i] = 1 with probability 1 - p (else 0), for n elements of dtype; p in
 *        [0, 1] (1: every element dropped). The mask is a function of (seed, i) only.
 */
void dropout_forward(void* y, const void* x, int dtype, uint8_t* mask, int64_t n, float p, uint64_t seed,
                     int threads);

/*! \brief dx = dy * mask / (1 - p): the gradient of dropout_forward. */
void dropout_backward(void* dx, const void* dy, int dtype, const uint8_t* mask, int64_t n, float p, int threads);

}  // namespace mxnet_amp

#endif  // MXNET_AMP_KERNELS_DROPOUT_H_
