/*!
 * \file scaler_update.cc
 * \brief lib_api glue for amp_scaler_update: the loss scaler's step on the device, so the host never
 *        waits for a step's finite flag.
 *
 * Input 0 (mutable) is the scaler state, float64 (6,): scale, growth_tracker, steps, skipped_steps,
 * last_overflow_step (0: none yet), steps_at_floor; input 1 the step's finite flag, float32 (1,). The
 * rule is mxnet.amp.loss_scaler.next_state, in float64 like Python's floats. Output: the new scale as
 * float32 (1,), what the next loss is multiplied by.
 */
#include <vector>

#include "glue.h"
#include "../kernels/scaler_rule.h"
#if defined(MXNET_AMP_CUDA)
#include "../kernels/cuda_kernels.h"
#endif

namespace mxnet_amp {
namespace {

constexpr char kOp[] = "amp_scaler_update";

using Params = ScalerRule;

bool parse_params(const Attrs& attrs, Params* p) {
  return parse_bool(kOp, attrs, "dynamic", true, &p->dynamic) &&
         parse_double(kOp, attrs, "growth_factor", 2.0, &p->growth_factor) &&
         parse_double(kOp, attrs, "backoff_factor", 0.5, &p->backoff_factor) &&
         parse_double(kOp, attrs, "growth_interval", 2000.0, &p->growth_interval) &&
         parse_double(kOp, attrs, "min_scale", 1.0, &p->min_scale) &&
         parse_double(kOp, attrs, "max_scale", 16777216.0, &p->max_scale);
}

MXReturnValue parse(const Attrs& attrs, int* num_in, int* num_out) {
  Params p;
  if (!parse_params(attrs, &p)) return MX_FAIL;
  *num_in = 2;
  *num_out = 1;
  return MX_SUCCESS;
}

MXReturnValue infer_type(const Attrs& attrs, std::vector<int>* in, std::vector<int>* out) {
  if ((*in)[0] != kFloat64 || (*in)[1] != kFloat32) {
    MX_ERROR_MSG << kOp << ": the scaler state must be float64 and the finite flag float32 (got "
                 << dtype_name((*in)[0]) << ", " << dtype_name((*in)[1]) << ")";
    return MX_FAIL;
  }
  (*out)[0] = kFloat32;
  return MX_SUCCESS;
}

MXReturnValue infer_shape(const Attrs& attrs, Shapes* in, Shapes* out) {
  (*out)[0] = std::vector<unsigned int>{1};
  return MX_SUCCESS;
}

MXReturnValue mutate_inputs(const Attrs& attrs, std::vector<int>* indices) {
  indices->push_back(0);
  return MX_SUCCESS;
}

MXReturnValue forward(const Attrs& attrs, std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                      const OpResource& res) {
  Params p;
  if (!parse_params(attrs, &p)) return MX_FAIL;
  if ((*inputs)[0].size() != kScalerStateSize || (*inputs)[1].size() != 1) {
    MX_ERROR_MSG << kOp << ": the scaler state must hold " << kScalerStateSize << " values and the flag 1 (got "
                 << (*inputs)[0].size() << " and " << (*inputs)[1].size() << ")";
    return MX_FAIL;
  }
  double* state = (*inputs)[0].data<double>();
  const float* flag = (*inputs)[1].data<float>();
  float* scale = (*outputs)[0].data<float>();
  if (on_gpu(*outputs)) {
#if defined(MXNET_AMP_CUDA)
    return cuda_result(kOp, cuda_scaler_update(p, state, flag, scale, res.get_cuda_stream()));
#else
    return no_cuda(kOp);
#endif
  }
  *scale = static_cast<float>(scaler_step(p, state, *flag != 0.0f));
  return MX_SUCCESS;
}

}  // namespace
}  // namespace mxnet_amp

REGISTER_OP(amp_scaler_update)
    .setParseAttrs(AMP_GUARDED(mxnet_amp::parse))
    .setInferType(AMP_GUARDED(mxnet_amp::infer_type))
    .setInferShape(AMP_GUARDED(mxnet_amp::infer_shape))
    .setMutateInputs(AMP_GUARDED(mxnet_amp::mutate_inputs))
    .setForward(AMP_GUARDED(mxnet_amp::forward), "cpu")
#if defined(MXNET_AMP_CUDA)
    .setForward(AMP_GUARDED(mxnet_amp::forward), "gpu")
#endif
    ;
