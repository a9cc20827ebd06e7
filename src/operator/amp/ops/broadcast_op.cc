/*!
 * \file broadcast_op.cc
 * \brief lib_api glue for amp_broadcast_mul: MXNet's broadcast_mul (NumPy broadcasting) on float32 or bfloat16
 *        operands, each of either dtype, float32 math and one rounding to the output's dtype (kernels/broadcast.h).
 *
 * Converted inference graphs run on it the float32 products whose result only a low precision reader takes: a
 * squeeze-excitation gate times its features before the next convolution (MobileNet v3). MXNet's float32
 * broadcast_mul between casts took 8.5 ms a forward of MobileNet v3 at batch 16 (AMD EPYC, class (c), 2026-12-07).
 * Attributes: dtype (float32 or bfloat16; absent or None: float32 if an operand is float32, else bfloat16).
 * Inputs: lhs, rhs. Output: lhs * rhs.
 * Backward: inputs [dy, lhs, rhs, y] (y unread), outputs [dlhs, drhs]: dy times the other operand, summed over the
 * dimensions the operand is broadcast along, in the operand's dtype.
 */
#include <string>
#include <vector>

#include "glue.h"
#include "../kernels/broadcast.h"
#include "../kernels/team.h"

namespace mxnet_amp {
namespace {

constexpr char kMul[] = "amp_broadcast_mul";

std::vector<int64_t> dims(const std::vector<unsigned int>& s) { return std::vector<int64_t>(s.begin(), s.end()); }
std::vector<int64_t> dims(const std::vector<int64_t>& s) { return s; }

bool full_shape(const std::vector<int64_t>& a, const std::vector<int64_t>& b, std::vector<int64_t>* full) {
  if (broadcast_shape(a, b, full)) return true;
  MX_ERROR_MSG << kMul << ": operands of shapes " << shape_text(a) << " and " << shape_text(b)
               << " do not broadcast (NumPy's rule: from the last dimension, sizes equal or 1)";
  return false;
}

MXReturnValue parse(const Attrs& attrs, int* num_in, int* num_out) {
  int dtype = -1;
  if (!parse_output_dtype(kMul, attrs, &dtype)) return MX_FAIL;
  *num_in = 2;
  *num_out = 1;
  return MX_SUCCESS;
}

MXReturnValue infer_type(const Attrs& attrs, std::vector<int>* in, std::vector<int>* out) {
  int dtype = -1;
  if (!parse_output_dtype(kMul, attrs, &dtype)) return MX_FAIL;
  for (size_t i = 0; i < in->size(); ++i) {
    const int d = (*in)[i];
    if (d != -1 && d != kFloat32 && d != kBfloat16) {
      MX_ERROR_MSG << kMul << ": input " << i << " (" << (i ? "rhs" : "lhs") << ") has dtype " << dtype_name(d)
                   << "; operands must be float32 or bfloat16";
      return MX_FAIL;
    }
  }
  if (dtype == -1) {
    if ((*in)[0] == -1 || (*in)[1] == -1) return MX_SUCCESS;  // not known yet
    dtype = (*in)[0] == kFloat32 || (*in)[1] == kFloat32 ? kFloat32 : kBfloat16;
  }
  (*out)[0] = dtype;
  return MX_SUCCESS;
}

MXReturnValue infer_shape(const Attrs& attrs, Shapes* in, Shapes* out) {
  std::vector<int64_t> full;
  if (!full_shape(dims((*in)[0]), dims((*in)[1]), &full)) return MX_FAIL;
  (*out)[0] = std::vector<unsigned int>(full.begin(), full.end());
  return MX_SUCCESS;
}

Strided strided(const MXTensor& t) {
  Strided s;
  s.data = t.data_ptr;
  s.dtype = static_cast<int>(t.dtype);
  s.shape = dims(t.shape);
  return s;
}

MXReturnValue forward(const Attrs& attrs, std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                      const OpResource& res) {
  if (!check_cpu(kMul, *inputs)) return MX_FAIL;
  const Strided a = strided((*inputs)[0]), b = strided((*inputs)[1]);
  MXTensor& y = (*outputs)[0];
  std::vector<int64_t> full;
  if (!full_shape(a.shape, b.shape, &full)) return MX_FAIL;
  const CallTeam team;  // the cores divided among the library calls running (kernels/team.h)
  cpu_broadcast_mul(a, b, y.data_ptr, static_cast<int>(y.dtype), full, full, team.threads());
  return MX_SUCCESS;
}

MXReturnValue backward(const Attrs& attrs, std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                       const OpResource& res) {
  if (!check_cpu(kMul, *inputs)) return MX_FAIL;
  const Strided dy = strided((*inputs)[0]), a = strided((*inputs)[1]), b = strided((*inputs)[2]);
  std::vector<int64_t> full;
  if (!full_shape(a.shape, b.shape, &full)) return MX_FAIL;
  const CallTeam team;
  for (int k = 0; k < 2; ++k) {
    MXTensor& g = (*outputs)[k];
    cpu_broadcast_mul(dy, k ? a : b, g.data_ptr, static_cast<int>(g.dtype), dims(g.shape), full, team.threads());
  }
  return MX_SUCCESS;
}

}  // namespace
}  // namespace mxnet_amp

REGISTER_OP(amp_broadcast_mul)
    .setParseAttrs(AMP_GUARDED(mxnet_amp::parse))
    .setInferType(AMP_GUARDED(mxnet_amp::infer_type))
    .setInferShape(AMP_GUARDED(mxnet_amp::infer_shape))
    .setForward(AMP_GUARDED(mxnet_amp::forward), "cpu")
    .setBackward(AMP_GUARDED(mxnet_amp::backward), "cpu");
