/*!
 * \file attention_ops.cc
 * \brief lib_api glue for the interleaved multi-head attention products of MXNet's contrib ops (GluonNLP's
 *        BERT and transformer layers) on oneDNN 3 strided matmuls: amp_selfatt_qk, amp_selfatt_valatt,
 *        amp_encdec_qk and amp_encdec_valatt replace _contrib_interleaved_matmul_{selfatt,encdec}_{qk,valatt}.
 *
 * Layouts are MXNet's: a projection tensor is (T, B, heads * parts * d), each head's parts side by side
 * (self-attention: query, key, value; encoder-decoder: the queries alone (1 part) and key, value (2 parts)).
 * Scores are (B * heads, Tq, Tk) = (q / sqrt(d)) k^T; the attended values (Tq, B, heads * d). Every operand is
 * a strided view of those tensors (dims (B, heads, T, d)): no transposed copies, one matmul per product, the
 * scale a oneDNN post-op. Operands are float32 or bfloat16 (all the same), products accumulate in float32,
 * and the output has the operands' dtype unless the attribute out_dtype (float32 or bfloat16) says otherwise.
 * Backward: inputs [dy, inputs..., y], outputs [gradient of each input] in the inputs' dtypes; the parts of a
 * projection gradient an op does not use are zero (MXNet sums the gradients of the ops that share it).
 */
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "onednn_glue.h"

namespace mxnet_amp {
namespace {

constexpr char kSelfQK[] = "amp_selfatt_qk";
constexpr char kSelfValAtt[] = "amp_selfatt_valatt";
constexpr char kEncDecQK[] = "amp_encdec_qk";
constexpr char kEncDecValAtt[] = "amp_encdec_valatt";

struct Params {
  long heads = 0;
  int out_dtype = -1;
};

bool parse(const char* op, const Attrs& attrs, Params* p) {
  return parse_int(op, attrs, "heads", 1, &p->heads) && parse_out_dtype(op, attrs, &p->out_dtype);
}

// How each op reads its inputs: the parts per head of its projection input(s), and what it writes.
struct Layout {
  int parts0;   // parts per head of input 0
  int parts1;   // parts per head of input 1; 0: input 1 is the attention (B * heads, Tq, Tk); -1: no input 1
  bool scores;  // output: the scores (B * heads, Tq, Tk); else the attended values (Tq, B, heads * d)
  int partial;  // the gradient (output index) of which only some parts are written
  int unused_first, unused_count;  // the parts of each head it does not write (zeroed)
};

Layout layout_of(const char* op) {
  if (op == kSelfQK) return {3, -1, true, 0, 2, 1};
  if (op == kSelfValAtt) return {3, 0, false, 0, 0, 2};
  if (op == kEncDecQK) return {1, 2, true, 1, 1, 1};
  return {2, 0, false, 0, 0, 1};  // kEncDecValAtt
}

// Part `part` of every head of a (T, B, heads * parts * d) tensor, as (B, heads, T, d).
View part_view(void* base, int dtype, int64_t t, int64_t b, int64_t heads, int parts, int64_t d, int part) {
  const int64_t width = heads * parts * d;
  View v;
  v.dtype = dtype;
  v.nb = 2;
  const int64_t dims[4] = {b, heads, t, d};
  const int64_t strides[4] = {width, parts * d, b * width, 1};
  std::copy(dims, dims + 4, v.dims);
  std::copy(strides, strides + 4, v.strides);
  const int64_t bytes = dtype == kFloat32 ? 4 : 2;
  v.ptr = base == nullptr ? nullptr : static_cast<char*>(base) + part * d * bytes;
  return v;
}

// The attention (B * heads, Tq, Tk) as (B, heads, Tq, Tk).
View attention_view(void* base, int dtype, int64_t b, int64_t heads, int64_t tq, int64_t tk) {
  return contiguous(base, dtype, {b, heads, tq, tk});
}

// Checks the shapes against each other; on success fills the problem sizes.
struct Sizes {
  int64_t tq = 0, tk = 0, b = 0, d = 0;
};

bool sizes_of(const char* op, long heads, const std::vector<std::vector<int64_t>>& in, Sizes* s,
              std::string* error) {
  const Layout l = layout_of(op);
  const auto& x = in[0];
  if (x.size() != 3) {
    *error = "input 0 must have 3 dimensions (sequence, batch, features)";
    return false;
  }
  const int64_t per_head = heads * l.parts0;
  if (x[2] % per_head != 0) {
    *error = "input 0's last dimension (" + std::to_string(x[2]) + ") must be a multiple of heads * " +
             std::to_string(l.parts0) + " = " + std::to_string(per_head);
    return false;
  }
  s->b = x[1];
  s->d = x[2] / per_head;
  if (l.parts1 == -1) {  // selfatt_qk: one input
    s->tq = s->tk = x[0];
    return true;
  }
  const auto& y = in[1];
  if (y.size() != 3) {
    *error = "input 1 must have 3 dimensions";
    return false;
  }
  if (l.parts1 > 0) {  // encdec_qk: queries (Tq, B, heads d), keys and values (Tk, B, heads 2 d)
    if (y[1] != s->b || y[2] != heads * l.parts1 * s->d) {
      *error = "input 1 must have shape (Tk, " + std::to_string(s->b) + ", " +
               std::to_string(heads * l.parts1 * s->d) + ") for queries of this shape";
      return false;
    }
    s->tq = x[0];
    s->tk = y[0];
    return true;
  }
  // valatt: attention (B heads, Tq, Tk) over the (Tk, B, .) projection
  s->tk = x[0];
  s->tq = y[1];
  if (y[0] != s->b * heads || y[2] != s->tk) {
    *error = "the attention must have shape (" + std::to_string(s->b * heads) + ", Tq, " +
             std::to_string(s->tk) + ") (batch * heads, queries, keys) for input 0 of this shape";
    return false;
  }
  return true;
}

bool sizes_of(const char* op, long heads, const std::vector<MXTensor>& in, Sizes* s) {
  std::vector<std::vector<int64_t>> shapes;
  for (const MXTensor& t : in) shapes.push_back(t.shape);
  std::string error;
  if (!sizes_of(op, heads, shapes, s, &error)) {
    MX_ERROR_MSG << op << ": " << error;
    return false;
  }
  return true;
}

template <const char* kOp>
MXReturnValue parse_attrs(const Attrs& attrs, int* num_in, int* num_out) {
  Params p;
  if (!parse(kOp, attrs, &p)) return MX_FAIL;
  *num_in = layout_of(kOp).parts1 == -1 ? 1 : 2;
  *num_out = 1;
  return MX_SUCCESS;
}

template <const char* kOp>
MXReturnValue infer_type(const Attrs& attrs, std::vector<int>* in, std::vector<int>* out) {
  Params p;
  if (!parse(kOp, attrs, &p)) return MX_FAIL;
  return infer_operand_types(kOp, p.out_dtype, in, out);
}

template <const char* kOp>
MXReturnValue infer_shape(const Attrs& attrs, Shapes* in, Shapes* out) {
  Params p;
  if (!parse(kOp, attrs, &p)) return MX_FAIL;
  std::vector<std::vector<int64_t>> shapes;
  for (const auto& s : *in) {
    if (s.empty()) {
      MX_ERROR_MSG << kOp << ": input shapes must be known";
      return MX_FAIL;
    }
    shapes.emplace_back(s.begin(), s.end());
  }
  Sizes s;
  std::string error;
  if (!sizes_of(kOp, p.heads, shapes, &s, &error)) {
    MX_ERROR_MSG << kOp << ": " << error;
    return MX_FAIL;
  }
  const auto u = [](int64_t v) { return static_cast<unsigned int>(v); };
  if (layout_of(kOp).scores) {
    (*out)[0] = {u(s.b * p.heads), u(s.tq), u(s.tk)};
  } else {
    (*out)[0] = {u(s.tq), u(s.b), u(p.heads * s.d)};
  }
  return MX_SUCCESS;
}

// The scores' scale 1 / sqrt(d) as a product's epilogue.
Epilogue scaled(int64_t d) {
  Epilogue e;
  e.alpha = 1.f / std::sqrt(static_cast<float>(d));
  return e;
}

bool empty(const Sizes& s) { return s.tq == 0 || s.tk == 0 || s.b == 0 || s.d == 0; }

// Query and key views of the inputs of a qk op (data pointers and dtypes as given).
void qk_views(const char* op, const std::vector<MXTensor*>& in, int dtype, long heads, const Sizes& s, View* q,
              View* k) {
  if (op == kSelfQK) {
    *q = part_view(in[0]->data_ptr, dtype, s.tq, s.b, heads, 3, s.d, 0);
    *k = part_view(in[0]->data_ptr, dtype, s.tk, s.b, heads, 3, s.d, 1);
  } else {
    *q = part_view(in[0]->data_ptr, dtype, s.tq, s.b, heads, 1, s.d, 0);
    *k = part_view(in[1]->data_ptr, dtype, s.tk, s.b, heads, 2, s.d, 0);
  }
}

// The value view of a valatt op's projection, and the view of its output.
View value_view(const char* op, void* proj, int dtype, long heads, const Sizes& s) {
  return op == kSelfValAtt ? part_view(proj, dtype, s.tk, s.b, heads, 3, s.d, 2)
                           : part_view(proj, dtype, s.tk, s.b, heads, 2, s.d, 1);
}

View output_view(void* out, int dtype, long heads, const Sizes& s) {
  return part_view(out, dtype, s.tq, s.b, heads, 1, s.d, 0);
}

template <const char* kOp>
MXReturnValue forward(const Attrs& attrs, std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                      const OpResource& res) {
  Params p;
  Sizes s;
  if (!parse(kOp, attrs, &p) || !sizes_of(kOp, p.heads, *inputs, &s)) return MX_FAIL;
  MXTensor& y = (*outputs)[0];
  const int dt = static_cast<int>((*inputs)[0].dtype);
  const int yt = static_cast<int>(y.dtype);
  if (empty(s)) {
    zero(&y);
    return MX_SUCCESS;
  }
  if (layout_of(kOp).scores) {
    View q, k;
    std::vector<MXTensor*> in;
    for (MXTensor& t : *inputs) in.push_back(&t);
    qk_views(kOp, in, dt, p.heads, s, &q, &k);
    const View c = attention_view(y.data_ptr, yt, s.b, p.heads, s.tq, s.tk);
    return gemm(kOp, q, k.t(), c, scaled(s.d)) ? MX_SUCCESS : MX_FAIL;
  }
  const View v = value_view(kOp, (*inputs)[0].data_ptr, dt, p.heads, s);
  const View att = attention_view((*inputs)[1].data_ptr, dt, s.b, p.heads, s.tq, s.tk);
  return gemm(kOp, att, v, output_view(y.data_ptr, yt, p.heads, s)) ? MX_SUCCESS : MX_FAIL;
}

template <const char* kOp>
MXReturnValue backward(const Attrs& attrs, std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                       const OpResource& res) {
  Params p;
  Sizes s;
  const Layout l = layout_of(kOp);
  const int n_in = l.parts1 == -1 ? 1 : 2;
  const std::vector<MXTensor> fwd_in(inputs->begin() + 1, inputs->begin() + 1 + n_in);
  if (!parse(kOp, attrs, &p) || !sizes_of(kOp, p.heads, fwd_in, &s)) return MX_FAIL;
  if (empty(s)) {
    for (MXTensor& g : *outputs) zero(&g);
    return MX_SUCCESS;
  }
  {  // the parts no product writes
    MXTensor& g = (*outputs)[l.partial];
    const int64_t parts = l.partial == 0 ? l.parts0 : l.parts1;
    const CallTeam team;
    zero_columns(g.data_ptr, static_cast<int>(g.dtype), g.size() / (parts * s.d), parts * s.d, l.unused_first * s.d,
                 l.unused_count * s.d, team.threads());
  }
  const int dt = static_cast<int>((*inputs)[1].dtype);
  Scratch keep;
  void* dy = in_dtype((*inputs)[0], dt, &keep);
  if (l.scores) {  // dq = dS k / sqrt(d), dk = dS^T q / sqrt(d)
    std::vector<MXTensor*> in, grads;
    for (int i = 1; i <= n_in; ++i) in.push_back(&(*inputs)[i]);
    for (MXTensor& g : *outputs) grads.push_back(&g);
    View q, k, dq, dk;
    qk_views(kOp, in, dt, p.heads, s, &q, &k);
    qk_views(kOp, grads, static_cast<int>(grads[0]->dtype), p.heads, s, &dq, &dk);
    const View ds = attention_view(dy, dt, s.b, p.heads, s.tq, s.tk);
    return gemm(kOp, ds, k, dq, scaled(s.d)) && gemm(kOp, ds.t(), q, dk, scaled(s.d))
               ? MX_SUCCESS
               : MX_FAIL;
  }
  // y = att v: d_att = dy v^T, dv = att^T dy
  MXTensor& dproj = (*outputs)[0];
  MXTensor& datt = (*outputs)[1];
  const View v = value_view(kOp, (*inputs)[1].data_ptr, dt, p.heads, s);
  const View att = attention_view((*inputs)[2].data_ptr, dt, s.b, p.heads, s.tq, s.tk);
  const View dyv = output_view(dy, dt, p.heads, s);
  const View dv = value_view(kOp, dproj.data_ptr, static_cast<int>(dproj.dtype), p.heads, s);
  const View da = attention_view(datt.data_ptr, static_cast<int>(datt.dtype), s.b, p.heads, s.tq, s.tk);
  return gemm(kOp, dyv, v.t(), da) && gemm(kOp, att.t(), dyv, dv) ? MX_SUCCESS : MX_FAIL;
}

}  // namespace
}  // namespace mxnet_amp

#define AMP_ATTENTION_OP(name, tag)                                              \
  REGISTER_OP(name)                                                              \
      .setParseAttrs(AMP_GUARDED(mxnet_amp::parse_attrs<mxnet_amp::tag>))        \
      .setInferType(AMP_GUARDED(mxnet_amp::infer_type<mxnet_amp::tag>))          \
      .setInferShape(AMP_GUARDED(mxnet_amp::infer_shape<mxnet_amp::tag>))        \
      .setForward(AMP_GUARDED(mxnet_amp::forward<mxnet_amp::tag>), "cpu")        \
      .setBackward(AMP_GUARDED(mxnet_amp::backward<mxnet_amp::tag>), "cpu")

AMP_ATTENTION_OP(amp_selfatt_qk, kSelfQK);
AMP_ATTENTION_OP(amp_selfatt_valatt, kSelfValAtt);
AMP_ATTENTION_OP(amp_encdec_qk, kEncDecQK);
AMP_ATTENTION_OP(amp_encdec_valatt, kEncDecValAtt);
