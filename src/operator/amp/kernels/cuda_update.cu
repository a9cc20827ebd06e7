/*!
 * \file cuda_update.cu
 * \brief CUDA fused optimizer update and loss-scaler step (see cuda_kernels.h), no MXNet headers.
 *
 * Parameters are cut into chunks of chunk_size elements, one block per chunk; the parameters of a launch and a
 * (parameter, chunk) pair per block travel in the kernel arguments (under the 4 KB limit). Every block reads the
 * step's finite flag and returns at once when it is 0, so a skipped step writes nothing and the host never
 * waits. The per-element rules are update_rules.h's, as on CPUs.
 */
#include <cuda_runtime.h>

#include <algorithm>

#include "convert.h"
#include "cuda_kernels.h"
#include "cuda_storage.cuh"
#include "update_rules.h"

namespace mxnet_amp {
namespace {

constexpr int kMaxSets = 20;  // parameters per launch: UpdateBatch must fit the 4 KB of kernel arguments
constexpr int kMaxBlocks = 160;
constexpr int kThreads = 512;

struct UpdateBatch {
  UpdateSet sets[kMaxSets];
  int block_set[kMaxBlocks];
  int block_chunk[kMaxBlocks];
  int64_t chunk_size;
};
static_assert(sizeof(UpdateBatch) <= 4096 - 128, "kernel arguments must fit in 4 KB");

using cuda::F32;
using cuda::F16;
using cuda::BF16;

template <typename W, bool kMaster, int kRule, bool kClip>
__device__ void update_range(const UpdateScalars& k, const UpdateSet& s, int64_t begin, int64_t end) {
  typename W::storage* weight = static_cast<typename W::storage*>(s.weight.data);
  const typename W::storage* grad = static_cast<const typename W::storage*>(s.grad);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float w = kMaster ? s.master[i] : W::load(weight[i]);
    const float g = W::load(grad[i]);
    float unused = 0.0f;
    float out;
    if (kRule == kSgd || kRule == kSgdMomentum) {
      out = sgd_element<kRule == kSgdMomentum, kClip>(k, w, g, kRule == kSgdMomentum ? &s.state0[i] : &unused);
    } else {
      out = adam_element<kRule == kAdamW, kClip>(k, w, g, &s.state0[i], &s.state1[i]);
    }
    if (kMaster) s.master[i] = out;
    weight[i] = W::store(out);
  }
}

template <typename W, bool kMaster>
__device__ void update_typed(int rule, bool clip, const UpdateScalars& k, const UpdateSet& s, int64_t b,
                             int64_t e) {
  switch (rule) {
    case kSgd: return clip ? update_range<W, kMaster, kSgd, true>(k, s, b, e)
                           : update_range<W, kMaster, kSgd, false>(k, s, b, e);
    case kSgdMomentum: return clip ? update_range<W, kMaster, kSgdMomentum, true>(k, s, b, e)
                                   : update_range<W, kMaster, kSgdMomentum, false>(k, s, b, e);
    case kAdam: return clip ? update_range<W, kMaster, kAdam, true>(k, s, b, e)
                            : update_range<W, kMaster, kAdam, false>(k, s, b, e);
    default: return clip ? update_range<W, kMaster, kAdamW, true>(k, s, b, e)
                         : update_range<W, kMaster, kAdamW, false>(k, s, b, e);
  }
}

__global__ void __launch_bounds__(kThreads) update_kernel(UpdateBatch batch, UpdateHyper h, const float* flag,
                                                          const double* state, double rescale_grad,
                                                          const float* previous_applied) {
  if (*flag == 0.0f) return;
  UpdateSet s = batch.sets[batch.block_set[blockIdx.x]];
  if (previous_applied != nullptr && *previous_applied == 0.0f) {
    s.lr = s.lr_if_skipped;
    s.eta = s.eta_if_skipped;
  }
  const int64_t begin = batch.block_chunk[blockIdx.x] * batch.chunk_size;
  const int64_t end = min(s.weight.size, begin + batch.chunk_size);
  const UpdateScalars k = update_scalars(h, s, static_cast<float>(rescale_grad * (1.0 / state[0])));
  const bool clip = h.clip_gradient >= 0.0f;
  switch (s.weight.dtype) {
    case kFloat16: return update_typed<F16, true>(h.rule, clip, k, s, begin, end);
    case kBfloat16: return update_typed<BF16, true>(h.rule, clip, k, s, begin, end);
    default:
      return s.master ? update_typed<F32, true>(h.rule, clip, k, s, begin, end)
                      : update_typed<F32, false>(h.rule, clip, k, s, begin, end);
  }
}

__global__ void applied_kernel(const float* flag, float* applied) { *applied = *flag != 0.0f ? 1.0f : 0.0f; }

__global__ void scaler_kernel(ScalerRule rule, double* state, const float* flag, float* scale) {
  *scale = static_cast<float>(scaler_step(rule, state, *flag != 0.0f));
}

const char* last_error() {
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace

const char* cuda_multi_tensor_update(int64_t chunk_size, const UpdateHyper& hyper, const UpdateSet* sets, int n,
                                     const float* finite_flag, const double* scaler_state, double rescale_grad,
                                     const float* previous_applied, float* applied, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  applied_kernel<<<1, 1, 0, s>>>(finite_flag, applied);
  if (const char* err = last_error()) return err;
  UpdateBatch batch;
  batch.chunk_size = std::max<int64_t>(chunk_size, 1);
  int used = 0, blocks = 0;
  auto launch = [&]() -> const char* {
    if (blocks > 0) {
      update_kernel<<<blocks, kThreads, 0, s>>>(batch, hyper, finite_flag, scaler_state, rescale_grad,
                                                previous_applied);
    }
    used = blocks = 0;
    return last_error();
  };
  for (int t = 0; t < n; ++t) {
    if (sets[t].weight.size == 0) continue;
    if (used == kMaxSets) {
      if (const char* err = launch()) return err;
    }
    batch.sets[used] = sets[t];
    const int64_t chunks = (sets[t].weight.size + batch.chunk_size - 1) / batch.chunk_size;
    for (int64_t c = 0; c < chunks; ++c) {
      if (blocks == kMaxBlocks) {  // launch what is packed; this parameter continues in slot 0
        if (const char* err = launch()) return err;
        batch.sets[0] = sets[t];
      }
      batch.block_set[blocks] = used;
      batch.block_chunk[blocks] = static_cast<int>(c);
      ++blocks;
    }
    ++used;
  }
  return launch();
}

const char* cuda_scaler_update(const ScalerRule& rule, double* state, const float* finite_flag, float* scale,
                               void* stream) {
  scaler_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(rule, state, finite_flag, scale);
  return last_error();
}

}  // namespace mxnet_amp
