/*!
 * \file conv_ops.cc
 * \brief lib_api glue for the oneDNN 3 convolution: amp_convolution (Convolution, _npx_convolution).
 *
 * Attributes are those of MXNet's Convolution (kernel, stride, dilate, pad, num_filter, num_group, no_bias;
 * layout must be channels-first; the CUDA-only workspace/cudnn_* are accepted and ignored), so the graph
 * rewriter only renames the node, plus three of its own for inference graphs:
 *   act_type="relu"  a ReLU fused into the convolution (oneDNN post-op; the gradient masks dy);
 *   with_sum=True    one more input, the addend, summed into the output before the ReLU (a residual sum);
 *   out_dtype        float32 or bfloat16: the output's dtype when it differs from the operands'.
 * Data, weight and bias are float32 or bfloat16 (all the same); the addend has the output's dtype.
 * Backward: inputs [dy, inputs..., y], outputs [gradient of each input], in the inputs' dtypes.
 */
#include <cstring>
#include <string>
#include <vector>

#include "onednn_glue.h"
#include "onednn_loader.h"

namespace mxnet_amp {
namespace {

constexpr char kConv[] = "amp_convolution";
constexpr int kMaxSpatial = AMP_CONV_MAX_SPATIAL;

struct ConvParams {
  std::vector<long> kernel, stride, dilate, pad;
  long num_filter = 0, num_group = 1;
  bool no_bias = false, relu = false, with_sum = false;
  int out_dtype = -1;

  int spatial() const { return static_cast<int>(kernel.size()); }
  int num_inputs() const { return 2 + !no_bias + with_sum; }
};

// A tuple attribute such as "(3, 3)", "[2,2]" or "(1,)": integers >= minimum, empty when absent.
bool parse_tuple(const Attrs& attrs, const char* key, long minimum, std::vector<long>* values) {
  values->clear();
  const auto it = attrs.find(key);
  if (it == attrs.end() || it->second == "None") return true;
  std::string s = it->second;
  for (char& ch : s) {
    if (ch == '(' || ch == ')' || ch == '[' || ch == ']' || ch == ',') ch = ' ';
  }
  const char* p = s.c_str();
  while (true) {
    while (*p == ' ') ++p;
    if (*p == '\0') break;
    char* end = nullptr;
    const long v = std::strtol(p, &end, 10);
    if (end == p || v < minimum || (*end != ' ' && *end != '\0')) {
      MX_ERROR_MSG << kConv << ": attribute " << key << " must be a tuple of integers >= " << minimum
                   << " (got '" << it->second << "')";
      return false;
    }
    values->push_back(v);
    p = end;
  }
  return true;
}

bool parse_conv(const Attrs& attrs, ConvParams* p) {
  if (!parse_tuple(attrs, "kernel", 1, &p->kernel) || !parse_tuple(attrs, "stride", 1, &p->stride) ||
      !parse_tuple(attrs, "dilate", 1, &p->dilate) || !parse_tuple(attrs, "pad", 0, &p->pad) ||
      !parse_int(kConv, attrs, "num_filter", 1, &p->num_filter) || !parse_bool(kConv, attrs, "no_bias", false, &p->no_bias) ||
      !parse_bool(kConv, attrs, "with_sum", false, &p->with_sum) || !parse_out_dtype(kConv, attrs, &p->out_dtype)) {
    return false;
  }
  if (attrs.count("num_group") && !parse_int(kConv, attrs, "num_group", 1, &p->num_group)) return false;
  const int n = p->spatial();
  if (n < 1 || n > kMaxSpatial) {
    MX_ERROR_MSG << kConv << ": attribute kernel must have 1 to " << kMaxSpatial << " sizes (got "
                 << (attrs.count("kernel") ? "'" + attrs.at("kernel") + "'" : std::string("none")) << ")";
    return false;
  }
  for (auto* v : {&p->stride, &p->dilate, &p->pad}) {
    if (v->empty()) v->assign(n, v == &p->pad ? 0 : 1);
    if (static_cast<int>(v->size()) != n) {
      MX_ERROR_MSG << kConv << ": stride, dilate and pad must have as many sizes as kernel (" << n << ")";
      return false;
    }
  }
  const auto layout = attrs.find("layout");
  if (layout != attrs.end() && layout->second != "None" && layout->second != "NCW" && layout->second != "NCHW" &&
      layout->second != "NCDHW") {
    MX_ERROR_MSG << kConv << ": attribute layout must be NCW, NCHW or NCDHW (got '" << layout->second << "')";
    return false;
  }
  const auto act = attrs.find("act_type");
  if (act != attrs.end() && act->second != "relu") {
    MX_ERROR_MSG << kConv << ": attribute act_type must be relu (got '" << act->second << "')";
    return false;
  }
  p->relu = act != attrs.end();
  return true;
}

MXReturnValue conv_parse(const Attrs& attrs, int* num_in, int* num_out) {
  ConvParams p;
  if (!parse_conv(attrs, &p)) return MX_FAIL;
  *num_in = p.num_inputs();
  *num_out = 1;
  return MX_SUCCESS;
}

MXReturnValue conv_infer_type(const Attrs& attrs, std::vector<int>* in, std::vector<int>* out) {
  ConvParams p;
  if (!parse_conv(attrs, &p)) return MX_FAIL;
  std::vector<int> operands(in->begin(), in->begin() + (p.no_bias ? 2 : 3));
  if (infer_operand_types(kConv, p.out_dtype, &operands, out) != MX_SUCCESS) return MX_FAIL;
  std::copy(operands.begin(), operands.end(), in->begin());
  if (p.with_sum) {
    int& addend = in->back();
    if (addend == -1) addend = (*out)[0];
    if (addend != (*out)[0]) {
      MX_ERROR_MSG << kConv << ": the addend has dtype " << dtype_name(addend) << "; it must have the output's, "
                   << dtype_name((*out)[0]);
      return MX_FAIL;
    }
  }
  return MX_SUCCESS;
}

// Output size of each spatial dimension (MXNet's formula); false with an error when one is < 1.
bool output_sizes(const ConvParams& p, const std::vector<int64_t>& data, std::vector<int64_t>* out) {
  out->clear();
  for (int i = 0; i < p.spatial(); ++i) {
    const int64_t extent = p.dilate[i] * (p.kernel[i] - 1) + 1;
    const int64_t padded = data[i + 2] + 2 * p.pad[i];
    if (padded < extent) {
      MX_ERROR_MSG << kConv << ": spatial dimension " << i << " of the data (" << data[i + 2] << ", padded "
                   << padded << ") is smaller than the dilated kernel (" << extent << ")";
      return false;
    }
    out->push_back((padded - extent) / p.stride[i] + 1);
  }
  return true;
}

bool expect_shape(Shapes* in, size_t index, const std::vector<unsigned int>& shape, const char* role) {
  if ((*in)[index].empty()) (*in)[index] = shape;
  if ((*in)[index] == shape) return true;
  std::string want, got;
  for (unsigned int d : shape) want += std::to_string(d) + ",";
  for (unsigned int d : (*in)[index]) got += std::to_string(d) + ",";
  MX_ERROR_MSG << kConv << ": " << role << " must have shape (" << want << ") for data of this shape (got ("
               << got << "))";
  return false;
}

MXReturnValue conv_infer_shape(const Attrs& attrs, Shapes* in, Shapes* out) {
  ConvParams p;
  if (!parse_conv(attrs, &p)) return MX_FAIL;
  const auto& x = (*in)[0];
  if (static_cast<int>(x.size()) != p.spatial() + 2) {
    MX_ERROR_MSG << kConv << ": the data must have " << p.spatial() + 2 << " dimensions (N, C and the kernel's "
                 << p.spatial() << "), got " << x.size();
    return MX_FAIL;
  }
  if (x[1] % p.num_group != 0 || p.num_filter % p.num_group != 0) {
    MX_ERROR_MSG << kConv << ": num_group (" << p.num_group << ") must divide the data's channels (" << x[1]
                 << ") and num_filter (" << p.num_filter << ")";
    return MX_FAIL;
  }
  std::vector<int64_t> sizes;
  if (!output_sizes(p, std::vector<int64_t>(x.begin(), x.end()), &sizes)) return MX_FAIL;
  std::vector<unsigned int> w = {static_cast<unsigned int>(p.num_filter), x[1] / static_cast<unsigned int>(p.num_group)};
  std::vector<unsigned int> y = {x[0], static_cast<unsigned int>(p.num_filter)};
  for (int i = 0; i < p.spatial(); ++i) {
    w.push_back(static_cast<unsigned int>(p.kernel[i]));
    y.push_back(static_cast<unsigned int>(sizes[i]));
  }
  if (!expect_shape(in, 1, w, "weight")) return MX_FAIL;
  if (!p.no_bias && !expect_shape(in, 2, {static_cast<unsigned int>(p.num_filter)}, "bias")) return MX_FAIL;
  if (p.with_sum && !expect_shape(in, in->size() - 1, y, "the addend")) return MX_FAIL;
  (*out)[0] = y;
  return MX_SUCCESS;
}

// The call's geometry from the attributes and the data's shape.
AmpConv describe(const ConvParams& p, const MXTensor& x, int pass) {
  AmpConv c;
  std::memset(&c, 0, sizeof(c));
  c.pass = pass;
  c.spatial = p.spatial();
  c.batch = x.shape[0];
  c.in_channels = x.shape[1];
  c.out_channels = p.num_filter;
  c.groups = p.num_group;
  std::vector<int64_t> sizes;
  output_sizes(p, x.shape, &sizes);
  for (int i = 0; i < c.spatial; ++i) {
    c.in_size[i] = x.shape[i + 2];
    c.out_size[i] = sizes[i];
    c.kernel[i] = p.kernel[i];
    c.stride[i] = p.stride[i];
    c.dilate[i] = p.dilate[i];
    c.pad[i] = p.pad[i];
  }
  c.dtype = static_cast<int>(x.dtype);
  c.bias_dtype = -1;
  return c;
}

bool convolve(const AmpConv& c) {
  AmpConvFn fn = onednn_conv();
  if (fn == nullptr) {
    MX_ERROR_MSG << kConv << ": oneDNN 3 kernels unavailable: " << onednn_info();
    return false;
  }
  char error[512] = {0};
  if (fn(&c, error, sizeof(error)) != 0) {
    MX_ERROR_MSG << kConv << ": " << error;
    return false;
  }
  return true;
}

MXReturnValue conv_forward(const Attrs& attrs, std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                           const OpResource& res) {
  ConvParams p;
  if (!parse_conv(attrs, &p)) return MX_FAIL;
  const MXTensor& x = (*inputs)[0];
  MXTensor& y = (*outputs)[0];
  if (y.size() == 0) return MX_SUCCESS;
  AmpConv c = describe(p, x, AMP_CONV_FORWARD);
  c.out_dtype = static_cast<int>(y.dtype);
  c.relu = p.relu;
  c.data = x.data_ptr;
  c.weight = (*inputs)[1].data_ptr;
  if (!p.no_bias) {
    c.bias = (*inputs)[2].data_ptr;
    c.bias_dtype = static_cast<int>((*inputs)[2].dtype);
  }
  if (p.with_sum) c.addend = inputs->back().data_ptr;
  c.out = y.data_ptr;
  return convolve(c) ? MX_SUCCESS : MX_FAIL;
}

MXReturnValue conv_backward(const Attrs& attrs, std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                            const OpResource& res) {
  ConvParams p;
  if (!parse_conv(attrs, &p)) return MX_FAIL;
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
  // dy, where a fused ReLU's output is positive (else 0), in the operands' dtype
  void* g = p.relu ? relu_masked(dy, inputs->back(), dt, &keep) : in_dtype(dy, dt, &keep);
  AmpConv c = describe(p, x, AMP_CONV_BACKWARD_DATA);
  c.diff_dst = g;
  c.weight = (*inputs)[2].data_ptr;
  c.out = dx.data_ptr;
  c.out_dtype = static_cast<int>(dx.dtype);
  if (!convolve(c)) return MX_FAIL;
  c = describe(p, x, AMP_CONV_BACKWARD_WEIGHTS);
  c.diff_dst = g;
  c.data = x.data_ptr;
  c.out = dw.data_ptr;
  c.out_dtype = static_cast<int>(dw.dtype);
  if (!p.no_bias) {
    c.diff_bias = (*outputs)[2].data_ptr;
    c.bias_dtype = static_cast<int>((*outputs)[2].dtype);
  }
  if (!convolve(c)) return MX_FAIL;
  if (p.with_sum) {  // the addend's gradient: dy through the ReLU
    MXTensor& da = outputs->back();
    for (int64_t i = 0; i < da.size(); ++i) store(da.data_ptr, static_cast<int>(da.dtype), i, load(g, dt, i));
  }
  return MX_SUCCESS;
}

}  // namespace
}  // namespace mxnet_amp

REGISTER_OP(amp_convolution)
    .setParseAttrs(mxnet_amp::conv_parse)
    .setInferType(mxnet_amp::conv_infer_type)
    .setInferShape(mxnet_amp::conv_infer_shape)
    .setForward(mxnet_amp::conv_forward, "cpu")
    .setBackward(mxnet_amp::conv_backward, "cpu");
