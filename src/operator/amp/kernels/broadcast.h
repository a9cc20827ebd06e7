/*!
 * \file broadcast.h
 * \brief Products of two arrays under NumPy broadcasting, and their gradients: the sums of products over the
 *        broadcast dimensions. Float32 or bfloat16 storage for each array, float32 math, one rounding per result.
 *        No MXNet or oneDNN headers; runs of the innermost dimension through the loops of this CPU's instruction
 *        set (cpu_loops.h), on the caller's OpenMP team (team.h).
 */
#ifndef MXNET_AMP_KERNELS_BROADCAST_H_
#define MXNET_AMP_KERNELS_BROADCAST_H_

#include <stdint.h>

#include <vector>

namespace mxnet_amp {

/*! \brief A contiguous row-major array of float32 (0) or bfloat16 (12) elements. */
struct Strided {
  const void* data = nullptr;
  int dtype = 0;
  std::vector<int64_t> shape;
};

/*!
 * \brief The broadcast shape of a and b (NumPy's rule: aligned at the last dimension, each pair of sizes equal or
 *        one of them 1), or false where they do not broadcast.
 */
bool broadcast_shape(const std::vector<int64_t>& a, const std::vector<int64_t>& b, std::vector<int64_t>* out);

/*!
 * \brief dst = the sum of x * z over the dimensions of \p full where dst has size 1 (none: dst = x * z), every array
 *        aligned to \p full at its last dimension, each of size full's or 1 in every dimension.
 *
 * The forward product: dst of shape full; the gradient of an operand: x = dy (shape full), z = the other operand,
 * dst = the gradient, of that operand's shape.
 */
void cpu_broadcast_mul(const Strided& x, const Strided& z, void* dst, int dst_dtype,
                       const std::vector<int64_t>& dst_shape, const std::vector<int64_t>& full, int threads);

}  // namespace mxnet_amp

#endif  // MXNET_AMP_KERNELS_BROADCAST_H_
