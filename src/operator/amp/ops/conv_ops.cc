/*!
 * \file conv_ops.cc
 * \brief lib_api glue for the oneDNN 3 convolutions: amp_convolution (Convolution, _npx_convolution) and
 *        amp_deconvolution (Deconvolution, _npx_deconvolution).
 *
 * Attributes are those of MXNet's Convolution (kernel, stride, dilate, pad, num_filter, num_group, no_bias;
 * layout must be channels-first; the CUDA-only workspace/cudnn_* are accepted and ignored), so the graph
 * rewriter only renames the node, plus three of its own for inference graphs:
 *   act_type         "relu" or "relu6" (a clip to [0, 6], MobileNets'): fused into the convolution (a oneDNN
 *                    post-op; the gradient masks dy where the output is at a bound); "hard_sigmoid" or
 *                    "hard_swish" (MobileNet v3's clip(x + 3, 0, 6) / 6 and x times it; inference only: no
 *                    gradient);
 *   with_sum=True    one more input, the addend, summed into the output before the ReLU (a residual sum);
 *   out_dtype        float32 or bfloat16: the output's dtype when it differs from the operands'.
 * Data, weight and bias are float32 or bfloat16 (all the same), unless param_dtype="float32" (training graphs):
 * then weight and bias stay float32 beside bfloat16 data, the weight is converted into a per-call buffer and the
 * weight and bias gradients are written in float32; the addend has the output's dtype.
 * amp_deconvolution takes Deconvolution's attributes (adj and target_shape too; no_bias defaults to True) and
 * out_dtype. A transposed convolution is the data gradient of a convolution, so it runs on the same three
 * passes with the roles swapped: forward = backward data (plus the bias), data gradient = forward, weight
 * gradient = backward weights with data and gradient exchanged. (MXNet 1.9.1's oneDNN Deconvolution
 * backward aborts when its weight is a computed tensor, as an AMP cast is: these kernels route around it.)
 * Backward: inputs [dy, inputs..., y], outputs [gradient of each input], in the inputs' dtypes.
 */
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "onednn_glue.h"
#include "onednn_loader.h"

namespace mxnet_amp {
namespace {

constexpr char kConv[] = "amp_convolution";
constexpr char kDeconv[] = "amp_deconvolution";
constexpr int kMaxSpatial = AMP_CONV_MAX_SPATIAL;

struct ConvParams {
  bool deconv = false;  // amp_deconvolution
  std::vector<long> kernel, stride, dilate, pad, adj, target_shape;
  long num_filter = 0, num_group = 1;
  bool no_bias = false, relu = false, with_sum = false;
  float relu_max = INFINITY;  // where relu: a ReLU6's 6
  int hard_act = AMP_ACT_NONE;  // or AMP_ACT_HARD_SIGMOID, AMP_ACT_HARD_SWISH
  int out_dtype = -1, param_dtype = -1;

  const char* op() const { return deconv ? kDeconv : kConv; }
  int spatial() const { return static_cast<int>(kernel.size()); }
  int num_inputs() const { return 2 + !no_bias + with_sum; }
};

bool parse_conv(const Attrs& attrs, bool deconv, ConvParams* p) {
  p->deconv = deconv;
  const char* op = p->op();
  if (!parse_tuple(op, attrs, "kernel", 1, &p->kernel) || !parse_tuple(op, attrs, "stride", 1, &p->stride) ||
      !parse_tuple(op, attrs, "dilate", 1, &p->dilate) || !parse_tuple(op, attrs, "pad", 0, &p->pad) ||
      !parse_int(op, attrs, "num_filter", 1, &p->num_filter) ||
      !parse_bool(op, attrs, "no_bias", deconv, &p->no_bias) || !parse_out_dtype(op, attrs, &p->out_dtype) ||
      !parse_param_dtype(op, attrs, &p->param_dtype)) {
    return false;
  }
  if (attrs.count("num_group") && !parse_int(op, attrs, "num_group", 1, &p->num_group)) return false;
  const int n = p->spatial();
  if (n < 1 || n > kMaxSpatial) {
    MX_ERROR_MSG << op << ": attribute kernel must have 1 to " << kMaxSpatial << " sizes (got "
                 << (attrs.count("kernel") ? "'" + attrs.at("kernel") + "'" : std::string("none")) << ")";
    return false;
  }
  if (deconv && (!parse_tuple(op, attrs, "adj", 0, &p->adj) ||
                 !parse_tuple(op, attrs, "target_shape", 0, &p->target_shape))) {
    return false;
  }
  for (auto* v : {&p->stride, &p->dilate, &p->pad, &p->adj, &p->target_shape}) {
    if (v->empty() || (v == &p->target_shape && std::all_of(v->begin(), v->end(), [](long t) { return t == 0; }))) {
      v->assign(n, v == &p->stride || v == &p->dilate ? 1 : 0);
    }
    if (static_cast<int>(v->size()) != n) {
      MX_ERROR_MSG << op << ": stride, dilate, pad" << (deconv ? ", adj and target_shape" : "")
                   << " must have as many sizes as kernel (" << n << ")";
      return false;
    }
  }
  const auto layout = attrs.find("layout");
  if (layout != attrs.end() && layout->second != "None" && layout->second != "NCW" && layout->second != "NCHW" &&
      layout->second != "NCDHW") {
    MX_ERROR_MSG << op << ": attribute layout must be NCW, NCHW or NCDHW (got '" << layout->second << "')";
    return false;
  }
  const auto act = attrs.find("act_type");
  if (deconv && (act != attrs.end() || attrs.count("with_sum"))) {
    MX_ERROR_MSG << op << ": fused activations and sums are not supported";
    return false;
  }
  if (act != attrs.end() && (act->second == "hard_sigmoid" || act->second == "hard_swish")) {
    p->hard_act = act->second == "hard_sigmoid" ? AMP_ACT_HARD_SIGMOID : AMP_ACT_HARD_SWISH;
  } else if (act != attrs.end() && act->second != "relu" && act->second != "relu6") {
    MX_ERROR_MSG << op << ": attribute act_type must be relu, relu6, hard_sigmoid or hard_swish (got '"
                 << act->second << "')";
    return false;
  } else if (!parse_relu(op, attrs, &p->relu, &p->relu_max)) {
    return false;
  }
  return deconv || parse_bool(op, attrs, "with_sum", false, &p->with_sum);
}

template <bool kDeconvolution>
MXReturnValue conv_parse(const Attrs& attrs, int* num_in, int* num_out) {
  ConvParams p;
  if (!parse_conv(attrs, kDeconvolution, &p)) return MX_FAIL;
  *num_in = p.num_inputs();
  *num_out = 1;
  return MX_SUCCESS;
}

template <bool kDeconvolution>
MXReturnValue conv_infer_type(const Attrs& attrs, std::vector<int>* in, std::vector<int>* out) {
  ConvParams p;
  if (!parse_conv(attrs, kDeconvolution, &p)) return MX_FAIL;
  std::vector<int> operands(in->begin(), in->begin() + (p.no_bias ? 2 : 3));
  if (infer_data_param_types(p.op(), p.out_dtype, p.param_dtype, &operands, out) != MX_SUCCESS) return MX_FAIL;
  std::copy(operands.begin(), operands.end(), in->begin());
  if (p.with_sum) {
    int& addend = in->back();
    if (addend == -1) addend = (*out)[0];
    if (addend != (*out)[0]) {
      MX_ERROR_MSG << p.op() << ": the addend has dtype " << dtype_name(addend) << "; it must have the output's, "
                   << dtype_name((*out)[0]);
      return MX_FAIL;
    }
  }
  return MX_SUCCESS;
}

// The convolution pass geometry of a call: for amp_convolution its own; for amp_deconvolution the
// convolution whose data gradient it is (that convolution's data is the output, its output the data).
// Spatial sizes follow MXNet's formulas; false with an error when a size is < 1.
bool geometry(const ConvParams& p, const std::vector<int64_t>& data, AmpConv* c) {
  std::memset(c, 0, sizeof(*c));
  c->spatial = p.spatial();
  c->batch = data[0];
  c->groups = p.num_group;
  c->in_channels = p.deconv ? p.num_filter : data[1];
  c->out_channels = p.deconv ? data[1] : p.num_filter;
  for (int i = 0; i < p.spatial(); ++i) {
    const int64_t extent = p.dilate[i] * (p.kernel[i] - 1) + 1;
    c->kernel[i] = p.kernel[i];
    c->stride[i] = p.stride[i];
    c->dilate[i] = p.dilate[i];
    c->pad[i] = p.pad[i];
    if (!p.deconv) {
      const int64_t padded = data[i + 2] + 2 * p.pad[i];
      if (padded < extent) {
        MX_ERROR_MSG << p.op() << ": spatial dimension " << i << " of the data (" << data[i + 2] << ", padded "
                     << padded << ") is smaller than the dilated kernel (" << extent << ")";
        return false;
      }
      c->in_size[i] = data[i + 2];
      c->out_size[i] = (padded - extent) / p.stride[i] + 1;
      continue;
    }
    int64_t adj = p.adj[i];
    if (p.target_shape[i] > 0) {  // MXNet's rule: the padding (and adj) that reach the target size
      const int64_t total = p.stride[i] * (data[i + 2] - 1) + extent - p.target_shape[i];
      if (total < 0) {
        MX_ERROR_MSG << p.op() << ": target_shape " << p.target_shape[i] << " of spatial dimension " << i
                     << " is larger than the kernel and stride can reach (" << p.stride[i] * (data[i + 2] - 1) + extent
                     << ")";
        return false;
      }
      adj = total % 2;
      c->pad[i] = (total + 1) / 2;
    }
    if (adj >= p.stride[i]) {
      MX_ERROR_MSG << p.op() << ": adj (" << adj << ") must be smaller than stride (" << p.stride[i]
                   << ") in spatial dimension " << i;
      return false;
    }
    const int64_t size = p.stride[i] * (data[i + 2] - 1) + extent - 2 * c->pad[i] + adj;
    if (size < 1) {
      MX_ERROR_MSG << p.op() << ": output size " << size << " of spatial dimension " << i << " is < 1";
      return false;
    }
    c->in_size[i] = size;
    c->out_size[i] = data[i + 2];
  }
  return true;
}

bool expect_shape(const char* op, Shapes* in, size_t index, const std::vector<unsigned int>& shape,
                  const char* role) {
  if ((*in)[index].empty()) (*in)[index] = shape;
  if ((*in)[index] == shape) return true;
  std::string want, got;
  for (unsigned int d : shape) want += std::to_string(d) + ",";
  for (unsigned int d : (*in)[index]) got += std::to_string(d) + ",";
  MX_ERROR_MSG << op << ": " << role << " must have shape (" << want << ") for data of this shape (got (" << got
               << "))";
  return false;
}

template <bool kDeconvolution>
MXReturnValue conv_infer_shape(const Attrs& attrs, Shapes* in, Shapes* out) {
  ConvParams p;
  if (!parse_conv(attrs, kDeconvolution, &p)) return MX_FAIL;
  const char* op = p.op();
  const auto& x = (*in)[0];
  if (static_cast<int>(x.size()) != p.spatial() + 2) {
    MX_ERROR_MSG << op << ": the data must have " << p.spatial() + 2 << " dimensions (N, C and the kernel's "
                 << p.spatial() << "), got " << x.size();
    return MX_FAIL;
  }
  if (x[1] % p.num_group != 0 || p.num_filter % p.num_group != 0) {
    MX_ERROR_MSG << op << ": num_group (" << p.num_group << ") must divide the data's channels (" << x[1]
                 << ") and num_filter (" << p.num_filter << ")";
    return MX_FAIL;
  }
  AmpConv c;
  if (!geometry(p, std::vector<int64_t>(x.begin(), x.end()), &c)) return MX_FAIL;
  const auto u = [](int64_t v) { return static_cast<unsigned int>(v); };
  // weight: (num_filter, C / groups, kernel...); Deconvolution: (C, num_filter / groups, kernel...)
  std::vector<unsigned int> w = {u(c.out_channels), u(c.in_channels / c.groups)};
  std::vector<unsigned int> y = {x[0], u(p.num_filter)};
  for (int i = 0; i < p.spatial(); ++i) {
    w.push_back(u(p.kernel[i]));
    y.push_back(u(p.deconv ? c.in_size[i] : c.out_size[i]));
  }
  if (!expect_shape(op, in, 1, w, "weight")) return MX_FAIL;
  if (!p.no_bias && !expect_shape(op, in, 2, {u(p.num_filter)}, "bias")) return MX_FAIL;
  if (p.with_sum && !expect_shape(op, in, in->size() - 1, y, "the addend")) return MX_FAIL;
  (*out)[0] = y;
  return MX_SUCCESS;
}

// One pass of the library's convolution, from the call's geometry.
bool convolve(const char* op, const AmpConv& geometry, int pass) {
  AmpConvFn fn = onednn_conv();
  if (fn == nullptr) {
    MX_ERROR_MSG << op << ": oneDNN 3 kernels unavailable: " << onednn_info();
    return false;
  }
  AmpConv c = geometry;
  c.pass = pass;
  char error[512] = {0};
  if (fn(&c, error, sizeof(error)) != 0) {
    MX_ERROR_MSG << op << ": " << error;
    return false;
  }
  return true;
}

// y[n, c, ...] = acc[n, c, ...] + bias[c] (Deconvolution's bias: the data-gradient pass has none).
void add_bias(const void* acc, int acc_dtype, const MXTensor& bias, MXTensor* y) {
  const int64_t channels = y->shape[1];
  const CallTeam team;
  add_channel_bias(y->data_ptr, static_cast<int>(y->dtype), acc, acc_dtype, bias.data_ptr,
                   static_cast<int>(bias.dtype), y->shape[0], channels, y->size() / (y->shape[0] * channels),
                   team.threads());
}

// db[c] = sum of g over every axis but the channels, in float32.
void bias_gradient(const void* g, int dtype, const MXTensor& like, MXTensor* db) {
  const int64_t channels = like.shape[1];
  const CallTeam team;
  channel_sums(db->data_ptr, static_cast<int>(db->dtype), g, dtype, like.shape[0], channels,
               like.size() / (like.shape[0] * channels), team.threads());
}

template <bool kDeconvolution>
MXReturnValue conv_forward(const Attrs& attrs, std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                           const OpResource& res) {
  ConvParams p;
  if (!parse_conv(attrs, kDeconvolution, &p)) return MX_FAIL;
  const MXTensor& x = (*inputs)[0];
  MXTensor& y = (*outputs)[0];
  if (y.size() == 0) return MX_SUCCESS;
  AmpConv c;
  if (!geometry(p, x.shape, &c)) return MX_FAIL;
  c.dtype = static_cast<int>(x.dtype);
  c.out_dtype = static_cast<int>(y.dtype);
  c.bias_dtype = -1;
  Scratch keep;
  c.weight = weight_in_dtype((*inputs)[1], c.dtype, &c.weight_dtype);  // float32 parameters: converted per call
  c.out = y.data_ptr;
  if (p.deconv) {  // with a bias and a bfloat16 output: the sum in float32, rounded once
    const bool staged = !p.no_bias && c.out_dtype != kFloat32;
    if (staged) {
      c.out = scratch(&keep, y.size());
      c.out_dtype = kFloat32;
    }
    c.diff_dst = x.data_ptr;
    if (!convolve(p.op(), c, AMP_CONV_BACKWARD_DATA)) return MX_FAIL;
    if (!p.no_bias) add_bias(c.out, c.out_dtype, (*inputs)[2], &y);
    return MX_SUCCESS;
  }
  c.relu = p.relu;
  c.relu_max = p.relu_max;
  c.hard_act = p.hard_act;
  c.data = x.data_ptr;
  if (!p.no_bias) {
    c.bias = (*inputs)[2].data_ptr;
    c.bias_dtype = static_cast<int>((*inputs)[2].dtype);
  }
  if (p.with_sum) c.addend = inputs->back().data_ptr;
  return convolve(p.op(), c, AMP_CONV_FORWARD) ? MX_SUCCESS : MX_FAIL;
}

template <bool kDeconvolution>
MXReturnValue conv_backward(const Attrs& attrs, std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                            const OpResource& res) {
  ConvParams p;
  if (!parse_conv(attrs, kDeconvolution, &p)) return MX_FAIL;
  if (p.hard_act != AMP_ACT_NONE) {
    MX_ERROR_MSG << p.op() << ": act_type " << (p.hard_act == AMP_ACT_HARD_SIGMOID ? "hard_sigmoid" : "hard_swish")
                 << " is fused into inference graphs only; it has no gradient";
    return MX_FAIL;
  }
  const MXTensor& dy = (*inputs)[0];
  const MXTensor& x = (*inputs)[1];
  MXTensor& dx = (*outputs)[0];
  MXTensor& dw = (*outputs)[1];
  if (dy.size() == 0) {
    for (MXTensor& g : *outputs) zero(&g);
    return MX_SUCCESS;
  }
  const int dt = static_cast<int>(x.dtype);
  Scratch keep;
  // dy, where a fused ReLU's output is inside (0, relu_max) (else 0), in the operands' dtype
  void* g = p.relu ? relu_masked(dy, inputs->back(), dt, p.relu_max, &keep) : in_dtype(dy, dt, &keep);
  AmpConv c;
  if (!geometry(p, x.shape, &c)) return MX_FAIL;
  c.dtype = dt;
  c.bias_dtype = -1;
  // Data gradient: the convolution's backward data pass; the deconvolution's is the convolution itself.
  c.weight = weight_in_dtype((*inputs)[2], dt, &c.weight_dtype);
  c.out = dx.data_ptr;
  c.out_dtype = static_cast<int>(dx.dtype);
  (p.deconv ? c.data : c.diff_dst) = g;
  if (!convolve(p.op(), c, p.deconv ? AMP_CONV_FORWARD : AMP_CONV_BACKWARD_DATA)) return MX_FAIL;
  // Weight gradient: data and output gradient exchange roles for the deconvolution.
  AmpConv w = c;
  w.weight = nullptr;
  w.data = p.deconv ? g : x.data_ptr;
  w.diff_dst = p.deconv ? x.data_ptr : g;
  w.out = dw.data_ptr;
  w.out_dtype = static_cast<int>(dw.dtype);
  if (!p.no_bias && !p.deconv) {
    w.diff_bias = (*outputs)[2].data_ptr;
    w.bias_dtype = static_cast<int>((*outputs)[2].dtype);
  }
  if (!convolve(p.op(), w, AMP_CONV_BACKWARD_WEIGHTS)) return MX_FAIL;
  if (!p.no_bias && p.deconv) bias_gradient(g, dt, dy, &(*outputs)[2]);
  if (p.with_sum) {  // the addend's gradient: dy through the ReLU
    MXTensor& da = outputs->back();
    for (int64_t i = 0; i < da.size(); ++i) store(da.data_ptr, static_cast<int>(da.dtype), i, load(g, dt, i));
  }
  return MX_SUCCESS;
}

}  // namespace
}  // namespace mxnet_amp

REGISTER_OP(amp_convolution)
    .setParseAttrs(AMP_GUARDED(mxnet_amp::conv_parse<false>))
    .setInferType(AMP_GUARDED(mxnet_amp::conv_infer_type<false>))
    .setInferShape(AMP_GUARDED(mxnet_amp::conv_infer_shape<false>))
    .setForward(AMP_GUARDED(mxnet_amp::conv_forward<false>), "cpu")
    .setBackward(AMP_GUARDED(mxnet_amp::conv_backward<false>), "cpu");

REGISTER_OP(amp_deconvolution)
    .setParseAttrs(AMP_GUARDED(mxnet_amp::conv_parse<true>))
    .setInferType(AMP_GUARDED(mxnet_amp::conv_infer_type<true>))
    .setInferShape(AMP_GUARDED(mxnet_amp::conv_infer_shape<true>))
    .setForward(AMP_GUARDED(mxnet_amp::conv_forward<true>), "cpu")
    .setBackward(AMP_GUARDED(mxnet_amp::conv_backward<true>), "cpu");
