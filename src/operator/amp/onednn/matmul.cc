/*!
 * \file matmul.cc
 * \brief libmxnet_amp_onednn.so: matrix products with oneDNN 3 (bfloat16 or float32 operands, float32
 *        accumulation), behind the C interface of matmul_api.h.
 *
 * oneDNN 3 picks its fastest kernel for the CPU (AMX tiles on Xeons with amx_bf16, AVX512-BF16 dot
 * products, reference kernels elsewhere). Operands stay in their plain strided layouts: MXNet hands
 * extension ops plain arrays, and oneDNN's matmul packs the weights internally as it goes.
 *
 * Threads: oneDNN sizes its parallel regions by omp_get_max_threads() of the calling thread, which MXNet sets
 * to 1 in its engine threads (its own kernels ask for threads explicitly). MXNET_AMP_ONEDNN_THREADS=<n> makes
 * each product run (and its primitive be created) with a team of n, restored afterwards. Not the default: on
 * the shared 2-core machine this was developed on, a second spinning OpenMP team made products slower as
 * often as faster.
 *
 * Primitives are cached per problem (dimensions, strides, dtypes, bias): a model runs the same few shapes
 * over and over, and creating a primitive costs far more than running a small one. The scratchpad is the
 * caller's (one growing buffer per thread), so one primitive may run on several MXNet worker threads at
 * once.
 */
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"
#include "matmul_api.h"

namespace {

using dnnl::memory;

constexpr int kFloat32 = 0;
constexpr int kBfloat16 = 12;

struct Cached {
  dnnl::matmul primitive;
  memory::desc a, b, c, bias, scratchpad;
};

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

bool to_data_type(int dtype, memory::data_type* out) {
  if (dtype == kFloat32) {
    *out = memory::data_type::f32;
  } else if (dtype == kBfloat16) {
    *out = memory::data_type::bf16;
  } else {
    return false;
  }
  return true;
}

memory::desc plain_desc(int ndims, const int64_t* dims, const int64_t* strides, memory::data_type type) {
  return memory::desc(memory::dims(dims, dims + ndims), type, memory::dims(strides, strides + ndims));
}

// The problem without its data pointers: the cache key.
std::string problem_key(const AmpMatmul& m) {
  std::vector<int64_t> k = {m.ndims, m.a_dtype, m.b_dtype, m.c_dtype, m.bias_dtype, m.relu};
  for (const int64_t* v : {m.a_dims, m.a_strides, m.b_dims, m.b_strides, m.c_dims, m.c_strides}) {
    k.insert(k.end(), v, v + m.ndims);
  }
  return std::string(reinterpret_cast<const char*>(k.data()), k.size() * sizeof(int64_t));
}

std::shared_ptr<const Cached> create(const AmpMatmul& m) {
  memory::data_type ta, tb, tc, tbias = memory::data_type::f32;
  if (!to_data_type(m.a_dtype, &ta) || !to_data_type(m.b_dtype, &tb) || !to_data_type(m.c_dtype, &tc) ||
      (m.bias_dtype >= 0 && !to_data_type(m.bias_dtype, &tbias))) {
    throw std::invalid_argument("operand dtypes must be float32 (0) or bfloat16 (12)");
  }
  auto entry = std::make_shared<Cached>();
  entry->a = plain_desc(m.ndims, m.a_dims, m.a_strides, ta);
  entry->b = plain_desc(m.ndims, m.b_dims, m.b_strides, tb);
  entry->c = plain_desc(m.ndims, m.c_dims, m.c_strides, tc);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (m.relu) {
    dnnl::post_ops ops;
    ops.append_eltwise(dnnl::algorithm::eltwise_relu, 0.f, 0.f);
    attr.set_post_ops(ops);
  }
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

std::shared_ptr<const Cached> lookup(const AmpMatmul& m) {
  static std::mutex mutex;
  static std::unordered_map<std::string, std::shared_ptr<const Cached>> cache;
  const std::string key = problem_key(m);
  {
    std::lock_guard<std::mutex> lock(mutex);
    const auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  auto entry = create(m);  // outside the lock: creating a primitive can take milliseconds
  std::lock_guard<std::mutex> lock(mutex);
  return cache.emplace(key, std::move(entry)).first->second;
}

// MXNET_AMP_ONEDNN_THREADS, or 0 (leave the caller's team size).
int product_threads() {
  static const int threads = [] {
    const char* env = std::getenv("MXNET_AMP_ONEDNN_THREADS");
    const int n = env != nullptr ? std::atoi(env) : 0;
    return n > 0 ? n : 0;
  }();
  return threads;
}

// Sets this thread's OpenMP team size (when threads > 0) for one product; restores it on scope exit.
class TeamSize {
 public:
  explicit TeamSize(int threads) : saved_(omp_get_max_threads()), set_(threads > 0) {
    if (set_) omp_set_num_threads(threads);
  }
  ~TeamSize() {
    if (set_) omp_set_num_threads(saved_);
  }

 private:
  int saved_;
  bool set_;
};

void run(const AmpMatmul& m) {
  const TeamSize team(product_threads());  // before creating the primitive: it splits work by the team size
  const auto entry = lookup(m);
  auto& engine = cpu_engine();
  thread_local std::vector<char> scratch;
  if (scratch.size() < entry->scratchpad.get_size()) scratch.resize(entry->scratchpad.get_size());
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, memory(entry->a, engine, const_cast<void*>(m.a))},
      {DNNL_ARG_WEIGHTS, memory(entry->b, engine, const_cast<void*>(m.b))},
      {DNNL_ARG_DST, memory(entry->c, engine, m.c)},
      {DNNL_ARG_SCRATCHPAD, memory(entry->scratchpad, engine, scratch.data())}};
  if (m.bias_dtype >= 0) args[DNNL_ARG_BIAS] = memory(entry->bias, engine, const_cast<void*>(m.bias));
  dnnl::stream stream(engine);
  entry->primitive.execute(stream, args);
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

extern "C" __attribute__((visibility("default"))) int mxnet_amp_onednn_matmul(const AmpMatmul* m,
                                                                              char* error,
                                                                              int error_len) {
  try {
    if (m->ndims < 2 || m->ndims > AMP_MATMUL_MAX_DIMS) {
      throw std::invalid_argument("ndims must be 2.." + std::to_string(AMP_MATMUL_MAX_DIMS));
    }
    run(*m);
    return 0;
  } catch (const dnnl::error& e) {
    std::snprintf(error, error_len, "oneDNN: %s (status %d)", e.what(), static_cast<int>(e.status));
  } catch (const std::exception& e) {
    std::snprintf(error, error_len, "%s", e.what());
  }
  return -1;
}

extern "C" __attribute__((visibility("default"))) const char* mxnet_amp_onednn_info() {
  static const std::string info = [] {
    const dnnl_version_t* v = dnnl_version();
    return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
           std::to_string(v->patch) + ", cpu isa " + isa_name(dnnl::get_effective_cpu_isa());
  }();
  return info.c_str();
}
