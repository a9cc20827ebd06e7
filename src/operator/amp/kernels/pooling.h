/*!
 * \file pooling.h
 * \brief 2-D max pooling of channels-first float32 or bfloat16 data, and its gradient.
 *
 * The values a max pooling writes are values of its input, so bfloat16 data pools exactly; the gradient of each
 * window goes to its first largest element (row by row, as MXNet's kernels route it) and overlapping windows add up
 * in float32 before one rounding. The backward reads the data and recomputes the choice: nothing else is kept.
 * Plain C++ and OpenMP on raw pointers (dtype codes as lib_api's: 0 float32, 12 bfloat16); no MXNet headers.
 */
#ifndef MXNET_AMP_KERNELS_POOLING_H_
#define MXNET_AMP_KERNELS_POOLING_H_

#include <stdint.h>

namespace mxnet_amp {

/*!
 * \brief The geometry of a 2-D pooling over `planes` planes (batch x channels) of h x w values: kernel kh x kw,
 *        strides sh, sw, padding ph, pw (padded positions never win), output oh x ow.
 */
struct PoolGeometry {
  int64_t planes;
  int64_t h, w, oh, ow;
  int64_t kh, kw, sh, sw, ph, pw;
};

/*! \brief y = the largest value of each window (a NaN wins); a window with no value of the data (padding
 *        only) gets -FLT_MAX, as from MXNet's Pooling. */
void max_pool_forward(const void* x, void* y, int dtype, const PoolGeometry& g, int threads);

/*! \brief dx = each window's dy added at its first largest value: the gradient of max_pool_forward. */
void max_pool_backward(const void* x, const void* dy, void* dx, int dtype, const PoolGeometry& g, int threads);

}  // namespace mxnet_amp

#endif  // MXNET_AMP_KERNELS_POOLING_H_
