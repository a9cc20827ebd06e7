/*!
 * \file cuda_harness.cu
 * \brief Runs the CUDA multi-tensor kernels against the CPU kernels (the references, themselves
 *        tested bit-exact against NumPy/MXNet in tests/python) on a GPU, without MXNet, and prints
 *        bandwidth against a device-to-device copy of the same bytes.
 *
 * Build: bash tools/build_dev.sh -DMXNET_AMP_CUDA=ON -DMXNET_AMP_TESTS=ON
 * Run:   build/dev/tests/cpp/amp_cuda_harness [--bench-elements N]   (exit status 0 on success)
 */
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../../src/operator/amp/kernels/convert.h"
#include "../../src/operator/amp/kernels/cuda_kernels.h"
#include "../../src/operator/amp/kernels/multi_tensor.h"

using namespace mxnet_amp;

namespace {

int g_failures = 0;

void cuda_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "CUDA error in %s: %s\n", what, cudaGetErrorString(err));
    std::exit(2);
  }
}

void expect(bool cond, const std::string& what) {
  if (!cond) {
    ++g_failures;
    std::fprintf(stderr, "FAIL: %s\n", what.c_str());
  }
}

/*! \brief Host and device copies of n tensors; device tensors start `offset` elements into their block. */
struct Tensors {
  std::vector<std::vector<unsigned char>> host;
  std::vector<TensorRef> host_refs, dev_refs;
  std::vector<void*> blocks;

  ~Tensors() {
    for (void* b : blocks) cudaFree(b);
  }
  void add(int dtype, int64_t size, int64_t offset) {
    const size_t bytes = static_cast<size_t>(size) * dtype_bytes(dtype);
    host.emplace_back(bytes);
    void* block = nullptr;
    cuda_check(cudaMalloc(&block, bytes + offset * dtype_bytes(dtype) + 1), "cudaMalloc");
    blocks.push_back(block);
    dev_refs.push_back({static_cast<char*>(block) + offset * dtype_bytes(dtype), size, dtype});
  }
  void finish() {
    host_refs.clear();
    for (size_t i = 0; i < host.size(); ++i) {
      host_refs.push_back({host[i].data(), dev_refs[i].size, dev_refs[i].dtype});
    }
  }
  void upload() {
    for (size_t i = 0; i < host.size(); ++i) {
      cuda_check(cudaMemcpy(dev_refs[i].data, host[i].data(), host[i].size(), cudaMemcpyHostToDevice),
                 "upload");
    }
  }
  std::vector<unsigned char> download(size_t i) const {
    std::vector<unsigned char> out(host[i].size());
    cuda_check(cudaMemcpy(out.data(), dev_refs[i].data, out.size(), cudaMemcpyDeviceToHost),
               "download");
    return out;
  }
};

void fill_random(std::vector<unsigned char>* bytes, int dtype, std::mt19937* rng, bool finite) {
  const size_t n = bytes->size() / dtype_bytes(dtype);
  std::normal_distribution<float> normal(0.0f, 100.0f);
  for (size_t i = 0; i < n; ++i) {
    float v = normal(*rng);
    if (!finite && (*rng)() % 64 == 0) v = bits_float(static_cast<uint32_t>((*rng)()));
    switch (dtype) {
      case kFloat32: reinterpret_cast<float*>(bytes->data())[i] = v; break;
      case kFloat64: reinterpret_cast<double*>(bytes->data())[i] = v; break;
      case kFloat16: reinterpret_cast<uint16_t*>(bytes->data())[i] = float_to_half_bits(v); break;
      default: reinterpret_cast<uint16_t*>(bytes->data())[i] = float_to_bf16_bits(v); break;
    }
  }
}

bool is_nan(const unsigned char* p, int dtype) {
  switch (dtype) {
    case kFloat32: { float v; std::memcpy(&v, p, 4); return std::isnan(v); }
    case kFloat64: { double v; std::memcpy(&v, p, 8); return std::isnan(v); }
    case kFloat16: { uint16_t v; std::memcpy(&v, p, 2); return (v & 0x7fffu) > 0x7c00u; }
    default: { uint16_t v; std::memcpy(&v, p, 2); return (v & 0x7fffu) > 0x7f80u; }
  }
}

// Bit-identical, except that any NaN matches any NaN: CUDA arithmetic and conversions return the
// canonical NaN where x86 keeps the payload.
bool same_values(const std::vector<unsigned char>& a, const std::vector<unsigned char>& b, int dtype) {
  if (a.size() != b.size()) return false;
  const size_t width = dtype_bytes(dtype);
  for (size_t i = 0; i < a.size(); i += width) {
    if (std::memcmp(&a[i], &b[i], width) != 0 && !(is_nan(&a[i], dtype) && is_nan(&b[i], dtype))) {
      return false;
    }
  }
  return true;
}

const int kDtypes[] = {kFloat32, kFloat64, kFloat16, kBfloat16};
const int64_t kSizes[] = {0, 1, 2, 3, 7, 17, 33, 65, 127, 1000, 65535, 65536, 65537, 1000003};

void test_cast() {
  std::mt19937 rng(1);
  for (int src : kDtypes) {
    for (int dst : kDtypes) {
      Tensors in, out;
      int64_t offset = 0;
      for (int64_t size : kSizes) {
        in.add(src, size, offset);
        out.add(dst, size, (offset + 1) % 4);
        offset = (offset + 1) % 4;
      }
      for (int i = 0; i < 1100; ++i) {  // more than 1000 tensors: several launches
        in.add(src, i % 13, i % 3);
        out.add(dst, i % 13, 0);
      }
      in.finish();
      out.finish();
      for (auto& h : in.host) fill_random(&h, src, &rng, false);
      in.upload();
      const char* err = cuda_multi_tensor_cast(kDefaultChunkSize, in.dev_refs.data(),
                                               out.dev_refs.data(),
                                               static_cast<int>(in.dev_refs.size()), nullptr);
      expect(err == nullptr, std::string("cast launch: ") + (err ? err : ""));
      cuda_check(cudaDeviceSynchronize(), "cast");
      cpu_multi_tensor_cast(kDefaultChunkSize, in.host_refs.data(), out.host_refs.data(),
                            static_cast<int>(in.host_refs.size()));
      for (size_t i = 0; i < out.host.size(); ++i) {
        expect(same_values(out.download(i), out.host[i], dst),
               std::string("cast ") + dtype_name(src) + "->" + dtype_name(dst) + " tensor " +
                   std::to_string(i) + " size " + std::to_string(out.host_refs[i].size));
      }
    }
  }
}

void test_unscale(float inv_scale, bool finite, bool sum_squares, uint32_t seed) {
  std::mt19937 rng(seed);
  Tensors t;
  int64_t offset = 0;
  for (int dtype : kDtypes) {
    for (int64_t size : kSizes) {
      t.add(dtype, size, offset);
      offset = (offset + 1) % 3;
    }
  }
  for (int i = 0; i < 1100; ++i) t.add(kDtypes[i % 4], i % 11, i % 2);
  t.finish();
  for (size_t i = 0; i < t.host.size(); ++i) fill_random(&t.host[i], t.host_refs[i].dtype, &rng, finite);
  t.upload();
  float* dev_results = nullptr;
  cuda_check(cudaMalloc(&dev_results, 2 * sizeof(float)), "cudaMalloc results");
  const char* err = cuda_multi_tensor_unscale_check(
      kDefaultChunkSize, dev_results, sum_squares ? dev_results + 1 : nullptr, t.dev_refs.data(),
      static_cast<int>(t.dev_refs.size()), inv_scale, nullptr);
  expect(err == nullptr, std::string("unscale launch: ") + (err ? err : ""));
  float got[2] = {-1.0f, -1.0f};
  cuda_check(cudaMemcpy(got, dev_results, sizeof(got), cudaMemcpyDeviceToHost), "results");
  cudaFree(dev_results);
  float flag = -1.0f, sq = -1.0f;
  cpu_multi_tensor_unscale_check(kDefaultChunkSize, &flag, sum_squares ? &sq : nullptr,
                                 t.host_refs.data(), static_cast<int>(t.host_refs.size()), inv_scale);
  const std::string tag = " (inv_scale " + std::to_string(inv_scale) + ", seed " + std::to_string(seed) + ")";
  expect(got[0] == flag, "flag " + std::to_string(got[0]) + " vs CPU " + std::to_string(flag) + tag);
  if (sum_squares && flag == 1.0f) {
    expect(std::fabs(got[1] - sq) <= 1e-5f * sq,
           "sum of squares " + std::to_string(got[1]) + " vs CPU " + std::to_string(sq) + tag);
  }
  for (size_t i = 0; i < t.host.size(); ++i) {
    expect(same_values(t.download(i), t.host[i], t.host_refs[i].dtype),
           "unscaled tensor " + std::to_string(i) + tag);
  }
}

float time_ms(cudaEvent_t start, cudaEvent_t stop) {
  float ms = 0.0f;
  cuda_check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
  return ms;
}

void bench(int64_t total) {
  float *data = nullptr, *copy = nullptr, *flag = nullptr;
  cuda_check(cudaMalloc(&data, total * sizeof(float)), "bench malloc");
  cuda_check(cudaMalloc(&copy, total * sizeof(float)), "bench malloc");
  cuda_check(cudaMalloc(&flag, sizeof(float)), "bench malloc");
  cuda_check(cudaMemset(data, 0, total * sizeof(float)), "memset");
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  const int repeat = 20;
  cudaMemcpy(copy, data, total * sizeof(float), cudaMemcpyDeviceToDevice);
  cudaEventRecord(start);
  for (int r = 0; r < repeat; ++r) cudaMemcpyAsync(copy, data, total * sizeof(float), cudaMemcpyDeviceToDevice);
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  const double copy_ms = time_ms(start, stop) / repeat;
  const double gb = 2.0 * 4.0 * total / 1e9;
  std::printf("D2D copy of %lld float32: %.3f ms (%.0f GB/s)\n", static_cast<long long>(total),
              copy_ms, gb / copy_ms * 1e3);
  for (int count : {1, 100, 10000}) {
    std::vector<TensorRef> tensors;
    const int64_t per = total / count;
    for (int i = 0; i < count; ++i) {
      tensors.push_back({data + i * per, i == count - 1 ? total - i * per : per, kFloat32});
    }
    cuda_multi_tensor_unscale_check(kDefaultChunkSize, flag, nullptr, tensors.data(), count, 0.5f, nullptr);
    cudaEventRecord(start);
    for (int r = 0; r < repeat; ++r) {
      cuda_multi_tensor_unscale_check(kDefaultChunkSize, flag, nullptr, tensors.data(), count,
                                      (r % 2) ? 2.0f : 0.5f, nullptr);
    }
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    const double ms = time_ms(start, stop) / repeat;
    std::printf("%6d tensors: unscale+check %.3f ms (%.0f GB/s, %.0f%% of D2D copy)\n", count, ms,
                gb / ms * 1e3, 100.0 * copy_ms / ms);
  }
  cuda_check(cudaGetLastError(), "bench");
  cudaFree(data);
  cudaFree(copy);
  cudaFree(flag);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t bench_elements = 100000000LL;
  if (argc > 2 && std::string(argv[1]) == "--bench-elements") bench_elements = std::atoll(argv[2]);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop;
  cuda_check(cudaGetDeviceProperties(&prop, 0), "properties");
  std::printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  test_cast();
  for (uint32_t seed = 0; seed < 2; ++seed) {
    test_unscale(1.0f / 65536, true, true, seed);
    test_unscale(0.5f, false, true, seed);
    test_unscale(0.375f, false, false, seed);
    test_unscale(1.0f, false, true, seed);
  }
  std::printf("%s: %d failure(s)\n", g_failures ? "FAILED" : "OK", g_failures);
  bench(bench_elements);
  return g_failures ? 1 : 0;
}
