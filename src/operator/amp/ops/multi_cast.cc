/*!
 * \file multi_cast.cc
 * \brief lib_api glue for amp_multi_cast (N arrays -> N arrays of one target dtype) and
 *        amp_multi_widest_cast (N arrays -> N arrays of the widest input dtype), one kernel call each.
 *
 * Backward casts each output gradient back to the dtype of its input.
 */
#include <vector>

#include "glue.h"
#include "../kernels/multi_tensor.h"
#if defined(MXNET_AMP_CUDA)
#include "../kernels/cuda_kernels.h"
#endif

namespace mxnet_amp {
namespace {

constexpr char kCast[] = "amp_multi_cast";
constexpr char kWidest[] = "amp_multi_widest_cast";

MXReturnValue parse_cast(const Attrs& attrs, int* num_in, int* num_out) {
  int dtype = 0;
  if (!parse_num_args(kCast, attrs, num_in) || !parse_target_dtype(kCast, attrs, &dtype)) {
    return MX_FAIL;
  }
  *num_out = *num_in;
  return MX_SUCCESS;
}

MXReturnValue parse_widest(const Attrs& attrs, int* num_in, int* num_out) {
  if (!parse_num_args(kWidest, attrs, num_in)) return MX_FAIL;
  *num_out = *num_in;
  return MX_SUCCESS;
}

MXReturnValue infer_type_cast(const Attrs& attrs, std::vector<int>* in, std::vector<int>* out) {
  int dtype = 0;
  if (!parse_target_dtype(kCast, attrs, &dtype) || !check_float_inputs(kCast, *in)) return MX_FAIL;
  out->assign(in->size(), dtype);
  return MX_SUCCESS;
}

MXReturnValue infer_type_widest(const Attrs& attrs, std::vector<int>* in, std::vector<int>* out) {
  if (!check_float_inputs(kWidest, *in)) return MX_FAIL;
  out->assign(in->size(), widest_dtype(in->data(), static_cast<int>(in->size())));
  return MX_SUCCESS;
}

MXReturnValue infer_shape(const Attrs& attrs, Shapes* in, Shapes* out) {
  *out = *in;
  return MX_SUCCESS;
}

// outputs[i] = cast(inputs[i]) for i < outputs.size(). Backward passes [output grads, inputs,
// outputs] as inputs and the input grads as outputs, so the same function casts each gradient back.
MXReturnValue run_cast(const char* op, std::vector<MXTensor>* inputs,
                       std::vector<MXTensor>* outputs, const OpResource& res) {
  std::vector<TensorRef> in, out;
  if (!to_refs(op, "input", inputs, 0, outputs->size(), &in) ||
      !to_refs(op, "output", outputs, 0, outputs->size(), &out)) {
    return MX_FAIL;
  }
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].size != out[i].size) {
      MX_ERROR_MSG << op << ": input " << i << " has " << in[i].size << " elements but output " << i
                   << " has " << out[i].size;
      return MX_FAIL;
    }
  }
  if (on_gpu(*outputs)) {
#if defined(MXNET_AMP_CUDA)
    return cuda_result(op, cuda_multi_tensor_cast(kDefaultChunkSize, in.data(), out.data(),
                                                  static_cast<int>(in.size()), res.get_cuda_stream()));
#else
    return no_cuda(op);
#endif
  }
  cpu_multi_tensor_cast(kDefaultChunkSize, in.data(), out.data(), static_cast<int>(in.size()));
  return MX_SUCCESS;
}

MXReturnValue forward_cast(const Attrs& attrs, std::vector<MXTensor>* inputs,
                           std::vector<MXTensor>* outputs, const OpResource& res) {
  return run_cast(kCast, inputs, outputs, res);
}

MXReturnValue forward_widest(const Attrs& attrs, std::vector<MXTensor>* inputs,
                             std::vector<MXTensor>* outputs, const OpResource& res) {
  return run_cast(kWidest, inputs, outputs, res);
}

}  // namespace
}  // namespace mxnet_amp

REGISTER_OP(amp_multi_cast)
    .setParseAttrs(AMP_GUARDED(mxnet_amp::parse_cast))
    .setInferType(AMP_GUARDED(mxnet_amp::infer_type_cast))
    .setInferShape(AMP_GUARDED(mxnet_amp::infer_shape))
    .setForward(AMP_GUARDED(mxnet_amp::forward_cast), "cpu")
    .setBackward(AMP_GUARDED(mxnet_amp::forward_cast), "cpu")
#if defined(MXNET_AMP_CUDA)
    .setForward(AMP_GUARDED(mxnet_amp::forward_cast), "gpu")
    .setBackward(AMP_GUARDED(mxnet_amp::forward_cast), "gpu")
#endif
    ;

REGISTER_OP(amp_multi_widest_cast)
    .setParseAttrs(AMP_GUARDED(mxnet_amp::parse_widest))
    .setInferType(AMP_GUARDED(mxnet_amp::infer_type_widest))
    .setInferShape(AMP_GUARDED(mxnet_amp::infer_shape))
    .setForward(AMP_GUARDED(mxnet_amp::forward_widest), "cpu")
    .setBackward(AMP_GUARDED(mxnet_amp::forward_widest), "cpu")
#if defined(MXNET_AMP_CUDA)
    .setForward(AMP_GUARDED(mxnet_amp::forward_widest), "gpu")
    .setBackward(AMP_GUARDED(mxnet_amp::forward_widest), "gpu")
#endif
    ;
