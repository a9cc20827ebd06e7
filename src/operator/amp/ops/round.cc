/*!
 * \file round.cc
 * \brief lib_api glue for amp_round: float32 -> float32 values rounded to float16 or bfloat16 precision.
 *
 * The op emulated mixed precision is built from: the graph rewriter rounds the inputs and outputs of a low
 * precision op whose kernel the device lacks, and runs its float32 kernel. The backward rounds the
 * gradient the same way, as a low precision gradient tensor would be.
 */
#include <vector>

#include "glue.h"
#include "../kernels/round.h"

namespace mxnet_amp {
namespace {

constexpr char kRound[] = "amp_round";

bool parse_round_dtype(const Attrs& attrs, int* dtype) {
  if (!parse_target_dtype(kRound, attrs, dtype)) return false;
  if (*dtype == kFloat32) {
    MX_ERROR_MSG << kRound << ": attribute dtype must be float16 or bfloat16 (got 'float32')";
    return false;
  }
  return true;
}

MXReturnValue parse(const Attrs& attrs, int* num_in, int* num_out) {
  int dtype = 0;
  if (!parse_round_dtype(attrs, &dtype)) return MX_FAIL;
  *num_in = 1;
  *num_out = 1;
  return MX_SUCCESS;
}

MXReturnValue infer_type(const Attrs& attrs, std::vector<int>* in, std::vector<int>* out) {
  if ((*in)[0] == -1) (*in)[0] = kFloat32;  // unknown yet (e.g. a weight in a partial type_dict): float32
  if ((*in)[0] != kFloat32) {
    MX_ERROR_MSG << kRound << ": input 0 must be float32 (got " << dtype_name((*in)[0]) << ")";
    return MX_FAIL;
  }
  (*out)[0] = kFloat32;
  return MX_SUCCESS;
}

MXReturnValue infer_shape(const Attrs& attrs, Shapes* in, Shapes* out) {
  *out = *in;
  return MX_SUCCESS;
}

// Forward: inputs [x], outputs [y]. Backward: inputs [dy, x, y], outputs [dx]. Both round inputs[0].
MXReturnValue run(const Attrs& attrs, std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                  const OpResource& res) {
  int dtype = 0;
  std::vector<TensorRef> in, out;
  if (!parse_round_dtype(attrs, &dtype) || !to_refs(kRound, "input", inputs, 0, 1, &in) ||
      !to_refs(kRound, "output", outputs, 0, 1, &out)) {
    return MX_FAIL;
  }
  if (on_gpu(*outputs)) {
#if defined(MXNET_AMP_CUDA)
    return cuda_result(kRound, cuda_round_to(in[0], out[0], dtype, res.get_cuda_stream()));
#else
    return no_cuda(kRound);
#endif
  }
  cpu_round_to(kDefaultChunkSize, in[0], out[0], dtype);
  return MX_SUCCESS;
}

}  // namespace
}  // namespace mxnet_amp

REGISTER_OP(amp_round)
    .setParseAttrs(AMP_GUARDED(mxnet_amp::parse))
    .setInferType(AMP_GUARDED(mxnet_amp::infer_type))
    .setInferShape(AMP_GUARDED(mxnet_amp::infer_shape))
    .setForward(AMP_GUARDED(mxnet_amp::run), "cpu")
    .setBackward(AMP_GUARDED(mxnet_amp::run), "cpu")
#if defined(MXNET_AMP_CUDA)
    .setForward(AMP_GUARDED(mxnet_amp::run), "gpu")
    .setBackward(AMP_GUARDED(mxnet_amp::run), "gpu")
#endif
    ;
