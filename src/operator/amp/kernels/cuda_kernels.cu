/*!
 * \file cuda_kernels.cu
 * \brief CUDA multi-tensor cast and unscale+check (see cuda_kernels.h), no MXNet headers.
 *
 * Launcher: tensors are cut into chunks of chunk_size elements; tensor metadata and a
 * (tensor, chunk) pair per block are packed into the kernel arguments (under the 4 KB limit), one
 * launch per kMaxTensors tensors or kMaxBlocks chunks. Each block handles one chunk and never
 * reads or writes past min(size, (chunk + 1) * chunk_size): every index is bounds-checked, so any
 * shape and any element offset is safe (cf. MXNet #19318). Math in float32 (float64 -> float64 in
 * float64), conversions from convert.h: the same bits as the CPU kernels, except NaN payloads
 * (CUDA arithmetic returns the canonical NaN; x86 keeps the payload).
 */
#include <cuda_runtime.h>

#include <algorithm>

#include "convert.h"
#include "cuda_kernels.h"
#include "cuda_storage.cuh"

namespace mxnet_amp {
namespace {

constexpr int kMaxTensors = 48;
constexpr int kMaxBlocks = 256;
constexpr int kThreads = 512;
constexpr int kIlp = 4;  // elements in flight per thread: loads of one round are issued together

struct TensorBatch {
  void* in[kMaxTensors];
  void* out[kMaxTensors];
  int64_t size[kMaxTensors];
  int in_dtype[kMaxTensors];
  int out_dtype[kMaxTensors];
  int64_t chunk_size;
  int block_tensor[kMaxBlocks];
  int block_chunk[kMaxBlocks];
};
static_assert(sizeof(TensorBatch) <= 4096, "kernel arguments must fit in 4 KB");

using cuda::F32;
using cuda::F16;
using cuda::BF16;
using cuda::F64;

template <typename Src, typename Dst>
__device__ void cast_range(const void* in, void* out, int64_t begin, int64_t end) {
  const typename Src::storage* src = static_cast<const typename Src::storage*>(in);
  typename Dst::storage* dst = static_cast<typename Dst::storage*>(out);
  for (int64_t base = begin + threadIdx.x; base < end; base += kIlp * blockDim.x) {
    typename Src::storage v[kIlp];
#pragma unroll
    for (int j = 0; j < kIlp; ++j) {
      const int64_t i = base + j * blockDim.x;
      if (i < end) v[j] = src[i];
    }
#pragma unroll
    for (int j = 0; j < kIlp; ++j) {
      const int64_t i = base + j * blockDim.x;
      if (i < end) dst[i] = Dst::store(Src::load(v[j]));
    }
  }
}

// Exact widening to float64 (and float64 copies) do not go through float32.
template <typename Src>
__device__ void widen_range(const void* in, void* out, int64_t begin, int64_t end) {
  const typename Src::storage* src = static_cast<const typename Src::storage*>(in);
  double* dst = static_cast<double*>(out);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    dst[i] = static_cast<double>(src[i]);
  }
}

template <typename Dst>
__device__ void cast_from(int src, const void* in, void* out, int64_t begin, int64_t end) {
  switch (src) {
    case kFloat32: cast_range<F32, Dst>(in, out, begin, end); break;
    case kFloat16: cast_range<F16, Dst>(in, out, begin, end); break;
    case kBfloat16: cast_range<BF16, Dst>(in, out, begin, end); break;
    default: cast_range<F64, Dst>(in, out, begin, end); break;
  }
}

__global__ void __launch_bounds__(kThreads) cast_kernel(TensorBatch batch) {
  const int t = batch.block_tensor[blockIdx.x];
  const int64_t begin = static_cast<int64_t>(batch.block_chunk[blockIdx.x]) * batch.chunk_size;
  const int64_t end = min(batch.size[t], begin + batch.chunk_size);
  const void* in = batch.in[t];
  void* out = batch.out[t];
  const int src = batch.in_dtype[t];
  switch (batch.out_dtype[t]) {
    case kFloat32: cast_from<F32>(src, in, out, begin, end); break;
    case kFloat16: cast_from<F16>(src, in, out, begin, end); break;
    case kBfloat16: cast_from<BF16>(src, in, out, begin, end); break;
    default:
      if (src == kFloat64) {
        widen_range<F64>(in, out, begin, end);
      } else if (src == kFloat32) {
        widen_range<F32>(in, out, begin, end);
      } else {
        cast_from<F64>(src, in, out, begin, end);
      }
      break;
  }
}

__device__ __forceinline__ bool finite_f32(float v) { return (float_bits(v) & 0x7f800000u) != 0x7f800000u; }

// Unscales [begin, end) in place; returns whether this thread saw only finite results and adds
// the squares of its results to *acc.
template <typename T>
__device__ bool unscale_range(void* data, int64_t begin, int64_t end, float inv_scale, bool write,
                              float* acc) {
  typename T::storage* p = static_cast<typename T::storage*>(data);
  bool ok = true;
  for (int64_t base = begin + threadIdx.x; base < end; base += kIlp * blockDim.x) {
    typename T::storage x[kIlp];
#pragma unroll
    for (int j = 0; j < kIlp; ++j) {
      const int64_t i = base + j * blockDim.x;
      if (i < end) x[j] = p[i];
    }
#pragma unroll
    for (int j = 0; j < kIlp; ++j) {
      const int64_t i = base + j * blockDim.x;
      if (i < end) {
        const typename T::storage r = T::store(T::load(x[j]) * inv_scale);
        if (write) p[i] = r;
        const float v = T::load(r);
        ok = ok && finite_f32(v);
        *acc += v * v;
      }
    }
  }
  return ok;
}

__device__ bool unscale_f64(void* data, int64_t begin, int64_t end, float inv_scale, bool write,
                            float* acc) {
  double* p = static_cast<double*>(data);
  const double s = inv_scale;
  bool ok = true;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double r = p[i] * s;
    if (write) p[i] = r;
    ok = ok && isfinite(r);
    *acc += static_cast<float>(r * r);
  }
  return ok;
}

__global__ void __launch_bounds__(kThreads) unscale_kernel(TensorBatch batch, float inv_scale,
                                                           float* finite_flag, float* sum_squares) {
  const int t = batch.block_tensor[blockIdx.x];
  const int64_t begin = static_cast<int64_t>(batch.block_chunk[blockIdx.x]) * batch.chunk_size;
  const int64_t end = min(batch.size[t], begin + batch.chunk_size);
  const bool write = inv_scale != 1.0f;
  float acc = 0.0f;
  bool ok;
  switch (batch.in_dtype[t]) {
    case kFloat32: ok = unscale_range<F32>(batch.in[t], begin, end, inv_scale, write, &acc); break;
    case kFloat16: ok = unscale_range<F16>(batch.in[t], begin, end, inv_scale, write, &acc); break;
    case kBfloat16: ok = unscale_range<BF16>(batch.in[t], begin, end, inv_scale, write, &acc); break;
    default: ok = unscale_f64(batch.in[t], begin, end, inv_scale, write, &acc); break;
  }
  if (!ok) *finite_flag = 0.0f;  // every writer stores the same value
  if (sum_squares == nullptr) return;
  for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, offset);
  __shared__ float warp_sums[kThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = acc;
  __syncthreads();
  if (warp == 0) {
    acc = lane < static_cast<int>(blockDim.x / 32) ? warp_sums[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, offset);
    if (lane == 0) atomicAdd(sum_squares, acc);
  }
}

__global__ void init_results(float* finite_flag, float* sum_squares) {
  *finite_flag = 1.0f;
  if (sum_squares != nullptr) *sum_squares = 0.0f;
}

// Packs (tensor, chunk) work into TensorBatch launches; launch(batch, blocks) runs one batch.
template <typename Launch>
const char* for_each_batch(int64_t chunk_size, const TensorRef* inputs, const TensorRef* outputs,
                           int n, Launch launch) {
  TensorBatch batch;
  batch.chunk_size = std::max<int64_t>(chunk_size, 1);
  int tensors = 0, blocks = 0;
  for (int t = 0; t < n; ++t) {
    if (inputs[t].size == 0) continue;
    batch.in[tensors] = inputs[t].data;
    batch.out[tensors] = outputs ? outputs[t].data : nullptr;
    batch.size[tensors] = inputs[t].size;
    batch.in_dtype[tensors] = inputs[t].dtype;
    batch.out_dtype[tensors] = outputs ? outputs[t].dtype : inputs[t].dtype;
    const int64_t chunks = (inputs[t].size + batch.chunk_size - 1) / batch.chunk_size;
    for (int64_t c = 0; c < chunks; ++c) {
      batch.block_tensor[blocks] = tensors;
      batch.block_chunk[blocks] = static_cast<int>(c);
      ++blocks;
      const bool last_chunk = c == chunks - 1;
      if (blocks == kMaxBlocks || (last_chunk && tensors + 1 == kMaxTensors)) {
        launch(batch, blocks);
        const cudaError_t err = cudaGetLastError();
        if (err != cudaSuccess) return cudaGetErrorString(err);
        blocks = 0;
        if (last_chunk) {
          tensors = -1;  // the batch is full: start the next tensor in slot 0
        } else {
          batch.in[0] = batch.in[tensors];  // keep the current tensor, now in slot 0
          batch.out[0] = batch.out[tensors];
          batch.size[0] = batch.size[tensors];
          batch.in_dtype[0] = batch.in_dtype[tensors];
          batch.out_dtype[0] = batch.out_dtype[tensors];
          tensors = 0;
        }
      }
    }
    ++tensors;
  }
  if (blocks > 0) {
    launch(batch, blocks);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return cudaGetErrorString(err);
  }
  return nullptr;
}

}  // namespace

const char* cuda_multi_tensor_cast(int64_t chunk_size, const TensorRef* inputs,
                                   const TensorRef* outputs, int n, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return for_each_batch(chunk_size, inputs, outputs, n, [s](const TensorBatch& batch, int blocks) {
    cast_kernel<<<blocks, kThreads, 0, s>>>(batch);
  });
}

const char* cuda_multi_tensor_unscale_check(int64_t chunk_size, float* finite_flag,
                                            float* sum_squares, const TensorRef* tensors, int n,
                                            float inv_scale, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  init_results<<<1, 1, 0, s>>>(finite_flag, sum_squares);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return cudaGetErrorString(err);
  return for_each_batch(chunk_size, tensors, nullptr, n,
                        [=](const TensorBatch& batch, int blocks) {
                          unscale_kernel<<<blocks, kThreads, 0, s>>>(batch, inv_scale, finite_flag,
                                                                      sum_squares);
                        });
}

}  // namespace mxnet_amp
