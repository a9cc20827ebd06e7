/*!
 * \file matmul_api.h
 * \brief C interface between libmxnet_amp.so and libmxnet_amp_onednn.so (the oneDNN 3 matrix products).
 *
 * libmxnet_amp.so opens libmxnet_amp_onednn.so with dlopen when a matrix-product op first runs, so that the
 * extension library loads, and its other ops work, where oneDNN 3 is not installed. Plain C types only: the
 * two libraries share nothing else.
 */
#ifndef MXNET_AMP_ONEDNN_MATMUL_API_H_
#define MXNET_AMP_ONEDNN_MATMUL_API_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*! \brief Most dimensions of an operand: batch dimensions (broadcast like NumPy) plus rows and columns. */
#define AMP_MATMUL_MAX_DIMS 6

/*!
 * \brief One product C = A B (+ bias) of plain strided tensors, computed with float32 accumulation.
 *
 * Operands have ndims dimensions: batch dimensions, then rows and columns (A: M x K, B: K x N, C: M x N).
 * A batch dimension of A or B may be 1 where C's is larger (broadcast). Strides are in elements, any
 * order (a transposed operand is a view with swapped strides). dtypes are MXNet type codes: 0 float32,
 * 12 bfloat16. bias (N values, contiguous) is added to every row when bias_dtype >= 0; relu != 0 applies
 * max(0, .) to the result (a fused activation).
 */
typedef struct AmpMatmul {
  int ndims;
  int a_dtype, b_dtype, c_dtype, bias_dtype, relu;
  int64_t a_dims[AMP_MATMUL_MAX_DIMS], a_strides[AMP_MATMUL_MAX_DIMS];
  int64_t b_dims[AMP_MATMUL_MAX_DIMS], b_strides[AMP_MATMUL_MAX_DIMS];
  int64_t c_dims[AMP_MATMUL_MAX_DIMS], c_strides[AMP_MATMUL_MAX_DIMS];
  const void* a;
  const void* b;
  const void* bias;
  void* c;
} AmpMatmul;

/*! \brief Runs m; returns 0, or -1 with a message in error (error_len bytes, NUL-terminated). */
typedef int (*AmpMatmulFn)(const AmpMatmul* m, char* error, int error_len);

/*! \brief "oneDNN 3.2.0, cpu isa avx512_core_amx" (a static string). */
typedef const char* (*AmpOnednnInfoFn)(void);

#define AMP_ONEDNN_LIBRARY "libmxnet_amp_onednn.so"
#define AMP_MATMUL_SYMBOL "mxnet_amp_onednn_matmul"
#define AMP_ONEDNN_INFO_SYMBOL "mxnet_amp_onednn_info"

#ifdef __cplusplus
}
#endif

#endif  // MXNET_AMP_ONEDNN_MATMUL_API_H_
