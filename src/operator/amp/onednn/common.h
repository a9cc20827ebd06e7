/*!
 * \file common.h
 * \brief What the oneDNN 3 kernels of libmxnet_amp_onednn.so share: the engine, dtypes, the OpenMP team
 *        size, a primitive cache and the C entry points' error reporting.
 *
 * Threads: oneDNN sizes its parallel regions by omp_get_max_threads() of the calling thread, which is 1 in
 * MXNet's engine threads unless OMP_NUM_THREADS is set (MXNet's own kernels ask for their team explicitly).
 * Each call runs (and its primitive is created) with a team set for it, restored afterwards (CallTeam,
 * kernels/team.h): the cores divided among the library calls running. The team size is part of each cached
 * primitive's key.
 *
 * Primitives are cached per problem (the call's description without its data pointers): a model runs the
 * same few shapes over and over, and creating a primitive costs far more than running a small one. Each kind
 * of primitive has one least-recently-used cache of at most MXNET_AMP_ONEDNN_CACHE_SIZE entries (default
 * 256): a service sees shapes nobody listed, and an evicted primitive is freed once no running call holds it.
 * oneDNN's own primitive cache, which would keep every evicted primitive's JIT code (1024 by default), gets the
 * same bound (cpu_engine).
 * Scratch memory is the caller's (buffers per thread), so one primitive may run on several MXNet worker
 * threads at once; a buffer grows to the largest recent call and shrinks back after 256 calls in a row that each
 * needed under a quarter of it (ThreadBuffers). mxnet_amp_onednn_cache_stats reports entries, hits, misses,
 * evictions and buffer bytes.
 */
#ifndef MXNET_AMP_ONEDNN_COMMON_H_
#define MXNET_AMP_ONEDNN_COMMON_H_

#include <omp.h>
#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"
#include "../kernels/team.h"

namespace mxnet_amp_onednn {

constexpr int kFloat32 = 0;
constexpr int kBfloat16 = 12;

using mxnet_amp::CallTeam;
using mxnet_amp::env_threads;
using mxnet_amp::team_threads;

/*! \brief Entries per kind of primitive: MXNET_AMP_ONEDNN_CACHE_SIZE if set (at least 1), else 256. */
inline size_t cache_capacity() {
  static const size_t capacity = [] {
    const int n = env_threads("MXNET_AMP_ONEDNN_CACHE_SIZE");
    return static_cast<size_t>(n > 0 ? n : 256);
  }();
  return capacity;
}

/*!
 * \brief The CPU engine. Its creation bounds oneDNN's own primitive cache (which keeps every primitive created,
 *        1024 by default, whatever this library's caches evicted) to cache_capacity(), unless
 *        ONEDNN_PRIMITIVE_CACHE_CAPACITY or DNNL_PRIMITIVE_CACHE_CAPACITY sets it.
 */
inline dnnl::engine& cpu_engine() {
  static dnnl::engine engine = [] {
    if (std::getenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY") == nullptr &&
        std::getenv("DNNL_PRIMITIVE_CACHE_CAPACITY") == nullptr) {
      dnnl::set_primitive_cache_capacity(static_cast<int>(cache_capacity()));
    }
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return engine;
}

/*! \brief oneDNN's type for an MXNet type code; throws std::invalid_argument for other dtypes. */
inline dnnl::memory::data_type to_data_type(int dtype) {
  if (dtype == kFloat32) return dnnl::memory::data_type::f32;
  if (dtype == kBfloat16) return dnnl::memory::data_type::bf16;
  throw std::invalid_argument("dtype " + std::to_string(dtype) + ": operands must be float32 (0) or "
                              "bfloat16 (12)");
}

/*! \brief A row-major (plain, contiguous) memory descriptor. */
inline dnnl::memory::desc plain_desc(const dnnl::memory::dims& dims, dnnl::memory::data_type type) {
  dnnl::memory::dims strides(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * dims[i + 1];
  return dnnl::memory::desc(dims, type, strides);
}

/*! \brief Counters of the primitive caches and scratch buffers (all kinds, all threads). */
struct CacheCounters {
  std::atomic<int64_t> entries{0}, hits{0}, misses{0}, evictions{0}, buffer_bytes{0};
};

inline CacheCounters& cache_counters() {
  static CacheCounters counters;
  return counters;
}


/*!
 * \brief Entries built once per key (outside the lock: creating a primitive can take milliseconds), kept in a
 *        least-recently-used cache of cache_capacity() entries per Entry type.
 */
template <typename Entry>
std::shared_ptr<const Entry> cached(const std::string& problem, const std::function<std::shared_ptr<Entry>()>& make) {
  using Order = std::list<std::string>;
  struct Slot {
    std::shared_ptr<const Entry> value;
    typename Order::iterator position;
  };
  static std::mutex mutex;
  static Order order;  // most recently used first
  static std::unordered_map<std::string, Slot> cache;
  CacheCounters& counters = cache_counters();
  // A primitive is built for the calling thread's team size (CallTeam): another team needs another one.
  const std::string key = std::to_string(omp_get_max_threads()) + "|" + problem;
  {
    std::lock_guard<std::mutex> lock(mutex);
    const auto it = cache.find(key);
    if (it != cache.end()) {
      order.splice(order.begin(), order, it->second.position);
      ++counters.hits;
      return it->second.value;
    }
    ++counters.misses;
  }
  std::shared_ptr<const Entry> entry = make();
  std::lock_guard<std::mutex> lock(mutex);
  const auto it = cache.find(key);
  if (it != cache.end()) return it->second.value;  // another thread built it meanwhile
  order.push_front(key);
  cache.emplace(key, Slot{entry, order.begin()});
  ++counters.entries;
  while (cache.size() > cache_capacity()) {
    cache.erase(order.back());
    order.pop_back();
    --counters.entries;
    ++counters.evictions;
  }
  return entry;
}

/*! \brief The bytes of a vector of integers: a cache key. */
inline std::string key_of(const std::vector<int64_t>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(int64_t));
}

/*!
 * \brief Memory mapped straight from the kernel (zeroed pages) and unmapped whole when released, its bytes counted
 *        in cache_counters(). From malloc, a freed multi-megabyte buffer below glibc's mmap threshold (which rises
 *        to the largest block freed so far: MXNet frees 9 MB weights while a model is built) stays in malloc's heap
 *        and the next, larger one is placed beside it: 3 MB of ResNet-18's peak at batch 32 on class (a). The rest
 *        of that heap's growth is oneDNN's own (mxnet/amp/core/heap.py).
 */
class PageBuffer {
 public:
  PageBuffer() = default;
  explicit PageBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes == 0) return;
    data_ = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (data_ == MAP_FAILED) {
      data_ = nullptr;
      throw std::bad_alloc();
    }
    cache_counters().buffer_bytes += static_cast<int64_t>(bytes);
  }
  ~PageBuffer() { release(); }
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;
  PageBuffer(PageBuffer&& other) noexcept { *this = std::move(other); }
  PageBuffer& operator=(PageBuffer&& other) noexcept {
    if (this != &other) {
      release();
      std::swap(data_, other.data_);
      std::swap(bytes_, other.bytes_);
    }
    return *this;
  }
  void* data() const { return data_; }
  size_t size() const { return bytes_; }
  /*! \brief Unmaps the memory (before a larger buffer is mapped in its place). */
  void release() {
    if (data_ == nullptr) return;
    munmap(data_, bytes_);
    cache_counters().buffer_bytes -= static_cast<int64_t>(bytes_);
    data_ = nullptr;
    bytes_ = 0;
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

/*! \brief This thread's scratch buffers. */
class ThreadBuffers {
 public:
  /*!
   * \brief Buffer number slot, at least bytes long: grown when short, shrunk back after kShrinkAfter calls in a row
   *        that each needed under a quarter of it (buffers under 1 MB are kept). A training step calls every layer
   *        once per pass, so its largest layer's buffer stays mapped instead of being unmapped and faulted back in
   *        every step; a service whose requests got smaller gives the memory back.
   */
  void* get(int slot, size_t bytes) {
    if (slots_.size() <= static_cast<size_t>(slot)) slots_.resize(slot + 1);
    Slot& s = slots_[slot];
    const bool oversized = s.buffer.size() > (1u << 20) && s.buffer.size() / 4 > bytes;
    s.oversized_calls = oversized ? s.oversized_calls + 1 : 0;
    if (s.buffer.size() < bytes || s.oversized_calls > kShrinkAfter) {
      s.buffer.release();  // the old one goes before the new one comes
      s.buffer = PageBuffer(bytes);
      s.oversized_calls = 0;
    }
    return s.buffer.data();
  }

 private:
  static constexpr int kShrinkAfter = 256;
  struct Slot {
    PageBuffer buffer;
    int oversized_calls = 0;
  };
  std::vector<Slot> slots_;
};

/*! \brief This thread's scratch buffer number slot, at least bytes long (kept for the next call). */
inline void* thread_buffer(int slot, size_t bytes) {
  thread_local ThreadBuffers buffers;
  return buffers.get(slot, bytes);
}

/*! \brief Runs body for a C entry point: 0, or -1 with the exception's message in error. */
inline int guarded(const std::function<void()>& body, char* error, int error_len) {
  try {
    body();
    return 0;
  } catch (const dnnl::error& e) {
    std::snprintf(error, error_len, "oneDNN: %s (status %d)", e.what(), static_cast<int>(e.status));
  } catch (const std::exception& e) {
    std::snprintf(error, error_len, "%s", e.what());
  }
  return -1;
}

}  // namespace mxnet_amp_onednn

#endif  // MXNET_AMP_ONEDNN_COMMON_H_
