/*!
 * \file cpu_kernels.cc
 * \brief CPU multi-tensor launcher: splits tensors into chunks and runs them in parallel (OpenMP) with
 *        the loops of the best instruction set of this CPU. Each thread takes one contiguous run of
 *        chunks holding an equal share of the elements, so it streams through memory in order.
 */
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include "cpu_loops.h"
#include "multi_tensor.h"
#include "round.h"

namespace mxnet_amp {
namespace {

// Below this many elements in one call, threads cost more than they save.
constexpr int64_t kParallelThreshold = int64_t(1) << 17;

const CpuLoops* select_loops() {
#if defined(AMP_HAVE_X86_ISAS)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    return cpu_loops_avx512();
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi2")) {
    return cpu_loops_avx2();
  }
#endif
  return cpu_loops_baseline();
}


struct Chunk {
  int tensor;
  int64_t begin;
  int64_t end;
};

std::vector<Chunk> make_chunks(int64_t chunk_size, const TensorRef* tensors, int n, int64_t* total) {
  const int64_t step = std::max<int64_t>(chunk_size, 1);
  std::vector<Chunk> chunks;
  *total = 0;
  for (int t = 0; t < n; ++t) {
    *total += tensors[t].size;
    for (int64_t b = 0; b < tensors[t].size; b += step) {
      chunks.push_back({t, b, std::min(tensors[t].size, b + step)});
    }
  }
  return chunks;
}

// Calls fn(c) for every chunk index c; in parallel when the call is large enough.
template <typename Fn>
void for_each_chunk(const std::vector<Chunk>& chunks, int64_t total, Fn fn) {
  const int64_t count = static_cast<int64_t>(chunks.size());
  if (total < kParallelThreshold || count < 2) {
    for (int64_t c = 0; c < count; ++c) fn(c);
    return;
  }
  std::vector<int64_t> start(count + 1, 0);  // elements before chunk c
  for (int64_t c = 0; c < count; ++c) start[c + 1] = start[c] + chunks[c].end - chunks[c].begin;
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const auto first = [&](int64_t share) {
      return std::lower_bound(start.begin(), start.end() - 1, total * share / threads) - start.begin();
    };
    const int64_t hi = t + 1 == threads ? count : first(t + 1);
    for (int64_t c = first(t); c < hi; ++c) fn(c);
  }
}

char* at(const TensorRef& t, int64_t index) {
  return static_cast<char*>(t.data) + index * dtype_bytes(t.dtype);
}

}  // namespace

const CpuLoops& cpu_loops() {
  static const CpuLoops* table = select_loops();
  return *table;
}

bool is_float_dtype(int dtype) {
  return dtype == kFloat32 || dtype == kFloat64 || dtype == kFloat16 || dtype == kBfloat16;
}

const char* dtype_name(int dtype) {
  switch (dtype) {
    case kFloat32: return "float32";
    case kFloat64: return "float64";
    case kFloat16: return "float16";
    case kBfloat16: return "bfloat16";
    case 3: return "uint8";
    case 4: return "int32";
    case 5: return "int8";
    case 6: return "int64";
    case 7: return "bool";
    default: return "unknown dtype";
  }
}

int dtype_bytes(int dtype) {
  switch (dtype) {
    case kFloat32: return 4;
    case kFloat64: return 8;
    case kFloat16:
    case kBfloat16: return 2;
    default: return 0;
  }
}

int widest_dtype(const int* dtypes, int n) {
  bool f64 = false, f32 = false, f16 = false, bf16 = false;
  for (int i = 0; i < n; ++i) {
    f64 |= dtypes[i] == kFloat64;
    f32 |= dtypes[i] == kFloat32;
    f16 |= dtypes[i] == kFloat16;
    bf16 |= dtypes[i] == kBfloat16;
  }
  if (f64) return kFloat64;
  if (f32 || (f16 && bf16)) return kFloat32;
  return f16 ? kFloat16 : kBfloat16;
}

const char* cpu_isa() { return cpu_loops().isa; }

void cpu_multi_tensor_cast(int64_t chunk_size, const TensorRef* inputs, const TensorRef* outputs,
                           int n) {
  int64_t total = 0;
  const std::vector<Chunk> chunks = make_chunks(chunk_size, inputs, n, &total);
  const CpuLoops& l = cpu_loops();
  for_each_chunk(chunks, total, [&](int64_t c) {
    const Chunk& k = chunks[c];
    const TensorRef& in = inputs[k.tensor];
    const TensorRef& out = outputs[k.tensor];
    l.cast(in.dtype, out.dtype, at(in, k.begin), at(out, k.begin), k.end - k.begin);
  });
}

void cpu_round_to(int64_t chunk_size, const TensorRef& in, const TensorRef& out, int dtype) {
  // Through the cast loops of this CPU (F16C / vectorised bf16), a short block at a time via the stack.
  constexpr int64_t kBlock = 2048;
  int64_t total = 0;
  const std::vector<Chunk> chunks = make_chunks(chunk_size, &in, 1, &total);
  const CpuLoops& l = cpu_loops();
  for_each_chunk(chunks, total, [&](int64_t c) {
    uint16_t low[kBlock];
    for (int64_t b = chunks[c].begin; b < chunks[c].end; b += kBlock) {
      const int64_t m = std::min(kBlock, chunks[c].end - b);
      l.cast(kFloat32, dtype, at(in, b), low, m);
      l.cast(dtype, kFloat32, low, at(out, b), m);
    }
  });
}

void cpu_multi_tensor_unscale_check(int64_t chunk_size, float* finite_flag, float* sum_squares,
                                    const TensorRef* tensors, int n, float inv_scale) {
  int64_t total = 0;
  const std::vector<Chunk> chunks = make_chunks(chunk_size, tensors, n, &total);
  const CpuLoops& l = cpu_loops();
  const bool write = inv_scale != 1.0f;
  // One partial sum per chunk, added in chunk order: the result does not depend on thread timing.
  std::vector<double> partial(sum_squares ? chunks.size() : 0, 0.0);
  std::atomic<bool> all_finite(true);
  for_each_chunk(chunks, total, [&](int64_t c) {
    const Chunk& k = chunks[c];
    const TensorRef& t = tensors[k.tensor];
    double* acc = sum_squares ? &partial[c] : nullptr;
    if (!l.unscale(t.dtype, at(t, k.begin), k.end - k.begin, inv_scale, write, acc)) {
      all_finite.store(false, std::memory_order_relaxed);
    }
  });
  *finite_flag = all_finite.load() ? 1.0f : 0.0f;
  if (sum_squares) {
    double total_sq = 0.0;
    for (double p : partial) total_sq += p;
    *sum_squares = static_cast<float>(total_sq);
  }
}

void cpu_multi_tensor_update(int64_t chunk_size, const UpdateHyper& hyper, const UpdateSet* sets, int n) {
  std::vector<TensorRef> weights(n);
  for (int i = 0; i < n; ++i) weights[i] = sets[i].weight;
  int64_t total = 0;
  const std::vector<Chunk> chunks = make_chunks(chunk_size, weights.data(), n, &total);
  const CpuLoops& l = cpu_loops();
  for_each_chunk(chunks, total, [&](int64_t c) {
    l.update(hyper, sets[chunks[c].tensor], chunks[c].begin, chunks[c].end);
  });
}

}  // namespace mxnet_amp
