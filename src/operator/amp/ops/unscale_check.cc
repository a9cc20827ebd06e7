/*!
 * \file unscale_check.cc
 * \brief lib_api glue for amp_multi_unscale_check: in place, every input *= inv_scale (inputs are
 *        mutable), one pass over each byte; output 0 is a float32 (1,) flag, 1.0 if every result is
 *        finite else 0.0; with sum_squares=True output 1 is the float32 (1,) global sum of squares of
 *        the unscaled values (for gradient-norm clipping in the same pass).
 */
#include <vector>

#include "glue.h"
#include "../kernels/multi_tensor.h"
#if defined(MXNET_AMP_CUDA)
#include "../kernels/cuda_kernels.h"
#endif

namespace mxnet_amp {
namespace {

constexpr char kOp[] = "amp_multi_unscale_check";

struct Params {
  int num_args;
  float inv_scale;
  bool sum_squares;
};

bool parse_params(const Attrs& attrs, Params* p) {
  return parse_num_args(kOp, attrs, &p->num_args) &&
         parse_float(kOp, attrs, "inv_scale", 1.0f, &p->inv_scale) &&
         parse_bool(kOp, attrs, "sum_squares", false, &p->sum_squares);
}

MXReturnValue parse(const Attrs& attrs, int* num_in, int* num_out) {
  Params p;
  if (!parse_params(attrs, &p)) return MX_FAIL;
  *num_in = p.num_args;
  *num_out = p.sum_squares ? 2 : 1;
  return MX_SUCCESS;
}

MXReturnValue infer_type(const Attrs& attrs, std::vector<int>* in, std::vector<int>* out) {
  if (!check_float_inputs(kOp, *in)) return MX_FAIL;
  out->assign(out->size(), kFloat32);
  return MX_SUCCESS;
}

MXReturnValue infer_shape(const Attrs& attrs, Shapes* in, Shapes* out) {
  out->assign(out->size(), std::vector<unsigned int>{1});
  return MX_SUCCESS;
}

MXReturnValue mutate_inputs(const Attrs& attrs, std::vector<int>* indices) {
  Params p;
  if (!parse_params(attrs, &p)) return MX_FAIL;
  for (int i = 0; i < p.num_args; ++i) indices->push_back(i);
  return MX_SUCCESS;
}

MXReturnValue forward(const Attrs& attrs, std::vector<MXTensor>* inputs,
                      std::vector<MXTensor>* outputs, const OpResource& res) {
  Params p;
  std::vector<TensorRef> refs;
  if (!parse_params(attrs, &p) || !to_refs(kOp, "input", inputs, 0, inputs->size(), &refs)) {
    return MX_FAIL;
  }
  float* flag = (*outputs)[0].data<float>();
  float* sum_squares = p.sum_squares ? (*outputs)[1].data<float>() : nullptr;
  const int n = static_cast<int>(refs.size());
  if (on_gpu(*outputs)) {
#if defined(MXNET_AMP_CUDA)
    return cuda_result(kOp, cuda_multi_tensor_unscale_check(kDefaultChunkSize, flag, sum_squares, refs.data(), n,
                                                            p.inv_scale, res.get_cuda_stream()));
#else
    return no_cuda(kOp);
#endif
  }
  cpu_multi_tensor_unscale_check(kDefaultChunkSize, flag, sum_squares, refs.data(), n, p.inv_scale);
  return MX_SUCCESS;
}

}  // namespace
}  // namespace mxnet_amp

REGISTER_OP(amp_multi_unscale_check)
    .setParseAttrs(AMP_GUARDED(mxnet_amp::parse))
    .setInferType(AMP_GUARDED(mxnet_amp::infer_type))
    .setInferShape(AMP_GUARDED(mxnet_amp::infer_shape))
    .setMutateInputs(AMP_GUARDED(mxnet_amp::mutate_inputs))
    .setForward(AMP_GUARDED(mxnet_amp::forward), "cpu")
#if defined(MXNET_AMP_CUDA)
    .setForward(AMP_GUARDED(mxnet_amp::forward), "gpu")
#endif
    ;
