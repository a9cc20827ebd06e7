/*!
 * \file dropout_op.cc
 * \brief lib_api glue for amp_dropout: MXNet's Dropout on float32 or bfloat16 data in the data's dtype
 *        (kernels/dropout.h), in place of MXNet's CPU Dropout, which has no bfloat16 case and draws its mask
 *        about ten times slower.
 *
 * Attributes are Dropout's: p (0.5), mode ("training": drop only in training calls, or "always"); axes must be
 * empty (no shared masks), cudnn_off is accepted and ignored.
 * Inputs: data and mode, a float32 (1,) tensor that says whether MXNet runs the graph for training (the graph
 * rewriter's mode flag, as amp_batch_norm's: exactly 1 in inference, 0 or 2 in training).
 * Outputs: the data with each element dropped with probability p and the others scaled by 1 / (1 - p) (the data's
 * dtype), and the keep mask (uint8, 0 or 1), which the backward reads. Outside training (and for p = 0) the
 * data is copied and the mask is all ones. The mask's random seed comes from MXNet's CPU random states, so
 * mx.random.seed makes it reproducible.
 * Backward: inputs [dy, dmask, data, mode, y, mask], outputs [dx = dy * mask / (1 - p) (dy in training, else),
 * zeros for the mode].
 */
#include <cstring>
#include <string>
#include <vector>

#include "glue.h"
#include "../kernels/dropout.h"
#include "../kernels/team.h"

namespace mxnet_amp {
namespace {

constexpr char kDropout[] = "amp_dropout";

struct DropoutParams {
  float p = 0.5f;
  bool always = false;
};

bool parse_dropout(const Attrs& attrs, DropoutParams* d) {
  if (!parse_float(kDropout, attrs, "p", 0.5f, &d->p)) return false;
  if (!(d->p >= 0.f && d->p <= 1.f)) {
    MX_ERROR_MSG << kDropout << ": attribute p must be in [0, 1] (got " << d->p << ")";
    return false;
  }
  const auto mode = attrs.find("mode");
  if (mode != attrs.end() && mode->second != "training" && mode->second != "always") {
    MX_ERROR_MSG << kDropout << ": attribute mode must be 'training' or 'always' (got '" << mode->second << "')";
    return false;
  }
  d->always = mode != attrs.end() && mode->second == "always";
  const auto axes = attrs.find("axes");
  if (axes != attrs.end() && axes->second != "()" && axes->second != "[]") {
    MX_ERROR_MSG << kDropout << ": attribute axes must be empty (got '" << axes->second << "'): masks shared "
                 << "along axes are MXNet's Dropout's";
    return false;
  }
  return true;
}

MXReturnValue parse(const Attrs& attrs, int* num_in, int* num_out) {
  DropoutParams d;
  if (!parse_dropout(attrs, &d)) return MX_FAIL;
  *num_in = 2;
  *num_out = 2;
  return MX_SUCCESS;
}

MXReturnValue infer_type(const Attrs& attrs, std::vector<int>* in, std::vector<int>* out) {
  int& data = (*in)[0];
  if (!check_data_dtype(kDropout, &data)) return MX_FAIL;
  int& mode = (*in)[1];
  if (mode == -1) mode = kFloat32;
  if (mode != kFloat32) {
    MX_ERROR_MSG << kDropout << ": input 1 (mode) must be float32 (got " << dtype_name(mode) << ")";
    return MX_FAIL;
  }
  (*out)[0] = data;
  (*out)[1] = mxnet::ext::kUint8;
  return MX_SUCCESS;
}

MXReturnValue infer_shape(const Attrs& attrs, Shapes* in, Shapes* out) {
  std::vector<unsigned int>& mode = (*in)[1];
  if (mode.empty()) mode = {1};
  if (mode != std::vector<unsigned int>{1}) {
    MX_ERROR_MSG << kDropout << ": input 1 (mode) must have shape (1,)";
    return MX_FAIL;
  }
  (*out)[0] = (*out)[1] = (*in)[0];
  return MX_SUCCESS;
}

// Whether this call drops: always, or in training (the mode input is not 1).
bool dropping(const DropoutParams& d, const MXTensor& mode) {
  return d.p > 0.f && (d.always || static_cast<const float*>(mode.data_ptr)[0] != 1.0f);
}

int64_t bytes(const MXTensor& t) { return t.size() * (t.dtype == kBfloat16 ? 2 : 4); }

MXReturnValue forward(const Attrs& attrs, std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                      const OpResource& res) {
  DropoutParams d;
  if (!parse_dropout(attrs, &d)) return MX_FAIL;
  if (on_gpu(*inputs)) {
    MX_ERROR_MSG << kDropout << ": runs on CPU only (got GPU tensors)";
    return MX_FAIL;
  }
  const MXTensor& x = (*inputs)[0];
  MXTensor& y = (*outputs)[0];
  uint8_t* mask = (*outputs)[1].data<uint8_t>();
  if (!dropping(d, (*inputs)[1])) {
    if (y.data_ptr != x.data_ptr) std::memcpy(y.data_ptr, x.data_ptr, bytes(x));
    std::memset(mask, 1, x.size());
    return MX_SUCCESS;
  }
  mxnet::ext::mx_cpu_rand_t& states = *res.get_cpu_rand_states();
  const uint64_t seed = (static_cast<uint64_t>(states()) << 32) | states();
  const CallTeam team;  // the cores divided among the library calls running (kernels/team.h)
  dropout_forward(y.data_ptr, x.data_ptr, static_cast<int>(x.dtype), mask, x.size(), d.p, seed, team.threads());
  return MX_SUCCESS;
}

MXReturnValue backward(const Attrs& attrs, std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                       const OpResource& res) {
  DropoutParams d;
  if (!parse_dropout(attrs, &d)) return MX_FAIL;
  const MXTensor& dy = (*inputs)[0];
  MXTensor& dx = (*outputs)[0];
  std::memset((*outputs)[1].data_ptr, 0, sizeof(float));  // the mode gets no gradient
  if (!dropping(d, (*inputs)[3])) {
    if (dx.data_ptr != dy.data_ptr) std::memcpy(dx.data_ptr, dy.data_ptr, bytes(dy));
    return MX_SUCCESS;
  }
  const CallTeam team;
  dropout_backward(dx.data_ptr, dy.data_ptr, static_cast<int>(dy.dtype), (*inputs)[5].data<uint8_t>(), dy.size(),
                   d.p, team.threads());
  return MX_SUCCESS;
}

}  // namespace
}  // namespace mxnet_amp

REGISTER_OP(amp_dropout)
    .setParseAttrs(AMP_GUARDED(mxnet_amp::parse))
    .setInferType(AMP_GUARDED(mxnet_amp::infer_type))
    .setInferShape(AMP_GUARDED(mxnet_amp::infer_shape))
    .setForward(AMP_GUARDED(mxnet_amp::forward), "cpu")
    .setBackward(AMP_GUARDED(mxnet_amp::backward), "cpu");
