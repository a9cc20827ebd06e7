/*!
 * \file matmul_ops.cc
 * \brief lib_api glue for the oneDNN 3 matrix products: amp_fully_connected (FullyConnected),
 *        amp_batch_dot (batch_dot, _npx_batch_dot) and amp_matmul (_npi_matmul: NumPy broadcasting).
 *
 * Operands are float32 or bfloat16 (both the same), products accumulate in float32, and the output has
 * the operands' dtype unless the attribute out_dtype (float32 or bfloat16) says otherwise. Attributes are
 * those of the MXNet op each one replaces, so the graph rewriter only renames the node. amp_fully_connected
 * also takes oneDNN post-ops that inference graphs fuse into it (amp_batch_dot and amp_matmul a scale, alpha: a
 * scalar multiplication or division of their output, folded in):
 *   with_sum=True    one more input, the addend (the output's dtype and shape), added after the bias (a
 *                    residual sum; its gradient is dy through the activation);
 *   act_type         "relu" (the gradient masks dy) or "gelu" (erf, as LeakyReLU's; inference only: no
 *                    gradient), applied last.
 * amp_fully_connected's param_dtype="float32" (training graphs) keeps weight and bias float32 beside bfloat16 data:
 * the weight is converted into a per-call buffer, forward and backward, and the weight and bias gradients are
 * written in float32 (no saved low precision copy of the weight, no cast's backward).
 *
 * Every product, gradients included, is one call of a strided matmul (onednn/api.h): a transposed
 * operand is a view with swapped strides, never a copy. An output stored transposed is computed as
 * C^T = B^T A^T. Gradients of operands broadcast over batch dimensions are summed in float32.
 * Backward: inputs [dy, inputs..., y], outputs [gradient of each input], in the inputs' dtypes.
 */
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "onednn_glue.h"
#include "onednn_loader.h"

namespace mxnet_amp {
namespace {

constexpr char kFC[] = "amp_fully_connected";
constexpr char kBatchDot[] = "amp_batch_dot";
constexpr char kMatmul[] = "amp_matmul";

// ---- attributes -----------------------------------------------------------------------------------

struct FCParams {
  long num_hidden = 0;
  bool no_bias = false, flatten = true, with_sum = false;
  int act = AMP_ACT_NONE;
  int out_dtype = -1, param_dtype = -1;

  int num_inputs() const { return 2 + !no_bias + with_sum; }
};

bool parse_fc(const Attrs& attrs, FCParams* p) {
  const auto act = attrs.find("act_type");
  if (act != attrs.end()) {
    if (act->second == "relu") {
      p->act = AMP_ACT_RELU;
    } else if (act->second == "gelu") {
      p->act = AMP_ACT_GELU;
    } else {
      MX_ERROR_MSG << kFC << ": attribute act_type must be relu or gelu (got '" << act->second << "')";
      return false;
    }
  }
  return parse_int(kFC, attrs, "num_hidden", 1, &p->num_hidden) &&
         parse_bool(kFC, attrs, "no_bias", false, &p->no_bias) &&
         parse_bool(kFC, attrs, "flatten", true, &p->flatten) &&
         parse_bool(kFC, attrs, "with_sum", false, &p->with_sum) && parse_out_dtype(kFC, attrs, &p->out_dtype) &&
         parse_param_dtype(kFC, attrs, &p->param_dtype);
}

// The activation of a fused act_type on one value (the empty product's path).
float activate(int act, float v) {
  if (act == AMP_ACT_RELU) return v < 0.f ? 0.f : v;
  if (act == AMP_ACT_GELU) return 0.5f * v * (1.f + std::erf(v * 0.70710678118654752f));
  return v;
}

struct DotParams {
  bool transpose_a = false, transpose_b = false;
  int out_dtype = -1;
  float alpha = 1.f;  // the product's scale (a scalar factor folded in: attention's 1 / sqrt(d))

  Epilogue epilogue() const {
    Epilogue e;
    e.alpha = alpha;
    return e;
  }
};

bool parse_dot(const char* op, const Attrs& attrs, DotParams* p) {
  if (!parse_float(op, attrs, "alpha", 1.f, &p->alpha) || !parse_out_dtype(op, attrs, &p->out_dtype)) return false;
  if (op == kMatmul) return true;
  return parse_bool(op, attrs, "transpose_a", false, &p->transpose_a) &&
         parse_bool(op, attrs, "transpose_b", false, &p->transpose_b);
}

// ---- amp_fully_connected ----------------------------------------------------------------------------

MXReturnValue fc_parse(const Attrs& attrs, int* num_in, int* num_out) {
  FCParams p;
  if (!parse_fc(attrs, &p)) return MX_FAIL;
  *num_in = p.num_inputs();
  *num_out = 1;
  return MX_SUCCESS;
}

MXReturnValue fc_infer_type(const Attrs& attrs, std::vector<int>* in, std::vector<int>* out) {
  FCParams p;
  if (!parse_fc(attrs, &p)) return MX_FAIL;
  if (!p.with_sum) return infer_data_param_types(kFC, p.out_dtype, p.param_dtype, in, out);
  std::vector<int> operands(in->begin(), in->end() - 1);
  if (infer_data_param_types(kFC, p.out_dtype, p.param_dtype, &operands, out) != MX_SUCCESS) return MX_FAIL;
  int& addend = in->back();
  std::copy(operands.begin(), operands.end(), in->begin());
  if (addend == -1) addend = (*out)[0];
  if (addend != (*out)[0]) {
    MX_ERROR_MSG << kFC << ": the addend has dtype " << dtype_name(addend) << "; it must have the output's, "
                 << dtype_name((*out)[0]);
    return MX_FAIL;
  }
  return MX_SUCCESS;
}

MXReturnValue fc_infer_shape(const Attrs& attrs, Shapes* in, Shapes* out) {
  FCParams p;
  if (!parse_fc(attrs, &p)) return MX_FAIL;
  const auto& x = (*in)[0];
  if (x.empty()) {
    MX_ERROR_MSG << kFC << ": the data shape must be known";
    return MX_FAIL;
  }
  unsigned int k = 1;
  std::vector<unsigned int> y;
  if (p.flatten) {
    for (size_t i = 1; i < x.size(); ++i) k *= x[i];
    y = {x[0], static_cast<unsigned int>(p.num_hidden)};
  } else {
    k = x.back();
    y.assign(x.begin(), x.end() - 1);
    y.push_back(static_cast<unsigned int>(p.num_hidden));
  }
  const std::vector<unsigned int> w = {static_cast<unsigned int>(p.num_hidden), k};
  if ((*in)[1].empty()) (*in)[1] = w;
  if ((*in)[1] != w) {
    MX_ERROR_MSG << kFC << ": weight must have shape (" << p.num_hidden << ", " << k << ") for data of "
                 << "this shape (num_hidden=" << p.num_hidden << ", flatten=" << p.flatten << ")";
    return MX_FAIL;
  }
  if (!p.no_bias) {
    const std::vector<unsigned int> b = {static_cast<unsigned int>(p.num_hidden)};
    if ((*in)[2].empty()) (*in)[2] = b;
    if ((*in)[2] != b) {
      MX_ERROR_MSG << kFC << ": bias must have shape (" << p.num_hidden << ",)";
      return MX_FAIL;
    }
  }
  if (p.with_sum) {
    auto& addend = in->back();
    if (addend.empty()) addend = y;
    if (addend != y) {
      MX_ERROR_MSG << kFC << ": the addend must have the output's shape";
      return MX_FAIL;
    }
  }
  (*out)[0] = y;
  return MX_SUCCESS;
}

// data as (M, K), weight (N, K).
void fc_dims(const MXTensor& x, const MXTensor& w, int64_t* m, int64_t* k, int64_t* n) {
  *n = w.shape[0];
  *k = w.shape[1];
  *m = *k == 0 ? 0 : x.size() / *k;
}

MXReturnValue fc_forward(const Attrs& attrs, std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                         const OpResource& res) {
  FCParams p;
  if (!parse_fc(attrs, &p)) return MX_FAIL;
  const MXTensor& x = (*inputs)[0];
  const MXTensor& w = (*inputs)[1];
  MXTensor& y = (*outputs)[0];
  int64_t m, k, n;
  fc_dims(x, w, &m, &k, &n);
  if (m == 0 || n == 0) return MX_SUCCESS;
  const int dt = static_cast<int>(x.dtype);
  const View xv = contiguous(x.data_ptr, dt, {m, k});
  int wdt;
  void* wp = weight_in_dtype(w, dt, &wdt);  // float32 parameters: converted per call (or read as they are)
  const View wv = contiguous(wp, wdt, {n, k});
  const View yv = contiguous(y.data_ptr, static_cast<int>(y.dtype), {m, n});
  Epilogue e;
  e.bias = p.no_bias ? nullptr : (*inputs)[2].data_ptr;
  e.bias_dtype = p.no_bias ? -1 : static_cast<int>((*inputs)[2].dtype);
  e.addend = p.with_sum ? inputs->back().data_ptr : nullptr;
  e.act = p.act;
  if (k == 0) {  // empty sum: bias + addend (or zeros)
    for (int64_t i = 0; i < m * n; ++i) {
      float v = e.bias ? load(e.bias, e.bias_dtype, i % n) : 0.f;
      if (e.addend) v += load(e.addend, yv.dtype, i);
      store(y.data_ptr, yv.dtype, i, activate(p.act, v));
    }
    return MX_SUCCESS;
  }
  return gemm(kFC, xv, wv.t(), yv, e) ? MX_SUCCESS : MX_FAIL;
}

MXReturnValue fc_backward(const Attrs& attrs, std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                          const OpResource& res) {
  FCParams p;
  if (!parse_fc(attrs, &p)) return MX_FAIL;
  if (p.act == AMP_ACT_GELU) {
    MX_ERROR_MSG << kFC << ": act_type gelu is fused into inference graphs only; it has no gradient (use "
                 << "LeakyReLU(act_type='gelu') after the product to train)";
    return MX_FAIL;
  }
  const MXTensor& x = (*inputs)[1];
  const MXTensor& w = (*inputs)[2];
  int64_t m, k, n;
  fc_dims(x, w, &m, &k, &n);
  const int dt = static_cast<int>(x.dtype);
  MXTensor& dx = (*outputs)[0];
  MXTensor& dw = (*outputs)[1];
  const bool relu = p.act == AMP_ACT_RELU;
  if (m == 0 || n == 0 || k == 0) {
    for (MXTensor& g : *outputs) zero(&g);
    if (m == 0 || n == 0 || (p.no_bias && !p.with_sum)) return MX_SUCCESS;
  }
  const MXTensor& dy_t = (*inputs)[0];
  Scratch keep;
  // dy, where a fused ReLU's output is positive (else 0), in the operands' dtype
  void* g = relu ? relu_masked(dy_t, inputs->back(), dt, INFINITY, &keep) : in_dtype(dy_t, dt, &keep);
  // what the bias and addend gradients read: dy as given, unless masked
  const void* g_sum = relu ? g : dy_t.data_ptr;
  const int g_sum_dtype = relu ? dt : static_cast<int>(dy_t.dtype);
  if (p.with_sum) {
    MXTensor& da = outputs->back();
    const CallTeam team;
    convert_into(da.data_ptr, static_cast<int>(da.dtype), g_sum, g_sum_dtype, da.size(), team.threads());
  }
  const View dy = contiguous(g, dt, {m, n});
  if (k > 0) {
    const View xv = contiguous(x.data_ptr, dt, {m, k});
    int wdt;
    void* wp = weight_in_dtype(w, dt, &wdt);
    const View wv = contiguous(wp, wdt, {n, k});
    if (!gemm(kFC, dy, wv, contiguous(dx.data_ptr, static_cast<int>(dx.dtype), {m, k})) ||
        !gemm(kFC, dy.t(), xv, contiguous(dw.data_ptr, static_cast<int>(dw.dtype), {n, k}))) {
      return MX_FAIL;
    }
  }
  if (!p.no_bias) {  // column sums of dy, float32
    MXTensor& db = (*outputs)[2];
    const CallTeam team;
    column_sums(db.data_ptr, static_cast<int>(db.dtype), g_sum, g_sum_dtype, m, n, team.threads());
  }
  return MX_SUCCESS;
}

// ---- amp_batch_dot and amp_matmul -----------------------------------------------------------------

// The logical operands (batch..., M, K) and (batch..., K, N) and the output (batch..., M, N), batch
// dimensions padded to one count. batch_dot: equal batch dimensions, transposes folded into strides;
// matmul: NumPy rules (1-D operands promoted, batch dimensions broadcast).
struct Problem {
  View a, b, c;
  std::vector<int64_t> out_shape;
};

bool make_problem(const char* op, const DotParams& p, const std::vector<int64_t>& sa,
                  const std::vector<int64_t>& sb, Problem* pr, std::string* error) {
  std::vector<int64_t> da = sa, db = sb;
  const bool numpy = op == kMatmul;
  if (da.empty() || db.empty()) {
    *error = "operands must have at least one dimension";
    return false;
  }
  if (numpy) {
    if (da.size() == 1) da.insert(da.begin(), 1);
    if (db.size() == 1) db.push_back(1);
  } else if (da.size() < 3 || da.size() != db.size()) {
    *error = "operands must have the same number (>= 3) of dimensions";
    return false;
  }
  const size_t nd = std::max(da.size(), db.size());
  if (nd > static_cast<size_t>(kMaxDims)) {
    *error = "at most " + std::to_string(kMaxDims) + " dimensions are supported";
    return false;
  }
  da.insert(da.begin(), nd - da.size(), 1);
  db.insert(db.begin(), nd - db.size(), 1);
  pr->a = contiguous(nullptr, kFloat32, da);
  pr->b = contiguous(nullptr, kFloat32, db);
  if (p.transpose_a) pr->a = pr->a.t();
  if (p.transpose_b) pr->b = pr->b.t();
  const int nb = static_cast<int>(nd) - 2;
  if (pr->a.cols() != pr->b.rows()) {
    *error = "inner dimensions differ (" + std::to_string(pr->a.cols()) + " vs " +
             std::to_string(pr->b.rows()) + ")";
    return false;
  }
  std::vector<int64_t> dc(nd);
  for (int i = 0; i < nb; ++i) {
    const int64_t x = pr->a.dims[i], y = pr->b.dims[i];
    if (x != y && (!numpy || (x != 1 && y != 1))) {
      *error = "batch dimension " + std::to_string(i) + " differs (" + std::to_string(x) + " vs " +
               std::to_string(y) + ")";
      return false;
    }
    dc[i] = std::max(x, y);
  }
  dc[nb] = pr->a.rows();
  dc[nb + 1] = pr->b.cols();
  pr->c = contiguous(nullptr, kFloat32, dc);
  pr->out_shape.assign(dc.begin(), dc.begin() + nb);
  if (!numpy || sa.size() > 1) pr->out_shape.push_back(dc[nb]);
  if (!numpy || sb.size() > 1) pr->out_shape.push_back(dc[nb + 1]);
  return true;
}

template <const char* kOp>
MXReturnValue dot_parse(const Attrs& attrs, int* num_in, int* num_out) {
  DotParams p;
  if (!parse_dot(kOp, attrs, &p)) return MX_FAIL;
  *num_in = 2;
  *num_out = 1;
  return MX_SUCCESS;
}

template <const char* kOp>
MXReturnValue dot_infer_type(const Attrs& attrs, std::vector<int>* in, std::vector<int>* out) {
  DotParams p;
  if (!parse_dot(kOp, attrs, &p)) return MX_FAIL;
  return infer_operand_types(kOp, p.out_dtype, in, out);
}

template <const char* kOp>
MXReturnValue dot_infer_shape(const Attrs& attrs, Shapes* in, Shapes* out) {
  DotParams p;
  if (!parse_dot(kOp, attrs, &p)) return MX_FAIL;
  Problem pr;
  std::string error;
  if (!make_problem(kOp, p, std::vector<int64_t>((*in)[0].begin(), (*in)[0].end()),
                    std::vector<int64_t>((*in)[1].begin(), (*in)[1].end()), &pr, &error)) {
    MX_ERROR_MSG << kOp << ": " << error;
    return MX_FAIL;
  }
  (*out)[0].assign(pr.out_shape.begin(), pr.out_shape.end());
  return MX_SUCCESS;
}

template <const char* kOp>
bool dot_problem(const Attrs& attrs, const MXTensor& a, const MXTensor& b, Problem* pr, DotParams* params) {
  DotParams& p = *params;
  std::string error;
  if (!parse_dot(kOp, attrs, &p)) return false;
  if (!make_problem(kOp, p, a.shape, b.shape, pr, &error)) {
    MX_ERROR_MSG << kOp << ": " << error;
    return false;
  }
  pr->a = with_ptr(pr->a, a.data_ptr, static_cast<int>(a.dtype));
  pr->b = with_ptr(pr->b, b.data_ptr, static_cast<int>(b.dtype));
  return true;
}

bool empty(const View& v) {
  for (int i = 0; i < v.nb + 2; ++i) {
    if (v.dims[i] == 0) return true;
  }
  return false;
}

template <const char* kOp>
MXReturnValue dot_forward(const Attrs& attrs, std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                          const OpResource& res) {
  Problem pr;
  DotParams p;
  if (!dot_problem<kOp>(attrs, (*inputs)[0], (*inputs)[1], &pr, &p)) return MX_FAIL;
  MXTensor& y = (*outputs)[0];
  const View c = with_ptr(pr.c, y.data_ptr, static_cast<int>(y.dtype));
  if (empty(c)) return MX_SUCCESS;
  if (pr.a.cols() == 0) {
    zero(&y);
    return MX_SUCCESS;
  }
  return gemm(kOp, pr.a, pr.b, c, p.epilogue()) ? MX_SUCCESS : MX_FAIL;
}

// grad (laid out like operand `like`, broadcast batch dimensions of size 1) = sum over broadcast of
// alpha x y, where x y has the batch dimensions of `full`.
bool product_into(const char* op, const View& x, const View& y, const View& like, const View& full,
                  const Epilogue& e, Scratch* keep) {
  bool broadcast = false;
  for (int i = 0; i < like.nb; ++i) broadcast = broadcast || like.dims[i] != full.dims[i];
  if (!broadcast) return gemm(op, x, y, like, e);
  // Full product in float32, then summed into the broadcast dimensions.
  std::vector<int64_t> dims(full.dims, full.dims + full.nb);
  dims.push_back(like.rows());
  dims.push_back(like.cols());
  float* tmp = static_cast<float*>(scratch(keep, full.batch_size() * like.rows() * like.cols()));
  if (!gemm(op, x, y, contiguous(tmp, kFloat32, dims), e)) return false;
  const CallTeam team;
  sum_broadcast_into(tmp, full.nb, full.dims, like.dims, like.strides, like.rows(), like.cols(), like.ptr,
                     like.dtype, team.threads());
  return true;
}

template <const char* kOp>
MXReturnValue dot_backward(const Attrs& attrs, std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                           const OpResource& res) {
  Problem pr;
  DotParams p;
  if (!dot_problem<kOp>(attrs, (*inputs)[1], (*inputs)[2], &pr, &p)) return MX_FAIL;
  MXTensor& ga = (*outputs)[0];
  MXTensor& gb = (*outputs)[1];
  const View da = with_ptr(pr.a, ga.data_ptr, static_cast<int>(ga.dtype));
  const View db = with_ptr(pr.b, gb.data_ptr, static_cast<int>(gb.dtype));
  if (empty(pr.c) || pr.a.cols() == 0) {
    for (MXTensor& g : *outputs) zero(&g);
    return MX_SUCCESS;
  }
  Scratch keep;
  const View dc = with_ptr(pr.c, in_dtype((*inputs)[0], pr.a.dtype, &keep), pr.a.dtype);
  return product_into(kOp, dc, pr.b.t(), da, pr.c, p.epilogue(), &keep) &&
                 product_into(kOp, pr.a.t(), dc, db, pr.c, p.epilogue(), &keep)
             ? MX_SUCCESS
             : MX_FAIL;
}

}  // namespace
}  // namespace mxnet_amp

REGISTER_OP(amp_fully_connected)
    .setParseAttrs(AMP_GUARDED(mxnet_amp::fc_parse))
    .setInferType(AMP_GUARDED(mxnet_amp::fc_infer_type))
    .setInferShape(AMP_GUARDED(mxnet_amp::fc_infer_shape))
    .setForward(AMP_GUARDED(mxnet_amp::fc_forward), "cpu")
    .setBackward(AMP_GUARDED(mxnet_amp::fc_backward), "cpu");

REGISTER_OP(amp_batch_dot)
    .setParseAttrs(AMP_GUARDED(mxnet_amp::dot_parse<mxnet_amp::kBatchDot>))
    .setInferType(AMP_GUARDED(mxnet_amp::dot_infer_type<mxnet_amp::kBatchDot>))
    .setInferShape(AMP_GUARDED(mxnet_amp::dot_infer_shape<mxnet_amp::kBatchDot>))
    .setForward(AMP_GUARDED(mxnet_amp::dot_forward<mxnet_amp::kBatchDot>), "cpu")
    .setBackward(AMP_GUARDED(mxnet_amp::dot_backward<mxnet_amp::kBatchDot>), "cpu");

REGISTER_OP(amp_matmul)
    .setParseAttrs(AMP_GUARDED(mxnet_amp::dot_parse<mxnet_amp::kMatmul>))
    .setInferType(AMP_GUARDED(mxnet_amp::dot_infer_type<mxnet_amp::kMatmul>))
    .setInferShape(AMP_GUARDED(mxnet_amp::dot_infer_shape<mxnet_amp::kMatmul>))
    .setForward(AMP_GUARDED(mxnet_amp::dot_forward<mxnet_amp::kMatmul>), "cpu")
    .setBackward(AMP_GUARDED(mxnet_amp::dot_backward<mxnet_amp::kMatmul>), "cpu");
