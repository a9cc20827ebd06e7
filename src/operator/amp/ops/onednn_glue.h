/*!
 * \file onednn_glue.h
 * \brief What the lib_api glue of the oneDNN 3 ops (matmul_ops.cc, conv_ops.cc) shares: their common
 *        attributes (out_dtype, positive integers), operand dtype inference, per-call scratch copies and the
 *        ReLU-masked gradient. The element loops are kernels/tensor_math.h's, on each call's team (team.h).
 */
#ifndef MXNET_AMP_OPS_ONEDNN_GLUE_H_
#define MXNET_AMP_OPS_ONEDNN_GLUE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "../kernels/tensor_math.h"
#include "../kernels/team.h"
#include "../onednn/api.h"
#include "glue.h"

namespace mxnet_amp {

/*! \brief Reads the integer attribute key (>= minimum); on failure reports an error naming op. */
bool parse_int(const char* op, const Attrs& attrs, const char* key, long minimum, long* value);

/*! \brief out_dtype: float32 or bfloat16; absent or None: the operands' dtype (*dtype = -1). */
bool parse_out_dtype(const char* op, const Attrs& attrs, int* dtype);

/*!
 * \brief Operands: float32 or bfloat16, all the same (unknown ones take the first known dtype); every
 *        output gets out_dtype, or the operands' dtype when out_dtype is -1.
 */
MXReturnValue infer_operand_types(const char* op, int out_dtype, std::vector<int>* in, std::vector<int>* out);

/*!
 * \brief param_dtype: float32 (the parameters, every operand after the data, stay float32 whatever the data's
 *        dtype: the kernel converts the weight per call and writes float32 gradients); absent or None: -1.
 */
bool parse_param_dtype(const char* op, const Attrs& attrs, int* dtype);

/*!
 * \brief Operand types of a product or convolution: as infer_operand_types when param_dtype is -1; else the data
 *        (in[0]) float32 or bfloat16, the parameters (in[1..]) param_dtype, every output out_dtype or the data's.
 */
MXReturnValue infer_data_param_types(const char* op, int out_dtype, int param_dtype, std::vector<int>* in,
                                     std::vector<int>* out);

/*! \brief Sets every element of t to 0. */
void zero(MXTensor* t);

/*! \brief Buffers of one op call (OpResource::alloc_cpu hands out one temporary space, reused by a second call). */
using Scratch = std::vector<std::unique_ptr<float[]>>;

/*! \brief A new, uninitialised buffer of floats float32 values (or twice as many bfloat16), kept in keep. */
void* scratch(Scratch* keep, int64_t floats);

/*! \brief The tensor t in dtype (a scratch copy when t has another dtype). */
void* in_dtype(const MXTensor& t, int dtype, Scratch* keep);

/*!
 * \brief The weight w in dtype: w itself, or (param_dtype: float32 weights beside bfloat16 data) its conversion
 *        into this thread's weight buffer, valid until the thread's next call; *used is the dtype returned. Where
 *        oneDNN 3 has no bfloat16 primitive (the kernels widen every operand to float32), float32 weights are w
 *        itself: the products read them unrounded, with no copy. The buffer keeps the largest size
 *        asked (the largest weight converted: 4.7 MB in ResNet-18 and a BERT-style encoder's layers); a fresh
 *        allocation per call paid its page faults every time (ResNet-18 training steps 8% slower).
 */
void* weight_in_dtype(const MXTensor& w, int dtype, int* used);

/*!
 * \brief dy where 0 < y < relu_max, else 0, in dtype (a scratch copy): the gradient through a fused ReLU (relu_max
 *        INFINITY) or ReLU6 (6).
 */
void* relu_masked(const MXTensor& dy, const MXTensor& y, int dtype, float relu_max, Scratch* keep);

/*! \brief Most dimensions of a product operand (batch dimensions, rows, columns). */
constexpr int kMaxDims = AMP_MATMUL_MAX_DIMS;

/*! \brief A tensor seen as (batch..., rows, cols) with strides in elements: a product operand. */
struct View {
  void* ptr = nullptr;
  int dtype = 0;
  int nb = 0;  // batch dimensions
  int64_t dims[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};

  int64_t rows() const { return dims[nb]; }
  int64_t cols() const { return dims[nb + 1]; }
  /*! \brief The transposed view (rows and columns swapped, no copy). */
  View t() const;
  int64_t batch_size() const;
};

/*! \brief Row-major view of a contiguous tensor of shape dims (batch dims first, then rows and cols). */
View contiguous(void* ptr, int dtype, const std::vector<int64_t>& dims);

/*! \brief v on other data of another dtype. */
View with_ptr(View v, void* ptr, int dtype);

/*! \brief What a product does to its result, in order: scale (alpha, not with a bias) or bias, addend, act. */
struct Epilogue {
  const void* bias = nullptr;
  int bias_dtype = -1;
  float alpha = 1.f;
  const void* addend = nullptr;  // the product's dtype and layout: a residual sum
  int act = AMP_ACT_NONE;        // an AmpActivation
};

/*!
 * \brief c = act(alpha a b + bias + addend): one oneDNN 3 matmul of strided views, float32 accumulation; false
 *        with the error reported (naming op) when it fails.
 */
bool gemm(const char* op, const View& a, const View& b, const View& c, const Epilogue& e = Epilogue());

}  // namespace mxnet_amp

#endif  // MXNET_AMP_OPS_ONEDNN_GLUE_H_
