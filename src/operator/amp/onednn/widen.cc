/*!
 * \file widen.cc
 * \brief bfloat16 storage on float32 arithmetic where oneDNN 3 has no bfloat16 primitives: widen.h.
 */
#include "widen.h"

#include "../kernels/tensor_math.h"
#include "common.h"

namespace mxnet_amp_onednn {

bool bf16_primitives() {
  static const bool ok = [] {
    const dnnl::memory::dims dims = {2, 2};
    try {
      const auto desc = plain_desc(dims, dnnl::memory::data_type::bf16);
      dnnl::matmul::primitive_desc(cpu_engine(), desc, desc, desc);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return ok;
}

extern "C" __attribute__((visibility("default"))) int mxnet_amp_onednn_bf16_primitives() {
  return bf16_primitives() ? 1 : 0;
}

int64_t span(int ndims, const int64_t* dims, const int64_t* strides) {
  int64_t last = 0;
  for (int i = 0; i < ndims; ++i) {
    if (dims[i] == 0) return 0;
    last += (dims[i] - 1) * strides[i];
  }
  return last + 1;
}

bool Widening::needed(std::initializer_list<int> dtypes) {
  for (int d : dtypes) {
    if (d == kBfloat16) return !bf16_primitives();
  }
  return false;
}

namespace {

// This thread's widening buffers, by slot; each grows to the largest size asked of it and is kept.
class Buffers {
 public:
  float* get(int slot, int64_t n) {
    if (buffers_.size() <= static_cast<size_t>(slot)) buffers_.resize(slot + 1);
    PageBuffer& b = buffers_[slot];
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    if (b.size() < bytes) {
      b.release();  // the old one goes before the new one comes
      b = PageBuffer(bytes);
    }
    return static_cast<float*>(b.data());
  }
  int in_use = 0;

 private:
  std::vector<PageBuffer> buffers_;
};

Buffers& thread_buffers() {
  thread_local Buffers buffers;
  return buffers;
}

}  // namespace

Widening::Widening(int threads) : threads_(threads), first_slot_(thread_buffers().in_use) {}

Widening::~Widening() { thread_buffers().in_use = first_slot_; }

float* Widening::buffer(int64_t n) {
  Buffers& buffers = thread_buffers();
  buffers.in_use = first_slot_ + ++slots_;
  return buffers.get(first_slot_ + slots_ - 1, n);  // written before it is read
}

const void* Widening::input(const void* p, int* dtype, int64_t n) {
  const int from = *dtype;
  if (from < 0) return p;
  *dtype = kFloat32;
  if (from == kFloat32 || p == nullptr) return p;
  float* copy = buffer(n);
  mxnet_amp::convert_into(copy, kFloat32, p, from, n, threads_);
  return copy;
}

void* Widening::output(void* p, int* dtype, int64_t n, bool keep) {
  const int to = *dtype;
  if (to < 0) return p;
  *dtype = kFloat32;
  if (to == kFloat32 || p == nullptr) return p;
  float* result = buffer(n);
  if (keep) mxnet_amp::convert_into(result, kFloat32, p, to, n, threads_);
  results_.push_back({p, result, n});
  return result;
}

void Widening::finish() {
  for (const Result& r : results_) mxnet_amp::convert_into(r.to, kBfloat16, r.from, kFloat32, r.n, threads_);
  results_.clear();
}

}  // namespace mxnet_amp_onednn
