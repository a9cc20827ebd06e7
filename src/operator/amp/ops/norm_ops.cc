/*!
 * \file norm_ops.cc
 * \brief lib_api glue for the last-axis normalisations: amp_layer_norm (LayerNorm, _npx_layer_norm), amp_softmax
 *        (softmax, _npx_softmax) and amp_log_softmax (log_softmax, _npx_log_softmax) on float32 or bfloat16 data
 *        with float32 statistics, so that a bfloat16 graph keeps them in bfloat16 instead of a float32 island
 *        between casts.
 *
 * amp_layer_norm: inputs data (float32 or bfloat16), gamma, beta (float32, (last axis,)); output in dtype
 * (float32 or bfloat16; absent or None: the data's). Attributes as LayerNorm's: axis (-1 or the last axis), eps
 * (1e-5), output_mean_var (False only); and dtype.
 * Forward: oneDNN 3's layer normalisation (onednn/api.h). Backward: inputs [dy, data, gamma, beta, y], outputs
 * [dx (the data's dtype), dgamma, dbeta (float32)]; the row statistics are recomputed from data
 * (kernels/rows.h: one read of it) rather than kept, since lib_api 11 has no hidden outputs.
 *
 * amp_softmax / amp_log_softmax: inputs data (float32 or bfloat16) and, with use_length=True, length (int32 or
 * int64, data's shape without the last axis: the valid prefix of each row; 0 beyond it, as MXNet's). Output in
 * dtype (float32 or bfloat16; absent or None: the data's). Attributes as softmax's: axis (-1 or the last axis),
 * temperature (None: 1), dtype, use_length. Forward: the library's row kernels (kernels/rows.h). Backward: oneDNN
 * 3's softmax (softmax_accurate, softmax_log) without lengths and temperature, the row kernels otherwise or where
 * oneDNN 3 is unavailable or has no bfloat16 primitives (its backward is a reference kernel there).
 * Backward: inputs [dy, data, (length,) y], outputs [ddata (the data's dtype), (zeros for length)].
 */
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "../kernels/rows.h"
#include "onednn_glue.h"
#include "onednn_loader.h"

namespace mxnet_amp {
namespace {

constexpr char kLayerNorm[] = "amp_layer_norm";
constexpr char kSoftmax[] = "amp_softmax";
constexpr char kLogSoftmax[] = "amp_log_softmax";
constexpr int kInt32 = mxnet::ext::kInt32;
constexpr int kInt64 = mxnet::ext::kInt64;

// ---- shared: the axis, data dtypes, rows x cols ------------------------------------------------------------

bool parse_axis(const char* op, const Attrs& attrs, long* axis) {
  const auto it = attrs.find("axis");
  *axis = -1;
  if (it == attrs.end()) return true;
  char* end = nullptr;
  const long v = std::strtol(it->second.c_str(), &end, 10);
  if (end == it->second.c_str() || *end != '\0') {
    MX_ERROR_MSG << op << ": attribute axis must be an integer (got '" << it->second << "')";
    return false;
  }
  *axis = v;
  return true;
}

// The data's rank allows the axis: the last one only (-1 or ndim - 1).
bool check_last_axis(const char* op, long axis, size_t ndim) {
  if (ndim == 0) {
    MX_ERROR_MSG << op << ": input 0 (data) must have at least one dimension";
    return false;
  }
  if (axis != -1 && axis != static_cast<long>(ndim) - 1) {
    MX_ERROR_MSG << op << ": attribute axis must be -1 or " << ndim - 1 << " (the last axis of data of " << ndim
                 << " dimensions; got " << axis << "); other axes: use MXNet's op";
    return false;
  }
  return true;
}

void rows_cols(const MXTensor& t, int64_t* rows, int64_t* cols) {
  *cols = t.shape.empty() ? 1 : t.shape.back();
  *rows = *cols == 0 ? 0 : t.size() / *cols;
}

// ---- amp_layer_norm ---------------------------------------------------------------------------------------------

struct NormParams {
  long axis = -1;
  float eps = 1e-5f;
  int dtype = -1;  // the output's; -1: the data's
};

bool parse_norm(const Attrs& attrs, NormParams* p) {
  bool output_mean_var = false;
  if (!parse_axis(kLayerNorm, attrs, &p->axis) || !parse_output_dtype(kLayerNorm, attrs, &p->dtype) || !parse_float(kLayerNorm, attrs, "eps", 1e-5f, &p->eps) ||
      !parse_bool(kLayerNorm, attrs, "output_mean_var", false, &output_mean_var)) {
    return false;
  }
  if (output_mean_var) {
    MX_ERROR_MSG << kLayerNorm << ": output_mean_var=True is not supported (use MXNet's LayerNorm)";
    return false;
  }
  if (!(p->eps >= 0.0f)) {
    MX_ERROR_MSG << kLayerNorm << ": attribute eps must be >= 0 (got " << p->eps << ")";
    return false;
  }
  return true;
}

MXReturnValue norm_parse(const Attrs& attrs, int* num_in, int* num_out) {
  NormParams p;
  if (!parse_norm(attrs, &p)) return MX_FAIL;
  *num_in = 3;
  *num_out = 1;
  return MX_SUCCESS;
}

MXReturnValue norm_infer_type(const Attrs& attrs, std::vector<int>* in, std::vector<int>* out) {
  NormParams p;
  if (!parse_norm(attrs, &p) || !check_data_dtype(kLayerNorm, &(*in)[0])) return MX_FAIL;
  static const char* const roles[] = {"data", "gamma", "beta"};
  for (int i = 1; i < 3; ++i) {
    int& t = (*in)[i];
    if (t == -1) t = kFloat32;
    if (t != kFloat32) {
      MX_ERROR_MSG << kLayerNorm << ": input " << i << " (" << roles[i] << ") must be float32 (got "
                   << dtype_name(t) << ")";
      return MX_FAIL;
    }
  }
  (*out)[0] = p.dtype == -1 ? (*in)[0] : p.dtype;
  return MX_SUCCESS;
}

MXReturnValue norm_infer_shape(const Attrs& attrs, Shapes* in, Shapes* out) {
  NormParams p;
  if (!parse_norm(attrs, &p) || !check_last_axis(kLayerNorm, p.axis, (*in)[0].size())) return MX_FAIL;
  const std::vector<unsigned int> params = {(*in)[0].back()};
  static const char* const roles[] = {"data", "gamma", "beta"};
  for (int i = 1; i < 3; ++i) {
    std::vector<unsigned int>& got = (*in)[i];
    if (got.empty()) got = params;
    if (got != params) {
      MX_ERROR_MSG << kLayerNorm << ": input " << i << " (" << roles[i] << ") must have shape (" << params[0]
                   << ",), the size of data's last axis (got " << got.size() << " dimensions)";
      return MX_FAIL;
    }
  }
  (*out)[0] = (*in)[0];
  return MX_SUCCESS;
}

bool run_norm(const AmpLayerNorm& n) {
  AmpLayerNormFn fn = onednn_layer_norm();
  if (fn == nullptr) {
    MX_ERROR_MSG << kLayerNorm << ": oneDNN 3 kernels unavailable: " << onednn_info();
    return false;
  }
  char error[512] = {0};
  if (fn(&n, error, sizeof(error)) != 0) {
    MX_ERROR_MSG << kLayerNorm << ": " << error;
    return false;
  }
  return true;
}

MXReturnValue norm_forward(const Attrs& attrs, std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                           const OpResource& res) {
  NormParams p;
  const MXTensor& x = (*inputs)[0];
  if (!parse_norm(attrs, &p) || !check_cpu(kLayerNorm, *inputs)) return MX_FAIL;
  AmpLayerNorm n = {};
  rows_cols(x, &n.rows, &n.cols);
  if (n.rows == 0) return MX_SUCCESS;
  n.pass = AMP_ROWS_FORWARD;
  n.src_dtype = static_cast<int>(x.dtype);
  n.dst_dtype = static_cast<int>((*outputs)[0].dtype);
  n.eps = p.eps;
  n.src = x.data_ptr;
  n.scale = (*inputs)[1].data<float>();
  n.shift = (*inputs)[2].data<float>();
  n.dst = (*outputs)[0].data_ptr;
  return run_norm(n) ? MX_SUCCESS : MX_FAIL;
}

MXReturnValue norm_backward(const Attrs& attrs, std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                            const OpResource& res) {
  NormParams p;
  const MXTensor& x = (*inputs)[1];
  if (!parse_norm(attrs, &p) || !check_cpu(kLayerNorm, *inputs)) return MX_FAIL;
  AmpLayerNorm n = {};
  rows_cols(x, &n.rows, &n.cols);
  if (n.rows == 0) {
    for (MXTensor& g : *outputs) zero(&g);
    return MX_SUCCESS;
  }
  n.pass = AMP_ROWS_BACKWARD;
  n.src_dtype = n.dst_dtype = static_cast<int>(x.dtype);
  n.eps = p.eps;
  n.src = x.data_ptr;
  n.scale = (*inputs)[2].data<float>();
  n.shift = (*inputs)[3].data<float>();
  Scratch keep;
  float* stats = static_cast<float*>(scratch(&keep, 2 * n.rows));
  {
    const CallTeam team;
    cpu_row_moments(x.data_ptr, n.src_dtype, n.rows, n.cols, stats, stats + n.rows, team.threads());
  }
  n.mean = stats;
  n.variance = stats + n.rows;
  n.diff_dst = in_dtype((*inputs)[0], n.src_dtype, &keep);  // dy has the output's dtype
  n.diff_src = (*outputs)[0].data_ptr;
  n.diff_scale = (*outputs)[1].data<float>();
  n.diff_shift = (*outputs)[2].data<float>();
  return run_norm(n) ? MX_SUCCESS : MX_FAIL;
}

// ---- amp_softmax, amp_log_softmax ---------------------------------------------------------------------------

struct SoftmaxParams {
  long axis = -1;
  double temperature = 1.0;
  int dtype = -1;  // the output's; -1: the data's
  bool use_length = false;
};

bool parse_softmax(const char* op, const Attrs& attrs, SoftmaxParams* p) {
  const auto t = attrs.find("temperature");
  const auto u = attrs.find("use_length");
  Attrs given = attrs;  // "None" means the default for these two
  if (t != attrs.end() && t->second == "None") given.erase("temperature");
  if (u != attrs.end() && u->second == "None") given.erase("use_length");
  if (!parse_axis(op, attrs, &p->axis) || !parse_output_dtype(op, attrs, &p->dtype) || !parse_double(op, given, "temperature", 1.0, &p->temperature) ||
      !parse_bool(op, given, "use_length", false, &p->use_length)) {
    return false;
  }
  if (!(p->temperature != 0.0) || !std::isfinite(p->temperature)) {
    MX_ERROR_MSG << op << ": attribute temperature must be a finite non-zero number (got " << p->temperature << ")";
    return false;
  }
  if (p->use_length && op == kLogSoftmax) {
    MX_ERROR_MSG << op << ": use_length=True is not supported (MXNet's log_softmax takes no length input)";
    return false;
  }
  return true;
}

template <const char* kOp>
MXReturnValue softmax_parse(const Attrs& attrs, int* num_in, int* num_out) {
  SoftmaxParams p;
  if (!parse_softmax(kOp, attrs, &p)) return MX_FAIL;
  *num_in = p.use_length ? 2 : 1;
  *num_out = 1;
  return MX_SUCCESS;
}

template <const char* kOp>
MXReturnValue softmax_infer_type(const Attrs& attrs, std::vector<int>* in, std::vector<int>* out) {
  SoftmaxParams p;
  if (!parse_softmax(kOp, attrs, &p) || !check_data_dtype(kOp, &(*in)[0])) return MX_FAIL;
  if (p.use_length) {
    int& t = (*in)[1];
    if (t == -1) t = kInt32;
    if (t != kInt32 && t != kInt64) {
      MX_ERROR_MSG << kOp << ": input 1 (length) must be int32 or int64 (got dtype code " << t << ")";
      return MX_FAIL;
    }
  }
  (*out)[0] = p.dtype == -1 ? (*in)[0] : p.dtype;
  return MX_SUCCESS;
}

template <const char* kOp>
MXReturnValue softmax_infer_shape(const Attrs& attrs, Shapes* in, Shapes* out) {
  SoftmaxParams p;
  const std::vector<unsigned int>& x = (*in)[0];
  if (!parse_softmax(kOp, attrs, &p) || !check_last_axis(kOp, p.axis, x.size())) return MX_FAIL;
  if (p.use_length) {
    const std::vector<unsigned int> want(x.begin(), x.end() - 1);
    std::vector<unsigned int>& got = (*in)[1];
    if (got.empty() && !want.empty()) got = want;
    if (got != want) {
      MX_ERROR_MSG << kOp << ": input 1 (length) must have data's shape without its last axis (" << want.size()
                   << " dimensions; got " << got.size() << ")";
      return MX_FAIL;
    }
  }
  (*out)[0] = x;
  return MX_SUCCESS;
}

// Forward: the row kernels (faster than oneDNN 3.2's softmax on float32 and bfloat16, and one rounding of a bfloat16
// output where oneDNN's is off by up to 1.84 ulps; bench/bench_norms.py). Backward: oneDNN's where it serves (no
// lengths, temperature 1: twice the row kernels' speed on bfloat16) and has bfloat16 primitives, else the row kernels
// (below avx512_core oneDNN 3.2's softmax backward is its reference kernel: a BERT-style encoder's attention
// gradient, 12288 rows of 128, took 22 ms there, plus float32 copies of three tensors).
bool run_softmax(const char* op, const SoftmaxParams& p, SoftmaxRows* s, bool forward) {
  AmpSoftmaxFn fn = onednn_softmax();
  if (fn != nullptr && onednn_bf16_primitives() && !forward && s->lengths == nullptr && p.temperature == 1.0) {
    AmpSoftmax a = {forward ? AMP_ROWS_FORWARD : AMP_ROWS_BACKWARD, s->log ? 1 : 0, s->src_dtype, s->dst_dtype,
                    s->rows, s->cols, s->src, s->dst, s->diff_dst, s->diff_src};
    char error[512] = {0};
    if (fn(&a, error, sizeof(error)) != 0) {
      MX_ERROR_MSG << op << ": " << error;
      return false;
    }
    return true;
  }
  const CallTeam team;
  s->temperature = static_cast<float>(p.temperature);
  s->threads = team.threads();
  if (forward) {
    cpu_softmax_forward(*s);
  } else {
    cpu_softmax_backward(*s);
  }
  return true;
}

template <const char* kOp>
MXReturnValue softmax_forward(const Attrs& attrs, std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                              const OpResource& res) {
  SoftmaxParams p;
  const MXTensor& x = (*inputs)[0];
  if (!parse_softmax(kOp, attrs, &p) || !check_cpu(kOp, *inputs)) return MX_FAIL;
  SoftmaxRows s;
  rows_cols(x, &s.rows, &s.cols);
  if (s.rows == 0) return MX_SUCCESS;
  s.log = kOp == kLogSoftmax;
  s.src_dtype = static_cast<int>(x.dtype);
  s.dst_dtype = static_cast<int>((*outputs)[0].dtype);
  s.src = x.data_ptr;
  s.dst = (*outputs)[0].data_ptr;
  if (p.use_length) {
    s.lengths = (*inputs)[1].data_ptr;
    s.length_bytes = (*inputs)[1].dtype == kInt64 ? 8 : 4;
  }
  return run_softmax(kOp, p, &s, true) ? MX_SUCCESS : MX_FAIL;
}

template <const char* kOp>
MXReturnValue softmax_backward(const Attrs& attrs, std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                               const OpResource& res) {
  SoftmaxParams p;
  if (!parse_softmax(kOp, attrs, &p) || !check_cpu(kOp, *inputs)) return MX_FAIL;
  const MXTensor& x = (*inputs)[1];
  const MXTensor& y = inputs->back();
  if (p.use_length) {  // no gradient for the lengths
    MXTensor& dl = (*outputs)[1];
    std::memset(dl.data_ptr, 0, dl.size() * (dl.dtype == kInt64 ? 8 : 4));
  }
  SoftmaxRows s;
  rows_cols(x, &s.rows, &s.cols);
  if (s.rows == 0) return MX_SUCCESS;
  Scratch keep;
  s.log = kOp == kLogSoftmax;
  s.src_dtype = static_cast<int>((*outputs)[0].dtype);
  s.dst_dtype = static_cast<int>(y.dtype);
  s.dst = y.data_ptr;
  s.diff_dst = in_dtype((*inputs)[0], s.dst_dtype, &keep);
  s.diff_src = (*outputs)[0].data_ptr;
  if (p.use_length) {
    s.lengths = (*inputs)[2].data_ptr;
    s.length_bytes = (*inputs)[2].dtype == kInt64 ? 8 : 4;
  }
  return run_softmax(kOp, p, &s, false) ? MX_SUCCESS : MX_FAIL;
}

}  // namespace
}  // namespace mxnet_amp

REGISTER_OP(amp_layer_norm)
    .setParseAttrs(AMP_GUARDED(mxnet_amp::norm_parse))
    .setInferType(AMP_GUARDED(mxnet_amp::norm_infer_type))
    .setInferShape(AMP_GUARDED(mxnet_amp::norm_infer_shape))
    .setForward(AMP_GUARDED(mxnet_amp::norm_forward), "cpu")
    .setBackward(AMP_GUARDED(mxnet_amp::norm_backward), "cpu");

REGISTER_OP(amp_softmax)
    .setParseAttrs(AMP_GUARDED(mxnet_amp::softmax_parse<mxnet_amp::kSoftmax>))
    .setInferType(AMP_GUARDED(mxnet_amp::softmax_infer_type<mxnet_amp::kSoftmax>))
    .setInferShape(AMP_GUARDED(mxnet_amp::softmax_infer_shape<mxnet_amp::kSoftmax>))
    .setForward(AMP_GUARDED(mxnet_amp::softmax_forward<mxnet_amp::kSoftmax>), "cpu")
    .setBackward(AMP_GUARDED(mxnet_amp::softmax_backward<mxnet_amp::kSoftmax>), "cpu");

REGISTER_OP(amp_log_softmax)
    .setParseAttrs(AMP_GUARDED(mxnet_amp::softmax_parse<mxnet_amp::kLogSoftmax>))
    .setInferType(AMP_GUARDED(mxnet_amp::softmax_infer_type<mxnet_amp::kLogSoftmax>))
    .setInferShape(AMP_GUARDED(mxnet_amp::softmax_infer_shape<mxnet_amp::kLogSoftmax>))
    .setForward(AMP_GUARDED(mxnet_amp::softmax_forward<mxnet_amp::kLogSoftmax>), "cpu")
    .setBackward(AMP_GUARDED(mxnet_amp::softmax_backward<mxnet_amp::kLogSoftmax>), "cpu");
