/*!
 * \file matmul.cc
 * \brief libmxnet_amp_onednn.so: matrix products with oneDNN 3 (bfloat16 or float32 operands, float32
 *        accumulation), behind the C interface of api.h.
 *
 * oneDNN 3 picks its fastest kernel for the CPU (AMX tiles on Xeons with amx_bf16, AVX512-BF16 dot
 * products, reference kernels elsewhere). Operands stay in their plain strided layouts: MXNet hands
 * extension ops plain arrays, and oneDNN's matmul packs the weights internally as it goes. Threads, the
 * primitive cache and scratch memory: common.h.
 */
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "api.h"
#include "common.h"
#include "widen.h"

namespace mxnet_amp_onednn {
namespace {

using dnnl::memory;

struct Cached {
  dnnl::matmul primitive;
  memory::desc a, b, c, bias, scratchpad;
};

memory::desc strided_desc(int ndims, const int64_t* dims, const int64_t* strides, memory::data_type type) {
  return memory::desc(memory::dims(dims, dims + ndims), type, memory::dims(strides, strides + ndims));
}

// The problem without its data pointers: the cache key.
std::string problem_key(const AmpMatmul& m, bool accumulate) {
  int32_t alpha_bits;
  std::memcpy(&alpha_bits, &m.alpha, sizeof(alpha_bits));
  std::vector<int64_t> k = {m.ndims, m.a_dtype, m.b_dtype, m.c_dtype, m.bias_dtype, m.act, alpha_bits,
                            m.addend != nullptr, accumulate};
  for (const int64_t* v : {m.a_dims, m.a_strides, m.b_dims, m.b_strides, m.c_dims, m.c_strides}) {
    k.insert(k.end(), v, v + m.ndims);
  }
  return key_of(k);
}

// accumulate: C += A B (oneDNN's sum post-op; the other fusions are refused with it: chunk_depth).
std::shared_ptr<Cached> create(const AmpMatmul& m, bool accumulate) {
  const memory::data_type ta = to_data_type(m.a_dtype), tb = to_data_type(m.b_dtype);
  const memory::data_type tc = to_data_type(m.c_dtype);
  const memory::data_type tbias = m.bias_dtype >= 0 ? to_data_type(m.bias_dtype) : memory::data_type::f32;
  auto entry = std::make_shared<Cached>();
  entry->a = strided_desc(m.ndims, m.a_dims, m.a_strides, ta);
  entry->b = strided_desc(m.ndims, m.b_dims, m.b_strides, tb);
  entry->c = strided_desc(m.ndims, m.c_dims, m.c_strides, tc);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (m.alpha != 1.f && m.bias_dtype >= 0) throw std::invalid_argument("alpha and a bias are not supported together");
  dnnl::post_ops ops;
  if (accumulate) ops.append_sum(1.f);
  if (m.alpha != 1.f) ops.append_eltwise(dnnl::algorithm::eltwise_linear, m.alpha, 0.f);
  if (m.addend != nullptr) ops.append_binary(dnnl::algorithm::binary_add, entry->c);
  switch (m.act) {
    case AMP_ACT_NONE: break;
    case AMP_ACT_RELU: ops.append_eltwise(dnnl::algorithm::eltwise_relu, 0.f, 0.f); break;
    case AMP_ACT_GELU: ops.append_eltwise(dnnl::algorithm::eltwise_gelu_erf, 0.f, 0.f); break;
    default: throw std::invalid_argument("unknown activation " + std::to_string(m.act));
  }
  attr.set_post_ops(ops);
  dnnl::matmul::primitive_desc pd;
  if (m.bias_dtype >= 0) {
    memory::dims bias_dims(m.ndims, 1);
    bias_dims.back() = m.c_dims[m.ndims - 1];
    memory::dims bias_strides(m.ndims, bias_dims.back());
    bias_strides.back() = 1;
    entry->bias = memory::desc(bias_dims, tbias, bias_strides);
    pd = dnnl::matmul::primitive_desc(cpu_engine(), entry->a, entry->b, entry->bias, entry->c, attr);
  } else {
    pd = dnnl::matmul::primitive_desc(cpu_engine(), entry->a, entry->b, entry->c, attr);
  }
  entry->scratchpad = pd.scratchpad_desc();
  entry->primitive = dnnl::matmul(pd);
  return entry;
}

// m on float32 copies where its bfloat16 tensors have no bfloat16 primitive here (widen.h); else m itself. C is left
// as it is where output is false (the caller widened it already).
AmpMatmul widened(const AmpMatmul& m, Widening* w, bool output = true) {
  if (!Widening::needed({m.a_dtype, m.b_dtype, m.c_dtype, m.bias_dtype})) return m;
  AmpMatmul f = m;
  f.a = w->input(m.a, &f.a_dtype, span(m.ndims, m.a_dims, m.a_strides));
  f.b = w->input(m.b, &f.b_dtype, span(m.ndims, m.b_dims, m.b_strides));
  f.bias = w->input(m.bias, &f.bias_dtype, m.c_dims[m.ndims - 1]);
  const int64_t c_span = span(m.ndims, m.c_dims, m.c_strides);
  int addend_dtype = m.c_dtype;  // the addend has C's dtype and strides
  f.addend = w->input(m.addend, &addend_dtype, c_span);
  if (!output) return f;
  int64_t c_elements = 1;
  for (int i = 0; i < m.ndims; ++i) c_elements *= m.c_dims[i];
  f.c = w->output(m.c, &f.c_dtype, c_span, c_span != c_elements);  // gaps between C's rows keep their values
  return f;
}

// Rows of C (its first dimension: M of a 2-D product, the batch of a batched one) that a widened chunk covers, or 0
// where A's and C's first dimension is not their outermost (a transposed operand: a chunk's copy would span the
// whole tensor anyway) or the product fits one chunk (widen.h: kWidenedChunk).
int64_t chunk_rows(const AmpMatmul& m) {
  for (int i = 1; i < m.ndims; ++i) {
    if (m.a_strides[i] > m.a_strides[0] || m.c_strides[i] > m.c_strides[0]) return 0;
  }
  const int64_t row = std::max<int64_t>(1, std::max(m.a_dims[0] > 1 ? m.a_strides[0] : 0, m.c_strides[0]));
  const int64_t rows = std::max<int64_t>(1, kWidenedChunk / row);
  return rows < m.c_dims[0] ? rows : 0;
}

// Rows first to first + count of m's C (and of A, and of B where it has a batch of its own).
AmpMatmul rows_of(const AmpMatmul& m, int64_t first, int64_t count) {
  AmpMatmul part = m;
  const auto moved = [first](const void* p, int64_t stride, int dtype) -> const void* {
    return p == nullptr ? nullptr : static_cast<const char*>(p) + first * stride * element_bytes(dtype);
  };
  part.c_dims[0] = count;
  part.c = const_cast<void*>(moved(m.c, m.c_strides[0], m.c_dtype));
  part.addend = moved(m.addend, m.c_strides[0], m.c_dtype);
  if (m.a_dims[0] > 1) {
    part.a_dims[0] = count;
    part.a = moved(m.a, m.a_strides[0], m.a_dtype);
  }
  if (m.ndims > 2 && m.b_dims[0] > 1) {  // a batch of B's own (a 2-D product's B has K rows: whole)
    part.b_dims[0] = count;
    part.b = moved(m.b, m.b_strides[0], m.b_dtype);
  }
  return part;
}

// Depth (rows of the contraction, K) that a widened chunk of a plain 2-D product covers, or 0. Where K is A's and
// B's outermost dimension (A stored transposed: a weight gradient dY^T X), a chunk of C's rows would still span the
// whole of A: the product is cut along K instead, the chunks' products added into C in float32 (oneDNN's sum
// post-op), which a bias, an addend, alpha or an activation would not survive. A chunk is at least kMinDepth deep:
// each one reads and writes the whole of C once more.
constexpr int64_t kMinDepth = 256;

int64_t chunk_depth(const AmpMatmul& m) {
  if (m.ndims != 2 || m.bias_dtype >= 0 || m.addend != nullptr || m.act != AMP_ACT_NONE || m.alpha != 1.f) return 0;
  if (m.a_strides[1] <= m.a_strides[0] || m.b_strides[0] <= m.b_strides[1]) return 0;  // K not outermost
  const int64_t depth = std::max(kMinDepth, kWidenedChunk / std::max<int64_t>(1, std::max(m.a_dims[0], m.c_dims[1])));
  return depth < m.a_dims[1] ? depth : 0;
}

// Depth first to first + count of m's contraction: columns of A, rows of B.
AmpMatmul depth_of(const AmpMatmul& m, int64_t first, int64_t count) {
  AmpMatmul part = m;
  part.a_dims[1] = part.b_dims[0] = count;
  part.a = static_cast<const char*>(m.a) + first * m.a_strides[1] * element_bytes(m.a_dtype);
  part.b = static_cast<const char*>(m.b) + first * m.b_strides[0] * element_bytes(m.b_dtype);
  return part;
}

std::shared_ptr<const Cached> entry_of(const AmpMatmul& m, bool accumulate) {
  return cached<Cached>(problem_key(m, accumulate), [&m, accumulate] { return create(m, accumulate); });
}

void execute(const Cached& entry, const AmpMatmul& m);

void run_primitive(const AmpMatmul& m, bool accumulate = false) { execute(*entry_of(m, accumulate), m); }

// m cut along K (chunk_depth): C widened once, each chunk's operands widened in turn and its product added.
void run_in_depth(const AmpMatmul& m, int64_t depth, int threads) {
  Widening outer(threads);
  AmpMatmul whole = m;
  const int64_t c_span = span(m.ndims, m.c_dims, m.c_strides);
  whole.c = outer.output(m.c, &whole.c_dtype, c_span, c_span != m.c_dims[0] * m.c_dims[1]);
  for (int64_t first = 0; first < m.a_dims[1]; first += depth) {
    Widening inner(threads);
    run_primitive(widened(depth_of(whole, first, std::min(depth, m.a_dims[1] - first)), &inner, false), first > 0);
  }
  outer.finish();
}

// A plain 2-D product whose oneDNN primitive asks for more than kMaxScratch of scratch is cut along K into chunks
// of at most that much, where C is float32 and only a bias is fused: AMX kernels copy B into a buffer padded to 64
// columns, so a classifier head on flattened features (8 x 98304 by 98304 x 2, float32 out) asked for 12 MB, for
// 0.4 MB of weights, kept as this thread's scratch (a BERT-style encoder's peak: 12 MB of 805 on class (d)). The first
// chunk adds the bias, the others add their products into C (oneDNN's sum post-op).
constexpr size_t kMaxScratch = size_t{4} << 20;

int64_t scratch_depth(const AmpMatmul& m, size_t scratch) {
  if (scratch <= kMaxScratch || m.ndims != 2 || m.c_dtype != kFloat32 || m.addend != nullptr ||
      m.act != AMP_ACT_NONE || m.alpha != 1.f) {
    return 0;
  }
  const int64_t pieces = static_cast<int64_t>((scratch + kMaxScratch - 1) / kMaxScratch);
  const int64_t depth = std::max(kMinDepth, (m.a_dims[1] + pieces - 1) / pieces);
  return depth < m.a_dims[1] ? depth : 0;
}

void run(const AmpMatmul& original) {
  const CallTeam team;  // before creating the primitive: it splits work by the team size
  if (!Widening::needed({original.a_dtype, original.b_dtype, original.c_dtype, original.bias_dtype})) {
    const auto entry = entry_of(original, false);
    const int64_t depth = scratch_depth(original, entry->scratchpad.get_size());
    // cut only where a chunk asks for at most half the scratch (B's copy; not partial sums of C, which stay)
    if (depth == 0 || 2 * entry_of(depth_of(original, 0, depth), false)->scratchpad.get_size() >
                          entry->scratchpad.get_size()) {
      return execute(*entry, original);
    }
    for (int64_t first = 0; first < original.a_dims[1]; first += depth) {
      AmpMatmul part = depth_of(original, first, std::min(depth, original.a_dims[1] - first));
      if (first > 0) part.bias_dtype = -1;  // added once, with the first chunk
      run_primitive(part, first > 0);
    }
    return;
  }
  const int64_t depth = chunk_depth(original);
  if (depth > 0) return run_in_depth(original, depth, team.threads());
  const int64_t rows = chunk_rows(original), total = original.c_dims[0];
  Widening outer(team.threads());
  AmpMatmul whole = original;
  if (rows > 0 && !(original.ndims > 2 && original.b_dims[0] > 1)) {  // B whole in every chunk: widened once
    whole.b = outer.input(original.b, &whole.b_dtype, span(original.ndims, original.b_dims, original.b_strides));
  }
  for (int64_t first = 0; first < total; first += rows > 0 ? rows : total) {
    Widening widening(team.threads());
    run_primitive(widened(rows > 0 ? rows_of(whole, first, std::min(rows, total - first)) : whole, &widening));
    widening.finish();
  }
}

void execute(const Cached& entry, const AmpMatmul& m) {
  auto& engine = cpu_engine();
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, memory(entry.a, engine, const_cast<void*>(m.a))},
      {DNNL_ARG_WEIGHTS, memory(entry.b, engine, const_cast<void*>(m.b))},
      {DNNL_ARG_DST, memory(entry.c, engine, m.c)},
      {DNNL_ARG_SCRATCHPAD, memory(entry.scratchpad, engine, thread_buffer(0, entry.scratchpad.get_size()))}};
  if (m.bias_dtype >= 0) args[DNNL_ARG_BIAS] = memory(entry.bias, engine, const_cast<void*>(m.bias));
  if (m.addend != nullptr) {
    const int arg = DNNL_ARG_ATTR_MULTIPLE_POST_OP(m.alpha != 1.f ? 1 : 0) | DNNL_ARG_SRC_1;
    args[arg] = memory(entry.c, engine, const_cast<void*>(m.addend));
  }
  dnnl::stream stream(engine);
  entry.primitive.execute(stream, args);
  stream.wait();
}

const char* isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::avx512_core_amx_fp16: return "avx512_core_amx_fp16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    case dnnl::cpu_isa::avx512_core_fp16: return "avx512_core_fp16";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx2_vnni_2: return "avx2_vnni_2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::sse41: return "sse41";
    default: return "default";
  }
}

}  // namespace
}  // namespace mxnet_amp_onednn

extern "C" __attribute__((visibility("default"))) int mxnet_amp_onednn_matmul(const AmpMatmul* m,
                                                                              char* error,
                                                                              int error_len) {
  return mxnet_amp_onednn::guarded(
      [m] {
        if (m->ndims < 2 || m->ndims > AMP_MATMUL_MAX_DIMS) {
          throw std::invalid_argument("ndims must be 2.." + std::to_string(AMP_MATMUL_MAX_DIMS));
        }
        mxnet_amp_onednn::run(*m);
      },
      error, error_len);
}

/*!
 * \brief The primitive caches' counters: entries now, hits, misses, evictions, scratch-buffer bytes held by all
 *        threads, the capacity per kind of primitive (MXNET_AMP_ONEDNN_CACHE_SIZE) and oneDNN's own
 *        primitive cache's capacity, in that order.
 */
extern "C" __attribute__((visibility("default"))) void mxnet_amp_onednn_cache_stats(int64_t* out) {
  const auto& c = mxnet_amp_onednn::cache_counters();
  out[0] = c.entries;
  out[1] = c.hits;
  out[2] = c.misses;
  out[3] = c.evictions;
  out[4] = c.buffer_bytes;
  out[5] = static_cast<int64_t>(mxnet_amp_onednn::cache_capacity());
  mxnet_amp_onednn::cpu_engine();  // sets oneDNN's capacity on first use
  out[6] = dnnl::get_primitive_cache_capacity();
}

/*! \brief The OpenMP team of a call that starts while no other library call runs (see CallTeam in common.h). */
extern "C" __attribute__((visibility("default"))) int mxnet_amp_onednn_team_threads() {
  return mxnet_amp_onednn::team_threads(1);
}

extern "C" __attribute__((visibility("default"))) const char* mxnet_amp_onednn_info() {
  static const std::string info = [] {
    const dnnl_version_t* v = dnnl_version();
    return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
           std::to_string(v->patch) + ", cpu isa " + mxnet_amp_onednn::isa_name(dnnl::get_effective_cpu_isa());
  }();
  return info.c_str();
}
