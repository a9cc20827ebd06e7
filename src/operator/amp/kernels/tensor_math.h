/*!
 * \file tensor_math.h
 * \brief The element loops around the library's oneDNN 3 products and convolutions: dtype conversion, the
 *        gradient through a fused ReLU, bias addition and bias gradients, sums over broadcast dimensions.
 *
 * Plain C++ on raw pointers of float32 or bfloat16 elements (dtype codes as lib_api's: 0 float32, 12
 * bfloat16); sums in float32. Each loop runs on the OpenMP team its caller passes (the call's team,
 * kernels/team.h). No MXNet or oneDNN headers.
 */
#ifndef MXNET_AMP_KERNELS_TENSOR_MATH_H_
#define MXNET_AMP_KERNELS_TENSOR_MATH_H_

#include <stdint.h>

#include "convert.h"

namespace mxnet_amp {

constexpr int kMathFloat32 = 0;
constexpr int kMathBfloat16 = 12;

/*! \brief Element i of a float32 or bfloat16 array, as float. */
inline float load(const void* p, int dtype, int64_t i) {
  return dtype == kMathBfloat16 ? bf16_bits_to_float(static_cast<const uint16_t*>(p)[i])
                                : static_cast<const float*>(p)[i];
}

/*! \brief Stores v as element i (rounded to nearest even for bfloat16). */
inline void store(void* p, int dtype, int64_t i, float v) {
  if (dtype == kMathBfloat16) {
    static_cast<uint16_t*>(p)[i] = float_to_bf16_bits(v);
  } else {
    static_cast<float*>(p)[i] = v;
  }
}

/*! \brief dst[i] = src[i] for i < n, converted between float32 and bfloat16. */
void convert_into(void* dst, int dst_dtype, const void* src, int src_dtype, int64_t n, int threads);

/*!
 * \brief dst[i] = 0 < y[i] < relu_max ? dy[i] : 0 for i < n: the gradient through a fused ReLU of output y, capped
 *        at relu_max (INFINITY: a plain ReLU, y > 0; 6: a ReLU6).
 */
void relu_mask(void* dst, int dst_dtype, const void* dy, int dy_dtype, const void* y, int y_dtype, int64_t n,
               float relu_max, int threads);

/*! \brief dst[j] = sum over i of src[i * cols + j], j < cols: a fully connected layer's bias gradient. */
void column_sums(void* dst, int dst_dtype, const void* src, int src_dtype, int64_t rows, int64_t cols,
                 int threads);

/*! \brief dst[i] = the sum of srcs[k][i] over k < n_srcs, i < n, added in float32 and rounded once. */
void sum_arrays(void* dst, int dst_dtype, const void* const* srcs, int n_srcs, int src_dtype, int64_t n,
                int threads);

/*!
 * \brief A concatenation along one axis of row-major arrays, each seen as (rows, row_bytes[i]) bytes: row r of whole
 *        is row r of parts[0], then of parts[1], ... (whole holds rows x sum(row_bytes) bytes). With split, the
 *        reverse: whole's rows are copied out into the parts (a concatenation's gradient). Any dtype.
 */
void concat_rows(void* whole, void* const* parts, const int64_t* row_bytes, int n_parts, int64_t rows, bool split,
                 int threads);

/*! \brief Sets the n elements of dst to 0. */
void zero_fill(void* dst, int dtype, int64_t n, int threads);

/*! \brief Sets elements [first, first + count) of each of the rows (row_length elements each) of dst to 0. */
void zero_columns(void* dst, int dtype, int64_t rows, int64_t row_length, int64_t first, int64_t count,
                  int threads);

/*!
 * \brief y[n, c, i] = acc[n, c, i] + bias[c] over (batch, channels, inner); acc may be y itself, or null
 *        (then y = bias[c]). A convolution's bias.
 */
void add_channel_bias(void* y, int y_dtype, const void* acc, int acc_dtype, const void* bias, int bias_dtype,
                      int64_t batch, int64_t channels, int64_t inner, int threads);

/*! \brief db[c] = sum over n and i of g[n, c, i]: a convolution's bias gradient. */
void channel_sums(void* db, int db_dtype, const void* g, int g_dtype, int64_t batch, int64_t channels,
                  int64_t inner, int threads);

/*!
 * \brief Sums a float32 batch of rows x cols matrices over the batch dimensions where \p like has size 1
 *        (NumPy broadcasting), storing into the strided matrices of \p like.
 *
 * \param full the float32 products, contiguous, batch dimensions \p full_dims (\p nb of them).
 * \param like_dims the output's batch dimensions (each equal to full_dims[d] or 1).
 * \param like_strides the output's element strides: \p nb batch strides, then the row and column strides.
 */
void sum_broadcast_into(const float* full, int nb, const int64_t* full_dims, const int64_t* like_dims,
                        const int64_t* like_strides, int64_t rows, int64_t cols, void* like, int like_dtype,
                        int threads);

}  // namespace mxnet_amp

#endif  // MXNET_AMP_KERNELS_TENSOR_MATH_H_
