/*!
 * \file norms.cc
 * \brief libmxnet_amp_onednn.so: layer normalisation and softmax over the last axis with oneDNN 3 (bfloat16 or
 *        float32 data, float32 statistics and parameters), forward and backward, behind the C interface of api.h.
 *
 * Both run on plain rows x cols tensors, the layout MXNet hands extension ops: no reorders. oneDNN 3.2's layer
 * normalisation takes bf16 src/dst with f32 scale, shift and statistics (its JIT kernels from avx512_core up,
 * reference kernels below), and its softmax bf16 or f32 on either side. Threads, the primitive cache and
 * scratch memory: common.h.
 */
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "api.h"
#include "common.h"
#include "widen.h"

namespace mxnet_amp_onednn {
namespace {

using dnnl::memory;

const auto kScaleShift = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;

struct CachedNorm {
  dnnl::primitive primitive;
  memory::desc data, dst, params, stats, scratchpad;
};

void check_rows(int64_t rows, int64_t cols) {
  if (rows < 1 || cols < 1) {
    throw std::invalid_argument("rows (" + std::to_string(rows) + ") and cols (" + std::to_string(cols) +
                                ") must be positive");
  }
}

// Rows of a widened chunk (widen.h: kWidenedChunk). Rows are independent, so where bfloat16 rows run on float32
// copies they are widened chunk after chunk, the copies a megabyte whatever the tensor (a BERT-style encoder's
// LayerNorm gradient widened 3 x 3.1 MB at once, AMD EPYC class (a), 2026-12-07); else all rows at once.
int64_t chunk_rows(bool widening, int64_t rows, int64_t cols) {
  return widening ? std::max<int64_t>(1, std::min(rows, kWidenedChunk / cols)) : rows;
}

// p moved first rows on, each row cols elements of dtype (NULL stays NULL).
template <typename T>
T* rows_on(T* p, int dtype, int64_t first, int64_t cols) {
  using Byte = typename std::conditional<std::is_const<T>::value, const char, char>::type;
  return p == nullptr ? nullptr : reinterpret_cast<T*>(reinterpret_cast<Byte*>(p) + first * cols * element_bytes(dtype));
}

// The primitive's scratchpad (this thread's buffer), where it needs one.
void add_scratchpad(const memory::desc& desc, std::unordered_map<int, memory>* args) {
  if (desc.get_size() > 0) {
    (*args)[DNNL_ARG_SCRATCHPAD] = memory(desc, cpu_engine(), thread_buffer(0, desc.get_size()));
  }
}

std::string norm_key(const AmpLayerNorm& n) {
  int32_t eps_bits;
  std::memcpy(&eps_bits, &n.eps, sizeof(eps_bits));
  return "ln|" + key_of({n.pass, n.src_dtype, n.pass == AMP_ROWS_FORWARD ? n.dst_dtype : -1, n.rows, n.cols, eps_bits});
}

std::shared_ptr<CachedNorm> create_norm(const AmpLayerNorm& n) {
  auto& engine = cpu_engine();
  auto entry = std::make_shared<CachedNorm>();
  entry->data = plain_desc({n.rows, n.cols}, to_data_type(n.src_dtype));
  entry->dst = plain_desc({n.rows, n.cols}, to_data_type(n.pass == AMP_ROWS_FORWARD ? n.dst_dtype : n.src_dtype));
  entry->params = plain_desc({n.cols}, memory::data_type::f32);
  entry->stats = plain_desc({n.rows}, memory::data_type::f32);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (n.pass == AMP_ROWS_FORWARD) {
    dnnl::layer_normalization_forward::primitive_desc pd(engine, dnnl::prop_kind::forward_inference, entry->data,
                                                         entry->dst, entry->stats, n.eps, kScaleShift, attr);
    entry->scratchpad = pd.scratchpad_desc();
    entry->primitive = dnnl::layer_normalization_forward(pd);
  } else {
    dnnl::layer_normalization_forward::primitive_desc hint(engine, dnnl::prop_kind::forward_training, entry->data,
                                                           entry->data, entry->stats, n.eps, kScaleShift);
    dnnl::layer_normalization_backward::primitive_desc pd(engine, dnnl::prop_kind::backward, entry->data,
                                                          entry->data, entry->data, entry->stats, n.eps,
                                                          kScaleShift, hint, attr);
    entry->scratchpad = pd.scratchpad_desc();
    entry->primitive = dnnl::layer_normalization_backward(pd);
  }
  return entry;
}

// n on float32 copies where its bfloat16 tensors have no bfloat16 primitive here (widen.h); else n itself.
AmpLayerNorm widened(const AmpLayerNorm& n, Widening* w) {
  if (!Widening::needed({n.src_dtype, n.dst_dtype})) return n;
  AmpLayerNorm f = n;
  const int64_t size = n.rows * n.cols;
  f.src = w->input(n.src, &f.src_dtype, size);
  if (n.pass == AMP_ROWS_FORWARD) {
    f.dst = w->output(n.dst, &f.dst_dtype, size);
  } else {
    int diff_dtype = n.src_dtype;  // diff_dst and diff_src have the data's dtype
    f.diff_dst = w->input(n.diff_dst, &diff_dtype, size);
    diff_dtype = n.src_dtype;
    f.diff_src = w->output(n.diff_src, &diff_dtype, size);
    f.dst_dtype = kFloat32;
  }
  return f;
}

// One pass of n (rows widened together).
void run_norm_rows(const AmpLayerNorm& original, int threads) {
  Widening widening(threads);
  const AmpLayerNorm n = widened(original, &widening);
  const auto entry = cached<CachedNorm>(norm_key(n), [&n] { return create_norm(n); });
  auto& engine = cpu_engine();
  const auto in = [&engine](const memory::desc& d, const void* p) { return memory(d, engine, const_cast<void*>(p)); };
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, in(entry->data, n.src)},
      {DNNL_ARG_SCALE, in(entry->params, n.scale)},
      {DNNL_ARG_SHIFT, in(entry->params, n.shift)}};  // backward reads it too (unused there)
  add_scratchpad(entry->scratchpad, &args);
  if (n.pass == AMP_ROWS_FORWARD) {
    args[DNNL_ARG_DST] = memory(entry->dst, engine, n.dst);
  } else {
    args[DNNL_ARG_MEAN] = in(entry->stats, n.mean);
    args[DNNL_ARG_VARIANCE] = in(entry->stats, n.variance);
    args[DNNL_ARG_DIFF_DST] = in(entry->data, n.diff_dst);
    args[DNNL_ARG_DIFF_SRC] = memory(entry->data, engine, n.diff_src);
    args[DNNL_ARG_DIFF_SCALE] = memory(entry->params, engine, n.diff_scale);
    args[DNNL_ARG_DIFF_SHIFT] = memory(entry->params, engine, n.diff_shift);
  }
  dnnl::stream stream(engine);
  entry->primitive.execute(stream, args);
  stream.wait();
  widening.finish();
}

// n in chunks of rows (chunk_rows); backward, the later chunks' scale and shift gradients are added to the first's
// in float32.
void run_norm(const AmpLayerNorm& n) {
  check_rows(n.rows, n.cols);
  if (n.pass != AMP_ROWS_FORWARD && n.pass != AMP_ROWS_BACKWARD) {
    throw std::invalid_argument("pass must be AMP_ROWS_FORWARD or AMP_ROWS_BACKWARD");
  }
  const CallTeam team;  // before creating the primitive: it splits work by the team size
  const int64_t chunk = chunk_rows(Widening::needed({n.src_dtype, n.dst_dtype}), n.rows, n.cols);
  Widening outer(team.threads());
  float* more = chunk < n.rows && n.pass == AMP_ROWS_BACKWARD ? outer.scratch(2 * n.cols) : nullptr;
  for (int64_t first = 0; first < n.rows; first += chunk) {
    AmpLayerNorm part = n;
    part.rows = std::min(chunk, n.rows - first);
    part.src = rows_on(n.src, n.src_dtype, first, n.cols);
    part.dst = rows_on(n.dst, n.dst_dtype, first, n.cols);
    part.diff_dst = rows_on(n.diff_dst, n.src_dtype, first, n.cols);
    part.diff_src = rows_on(n.diff_src, n.src_dtype, first, n.cols);
    part.mean = rows_on(n.mean, kFloat32, first, 1);
    part.variance = rows_on(n.variance, kFloat32, first, 1);
    if (more != nullptr && first > 0) {
      part.diff_scale = more;
      part.diff_shift = more + n.cols;
    }
    run_norm_rows(part, team.threads());
    for (int64_t i = 0; more != nullptr && first > 0 && i < n.cols; ++i) {
      n.diff_scale[i] += more[i];
      n.diff_shift[i] += more[n.cols + i];
    }
  }
}

struct CachedSoftmax {
  dnnl::primitive primitive;
  memory::desc src, dst, scratchpad;
};

std::string softmax_key(const AmpSoftmax& s) {
  return "sm|" + key_of({s.pass, s.log, s.src_dtype, s.dst_dtype, s.rows, s.cols});
}

std::shared_ptr<CachedSoftmax> create_softmax(const AmpSoftmax& s) {
  auto& engine = cpu_engine();
  auto entry = std::make_shared<CachedSoftmax>();
  entry->src = plain_desc({s.rows, s.cols}, to_data_type(s.src_dtype));
  entry->dst = plain_desc({s.rows, s.cols}, to_data_type(s.dst_dtype));
  const auto algo = s.log ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate;
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (s.pass == AMP_ROWS_FORWARD) {
    dnnl::softmax_forward::primitive_desc pd(engine, dnnl::prop_kind::forward_inference, algo, entry->src,
                                             entry->dst, 1, attr);
    entry->scratchpad = pd.scratchpad_desc();
    entry->primitive = dnnl::softmax_forward(pd);
  } else {
    dnnl::softmax_forward::primitive_desc hint(engine, dnnl::prop_kind::forward_training, algo, entry->src,
                                               entry->dst, 1);
    // diff_src has the data's dtype, diff_dst the output's, as dst.
    dnnl::softmax_backward::primitive_desc pd(engine, algo, entry->src, entry->dst, entry->dst, 1, hint, attr);
    entry->scratchpad = pd.scratchpad_desc();
    entry->primitive = dnnl::softmax_backward(pd);
  }
  return entry;
}

// s on float32 copies where its bfloat16 tensors have no bfloat16 primitive here (widen.h); else s itself.
AmpSoftmax widened(const AmpSoftmax& s, Widening* w) {
  if (!Widening::needed({s.src_dtype, s.dst_dtype})) return s;
  AmpSoftmax f = s;
  const int64_t size = s.rows * s.cols;
  if (s.pass == AMP_ROWS_FORWARD) {
    f.src = w->input(s.src, &f.src_dtype, size);
    f.dst = w->output(s.dst, &f.dst_dtype, size);
  } else {  // dst and diff_dst have the output's dtype, diff_src the data's
    int dtype = s.dst_dtype;
    f.dst = const_cast<void*>(w->input(s.dst, &dtype, size));
    f.diff_dst = w->input(s.diff_dst, &f.dst_dtype, size);
    f.diff_src = w->output(s.diff_src, &f.src_dtype, size);
  }
  return f;
}

// All rows at once: the library calls this only where oneDNN 3 has bfloat16 primitives (ops/norm_ops.cc), so nothing
// is widened in practice; the row kernels serve the other CPUs.
void run_softmax(const AmpSoftmax& original) {
  check_rows(original.rows, original.cols);
  if (original.pass != AMP_ROWS_FORWARD && original.pass != AMP_ROWS_BACKWARD) {
    throw std::invalid_argument("pass must be AMP_ROWS_FORWARD or AMP_ROWS_BACKWARD");
  }
  const CallTeam team;
  Widening widening(team.threads());
  const AmpSoftmax s = widened(original, &widening);
  const auto entry = cached<CachedSoftmax>(softmax_key(s), [&s] { return create_softmax(s); });
  auto& engine = cpu_engine();
  std::unordered_map<int, memory> args;
  add_scratchpad(entry->scratchpad, &args);
  if (s.pass == AMP_ROWS_FORWARD) {
    args[DNNL_ARG_SRC] = memory(entry->src, engine, const_cast<void*>(s.src));
    args[DNNL_ARG_DST] = memory(entry->dst, engine, s.dst);
  } else {
    args[DNNL_ARG_DST] = memory(entry->dst, engine, s.dst);
    args[DNNL_ARG_DIFF_DST] = memory(entry->dst, engine, const_cast<void*>(s.diff_dst));
    args[DNNL_ARG_DIFF_SRC] = memory(entry->src, engine, s.diff_src);
  }
  dnnl::stream stream(engine);
  entry->primitive.execute(stream, args);
  stream.wait();
  widening.finish();
}

}  // namespace
}  // namespace mxnet_amp_onednn

extern "C" __attribute__((visibility("default"))) int mxnet_amp_onednn_layer_norm(const AmpLayerNorm* n,
                                                                                  char* error, int error_len) {
  return mxnet_amp_onednn::guarded([n] { mxnet_amp_onednn::run_norm(*n); }, error, error_len);
}

extern "C" __attribute__((visibility("default"))) int mxnet_amp_onednn_softmax(const AmpSoftmax* s, char* error,
                                                                               int error_len) {
  return mxnet_amp_onednn::guarded([s] { mxnet_amp_onednn::run_softmax(*s); }, error, error_len);
}
