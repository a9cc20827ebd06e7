/*!
 * \file api.h
 * \brief C interface between libmxnet_amp.so and libmxnet_amp_onednn.so (the oneDNN 3 matrix products,
 *        convolutions, layer normalisation and softmax).
 *
 * libmxnet_amp.so opens libmxnet_amp_onednn.so with dlopen when one of its ops first runs, so that the
 * extension library loads, and its other ops work, where oneDNN 3 is not installed. Plain C types only: the
 * two libraries share nothing else.
 */
#ifndef MXNET_AMP_ONEDNN_API_H_
#define MXNET_AMP_ONEDNN_API_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*! \brief Most dimensions of an operand: batch dimensions (broadcast like NumPy) plus rows and columns. */
#define AMP_MATMUL_MAX_DIMS 6

/*! \brief The activation an AmpMatmul applies last (AmpMatmul.act). */
enum AmpActivation {
  AMP_ACT_NONE = 0,
  AMP_ACT_RELU = 1, /*!< max(0, x) */
  AMP_ACT_GELU = 2, /*!< x Phi(x), Phi the normal distribution function (erf; MXNet's LeakyReLU gelu) */
  AMP_ACT_HARD_SIGMOID = 3, /*!< clip(x + 3, 0, 6) / 6 (MobileNet v3's; convolutions, inference only) */
  AMP_ACT_HARD_SWISH = 4    /*!< x clip(x + 3, 0, 6) / 6 (MobileNet v3's; convolutions, inference only) */
};

/*!
 * \brief One product C = A B (+ bias) of plain strided tensors, computed with float32 accumulation.
 *
 * Operands have ndims dimensions: batch dimensions, then rows and columns (A: M x K, B: K x N, C: M x N).
 * A batch dimension of A or B may be 1 where C's is larger (broadcast). Strides are in elements, any
 * order (a transposed operand is a view with swapped strides). dtypes are MXNet type codes: 0 float32,
 * 12 bfloat16. bias (N values, contiguous) is added to every row when bias_dtype >= 0; alpha scales the
 * product (1: none; not with a bias); addend (not NULL: C's dtype and strides) is added next (a fused residual
 * sum), and act (an AmpActivation) is applied last.
 */
typedef struct AmpMatmul {
  int ndims;
  int a_dtype, b_dtype, c_dtype, bias_dtype, act;
  float alpha;
  int64_t a_dims[AMP_MATMUL_MAX_DIMS], a_strides[AMP_MATMUL_MAX_DIMS];
  int64_t b_dims[AMP_MATMUL_MAX_DIMS], b_strides[AMP_MATMUL_MAX_DIMS];
  int64_t c_dims[AMP_MATMUL_MAX_DIMS], c_strides[AMP_MATMUL_MAX_DIMS];
  const void* a;
  const void* b;
  const void* bias;
  const void* addend;
  void* c;
} AmpMatmul;

/*! \brief Runs m; returns 0, or -1 with a message in error (error_len bytes, NUL-terminated). */
typedef int (*AmpMatmulFn)(const AmpMatmul* m, char* error, int error_len);

/*! \brief Most spatial dimensions of a convolution (1-D, 2-D and 3-D). */
#define AMP_CONV_MAX_SPATIAL 3

/*! \brief Which computation of a convolution AmpConv asks for. */
enum AmpConvPass {
  AMP_CONV_FORWARD = 0,          /*!< out = relu?(conv(data, weight) + bias + addend?), capped at relu_max */
  AMP_CONV_BACKWARD_DATA = 1,    /*!< out = gradient of data, from diff_dst and weight */
  AMP_CONV_BACKWARD_WEIGHTS = 2  /*!< out = gradient of weight (and diff_bias), from diff_dst and data */
};

/*!
 * \brief One convolution pass over plain (row-major NC[D][H]W, weights O I/groups [KD][KH]W) tensors.
 *
 * Geometry is MXNet's Convolution: symmetric padding `pad`, dilation `dilate` (1: none), output size
 * floor((in + 2 pad - dilate (kernel - 1) - 1) / stride) + 1. Tensors of one pass share `dtype` (MXNet type
 * code: 0 float32, 12 bfloat16) except `out`, which has `out_dtype`, and the bias / diff_bias, which have
 * `bias_dtype` (-1: no bias). Forward only: `relu` != 0 applies min(max(0, .), relu_max) last (relu_max INFINITY
 * or 6, a ReLU6), `addend` (dtype `out_dtype`,
 * the output's shape) is added before it when not NULL (a fused residual sum). Products accumulate in float32.
 */
typedef struct AmpConv {
  int pass;     /*!< an AmpConvPass */
  int spatial;  /*!< 1..AMP_CONV_MAX_SPATIAL */
  int64_t batch, in_channels, out_channels, groups;
  int64_t in_size[AMP_CONV_MAX_SPATIAL], out_size[AMP_CONV_MAX_SPATIAL], kernel[AMP_CONV_MAX_SPATIAL];
  int64_t stride[AMP_CONV_MAX_SPATIAL], dilate[AMP_CONV_MAX_SPATIAL], pad[AMP_CONV_MAX_SPATIAL];
  int dtype, out_dtype, bias_dtype, relu;
  float relu_max;        /*!< forward, where relu: INFINITY, or a ReLU6's 6 */
  int hard_act;          /*!< forward, where not relu: AMP_ACT_NONE, AMP_ACT_HARD_SIGMOID or AMP_ACT_HARD_SWISH, last */
  int weight_dtype;      /*!< the weight's: dtype, or float32 beside bfloat16 data where
                              mxnet_amp_onednn_bf16_primitives() is 0 (the kernels widen every operand there) */
  const void* data;      /*!< forward, backward weights */
  const void* weight;    /*!< forward, backward data */
  const void* bias;      /*!< forward (when bias_dtype >= 0) */
  const void* addend;    /*!< forward: NULL or the residual to add */
  const void* diff_dst;  /*!< backward passes */
  void* out;             /*!< the pass's result */
  void* diff_bias;       /*!< backward weights (when bias_dtype >= 0) */
} AmpConv;

/*! \brief Runs c; returns 0, or -1 with a message in error (error_len bytes, NUL-terminated). */
typedef int (*AmpConvFn)(const AmpConv* c, char* error, int error_len);

/*! \brief Which computation of a layer normalisation or softmax AmpLayerNorm / AmpSoftmax asks for. */
enum AmpRowPass {
  AMP_ROWS_FORWARD = 0,  /*!< dst from src */
  AMP_ROWS_BACKWARD = 1  /*!< diff_src (and the parameters' gradients) from diff_dst */
};

/*!
 * \brief Layer normalisation over the last axis of a plain rows x cols tensor (MXNet's LayerNorm, axis -1):
 *        dst = (src - mean) / sqrt(variance + eps) * scale + shift, statistics per row in float32.
 *
 * src, diff_dst and diff_src have `src_dtype`, dst has `dst_dtype` (0 float32, 12 bfloat16); scale, shift, their
 * gradients and the statistics (rows values each) are float32. Forward reads src, scale, shift and writes dst.
 * Backward reads src, mean, variance (biased, without eps: the caller's, e.g. recomputed from src), scale, shift
 * and diff_dst, and writes diff_src, diff_scale and diff_shift.
 */
typedef struct AmpLayerNorm {
  int pass;  /*!< an AmpRowPass */
  int src_dtype, dst_dtype;
  int64_t rows, cols;
  float eps;
  const void* src;
  const float* scale;
  const float* shift;
  void* dst;                /*!< forward */
  const float* mean;        /*!< backward */
  const float* variance;    /*!< backward */
  const void* diff_dst;     /*!< backward */
  void* diff_src;           /*!< backward */
  float* diff_scale;        /*!< backward */
  float* diff_shift;        /*!< backward */
} AmpLayerNorm;

/*! \brief Runs n; returns 0, or -1 with a message in error (error_len bytes, NUL-terminated). */
typedef int (*AmpLayerNormFn)(const AmpLayerNorm* n, char* error, int error_len);

/*!
 * \brief Softmax (or log-softmax) over the last axis of a plain rows x cols tensor, oneDNN's softmax_accurate
 *        (softmax_log): dst = exp(src - max) / sum(exp(src - max)), in float32 whatever the storage.
 *
 * Forward reads src (`src_dtype`) and writes dst (`dst_dtype`). Backward reads dst and diff_dst (`dst_dtype`)
 * and writes diff_src (`src_dtype`): softmax diff_src = dst (diff_dst - sum(diff_dst dst)), log-softmax
 * diff_src = diff_dst - exp(dst) sum(diff_dst).
 */
typedef struct AmpSoftmax {
  int pass;  /*!< an AmpRowPass */
  int log;   /*!< 0: softmax, 1: log-softmax */
  int src_dtype, dst_dtype;
  int64_t rows, cols;
  const void* src;       /*!< forward */
  void* dst;             /*!< forward: written; backward: read */
  const void* diff_dst;  /*!< backward */
  void* diff_src;        /*!< backward */
} AmpSoftmax;

/*! \brief Runs s; returns 0, or -1 with a message in error (error_len bytes, NUL-terminated). */
typedef int (*AmpSoftmaxFn)(const AmpSoftmax* s, char* error, int error_len);

/*! \brief "oneDNN 3.2.0, cpu isa avx512_core_amx" (a static string). */
typedef const char* (*AmpOnednnInfoFn)(void);

/*!
 * \brief 1 where oneDNN 3 creates bfloat16 primitives here (avx512_core and up), 0 where the kernels widen bfloat16
 *        operands to float32 (widen.h): there a product or convolution takes a float32 weight beside bfloat16 data.
 */
typedef int (*AmpBf16PrimitivesFn)(void);

#define AMP_ONEDNN_LIBRARY "libmxnet_amp_onednn.so"
#define AMP_MATMUL_SYMBOL "mxnet_amp_onednn_matmul"
#define AMP_CONV_SYMBOL "mxnet_amp_onednn_conv"
#define AMP_LAYER_NORM_SYMBOL "mxnet_amp_onednn_layer_norm"
#define AMP_SOFTMAX_SYMBOL "mxnet_amp_onednn_softmax"
#define AMP_ONEDNN_INFO_SYMBOL "mxnet_amp_onednn_info"
#define AMP_BF16_PRIMITIVES_SYMBOL "mxnet_amp_onednn_bf16_primitives"

#ifdef __cplusplus
}
#endif

#endif  // MXNET_AMP_ONEDNN_API_H_
