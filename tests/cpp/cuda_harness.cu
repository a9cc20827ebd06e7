/*!
 * \file cuda_harness.cu
 * \brief Every CUDA kernel of the library against the CPU kernels (the references, themselves tested
 *        bit-exact against NumPy/MXNet in tests/python) on a GPU, without MXNet; then each kernel's
 *        bandwidth against a device-to-device copy of the same bytes.
 *
 * Bit for bit (any NaN matches any NaN: CUDA returns the canonical NaN where x86 keeps the payload):
 * - cast, every pair of float32/float64/float16/bfloat16: every float16 and bfloat16 bit pattern, a float32
 *   sweep (every top half with 32 low halves: ties, NaN payloads, denormals, overflow), random tensors at odd
 *   offsets, more tensors and chunks than one launch holds;
 * - multi-cast and widest cast: tensors of mixed input (and, as in backward, output) dtypes in one call;
 * - round (amp_round) to float16 and bfloat16, in place and not, past the grid-stride limit;
 * - unscale + finite check: values and flag (the sum of squares within 1e-5: float vs double sums);
 * - loss-scaler step on the float64 device state, over sequences of finite and non-finite flags;
 * - fused update (SGD, SGD with momentum, Adam, AdamW; clipping on/off, weight decay on/off; float32 weights,
 *   float32/float16/bfloat16 weights with float32 master weights), and a skipped step (finite flag 0) leaving
 *   every buffer's bits as they were. nvcc contracts multiply-adds (as in MXNet's own GPU kernels), so by
 *   default float32 results must agree to 1e-6 of the tensor's magnitude and float16/bfloat16 weights must be
 *   the GPU's master weights rounded, bit for bit; --exact-update asks the CPU's bits everywhere, for a build
 *   of cuda_update.cu with -fmad=false (tools/gpu_check.sh runs both).
 *
 * Build and run without MXNet: bash tools/gpu_check.sh. With CMake:
 *   bash tools/build_dev.sh -DMXNET_AMP_CUDA=ON -DMXNET_AMP_TESTS=ON; build/dev/tests/cpp/amp_cuda_harness
 * Usage: amp_cuda_harness [--bench-elements N] [--exact-update]   (N = 0: no benchmark; exit status 0 on success)
 */
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "../../src/operator/amp/kernels/convert.h"
#include "../../src/operator/amp/kernels/cuda_kernels.h"
#include "../../src/operator/amp/kernels/multi_tensor.h"
#include "../../src/operator/amp/kernels/round.h"
#include "../../src/operator/amp/kernels/scaler_rule.h"

using namespace mxnet_amp;

namespace {

int g_failures = 0;

void cuda_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "CUDA error in %s: %s\n", what, cudaGetErrorString(err));
    std::printf("FAILED: %d failure(s), then a CUDA error in %s\n", g_failures + 1, what);
    std::exit(1);
  }
}

void expect(bool cond, const std::string& what) {
  if (!cond) {
    ++g_failures;
    std::fprintf(stderr, "FAIL: %s\n", what.c_str());
  }
}

void expect_launched(const char* err, const std::string& what) {
  expect(err == nullptr, what + ": launch failed: " + (err ? err : ""));
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

/*! \brief A few device values (a flag, a scale, the scaler state), uploaded and downloaded whole. */
template <typename T>
struct DeviceScalars {
  T* dev = nullptr;
  explicit DeviceScalars(size_t n) { cuda_check(cudaMalloc(&dev, n * sizeof(T)), "cudaMalloc scalars"); }
  ~DeviceScalars() { cudaFree(dev); }
  void set(const T* values, size_t n) {
    cuda_check(cudaMemcpy(dev, values, n * sizeof(T), cudaMemcpyHostToDevice), "scalars upload");
  }
  void get(T* values, size_t n) const {
    cuda_check(cudaMemcpy(values, dev, n * sizeof(T), cudaMemcpyDeviceToHost), "scalars download");
  }
};

void store_value(std::vector<unsigned char>* bytes, int dtype, size_t i, float v) {
  switch (dtype) {
    case kFloat32: reinterpret_cast<float*>(bytes->data())[i] = v; break;
    case kFloat64: reinterpret_cast<double*>(bytes->data())[i] = v; break;
    case kFloat16: reinterpret_cast<uint16_t*>(bytes->data())[i] = float_to_half_bits(v); break;
    default: reinterpret_cast<uint16_t*>(bytes->data())[i] = float_to_bf16_bits(v); break;
  }
}

void fill_random(std::vector<unsigned char>* bytes, int dtype, std::mt19937* rng, bool finite,
                 float stddev = 100.0f) {
  const size_t n = bytes->size() / dtype_bytes(dtype);
  std::normal_distribution<float> normal(0.0f, stddev);
  for (size_t i = 0; i < n; ++i) {
    float v = normal(*rng);
    if (!finite && (*rng)() % 64 == 0) v = bits_float(static_cast<uint32_t>((*rng)()));
    store_value(bytes, dtype, i, v);
  }
}

// Low halves of the float32 sweep: round-to-nearest-even ties and their neighbours for bfloat16 (bit 15) and
// float16 (bit 12 for normal results, bits 13 and up for subnormal ones), with both parities of the kept bit.
const uint16_t kLowHalves[32] = {0x0000, 0x0001, 0x0002, 0x00ff, 0x07ff, 0x0800, 0x0fff, 0x1000,
                                 0x1001, 0x17ff, 0x1800, 0x1fff, 0x2000, 0x2001, 0x3000, 0x3001,
                                 0x4000, 0x4001, 0x5000, 0x6000, 0x7000, 0x7fff, 0x8000, 0x8001,
                                 0x8fff, 0x9000, 0xa000, 0xb000, 0xc000, 0xd000, 0xe000, 0xffff};
// Low 48 bits of the float64 sweep: float32 ties (bit 28) of both parities (bit 29), and their neighbours.
const uint64_t kLowBits64[8] = {0x0ull, 0x1ull, 0x0fffffffull, 0x10000000ull, 0x10000001ull, 0x30000000ull,
                                0xffffffffffffull, 0x123456789abull};

/*! \brief Elements of a full sweep: every bit pattern (16-bit types) or every top half with each low part. */
int64_t sweep_size(int dtype) {
  switch (dtype) {
    case kFloat32: return 65536 * 32;
    case kFloat64: return 65536 * 8;
    default: return 65536;
  }
}

/*! \brief Edge-case bit patterns, cycling through the sweep of the dtype (see sweep_size). */
void fill_sweep(std::vector<unsigned char>* bytes, int dtype) {
  const size_t n = bytes->size() / dtype_bytes(dtype);
  for (size_t i = 0; i < n; ++i) {
    switch (dtype) {
      case kFloat32: {
        const uint32_t u = static_cast<uint32_t>((i / 32) & 0xffffu) << 16 | kLowHalves[i % 32];
        std::memcpy(bytes->data() + 4 * i, &u, 4);
        break;
      }
      case kFloat64: {
        const uint64_t u = static_cast<uint64_t>((i / 8) & 0xffffu) << 48 | kLowBits64[i % 8];
        std::memcpy(bytes->data() + 8 * i, &u, 8);
        break;
      }
      default: {
        const uint16_t u = static_cast<uint16_t>(i & 0xffffu);
        std::memcpy(bytes->data() + 2 * i, &u, 2);
        break;
      }
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

std::string hex_bits(const unsigned char* p, int dtype) {
  uint64_t u = 0;
  std::memcpy(&u, p, dtype_bytes(dtype));  // little-endian
  char text[24];
  std::snprintf(text, sizeof(text), "0x%0*llx", 2 * dtype_bytes(dtype), static_cast<unsigned long long>(u));
  return text;
}

// Index of the first element whose bits differ, a NaN matching any NaN (CUDA arithmetic and conversions
// return the canonical NaN where x86 keeps the payload); -1 if none.
int64_t first_difference(const std::vector<unsigned char>& a, const std::vector<unsigned char>& b, int dtype) {
  const size_t width = dtype_bytes(dtype);
  for (size_t i = 0; i < a.size(); i += width) {
    if (std::memcmp(&a[i], &b[i], width) != 0 && !(is_nan(&a[i], dtype) && is_nan(&b[i], dtype))) {
      return static_cast<int64_t>(i / width);
    }
  }
  return -1;
}

/*! \brief Fails with the first differing element, its GPU and CPU bits. */
void expect_same(const std::vector<unsigned char>& got, const std::vector<unsigned char>& want, int dtype,
                 const std::string& what) {
  if (got.size() != want.size()) {
    expect(false, what + ": " + std::to_string(got.size()) + " bytes vs CPU " + std::to_string(want.size()));
    return;
  }
  const int64_t i = first_difference(got, want, dtype);
  if (i >= 0) {
    const size_t at = static_cast<size_t>(i) * dtype_bytes(dtype);
    expect(false, what + ": element " + std::to_string(i) + " is " + hex_bits(&got[at], dtype) + ", CPU " +
                      hex_bits(&want[at], dtype));
  }
}

const int kDtypes[] = {kFloat32, kFloat64, kFloat16, kBfloat16};
const int64_t kSizes[] = {0, 1, 2, 3, 7, 17, 33, 65, 127, 1000, 65535, 65536, 65537, 1000003};

// ---- casts -------------------------------------------------------------------------------------------------

/*! \brief cuda_multi_tensor_cast vs cpu_multi_tensor_cast in one call; tensor i goes from in[i] to out[i]. */
void check_cast(const Tensors& in, Tensors* out, int64_t chunk_size, const std::string& tag) {
  expect_launched(cuda_multi_tensor_cast(chunk_size, in.dev_refs.data(), out->dev_refs.data(),
                                         static_cast<int>(in.dev_refs.size()), nullptr),
                  tag);
  cuda_check(cudaDeviceSynchronize(), "cast");
  cpu_multi_tensor_cast(chunk_size, in.host_refs.data(), out->host_refs.data(),
                        static_cast<int>(in.host_refs.size()));
  for (size_t i = 0; i < out->host.size(); ++i) {
    expect_same(out->download(i), out->host[i], out->host_refs[i].dtype,
                tag + " tensor " + std::to_string(i) + " (" + dtype_name(in.host_refs[i].dtype) + "->" +
                    dtype_name(out->host_refs[i].dtype) + ", size " + std::to_string(out->host_refs[i].size) +
                    ")");
  }
}

// Every dtype pair: a full sweep, random tensors of every size at odd offsets, then more tensors than one launch
// holds; with chunk_size 1000, more chunks than one launch holds too.
void test_cast(int64_t chunk_size) {
  std::mt19937 rng(1);
  for (int src : kDtypes) {
    for (int dst : kDtypes) {
      Tensors in, out;
      in.add(src, sweep_size(src), 1);
      out.add(dst, sweep_size(src), 3);
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
      fill_sweep(&in.host[0], src);
      for (size_t i = 1; i < in.host.size(); ++i) fill_random(&in.host[i], src, &rng, false);
      in.upload();
      check_cast(in, &out, chunk_size,
                 std::string("cast ") + dtype_name(src) + "->" + dtype_name(dst) + " chunk " +
                     std::to_string(chunk_size));
    }
  }
}

// amp_multi_cast (one target) and amp_multi_widest_cast (widest_dtype of the inputs) over mixed inputs, and the
// backward pass (each gradient back to its own input dtype: mixed outputs), each in one call.
void test_multicast() {
  std::mt19937 rng(3);
  const std::vector<std::vector<int>> input_sets = {
      {kFloat16, kBfloat16}, {kFloat16, kFloat16}, {kBfloat16}, {kFloat16, kFloat32, kBfloat16},
      {kFloat64, kFloat16, kBfloat16, kFloat32}, {kBfloat16, kFloat64}};
  const int64_t sizes[] = {17, 0, 65537, 1, 1000, 200003, 3};
  for (const std::vector<int>& dtypes : input_sets) {
    const int k = static_cast<int>(dtypes.size());
    std::vector<std::vector<int>> targets;  // output dtype per input position
    targets.push_back(std::vector<int>(k, widest_dtype(dtypes.data(), k)));
    for (int dst : kDtypes) targets.push_back(std::vector<int>(k, dst));
    std::vector<int> backward(k);
    for (int j = 0; j < k; ++j) backward[j] = dtypes[(j + 1) % k];
    targets.push_back(backward);
    for (size_t t = 0; t < targets.size(); ++t) {
      Tensors in, out;
      for (int i = 0; i < 70; ++i) {  // more than one launch holds
        const int64_t size = i < k ? sweep_size(dtypes[i]) : sizes[i % 7];
        in.add(dtypes[i % k], size, i % 3);
        out.add(targets[t][i % k], size, (i + 1) % 2);
      }
      in.finish();
      out.finish();
      for (int i = 0; i < 70; ++i) {
        if (i < k) {
          fill_sweep(&in.host[i], dtypes[i]);
        } else {
          fill_random(&in.host[i], dtypes[i % k], &rng, false);
        }
      }
      in.upload();
      std::string names;
      for (int d : dtypes) names += std::string(names.empty() ? "" : ",") + dtype_name(d);
      const char* kind = t == 0 ? "widest cast" : (t + 1 == targets.size() ? "multi-cast back" : "multi-cast");
      check_cast(in, &out, kDefaultChunkSize, std::string(kind) + " of {" + names + "}");
    }
  }
}

// ---- round -------------------------------------------------------------------------------------------------

void test_round() {
  std::mt19937 rng(4);
  // The last size needs more than the kernel's 65535 blocks of 256 threads: the grid-stride loop.
  const int64_t sizes[] = {sweep_size(kFloat32), 0, 1, 7, 65537, 1000003, 65535 * 256 + 1001};
  for (int dtype : {kFloat16, kBfloat16}) {
    for (bool in_place : {false, true}) {
      Tensors in, out;
      for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); ++i) {
        in.add(kFloat32, sizes[i], i % 3);
        out.add(kFloat32, sizes[i], (i + 1) % 3);
      }
      in.finish();
      out.finish();
      fill_sweep(&in.host[0], kFloat32);
      for (size_t i = 1; i < in.host.size(); ++i) fill_random(&in.host[i], kFloat32, &rng, false);
      in.upload();
      for (size_t i = 0; i < in.host.size(); ++i) {
        const TensorRef& dev_out = in_place ? in.dev_refs[i] : out.dev_refs[i];
        const TensorRef& host_out = in_place ? in.host_refs[i] : out.host_refs[i];
        expect_launched(cuda_round_to(in.dev_refs[i], dev_out, dtype, nullptr), "round");
        cuda_check(cudaDeviceSynchronize(), "round");
        cpu_round_to(kDefaultChunkSize, in.host_refs[i], host_out, dtype);
        const Tensors& result = in_place ? in : out;
        expect_same(result.download(i), result.host[i], kFloat32,
                    std::string("round to ") + dtype_name(dtype) + (in_place ? " in place" : "") + ", tensor " +
                        std::to_string(i) + " size " + std::to_string(sizes[i]));
      }
    }
  }
}

// ---- unscale + finite check --------------------------------------------------------------------------------

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
  const size_t random_tensors = t.host.size();
  if (!finite) {
    for (int dtype : kDtypes) t.add(dtype, sweep_size(dtype), 1);
  }
  t.finish();
  for (size_t i = 0; i < t.host.size(); ++i) {
    if (i < random_tensors) {
      fill_random(&t.host[i], t.host_refs[i].dtype, &rng, finite);
    } else {
      fill_sweep(&t.host[i], t.host_refs[i].dtype);
    }
  }
  t.upload();
  DeviceScalars<float> results(2);
  expect_launched(cuda_multi_tensor_unscale_check(kDefaultChunkSize, results.dev,
                                                  sum_squares ? results.dev + 1 : nullptr, t.dev_refs.data(),
                                                  static_cast<int>(t.dev_refs.size()), inv_scale, nullptr),
                  "unscale");
  float got[2] = {-1.0f, -1.0f};
  results.get(got, 2);
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
    expect_same(t.download(i), t.host[i], t.host_refs[i].dtype, "unscaled tensor " + std::to_string(i) + tag);
  }
}

// ---- loss-scaler step --------------------------------------------------------------------------------------

std::string state_text(const double* s, float scale) {
  char text[160];
  std::snprintf(text, sizeof(text), "{%.17g, %g, %g, %g, %g, %g} scale %.9g", s[0], s[1], s[2], s[3], s[4], s[5],
                scale);
  return text;
}

void test_scaler() {
  const ScalerRule rules[] = {{false, 2.0, 0.5, 2000.0, 1.0, 16777216.0},
                              {true, 2.0, 0.5, 3.0, 1.0, 16777216.0},
                              {true, 1.5, 0.3, 1.0, 0.7, 1000.0}};
  const double starts[][kScalerStateSize] = {{65536.0, 0, 0, 0, 0, 0}, {10000.0, 2, 10, 3, 7, 0}};
  // Runs long enough to reach max_scale and min_scale, then flags in any order; any non-zero flag (0.5, NaN)
  // counts as finite and -0.0 as not, on both sides.
  std::vector<float> flags(40, 1.0f);
  flags.insert(flags.end(), 40, 0.0f);
  std::mt19937 rng(5);
  const float mixed[] = {1.0f, 1.0f, 1.0f, 0.0f, -0.0f, 0.5f, std::nanf("")};
  for (int i = 0; i < 200; ++i) flags.push_back(mixed[rng() % 7]);
  DeviceScalars<double> state(kScalerStateSize);
  DeviceScalars<float> flag(1), scale(1);
  for (size_t r = 0; r < sizeof(rules) / sizeof(rules[0]); ++r) {
    for (const auto& start : starts) {
      double want[kScalerStateSize], got[kScalerStateSize];
      std::memcpy(want, start, sizeof(want));
      state.set(want, kScalerStateSize);
      for (size_t step = 0; step < flags.size(); ++step) {
        flag.set(&flags[step], 1);
        expect_launched(cuda_scaler_update(rules[r], state.dev, flag.dev, scale.dev, nullptr), "scaler step");
        const float want_scale = static_cast<float>(scaler_step(rules[r], want, flags[step] != 0.0f));
        float got_scale = 0.0f;
        scale.get(&got_scale, 1);
        state.get(got, kScalerStateSize);
        if (std::memcmp(got, want, sizeof(got)) != 0 || float_bits(got_scale) != float_bits(want_scale)) {
          expect(false, "scaler rule " + std::to_string(r) + " step " + std::to_string(step) + ": state " +
                            state_text(got, got_scale) + ", CPU " + state_text(want, want_scale));
          break;  // the rest of the sequence would differ too
        }
      }
    }
  }
}

// ---- fused optimizer update --------------------------------------------------------------------------------

const char* const kRuleNames[] = {"sgd", "sgd_mom", "adam", "adamw"};

struct UpdateCase {
  int rule;
  int dtype;    // of weight and grad
  bool master;  // float32 master weights (always, for float16/bfloat16)
  bool clip, decay;
  int64_t chunk_size;
  bool finite;  // the step's flag; 0: nothing may change
};

/*! \brief Float32 values that are not the CPU's bits in tolerance mode, per rule. */
struct Drift {
  int64_t values = 0, differing = 0;
  double largest = 0.0;  // of |GPU - CPU| / magnitude
};

/*! \brief The largest finite |value| of float32 tensors: the scale of the operands of their update. */
float magnitude_of(const std::vector<const std::vector<unsigned char>*>& tensors) {
  float m = 0.0f;
  for (const auto* t : tensors) {
    const float* v = reinterpret_cast<const float*>(t->data());
    for (size_t i = 0; i < t->size() / 4; ++i) {
      if (std::isfinite(v[i])) m = std::max(m, std::fabs(v[i]));
    }
  }
  return m;
}

// Tolerance mode (nvcc's multiply-add contraction rounds once where the CPU rounds twice, an error of the
// order of the operands' ulp): |GPU - CPU| <= 1e-6 (|CPU| + magnitude), magnitude that of the buffer's role over
// every parameter of the call.
void expect_close(const std::vector<unsigned char>& got, const std::vector<unsigned char>& want, float magnitude,
                  const std::string& what, Drift* drift) {
  const float* g = reinterpret_cast<const float*>(got.data());
  const float* w = reinterpret_cast<const float*>(want.data());
  const size_t n = want.size() / 4;
  drift->values += static_cast<int64_t>(n);
  for (size_t i = 0; i < n; ++i) {
    if (float_bits(g[i]) == float_bits(w[i]) || (std::isnan(g[i]) && std::isnan(w[i]))) continue;
    ++drift->differing;
    const double diff = std::fabs(static_cast<double>(g[i]) - w[i]);
    if (diff <= 1e-6 * (std::fabs(w[i]) + magnitude)) {
      drift->largest = std::max(drift->largest, diff / magnitude);
      continue;
    }
    expect(false, what + ": element " + std::to_string(i) + " is " + std::to_string(g[i]) + ", CPU " +
                      std::to_string(w[i]) + " (beyond multiply-add contraction)");
    return;
  }
}

// Buffers of parameter p in the Tensors of test_update: weight, grad, state0, state1, master.
constexpr int kBuffers = 5;
const char* const kBufferNames[kBuffers] = {"weight", "grad", "state 0", "state 1", "master weight"};

void test_update(const UpdateCase& c, bool exact, std::mt19937* rng, Drift* drift) {
  std::vector<int64_t> sizes = {1, 3, 17, 0, 1000, 65537, 200003};
  for (int i = 0; i < 30; ++i) sizes.push_back(1 + i % 7);  // more parameters than one launch holds
  const int n = static_cast<int>(sizes.size());
  const bool adam = c.rule == kAdam || c.rule == kAdamW;
  Tensors b;
  for (int p = 0; p < n; ++p) {
    b.add(c.dtype, sizes[p], p % 3);
    b.add(c.dtype, sizes[p], (p + 1) % 3);
    for (int k = 2; k < kBuffers; ++k) b.add(kFloat32, sizes[p], (p + k) % 2);
  }
  b.finish();
  for (int p = 0; p < n; ++p) {
    std::vector<unsigned char>* buf = &b.host[kBuffers * p];
    fill_random(&buf[4], kFloat32, rng, true, 1.0f);  // master
    const float* master = reinterpret_cast<const float*>(buf[4].data());
    for (int64_t i = 0; i < sizes[p]; ++i) store_value(&buf[0], c.dtype, i, master[i]);
    if (!c.master) fill_random(&buf[0], c.dtype, rng, true, 1.0f);
    fill_random(&buf[1], c.dtype, rng, true, 2000.0f);  // rescaled: about N(0, 0.65), clipped at 0.5
    if (p == 2) {  // non-finite and extreme gradients: both sides must propagate them alike
      const float extremes[] = {INFINITY, -INFINITY, NAN, 65504.0f, -0.0f, -65504.0f};
      for (int e = 0; e < 6; ++e) store_value(&buf[1], c.dtype, e, extremes[e]);
    }
    fill_random(&buf[2], kFloat32, rng, true, 0.1f);
    fill_random(&buf[3], kFloat32, rng, true, 0.01f);
    for (int64_t i = 0; i < sizes[p]; ++i) buf[3][4 * i + 3] &= 0x7f;  // var >= 0
  }
  b.upload();
  std::vector<UpdateSet> host_sets(n), dev_sets(n);
  static int cases = 0;
  const bool previous_skipped = cases++ % 2 == 1;  // every other case: lr/eta from the previous-skipped values
  for (int p = 0; p < n; ++p) {
    for (int side = 0; side < 2; ++side) {
      const std::vector<TensorRef>& r = side ? b.dev_refs : b.host_refs;
      UpdateSet& s = side ? dev_sets[p] : host_sets[p];
      s.weight = r[kBuffers * p];
      s.grad = r[kBuffers * p + 1].data;
      s.state0 = c.rule != kSgd ? static_cast<float*>(r[kBuffers * p + 2].data) : nullptr;
      s.state1 = adam ? static_cast<float*>(r[kBuffers * p + 3].data) : nullptr;
      s.master = c.master ? static_cast<float*>(r[kBuffers * p + 4].data) : nullptr;
      s.lr = 0.01f * (1 + p % 3);
      s.wd = c.decay ? 1e-3f * (1 + p % 2) : 0.0f;
      s.eta = c.rule == kAdamW ? 1.0f - 0.25f * (p % 2) : 1.0f;
      if (side == 1 && previous_skipped) {  // the device must take the "previous step skipped" values
        s.lr_if_skipped = s.lr;
        s.eta_if_skipped = s.eta;
        s.lr = 7.0f;
        s.eta = 3.0f;
      }
    }
  }
  const double scaler_state[kScalerStateSize] = {384.0, 0, 0, 0, 0, 0};
  const double rescale_grad = 0.125;
  DeviceScalars<double> state(kScalerStateSize);
  state.set(scaler_state, kScalerStateSize);
  DeviceScalars<float> flag(1), applied(1), previous(1);
  const float flag_value = c.finite ? 1.0f : 0.0f, unset = -1.0f, previous_value = 0.0f;
  flag.set(&flag_value, 1);
  previous.set(&previous_value, 1);
  applied.set(&unset, 1);
  UpdateHyper hyper{c.rule, 1e30f, c.clip ? 0.5f : -1.0f, 0.9f, 0.9f, 0.999f, 1e-8f};  // GPU ignores rescale_grad
  const std::string tag = std::string("update ") + kRuleNames[c.rule] + " " + dtype_name(c.dtype) +
                          (c.master ? " master" : "") + (c.clip ? " clip" : "") + (c.decay ? " wd" : "") +
                          " chunk " + std::to_string(c.chunk_size) + (c.finite ? "" : " flag 0") +
                          (previous_skipped ? " previous skipped" : "");
  expect_launched(cuda_multi_tensor_update(c.chunk_size, hyper, dev_sets.data(), n, flag.dev, state.dev,
                                           rescale_grad, previous_skipped ? previous.dev : nullptr, applied.dev,
                                           nullptr),
                  tag);
  float got_applied = 0.0f;
  applied.get(&got_applied, 1);
  expect(got_applied == flag_value, tag + ": applied " + std::to_string(got_applied));
  double state_after[kScalerStateSize];
  state.get(state_after, kScalerStateSize);
  expect(std::memcmp(state_after, scaler_state, sizeof(state_after)) == 0, tag + ": changed the scaler state");
  if (c.finite) {  // as amp_multi_update's CPU path
    hyper.rescale_grad = static_cast<float>(rescale_grad * (1.0 / scaler_state[0]));
    cpu_multi_tensor_update(c.chunk_size, hyper, host_sets.data(), n);
  }
  float magnitude[kBuffers];
  for (int k = 0; k < kBuffers; ++k) {
    std::vector<const std::vector<unsigned char>*> role;
    for (int p = 0; p < n && (k > 1 || c.dtype == kFloat32); ++p) role.push_back(&b.host[kBuffers * p + k]);
    magnitude[k] = magnitude_of(role);
  }
  for (int p = 0; p < n; ++p) {
    const std::vector<unsigned char> master = b.download(kBuffers * p + 4);
    for (int k = 0; k < kBuffers; ++k) {
      const size_t i = kBuffers * p + k;
      const std::vector<unsigned char> got = k == 4 ? master : b.download(i);
      const std::string what = tag + ", parameter " + std::to_string(p) + " " + kBufferNames[k];
      const bool written = k == 0 || (k == 2 && c.rule != kSgd) || (k == 3 && adam) || (k == 4 && c.master);
      if (exact || !c.finite || !written) {
        expect_same(got, b.host[i], b.host_refs[i].dtype, what);
      } else if (k == 0 && c.master) {  // the GPU's own master weights, rounded
        std::vector<unsigned char> rounded(got.size());
        for (int64_t e = 0; e < sizes[p]; ++e) {
          store_value(&rounded, c.dtype, e, reinterpret_cast<const float*>(master.data())[e]);
        }
        expect_same(got, rounded, c.dtype, what + " (vs its master weights rounded)");
      } else {
        expect_close(got, b.host[i], magnitude[k], what, drift);
      }
    }
  }
}

void test_updates(bool exact) {
  std::mt19937 rng(6);
  struct Kind { int dtype; bool master; };
  const Kind kinds[] = {{kFloat32, false}, {kFloat32, true}, {kFloat16, true}, {kBfloat16, true}};
  for (int rule : {kSgd, kSgdMomentum, kAdam, kAdamW}) {
    Drift drift;
    int index = 0;
    for (const Kind& kind : kinds) {
      for (bool clip : {false, true}) {
        for (bool decay : {false, true}) {
          // 200003 elements in chunks of 1000: more chunks than one launch holds.
          const int64_t chunk = index++ % 2 ? kDefaultChunkSize : 1000;
          test_update({rule, kind.dtype, kind.master, clip, decay, chunk, true}, exact, &rng, &drift);
        }
      }
      test_update({rule, kind.dtype, kind.master, true, true, 1000, false}, exact, &rng, &drift);
    }
    if (!exact) {
      std::printf("  update %-7s: %lld of %lld float32 results not the CPU's bits (multiply-add contraction), "
                  "largest difference %.2g of the values' magnitude\n",
                  kRuleNames[rule], static_cast<long long>(drift.differing), static_cast<long long>(drift.values),
                  drift.largest);
    }
  }
}

// ---- bandwidth ---------------------------------------------------------------------------------------------

struct Timer {
  cudaEvent_t start, stop;
  Timer() {
    cuda_check(cudaEventCreate(&start), "event");
    cuda_check(cudaEventCreate(&stop), "event");
  }
  ~Timer() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  // Mean milliseconds of `repeat` back-to-back calls of launch(r), after one warm-up call.
  double ms(const std::function<const char*(int)>& launch, const std::string& what, int repeat = 20) {
    expect_launched(launch(0), what);
    cuda_check(cudaDeviceSynchronize(), what.c_str());
    cuda_check(cudaEventRecord(start), "event");
    const char* err = nullptr;
    for (int r = 0; r < repeat; ++r) err = err ? err : launch(r);
    cuda_check(cudaEventRecord(stop), "event");
    cuda_check(cudaEventSynchronize(stop), what.c_str());
    expect_launched(err, what);
    float total = 0.0f;
    cuda_check(cudaEventElapsedTime(&total, start, stop), "elapsed");
    return total / repeat;
  }
};

/*! \brief Bytes read plus written by a kernel, and the time of a D2D copy moving as many (cached by size). */
double copy_ms(Timer* timer, size_t traffic) {
  static std::map<size_t, double> cache;
  auto it = cache.find(traffic);
  if (it != cache.end()) return it->second;
  const size_t bytes = traffic / 2;
  void *src = nullptr, *dst = nullptr;
  cuda_check(cudaMalloc(&src, bytes), "bench malloc");
  cuda_check(cudaMalloc(&dst, bytes), "bench malloc");
  cuda_check(cudaMemset(src, 0, bytes), "memset");
  const double ms = timer->ms([&](int) {
    const cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice);
    return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
  }, "D2D copy");
  cudaFree(src);
  cudaFree(dst);
  return cache[traffic] = ms;
}

void report(Timer* timer, const std::string& name, size_t traffic, double ms) {
  std::printf("  %-44s %8.3f ms %6.0f GB/s %5.0f%% of a D2D copy\n", name.c_str(), ms, traffic / ms / 1e6,
              100.0 * copy_ms(timer, traffic) / ms);
}

/*! \brief Zeroed device buffers, freed at the end of a benchmark. */
struct Buffers {
  std::vector<void*> blocks;
  ~Buffers() {
    for (void* b : blocks) cudaFree(b);
  }
  void* add(size_t bytes) {
    void* p = nullptr;
    cuda_check(cudaMalloc(&p, bytes), "bench malloc");
    cuda_check(cudaMemset(p, 0, bytes), "bench memset");
    blocks.push_back(p);
    return p;
  }
};

/*! \brief `count` tensors of `dtype` covering total elements of one buffer. */
std::vector<TensorRef> split(void* data, int dtype, int64_t total, int count) {
  std::vector<TensorRef> out;
  const int64_t per = total / count;
  for (int i = 0; i < count; ++i) {
    out.push_back({static_cast<char*>(data) + i * per * dtype_bytes(dtype),
                   i == count - 1 ? total - i * per : per, dtype});
  }
  return out;
}

void bench_unscale(Timer* timer, int64_t total) {
  for (int dtype : {kFloat32, kFloat16}) {
    Buffers mem;
    void* data = mem.add(total * dtype_bytes(dtype));
    float* results = static_cast<float*>(mem.add(2 * sizeof(float)));
    for (int count : {1, 100, 10000}) {
      if (dtype != kFloat32 && count != 1) continue;
      const std::vector<TensorRef> t = split(data, dtype, total, count);
      const std::string name = std::string("unscale+check ") + dtype_name(dtype) + ", " + std::to_string(count) +
                               " tensor(s)";
      const double ms = timer->ms([&](int r) {  // 2 and 0.5 in turn: values stay put
        return cuda_multi_tensor_unscale_check(kDefaultChunkSize, results, nullptr, t.data(), count,
                                               r % 2 ? 2.0f : 0.5f, nullptr);
      }, name);
      report(timer, name, 2 * dtype_bytes(dtype) * total, ms);
    }
    if (dtype == kFloat32) {
      const std::vector<TensorRef> t = split(data, dtype, total, 1);
      const double ms = timer->ms([&](int) {
        return cuda_multi_tensor_unscale_check(kDefaultChunkSize, results, results + 1, t.data(), 1, 1.0f,
                                               nullptr);
      }, "check + sum of squares");
      report(timer, "check only (inv_scale 1) + sum of squares", 4 * total, ms);
    }
  }
}

void bench_cast(Timer* timer, int64_t total) {
  const int pairs[][2] = {{kFloat32, kFloat16}, {kFloat16, kFloat32}, {kFloat32, kBfloat16}, {kBfloat16, kFloat32}};
  for (const auto& pair : pairs) {
    Buffers mem;
    void* in = mem.add(total * dtype_bytes(pair[0]));
    void* out = mem.add(total * dtype_bytes(pair[1]));
    for (int count : {1, 10000}) {
      if (pair[0] != kFloat32 && count != 1) continue;
      const std::vector<TensorRef> ins = split(in, pair[0], total, count), outs = split(out, pair[1], total, count);
      const std::string name = std::string("cast ") + dtype_name(pair[0]) + "->" + dtype_name(pair[1]) + ", " +
                               std::to_string(count) + " tensor(s)";
      const double ms = timer->ms([&](int) {
        return cuda_multi_tensor_cast(kDefaultChunkSize, ins.data(), outs.data(), count, nullptr);
      }, name);
      report(timer, name, (dtype_bytes(pair[0]) + dtype_bytes(pair[1])) * total, ms);
    }
  }
}

void bench_round(Timer* timer, int64_t total) {
  Buffers mem;
  const TensorRef in{mem.add(total * 4), total, kFloat32}, out{mem.add(total * 4), total, kFloat32};
  for (int dtype : {kFloat16, kBfloat16}) {
    const std::string name = std::string("round to ") + dtype_name(dtype);
    const double ms = timer->ms([&](int) { return cuda_round_to(in, out, dtype, nullptr); }, name);
    report(timer, name, 8 * total, ms);
  }
}

void bench_update(Timer* timer, int64_t total) {
  struct Case { int rule, dtype, params; };
  const Case cases[] = {{kSgd, kFloat32, 1},        {kSgdMomentum, kFloat32, 1}, {kAdam, kFloat32, 1},
                        {kAdamW, kFloat32, 1},      {kAdam, kFloat32, 1000},     {kSgdMomentum, kFloat16, 1},
                        {kAdam, kFloat16, 1},       {kAdam, kBfloat16, 1}};
  for (const Case& c : cases) {
    const bool master = c.dtype != kFloat32;
    const int states = c.rule == kSgd ? 0 : (c.rule == kSgdMomentum ? 1 : 2);
    const size_t wb = dtype_bytes(c.dtype);
    Buffers mem;
    char* weight = static_cast<char*>(mem.add(total * wb));
    char* grad = static_cast<char*>(mem.add(total * wb));
    float* s0 = states > 0 ? static_cast<float*>(mem.add(total * 4)) : nullptr;
    float* s1 = states > 1 ? static_cast<float*>(mem.add(total * 4)) : nullptr;
    float* m = master ? static_cast<float*>(mem.add(total * 4)) : nullptr;
    float* flag = static_cast<float*>(mem.add(2 * sizeof(float)));
    double* state = static_cast<double*>(mem.add(kScalerStateSize * sizeof(double)));
    const float one = 1.0f;
    const double scale = 1.0;
    cuda_check(cudaMemcpy(flag, &one, sizeof(one), cudaMemcpyHostToDevice), "bench flag");
    cuda_check(cudaMemcpy(state, &scale, sizeof(scale), cudaMemcpyHostToDevice), "bench state");
    std::vector<UpdateSet> sets;
    for (const TensorRef& w : split(weight, c.dtype, total, c.params)) {
      const int64_t at = (static_cast<char*>(w.data) - weight) / static_cast<int64_t>(wb);
      sets.push_back({w, grad + at * wb, s0 ? s0 + at : nullptr, s1 ? s1 + at : nullptr, m ? m + at : nullptr,
                      0.01f, 1e-4f, 1.0f});
    }
    const UpdateHyper hyper{c.rule, 1.0f, -1.0f, 0.9f, 0.9f, 0.999f, 1e-8f};
    const std::string name = std::string("update ") + kRuleNames[c.rule] + " " + dtype_name(c.dtype) +
                             (master ? " + master" : "") + ", " + std::to_string(c.params) + " param(s)";
    const double ms = timer->ms([&](int) {
      return cuda_multi_tensor_update(kDefaultChunkSize, hyper, sets.data(), c.params, flag, state, 1.0, nullptr,
                                      flag + 1, nullptr);
    }, name);
    // Reads grad, the weight (or master) and the states; writes the weight, master and states.
    const size_t per = wb + (master ? 4 : wb) + 8 * states + wb + (master ? 4 : 0);
    report(timer, name, per * total, ms);
  }
}

void bench_scaler(Timer* timer) {
  Buffers mem;
  double* state = static_cast<double*>(mem.add(kScalerStateSize * sizeof(double)));
  float* flag = static_cast<float*>(mem.add(sizeof(float)));
  float* scale = static_cast<float*>(mem.add(sizeof(float)));
  const ScalerRule rule{true, 2.0, 0.5, 2000.0, 1.0, 16777216.0};
  const double ms = timer->ms([&](int) { return cuda_scaler_update(rule, state, flag, scale, nullptr); },
                              "scaler step", 1000);
  std::printf("  %-44s %8.1f us per step (one thread: launch latency, no bandwidth to speak of)\n",
              "loss-scaler step", ms * 1e3);
}

void run_group(const char* name, const std::function<void()>& checks) {
  const int before = g_failures;
  checks();
  if (g_failures == before) {
    std::printf("%-24s ok\n", name);
  } else {
    std::printf("%-24s %d failure(s)\n", name, g_failures - before);
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t bench_elements = 100000000LL;
  bool exact_update = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--bench-elements" && i + 1 < argc) {
      bench_elements = std::atoll(argv[++i]);
    } else if (arg == "--exact-update") {
      exact_update = true;
    } else {
      std::fprintf(stderr, "usage: %s [--bench-elements N] [--exact-update]\n", argv[0]);
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop;
  cuda_check(cudaGetDeviceProperties(&prop, 0), "properties");
  std::printf("device: %s (sm_%d%d); CPU references: %s loops\n", prop.name, prop.major, prop.minor, cpu_isa());
  run_group("cast", [] {
    test_cast(kDefaultChunkSize);
    test_cast(1000);
  });
  run_group("multi-cast, widest", test_multicast);
  run_group("round", test_round);
  run_group("unscale+check", [] {
    for (uint32_t seed = 0; seed < 2; ++seed) {
      test_unscale(1.0f / 65536, true, true, seed);
      test_unscale(0.5f, false, true, seed);
      test_unscale(0.375f, false, false, seed);
      test_unscale(1.0f, false, true, seed);
    }
  });
  run_group("loss-scaler step", test_scaler);
  run_group(exact_update ? "update (exact)" : "update", [=] { test_updates(exact_update); });
  if (bench_elements > 0) {
    std::printf("bandwidth, %lld elements (GB/s of bytes read + written; a D2D copy moving as many bytes):\n",
                static_cast<long long>(bench_elements));
    Timer timer;
    bench_unscale(&timer, bench_elements);
    bench_cast(&timer, bench_elements);
    bench_round(&timer, bench_elements);
    bench_update(&timer, bench_elements);
    bench_scaler(&timer);
  }
  std::printf("%s: %d failure(s)\n", g_failures ? "FAILED" : "OK", g_failures);
  return g_failures ? 1 : 0;
}
