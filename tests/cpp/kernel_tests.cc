/*!
 * \file kernel_tests.cc
 * \brief Standalone tests of the CPU multi-tensor kernels (no MXNet): the chunked, vectorised,
 *        multi-threaded launcher must agree bit for bit with a plain scalar loop, and never touch
 *        memory outside a tensor. Every tensor gets its own exact-size heap block, so a run under
 *        AddressSanitizer (tools/asan_check.sh) catches any out-of-bounds access.
 *
 * Usage: amp_kernel_tests           run the tests, exit status 0 on success
 *        amp_kernel_tests --bench [elements]   time unscale+check against memcpy, and casts
 */
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../../src/operator/amp/kernels/convert.h"
#include "../../src/operator/amp/kernels/multi_tensor.h"
#include "../../src/operator/amp/kernels/rows.h"
#include "../../src/operator/amp/kernels/tensor_math.h"

using namespace mxnet_amp;

namespace {

int g_failures = 0;

#define CHECK_TRUE(cond, ...)                          \
  do {                                                 \
    if (!(cond)) {                                     \
      ++g_failures;                                    \
      std::fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      std::fprintf(stderr, __VA_ARGS__);               \
      std::fprintf(stderr, "\n");                      \
    }                                                  \
  } while (0)

/*! \brief Owns tensors, each in its own exact-size heap block starting `offset` elements in. */
class Arena {
 public:
  ~Arena() {
    for (auto* b : blocks_) delete b;
  }
  TensorRef make(int dtype, int64_t size, int64_t offset = 0) {
    const int64_t bytes = (size + offset) * dtype_bytes(dtype);
    if (bytes == 0) return TensorRef{nullptr, 0, dtype};
    auto* block = new std::vector<unsigned char>(static_cast<size_t>(bytes));
    blocks_.push_back(block);
    return TensorRef{block->data() + offset * dtype_bytes(dtype), size, dtype};
  }

 private:
  std::vector<std::vector<unsigned char>*> blocks_;
};

float to_float(const TensorRef& t, int64_t i) {
  switch (t.dtype) {
    case kFloat32: return static_cast<const float*>(t.data)[i];
    case kFloat64: return static_cast<float>(static_cast<const double*>(t.data)[i]);
    case kFloat16: return half_bits_to_float(static_cast<const uint16_t*>(t.data)[i]);
    default: return bf16_bits_to_float(static_cast<const uint16_t*>(t.data)[i]);
  }
}

void store(const TensorRef& t, int64_t i, float v) {
  switch (t.dtype) {
    case kFloat32: static_cast<float*>(t.data)[i] = v; break;
    case kFloat64: static_cast<double*>(t.data)[i] = v; break;
    case kFloat16: static_cast<uint16_t*>(t.data)[i] = float_to_half_bits(v); break;
    default: static_cast<uint16_t*>(t.data)[i] = float_to_bf16_bits(v); break;
  }
}

bool same_bytes(const TensorRef& a, const TensorRef& b) {
  const size_t bytes = static_cast<size_t>(a.size) * dtype_bytes(a.dtype);
  return a.size == b.size && a.dtype == b.dtype && (bytes == 0 || !std::memcmp(a.data, b.data, bytes));
}

float random_value(std::mt19937* rng) {
  static const uint32_t special[] = {0x0u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                     0x00000001u, 0x477ff000u, 0x387fe000u, 0x3f808000u};
  const uint32_t pick = (*rng)() % 16;
  if (pick < 2) return bits_float(special[(*rng)() % (sizeof(special) / sizeof(special[0]))]);
  std::normal_distribution<float> normal(0.0f, 100.0f);
  return normal(*rng);
}

void fill(const TensorRef& t, std::mt19937* rng, bool finite_only) {
  for (int64_t i = 0; i < t.size; ++i) {
    float v = random_value(rng);
    while (finite_only && !std::isfinite(v)) v = random_value(rng);
    store(t, i, v);
  }
}

const int kDtypes[] = {kFloat32, kFloat64, kFloat16, kBfloat16};
const int64_t kSizes[] = {0, 1, 2, 3, 7, 15, 16, 17, 31, 33, 63, 64, 65, 127, 1000, 65535, 65536,
                          65537, 200001};

void test_cast_all_pairs_sizes_offsets() {
  std::mt19937 rng(1);
  for (int src : kDtypes) {
    for (int dst : kDtypes) {
      Arena arena;
      std::vector<TensorRef> in, out, expect;
      int64_t offset = 0;
      for (int64_t size : kSizes) {
        in.push_back(arena.make(src, size, offset));
        out.push_back(arena.make(dst, size, (offset + 1) % 4));
        expect.push_back(arena.make(dst, size));
        fill(in.back(), &rng, false);
        for (int64_t i = 0; i < size; ++i) {
          if (src == kFloat64 && dst == kFloat64) {
            static_cast<double*>(expect.back().data)[i] = static_cast<const double*>(in.back().data)[i];
          } else if (dst == kFloat64 && src == kFloat32) {
            static_cast<double*>(expect.back().data)[i] = static_cast<const float*>(in.back().data)[i];
          } else {
            store(expect.back(), i, to_float(in.back(), i));
          }
        }
        offset = (offset + 1) % 4;
      }
      for (int64_t chunk : {int64_t(1), int64_t(7), kDefaultChunkSize}) {
        if (chunk == 1 && src != kFloat32) continue;  // one-element chunks: slow, one pair is enough
        cpu_multi_tensor_cast(chunk, in.data(), out.data(), static_cast<int>(in.size()));
        for (size_t t = 0; t < in.size(); ++t) {
          CHECK_TRUE(same_bytes(out[t], expect[t]), "cast %s->%s size %lld chunk %lld differs",
                     dtype_name(src), dtype_name(dst), static_cast<long long>(in[t].size),
                     static_cast<long long>(chunk));
        }
      }
    }
  }
}

void test_cast_many_tensors() {
  std::mt19937 rng(2);
  Arena arena;
  std::vector<TensorRef> in, out;
  for (int i = 0; i < 3000; ++i) {
    in.push_back(arena.make(kDtypes[i % 4], i % 9));
    out.push_back(arena.make(kFloat16, i % 9));
    fill(in.back(), &rng, false);
  }
  cpu_multi_tensor_cast(kDefaultChunkSize, in.data(), out.data(), static_cast<int>(in.size()));
  for (size_t t = 0; t < in.size(); ++t) {
    for (int64_t i = 0; i < in[t].size; ++i) {
      const uint16_t got = static_cast<const uint16_t*>(out[t].data)[i];
      CHECK_TRUE(got == float_to_half_bits(to_float(in[t], i)), "tensor %zu element %lld", t,
                 static_cast<long long>(i));
    }
  }
}

// Scalar reference of unscale+check over copies of the tensors.
bool reference_unscale(const std::vector<TensorRef>& tensors, float inv_scale, double* sum_squares) {
  bool finite = true;
  *sum_squares = 0.0;
  for (const TensorRef& t : tensors) {
    for (int64_t i = 0; i < t.size; ++i) {
      double r;
      if (t.dtype == kFloat64) {
        double* p = static_cast<double*>(t.data) + i;
        *p = *p * static_cast<double>(inv_scale);
        r = *p;
      } else {
        store(t, i, to_float(t, i) * inv_scale);
        r = to_float(t, i);
      }
      finite = finite && std::isfinite(r);
      *sum_squares += r * r;
    }
  }
  return finite;
}

void test_unscale(float inv_scale, bool inject, uint32_t seed) {
  std::mt19937 rng(seed);
  Arena arena;
  std::vector<TensorRef> tensors, copies;
  int64_t offset = 0;
  for (int dtype : kDtypes) {
    for (int64_t size : kSizes) {
      tensors.push_back(arena.make(dtype, size, offset));
      fill(tensors.back(), &rng, true);
      offset = (offset + 1) % 3;
    }
  }
  if (inject) {
    // One non-finite value in a random tensor at a random position.
    size_t t;
    do { t = rng() % tensors.size(); } while (tensors[t].size == 0);
    store(tensors[t], static_cast<int64_t>(rng() % tensors[t].size), NAN);
  }
  for (const TensorRef& t : tensors) {
    copies.push_back(arena.make(t.dtype, t.size));
    if (t.size) std::memcpy(copies.back().data, t.data, t.size * dtype_bytes(t.dtype));
  }
  double expect_sq = 0.0;
  const bool expect_finite = reference_unscale(copies, inv_scale, &expect_sq);
  float flag = -1.0f, sq = -1.0f;
  cpu_multi_tensor_unscale_check(kDefaultChunkSize, &flag, &sq, tensors.data(),
                                 static_cast<int>(tensors.size()), inv_scale);
  CHECK_TRUE(flag == (expect_finite ? 1.0f : 0.0f), "flag %g, expected finite=%d (inv %g)", flag,
             expect_finite, inv_scale);
  for (size_t t = 0; t < tensors.size(); ++t) {
    CHECK_TRUE(same_bytes(tensors[t], copies[t]), "unscale %s size %lld differs (inv %g)",
               dtype_name(tensors[t].dtype), static_cast<long long>(tensors[t].size), inv_scale);
  }
  if (expect_finite) {
    CHECK_TRUE(std::fabs(sq - expect_sq) <= 1e-6 * expect_sq, "sum of squares %.9g vs %.9g", sq,
               expect_sq);
  }
  float flag_only = -1.0f;
  cpu_multi_tensor_unscale_check(kDefaultChunkSize, &flag_only, nullptr, copies.data(),
                                 static_cast<int>(copies.size()), 1.0f);
  CHECK_TRUE(flag_only == flag, "pure check flag %g vs %g", flag_only, flag);
}

void test_empty_and_zero_size() {
  TensorRef empty{nullptr, 0, kFloat32};
  float flag = -1.0f, sq = -1.0f;
  cpu_multi_tensor_unscale_check(kDefaultChunkSize, &flag, &sq, &empty, 1, 0.5f);
  CHECK_TRUE(flag == 1.0f && sq == 0.0f, "zero-size: flag %g sq %g", flag, sq);
  TensorRef out{nullptr, 0, kFloat16};
  cpu_multi_tensor_cast(kDefaultChunkSize, &empty, &out, 1);
  cpu_multi_tensor_unscale_check(kDefaultChunkSize, &flag, &sq, nullptr, 0, 0.5f);
  CHECK_TRUE(flag == 1.0f && sq == 0.0f, "no tensors: flag %g sq %g", flag, sq);
}

void test_widest_dtype() {
  const int a[] = {kFloat16, kFloat32};
  const int b[] = {kFloat16, kBfloat16};
  const int c[] = {kBfloat16, kBfloat16};
  const int d[] = {kFloat16, kFloat64, kBfloat16};
  CHECK_TRUE(widest_dtype(a, 2) == kFloat32, "f16+f32");
  CHECK_TRUE(widest_dtype(b, 2) == kFloat32, "f16+bf16");
  CHECK_TRUE(widest_dtype(c, 2) == kBfloat16, "bf16+bf16");
  CHECK_TRUE(widest_dtype(d, 3) == kFloat64, "f64");
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int bench(int64_t total) {
  std::vector<float> data(static_cast<size_t>(total), 1.0f), copy(static_cast<size_t>(total));
  const int repeat = 5;
  double t_copy = 1e30;
  for (int r = 0; r < repeat; ++r) {
    const auto start = std::chrono::steady_clock::now();
    std::memcpy(copy.data(), data.data(), total * sizeof(float));
    t_copy = std::min(t_copy, seconds_since(start));
  }
  const double gb = 2.0 * 4.0 * total / 1e9;
  std::printf("isa %s, %lld float32, memcpy %.2f ms (%.1f GB/s)\n", cpu_isa(),
              static_cast<long long>(total), 1e3 * t_copy, gb / t_copy);
  for (int count : {1, 100, 10000}) {
    std::vector<TensorRef> tensors;
    const int64_t per = total / count;
    for (int i = 0; i < count; ++i) {
      tensors.push_back({data.data() + i * per, i == count - 1 ? total - i * per : per, kFloat32});
    }
    double t_best = 1e30;
    for (int r = 0; r < repeat; ++r) {
      float flag = 0.0f;
      const float inv = (r % 2) ? 2.0f : 0.5f;  // values stay 1.0 / 0.5
      const auto start = std::chrono::steady_clock::now();
      cpu_multi_tensor_unscale_check(kDefaultChunkSize, &flag, nullptr, tensors.data(), count, inv);
      t_best = std::min(t_best, seconds_since(start));
    }
    std::printf("%6d tensors: unscale+check %.2f ms (%.1f GB/s, %.0f%% of memcpy)\n", count,
                1e3 * t_best, gb / t_best, 100.0 * t_copy / t_best);
  }
  std::vector<uint16_t> low(static_cast<size_t>(total));
  for (int dtype : {kFloat16, kBfloat16}) {
    const TensorRef in{data.data(), total, kFloat32}, out{low.data(), total, dtype};
    double t_best = 1e30;
    for (int r = 0; r < repeat; ++r) {
      const auto start = std::chrono::steady_clock::now();
      cpu_multi_tensor_cast(kDefaultChunkSize, &in, &out, 1);
      t_best = std::min(t_best, seconds_since(start));
    }
    std::printf("cast float32 -> %s: %.2f ms (%.1f GB/s read+written)\n", dtype_name(dtype),
                1e3 * t_best, 6.0 * total / 1e9 / t_best);
  }
  return 0;
}

}  // namespace

// The element loops of tensor_math.h against scalar references, in exact-size heap blocks (AddressSanitizer),
// for float32 and bfloat16 storage and team sizes 1 and 2.
float stored(int dtype, float v) {  // v as an array of dtype holds it
  unsigned char cell[4];
  mxnet_amp::store(cell, dtype, 0, v);
  return mxnet_amp::load(cell, dtype, 0);
}

void test_tensor_math() {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uni(-2.f, 2.f);
  for (int dtype : {0, 12}) {
    for (int threads : {1, 2}) {
      const int64_t batch = 3, channels = 5, inner = 7, n = batch * channels * inner;
      const size_t width = dtype == 12 ? 2 : 4;
      std::vector<unsigned char> g(n * width), out(n * width), masked(n * width), sums(channels * width);
      for (int64_t i = 0; i < n; ++i) mxnet_amp::store(g.data(), dtype, i, uni(rng));
      std::vector<float> bias(channels), col(channels);
      for (float& x : bias) x = uni(rng);
      mxnet_amp::channel_sums(sums.data(), dtype, g.data(), dtype, batch, channels, inner, threads);
      mxnet_amp::column_sums(col.data(), 0, g.data(), dtype, batch * inner, channels, threads);
      for (int64_t c = 0; c < channels; ++c) {
        float per_channel = 0.f, per_column = 0.f;
        for (int64_t b = 0; b < batch; ++b) {
          for (int64_t i = 0; i < inner; ++i) {
            per_channel += mxnet_amp::load(g.data(), dtype, (b * channels + c) * inner + i);
          }
        }
        for (int64_t i = 0; i < batch * inner; ++i) per_column += mxnet_amp::load(g.data(), dtype, i * channels + c);
        CHECK_TRUE(mxnet_amp::load(sums.data(), dtype, c) == stored(dtype, per_channel), "channel_sums dtype %d, %lld",
                   dtype, (long long)c);
        CHECK_TRUE(col[c] == per_column, "column_sums dtype %d, %lld: %g vs %g", dtype, (long long)c, col[c],
                   per_column);
      }
      // y = bias, then y += bias (acc = y itself), then the gradient through a ReLU of y
      mxnet_amp::add_channel_bias(out.data(), dtype, nullptr, dtype, bias.data(), 0, batch, channels, inner, threads);
      mxnet_amp::add_channel_bias(out.data(), dtype, out.data(), dtype, bias.data(), 0, batch, channels, inner,
                                  threads);
      // (a plain ReLU, and one capped at 1: a ReLU6's mask with the cap inside the values' range)
      std::vector<unsigned char> capped(n * width);
      mxnet_amp::relu_mask(masked.data(), dtype, g.data(), dtype, out.data(), dtype, n, INFINITY, threads);
      mxnet_amp::relu_mask(capped.data(), dtype, g.data(), dtype, out.data(), dtype, n, 1.f, threads);
      for (int64_t i = 0; i < n; ++i) {
        const float b = bias[i / inner % channels], twice = stored(dtype, stored(dtype, b) + b);
        CHECK_TRUE(mxnet_amp::load(out.data(), dtype, i) == twice, "add_channel_bias dtype %d, %lld", dtype,
                   (long long)i);
        const float relu_grad = twice > 0.f ? mxnet_amp::load(g.data(), dtype, i) : 0.f;
        CHECK_TRUE(mxnet_amp::load(masked.data(), dtype, i) == relu_grad, "relu_mask dtype %d, %lld", dtype,
                   (long long)i);
        const float capped_grad = twice > 0.f && twice < 1.f ? mxnet_amp::load(g.data(), dtype, i) : 0.f;
        CHECK_TRUE(mxnet_amp::load(capped.data(), dtype, i) == capped_grad, "relu_mask capped dtype %d, %lld", dtype,
                   (long long)i);
      }
      // (2, 3) batches of 2x3 matrices summed into (1, 3), stored transposed (strides: batch 6, row 1, column 2)
      const int64_t full_dims[2] = {2, 3}, like_dims[2] = {1, 3}, strides[4] = {0, 6, 1, 2};
      std::vector<float> full(2 * 3 * 6);
      for (float& x : full) x = uni(rng);
      std::vector<unsigned char> like(3 * 6 * width);
      mxnet_amp::sum_broadcast_into(full.data(), 2, full_dims, like_dims, strides, 2, 3, like.data(), dtype, threads);
      for (int64_t b = 0; b < 3; ++b) {
        for (int64_t r = 0; r < 2; ++r) {
          for (int64_t c = 0; c < 3; ++c) {
            const float expect = full[b * 6 + r * 3 + c] + full[(3 + b) * 6 + r * 3 + c];
            CHECK_TRUE(mxnet_amp::load(like.data(), dtype, b * 6 + r + c * 2) == stored(dtype, expect),
                       "sum_broadcast_into dtype %d (%lld, %lld, %lld)", dtype, (long long)b, (long long)r,
                       (long long)c);
          }
        }
      }
    }
  }
}

// Row kernels (rows.h) against float64 references: layer-norm moments, and softmax / log-softmax forward and
// backward with lengths (0, partial, full, beyond cols, negative) and temperatures, every dtype pair, teams of 1
// and 2; each tensor in its own exact-size block. Tolerances: float32 math, plus a bfloat16 output's rounding.
double row_tolerance(int dtype, double ref) { return 2e-6 + (dtype == kBfloat16 ? std::fabs(ref) * 0x1p-8 : 0.0); }

void test_row_moments(std::mt19937* rng) {
  std::uniform_real_distribution<float> uni(-3.f, 3.f);
  for (int dtype : {0, 12}) {
    for (int64_t cols : {1, 7, 33, 513}) {
      const int64_t rows = 5;
      Arena arena;
      const TensorRef x = arena.make(dtype, rows * cols);
      for (int64_t i = 0; i < rows * cols; ++i) mxnet_amp::store(x.data, dtype, i, 100.f + uni(*rng));
      std::vector<float> mean(rows), var(rows);
      cpu_row_moments(x.data, dtype, rows, cols, mean.data(), var.data(), 2);
      for (int64_t r = 0; r < rows; ++r) {
        double m = 0, v = 0;
        for (int64_t c = 0; c < cols; ++c) m += to_float(x, r * cols + c);
        m /= cols;
        for (int64_t c = 0; c < cols; ++c) v += (to_float(x, r * cols + c) - m) * (to_float(x, r * cols + c) - m);
        v /= cols;
        CHECK_TRUE(std::fabs(mean[r] - m) <= 1e-5 * std::fabs(m) && std::fabs(var[r] - v) <= 1e-4 * v + 1e-5,
                   "row_moments dtype %d cols %lld row %lld: %g %g vs %g %g", dtype, (long long)cols, (long long)r,
                   mean[r], var[r], m, v);
      }
    }
  }
}

void check_softmax_case(int sd, int dd, int64_t cols, float temperature, bool log, int threads, std::mt19937* rng) {
  std::uniform_real_distribution<float> uni(-30.f, 30.f);
  const int64_t rows = 6;
  const int32_t lengths[rows] = {0, 1, static_cast<int32_t>(cols / 2), static_cast<int32_t>(cols),
                                 static_cast<int32_t>(cols + 3), -2};
  Arena arena;
  const TensorRef x = arena.make(sd, rows * cols), y = arena.make(dd, rows * cols), dy = arena.make(dd, rows * cols);
  const TensorRef dx = arena.make(sd, rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) {
    mxnet_amp::store(x.data, sd, i, uni(*rng));
    mxnet_amp::store(dy.data, dd, i, uni(*rng) / 30.f);
  }
  SoftmaxRows s;
  s.rows = rows;
  s.cols = cols;
  s.src_dtype = sd;
  s.dst_dtype = dd;
  s.src = x.data;
  s.dst = y.data;
  s.diff_dst = dy.data;
  s.diff_src = dx.data;
  s.lengths = log ? nullptr : lengths;
  s.temperature = temperature;
  s.log = log;
  s.threads = threads;
  cpu_softmax_forward(s);
  cpu_softmax_backward(s);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = log ? cols : std::min<int64_t>(std::max<int32_t>(lengths[r], 0), cols);
    double m = -1e300, sum = 0, dot = 0, dsum = 0;
    for (int64_t c = 0; c < n; ++c) m = std::max(m, to_float(x, r * cols + c) / (double)temperature);
    for (int64_t c = 0; c < n; ++c) sum += std::exp(to_float(x, r * cols + c) / (double)temperature - m);
    for (int64_t c = 0; c < n; ++c) {  // the backward reads the stored (rounded) y
      dot += to_float(dy, r * cols + c) * to_float(y, r * cols + c);
      dsum += to_float(dy, r * cols + c);
    }
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = r * cols + c;
      const double z = to_float(x, i) / (double)temperature - m;
      const double ref = c >= n ? 0.0 : log ? z - std::log(sum) : std::exp(z) / sum;
      const double yv = to_float(y, i), g = to_float(dy, i);
      const double dref = c >= n ? 0.0 : (log ? g - std::exp(yv) * dsum : yv * (g - dot)) / temperature;
      CHECK_TRUE(std::fabs(to_float(y, i) - ref) <= row_tolerance(dd, ref) * (log ? 30 : 1),
                 "softmax %d->%d cols %lld t %g log %d row %lld col %lld: %g vs %g", sd, dd, (long long)cols,
                 temperature, log, (long long)r, (long long)c, to_float(y, i), ref);
      CHECK_TRUE(std::fabs(to_float(dx, i) - dref) <= row_tolerance(sd, dref) + 1e-5 * (std::fabs(dot) + 1),
                 "softmax grad %d->%d cols %lld t %g log %d row %lld col %lld: %g vs %g", sd, dd, (long long)cols,
                 temperature, log, (long long)r, (long long)c, to_float(dx, i), dref);
    }
  }
}

void test_rows() {
  std::mt19937 rng(11);
  test_row_moments(&rng);
  for (int sd : {0, 12}) {
    for (int dd : {0, 12}) {
      for (int64_t cols : {1, 7, 33, 130}) {
        for (float t : {1.0f, 0.5f, -2.0f}) {
          for (bool log : {false, true}) check_softmax_case(sd, dd, cols, t, log, cols == 33 ? 2 : 1, &rng);
        }
      }
    }
  }
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--bench") {
    return bench(argc > 2 ? std::atoll(argv[2]) : 100000000LL);
  }
  test_widest_dtype();
  test_empty_and_zero_size();
  test_cast_all_pairs_sizes_offsets();
  test_cast_many_tensors();
  test_tensor_math();
  test_rows();
  for (uint32_t seed = 0; seed < 4; ++seed) {
    test_unscale(1.0f / 65536, false, seed);
    test_unscale(1.0f, false, seed);
    test_unscale(0.375f, true, seed);
    test_unscale(1.0f, true, seed);
  }
  std::printf("%s: %d failure(s), cpu isa %s\n", g_failures ? "FAILED" : "OK", g_failures, cpu_isa());
  return g_failures ? 1 : 0;
}
