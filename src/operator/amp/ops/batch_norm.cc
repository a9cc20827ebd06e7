/*!
 * \file batch_norm.cc
 * \brief lib_api glue for amp_batch_norm: MXNet's BatchNorm on float32, float16 or bfloat16 data with float32
 *        parameters and statistics (kernels/batch_norm.h), so that a low precision graph keeps BatchNorm in its
 *        dtype instead of a float32 island between casts.
 *
 * Attributes are BatchNorm's: eps (1e-3), momentum (0.9), fix_gamma (True), use_global_stats (False), axis (1);
 * output_mean_var must be False; cudnn_off and the calibration ranges are accepted and ignored. act_type="relu"
 * (or "relu6", a clip to [0, 6]) applies a ReLU to the output (graphs fuse the ReLU that follows: backward then
 * keeps one activation, not the normalised data beside the ReLU's output; the gradient masks dy where the output
 * is at a bound). with_sum=True
 * takes one more input after the mode, the addend (the data's dtype and shape), added before the ReLU (a ResNet
 * block's residual sum; its gradient is dy through the ReLU).
 * Inputs: data, gamma, beta, moving_mean, moving_var (mutated: auxiliary states, as BatchNorm's) and mode, a
 * float32 (1,) tensor that says whether MXNet runs the graph for training: lib_api tells an extension op
 * nothing about it, so the graph rewriter feeds the output of Dropout(p=0.5) on a (1,) tensor of ones, which
 * MXNet computes with the same flag as every other op of the call: exactly 1 in inference (Dropout is then the
 * identity), 0 or 2 in training. Training normalises with the batch's statistics and updates the moving ones,
 * unless use_global_stats.
 * Outputs: the normalised data (the data's dtype), and the mean and 1 / sqrt(variance + eps) used (float32,
 * (channels,)), which the backward reads.
 * Backward: inputs [dy, dmean, dinvstd, the 6 (7) inputs, the 3 outputs], outputs [dx, dgamma, dbeta, then zeros
 * for the statistics and the mode, and the addend's gradient].
 * Threads: each call's OpenMP team is the cores divided among the library calls running (kernels/team.h, as the
 * oneDNN 3 kernels').
 */
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "glue.h"
#include "../kernels/batch_norm.h"
#include "../kernels/team.h"

namespace mxnet_amp {
namespace {

constexpr char kBatchNorm[] = "amp_batch_norm";
constexpr int kInputs = 6, kOutputs = 3;
enum Input { kData = 0, kGamma, kBeta, kMovingMean, kMovingVar, kMode };
constexpr const char* kRoles[kInputs] = {"data", "gamma", "beta", "moving_mean", "moving_var", "mode"};

struct BatchNormParams {
  float eps = 1e-3f, momentum = 0.9f;
  bool fix_gamma = true, use_global_stats = false, relu = false, with_sum = false;
  float relu_max = INFINITY;  // where relu: a ReLU6's 6
  long axis = 1;

  int num_inputs() const { return kInputs + with_sum; }
};

bool parse_bn(const Attrs& attrs, BatchNormParams* p) {
  bool output_mean_var = false;
  if (!parse_float(kBatchNorm, attrs, "eps", 1e-3f, &p->eps) ||
      !parse_float(kBatchNorm, attrs, "momentum", 0.9f, &p->momentum) ||
      !parse_bool(kBatchNorm, attrs, "fix_gamma", true, &p->fix_gamma) ||
      !parse_bool(kBatchNorm, attrs, "use_global_stats", false, &p->use_global_stats) ||
      !parse_bool(kBatchNorm, attrs, "output_mean_var", false, &output_mean_var) ||
      !parse_bool(kBatchNorm, attrs, "with_sum", false, &p->with_sum)) {
    return false;
  }
  if (!parse_relu(kBatchNorm, attrs, &p->relu, &p->relu_max)) return false;
  if (output_mean_var) {
    MX_ERROR_MSG << kBatchNorm << ": output_mean_var=True is not supported (its outputs are the mean and "
                 << "inverse standard deviation the backward needs)";
    return false;
  }
  if (!(p->eps > 0.0f)) {
    MX_ERROR_MSG << kBatchNorm << ": attribute eps must be > 0 (got " << p->eps << ")";
    return false;
  }
  const auto it = attrs.find("axis");
  if (it != attrs.end()) {
    char* end = nullptr;
    errno = 0;
    p->axis = std::strtol(it->second.c_str(), &end, 10);
    if (errno != 0 || end == it->second.c_str() || *end != '\0') {
      MX_ERROR_MSG << kBatchNorm << ": attribute axis must be an integer (got '" << it->second << "')";
      return false;
    }
  }
  return true;
}

// The data's [outer, channels, inner] for the axis; false (with an error) when the axis is out of range.
bool bn_shape(const BatchNormParams& p, const std::vector<int64_t>& dims, BatchNormShape* s) {
  const long ndim = static_cast<long>(dims.size());
  const long axis = p.axis < 0 ? p.axis + ndim : p.axis;
  if (ndim < 1 || axis < 0 || axis >= ndim) {
    MX_ERROR_MSG << kBatchNorm << ": axis " << p.axis << " is out of range for data of " << ndim << " dimensions";
    return false;
  }
  s->outer = 1;
  s->inner = 1;
  for (long i = 0; i < axis; ++i) s->outer *= dims[i];
  s->channels = dims[axis];
  for (long i = axis + 1; i < ndim; ++i) s->inner *= dims[i];
  return true;
}

MXReturnValue parse(const Attrs& attrs, int* num_in, int* num_out) {
  BatchNormParams p;
  if (!parse_bn(attrs, &p)) return MX_FAIL;
  *num_in = p.num_inputs();
  *num_out = kOutputs;
  return MX_SUCCESS;
}

MXReturnValue mutate_inputs(const Attrs& attrs, std::vector<int>* indices) {
  *indices = {kMovingMean, kMovingVar};
  return MX_SUCCESS;
}

MXReturnValue infer_type(const Attrs& attrs, std::vector<int>* in, std::vector<int>* out) {
  BatchNormParams p;
  if (!parse_bn(attrs, &p)) return MX_FAIL;
  int& data = (*in)[kData];
  if (data == -1) data = kFloat32;
  if (data != kFloat32 && data != kFloat16 && data != kBfloat16) {
    MX_ERROR_MSG << kBatchNorm << ": data must be float32, float16 or bfloat16 (got " << dtype_name(data) << ")";
    return MX_FAIL;
  }
  for (int i = kGamma; i < kInputs; ++i) {
    int& t = (*in)[i];
    if (t == -1) t = kFloat32;
    if (t != kFloat32) {
      MX_ERROR_MSG << kBatchNorm << ": input " << i << " (" << kRoles[i] << ") must be float32 (got "
                   << dtype_name(t) << ")";
      return MX_FAIL;
    }
  }
  if (p.with_sum) {
    int& addend = in->back();
    if (addend == -1) addend = data;
    if (addend != data) {
      MX_ERROR_MSG << kBatchNorm << ": the addend has dtype " << dtype_name(addend) << "; it must have the data's, "
                   << dtype_name(data);
      return MX_FAIL;
    }
  }
  (*out)[0] = data;
  (*out)[1] = (*out)[2] = kFloat32;
  return MX_SUCCESS;
}

MXReturnValue infer_shape(const Attrs& attrs, Shapes* in, Shapes* out) {
  BatchNormParams p;
  if (!parse_bn(attrs, &p)) return MX_FAIL;
  const std::vector<int64_t> dims((*in)[kData].begin(), (*in)[kData].end());
  BatchNormShape s;
  if (!bn_shape(p, dims, &s)) return MX_FAIL;
  const std::vector<unsigned int> channels = {static_cast<unsigned int>(s.channels)};
  for (int i = kGamma; i < kInputs; ++i) {
    const std::vector<unsigned int> want = i == kMode ? std::vector<unsigned int>{1} : channels;
    std::vector<unsigned int>& got = (*in)[i];
    if (got.empty()) got = want;
    if (got != want) {
      MX_ERROR_MSG << kBatchNorm << ": input " << i << " (" << kRoles[i] << ") must have shape (" << want[0]
                   << ",) for data of " << s.channels << " channels on axis " << p.axis << " (got "
                   << got.size() << " dimensions)";
      return MX_FAIL;
    }
  }
  if (p.with_sum) {
    std::vector<unsigned int>& addend = in->back();
    if (addend.empty()) addend = (*in)[kData];
    if (addend != (*in)[kData]) {
      MX_ERROR_MSG << kBatchNorm << ": the addend must have the data's shape";
      return MX_FAIL;
    }
  }
  (*out)[0] = (*in)[kData];
  (*out)[1] = (*out)[2] = channels;
  return MX_SUCCESS;
}

// Whether this call normalises with the batch's statistics: the mode input is not 1 (see the file comment).
bool training(const BatchNormParams& p, const MXTensor& mode) {
  return !p.use_global_stats && static_cast<const float*>(mode.data_ptr)[0] != 1.0f;
}

MXReturnValue forward(const Attrs& attrs, std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                      const OpResource& res) {
  BatchNormParams p;
  BatchNormForward a;
  if (!parse_bn(attrs, &p) || !check_cpu(kBatchNorm, *inputs) || !bn_shape(p, (*inputs)[kData].shape, &a.shape)) return MX_FAIL;
  a.dtype = static_cast<int>((*inputs)[kData].dtype);
  a.x = (*inputs)[kData].data_ptr;
  a.y = (*outputs)[0].data_ptr;
  a.gamma = p.fix_gamma ? nullptr : (*inputs)[kGamma].data<float>();
  a.beta = (*inputs)[kBeta].data<float>();
  a.moving_mean = (*inputs)[kMovingMean].data<float>();
  a.moving_var = (*inputs)[kMovingVar].data<float>();
  a.saved_mean = (*outputs)[1].data<float>();
  a.saved_invstd = (*outputs)[2].data<float>();
  a.eps = p.eps;
  a.momentum = p.momentum;
  a.training = training(p, (*inputs)[kMode]);
  const CallTeam team;  // the cores divided among the library calls running (kernels/team.h)
  a.threads = team.threads();
  a.addend = p.with_sum ? inputs->back().data_ptr : nullptr;
  a.relu = p.relu;
  a.relu_max = p.relu_max;
  cpu_batch_norm_forward(a);
  return MX_SUCCESS;
}

MXReturnValue backward(const Attrs& attrs, std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                       const OpResource& res) {
  BatchNormParams p;
  BatchNormBackward a;
  const std::vector<MXTensor>& in = *inputs;
  const MXTensor& x = in[kOutputs + kData];
  if (!parse_bn(attrs, &p) || !check_cpu(kBatchNorm, in) || !bn_shape(p, x.shape, &a.shape)) return MX_FAIL;
  for (int i = kMovingMean; i < kInputs; ++i) {  // the statistics and the mode get no gradient
    std::memset((*outputs)[i].data_ptr, 0, (*outputs)[i].size() * sizeof(float));
  }
  a.dtype = static_cast<int>(x.dtype);
  a.dx = (*outputs)[kData].data_ptr;
  const CallTeam team;  // the cores divided among the library calls running (kernels/team.h)
  a.threads = team.threads();
  a.dy = in[0].data_ptr;
  a.y = in[kOutputs + p.num_inputs()].data_ptr;  // the forward's output: a fused ReLU masks dy by it
  a.daddend = p.with_sum ? outputs->back().data_ptr : nullptr;
  a.relu = p.relu;
  a.relu_max = p.relu_max;
  a.x = x.data_ptr;
  a.gamma = p.fix_gamma ? nullptr : static_cast<const float*>(in[kOutputs + kGamma].data_ptr);
  a.saved_mean = static_cast<const float*>(in[kOutputs + p.num_inputs() + 1].data_ptr);
  a.saved_invstd = static_cast<const float*>(in[kOutputs + p.num_inputs() + 2].data_ptr);
  a.dgamma = (*outputs)[kGamma].data<float>();
  a.dbeta = (*outputs)[kBeta].data<float>();
  a.training = training(p, in[kOutputs + kMode]);
  cpu_batch_norm_backward(a);
  return MX_SUCCESS;
}

}  // namespace
}  // namespace mxnet_amp

REGISTER_OP(amp_batch_norm)
    .setParseAttrs(AMP_GUARDED(mxnet_amp::parse))
    .setInferType(AMP_GUARDED(mxnet_amp::infer_type))
    .setInferShape(AMP_GUARDED(mxnet_amp::infer_shape))
    .setMutateInputs(AMP_GUARDED(mxnet_amp::mutate_inputs))
    .setForward(AMP_GUARDED(mxnet_amp::forward), "cpu")
    .setBackward(AMP_GUARDED(mxnet_amp::backward), "cpu");
