/*!
 * \file pooling_op.cc
 * \brief lib_api glue for amp_pooling: MXNet's max Pooling of 2-D channels-first data in the data's dtype, float32
 *        or bfloat16 (kernels/pooling.h), for training graphs that store bfloat16 on float32 arithmetic (CPU class
 *        (a)). There MXNet's Pooling fails on bfloat16 data ("could not create a primitive descriptor iterator"),
 *        and a float32 island around it kept the float32 data for backward: 33.5 MB behind ResNet-18's stem at
 *        batch 128 of 64x64 images.
 *
 * Attributes are Pooling's: kernel (2 values), stride (1s), pad (0s), pool_type ("max", the only one taken),
 * pooling_convention ("valid" or "full"), global_pool (False: the window is the whole plane), layout (None or
 * "NCHW"); cudnn_off, p_value and count_include_pad are accepted and ignored.
 * Input: data (N, C, H, W). Output: the pooled data, the data's dtype.
 * Backward: inputs [dy, data, y] (y is not read: nnvm/backward_inputs.cc gives the slot dy), output [dx].
 */
#include <string>
#include <vector>

#include "glue.h"
#include "../kernels/pooling.h"
#include "../kernels/team.h"

namespace mxnet_amp {
namespace {

constexpr char kPooling[] = "amp_pooling";

struct PoolParams {
  std::vector<long> kernel, stride, pad;
  bool global = false, full = false;
};

bool check_choice(const Attrs& attrs, const char* key, const char* fallback, const std::vector<std::string>& valid,
                  std::string* value) {
  const auto it = attrs.find(key);
  *value = it == attrs.end() ? fallback : it->second;
  for (const std::string& v : valid) {
    if (*value == v) return true;
  }
  std::string choices;
  for (const std::string& v : valid) choices += (choices.empty() ? "'" : ", '") + v + "'";
  MX_ERROR_MSG << kPooling << ": attribute " << key << " must be one of " << choices << " (got '" << *value << "')";
  return false;
}

bool parse_pool(const Attrs& attrs, PoolParams* p) {
  std::string pool_type, convention, layout;
  if (!check_choice(attrs, "pool_type", "max", {"max"}, &pool_type) ||
      !check_choice(attrs, "pooling_convention", "valid", {"valid", "full"}, &convention) ||
      !check_choice(attrs, "layout", "None", {"None", "NCHW"}, &layout) ||
      !parse_bool(kPooling, attrs, "global_pool", false, &p->global) ||
      !parse_tuple(kPooling, attrs, "kernel", 1, &p->kernel) || !parse_tuple(kPooling, attrs, "stride", 1, &p->stride) ||
      !parse_tuple(kPooling, attrs, "pad", 0, &p->pad)) {
    return false;
  }
  p->full = convention == "full";
  if (p->stride.empty()) p->stride = {1, 1};
  if (p->pad.empty()) p->pad = {0, 0};
  if ((!p->global && p->kernel.size() != 2) || p->stride.size() != 2 || p->pad.size() != 2) {
    MX_ERROR_MSG << kPooling << ": kernel, stride and pad must have 2 values each (2-D pooling; got "
                 << p->kernel.size() << ", " << p->stride.size() << ", " << p->pad.size() << ")";
    return false;
  }
  return true;
}

MXReturnValue parse(const Attrs& attrs, int* num_in, int* num_out) {
  PoolParams p;
  if (!parse_pool(attrs, &p)) return MX_FAIL;
  *num_in = 1;
  *num_out = 1;
  return MX_SUCCESS;
}

MXReturnValue infer_type(const Attrs& attrs, std::vector<int>* in, std::vector<int>* out) {
  if (!check_data_dtype(kPooling, &(*in)[0])) return MX_FAIL;
  (*out)[0] = (*in)[0];
  return MX_SUCCESS;
}

// The geometry of data of shape (N, C, H, W); false (with the error) where the windows do not fit it.
template <typename Dim>
bool geometry(const PoolParams& p, const std::vector<Dim>& shape, PoolGeometry* g) {
  if (shape.size() != 4) {
    MX_ERROR_MSG << kPooling << ": data must have 4 dimensions (N, C, H, W) (got " << shape.size() << ")";
    return false;
  }
  g->planes = static_cast<int64_t>(shape[0]) * shape[1];
  g->h = shape[2];
  g->w = shape[3];
  g->kh = p.global ? g->h : p.kernel[0];
  g->kw = p.global ? g->w : p.kernel[1];
  g->sh = p.global ? 1 : p.stride[0];
  g->sw = p.global ? 1 : p.stride[1];
  g->ph = p.global ? 0 : p.pad[0];
  g->pw = p.global ? 0 : p.pad[1];
  if (g->kh > g->h + 2 * g->ph || g->kw > g->w + 2 * g->pw) {
    MX_ERROR_MSG << kPooling << ": kernel (" << g->kh << ", " << g->kw << ") is larger than the padded data ("
                 << g->h + 2 * g->ph << ", " << g->w + 2 * g->pw << ")";
    return false;
  }
  const int64_t round = p.full ? 1 : 0;  // "full": a last window that starts inside the padded data counts
  g->oh = (g->h + 2 * g->ph - g->kh + round * (g->sh - 1)) / g->sh + 1;
  g->ow = (g->w + 2 * g->pw - g->kw + round * (g->sw - 1)) / g->sw + 1;
  return true;
}

MXReturnValue infer_shape(const Attrs& attrs, Shapes* in, Shapes* out) {
  PoolParams p;
  PoolGeometry g;
  if (!parse_pool(attrs, &p) || !geometry(p, (*in)[0], &g)) return MX_FAIL;
  (*out)[0] = {(*in)[0][0], (*in)[0][1], static_cast<unsigned int>(g.oh), static_cast<unsigned int>(g.ow)};
  return MX_SUCCESS;
}

MXReturnValue forward(const Attrs& attrs, std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                      const OpResource& res) {
  PoolParams p;
  PoolGeometry g;
  if (!parse_pool(attrs, &p) || !geometry(p, (*inputs)[0].shape, &g)) return MX_FAIL;
  if (on_gpu(*inputs)) {
    MX_ERROR_MSG << kPooling << ": runs on CPU only (got GPU tensors)";
    return MX_FAIL;
  }
  const MXTensor& x = (*inputs)[0];
  const CallTeam team;  // the cores divided among the library calls running (kernels/team.h)
  max_pool_forward(x.data_ptr, (*outputs)[0].data_ptr, static_cast<int>(x.dtype), g, team.threads());
  return MX_SUCCESS;
}

MXReturnValue backward(const Attrs& attrs, std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                       const OpResource& res) {
  PoolParams p;
  PoolGeometry g;
  const MXTensor& x = (*inputs)[1];
  if (!parse_pool(attrs, &p) || !geometry(p, x.shape, &g)) return MX_FAIL;
  if ((*inputs)[0].dtype != x.dtype) {
    MX_ERROR_MSG << kPooling << ": the output gradient has dtype " << dtype_name((*inputs)[0].dtype)
                 << "; it must have the data's, " << dtype_name(x.dtype);
    return MX_FAIL;
  }
  const CallTeam team;
  max_pool_backward(x.data_ptr, (*inputs)[0].data_ptr, (*outputs)[0].data_ptr, static_cast<int>(x.dtype), g,
                    team.threads());
  return MX_SUCCESS;
}

}  // namespace
}  // namespace mxnet_amp

REGISTER_OP(amp_pooling)
    .setParseAttrs(AMP_GUARDED(mxnet_amp::parse))
    .setInferType(AMP_GUARDED(mxnet_amp::infer_type))
    .setInferShape(AMP_GUARDED(mxnet_amp::infer_shape))
    .setForward(AMP_GUARDED(mxnet_amp::forward), "cpu")
    .setBackward(AMP_GUARDED(mxnet_amp::backward), "cpu");
