/*!
 * \file cpu_loops_isa.cc
 * \brief Single-chunk CPU loops, written for compiler auto-vectorisation.
 *
 * Compiled once per instruction set with AMP_ISA set to baseline, avx2 or avx512 (see CMakeLists.txt);
 * each copy lives in its own namespace so the copies never mix at link time.
 */
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "convert.h"
#include "counter_hash.h"
#include "cpu_loops.h"
#include "multi_tensor.h"
#include "update_rules.h"

#ifndef AMP_ISA
#error "AMP_ISA must be defined (baseline, avx2 or avx512)"
#endif

#define AMP_CONCAT_(a, b) a##b
#define AMP_CONCAT(a, b) AMP_CONCAT_(a, b)
#define AMP_STR_(x) #x
#define AMP_STR(x) AMP_STR_(x)

namespace mxnet_amp {
namespace AMP_CONCAT(isa_, AMP_ISA) {
namespace {

struct F32 {
  using storage = float;
  static inline float load(float v) { return v; }
  static inline float store(float v) { return v; }
  static inline bool finite(float v) { return (float_bits(v) & 0x7f800000u) != 0x7f800000u; }
};
struct F16 {
  using storage = uint16_t;
  static inline float load(uint16_t v) { return half_bits_to_float(v); }
  static inline uint16_t store(float v) { return float_to_half_bits(v); }
  static inline bool finite(uint16_t v) { return (v & 0x7c00u) != 0x7c00u; }
};
struct BF16 {
  using storage = uint16_t;
  static inline float load(uint16_t v) { return bf16_bits_to_float(v); }
  static inline uint16_t store(float v) { return float_to_bf16_bits(v); }
  static inline bool finite(uint16_t v) { return (v & 0x7f80u) != 0x7f80u; }
};
struct F64 {
  using storage = double;
  static inline float load(double v) { return static_cast<float>(v); }
  static inline double store(float v) { return v; }
  static inline bool finite(double v) {
    uint64_t u;
    memcpy(&u, &v, sizeof(u));
    return (u & 0x7ff0000000000000ull) != 0x7ff0000000000000ull;
  }
};

template <typename Src, typename Dst>
void cast_loop(const void* in, void* out, int64_t n) {
  const typename Src::storage* __restrict__ src = static_cast<const typename Src::storage*>(in);
  typename Dst::storage* __restrict__ dst = static_cast<typename Dst::storage*>(out);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = Dst::store(Src::load(src[i]));
}

#if defined(__F16C__)
// F16C converts float32 <-> float16 with the same round-to-nearest-even as numpy, 8 values per
// instruction, but it quiets signalling NaNs (numpy keeps them) and may honour MXCSR's
// flush-to-zero / denormals-are-zero bits. So: blocks holding a NaN, and calls made while FTZ or DAZ
// is set, take the integer path of convert.h instead.
inline bool f16c_exact() { return (_mm_getcsr() & 0x8040u) == 0u; }

template <>
void cast_loop<F32, F16>(const void* in, void* out, int64_t n) {
  const float* src = static_cast<const float*>(in);
  uint16_t* dst = static_cast<uint16_t*>(out);
  int64_t i = 0;
  if (f16c_exact()) {
    for (; i + 8 <= n; i += 8) {
      const __m256 x = _mm256_loadu_ps(src + i);
      if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0) {
        for (int j = 0; j < 8; ++j) dst[i + j] = float_to_half_bits(src[i + j]);
      } else {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                         _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
      }
    }
  }
  for (; i < n; ++i) dst[i] = float_to_half_bits(src[i]);
}

template <>
void cast_loop<F16, F32>(const void* in, void* out, int64_t n) {
  const uint16_t* src = static_cast<const uint16_t*>(in);
  float* dst = static_cast<float*>(out);
  int64_t i = 0;
  if (f16c_exact()) {
    for (; i + 8 <= n; i += 8) {
      const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
      if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0) {
        for (int j = 0; j < 8; ++j) dst[i + j] = half_bits_to_float(src[i + j]);
      } else {
        _mm256_storeu_ps(dst + i, x);
      }
    }
  }
  for (; i < n; ++i) dst[i] = half_bits_to_float(src[i]);
}

// Unscales float16 data 8 values at a time; returns how many values it handled (a multiple of 8).
// NaN inputs need no integer path here: a product is never a signalling NaN, and F16C rounds a
// quiet NaN exactly like numpy.
template <bool kWrite, bool kSumSquares>
int64_t unscale_f16_f16c(uint16_t* p, int64_t n, float inv_scale, bool* finite, double* acc) {
  if (!f16c_exact()) return 0;
  const __m256 scale = _mm256_set1_ps(inv_scale);
  const __m128i exp_mask = _mm_set1_epi16(0x7c00);
  __m128i bad = _mm_setzero_si128();
  __m256d sum_lo = _mm256_setzero_pd(), sum_hi = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i* at = reinterpret_cast<__m128i*>(p + i);
    const __m256 y = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(at)), scale);
    const __m128i r = _mm256_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT);
    if (kWrite) _mm_storeu_si128(at, r);
    bad = _mm_or_si128(bad, _mm_cmpeq_epi16(_mm_and_si128(r, exp_mask), exp_mask));
    if (kSumSquares) {
      const __m256 v = _mm256_cvtph_ps(r);
      const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
      const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
      sum_lo = _mm256_add_pd(sum_lo, _mm256_mul_pd(lo, lo));
      sum_hi = _mm256_add_pd(sum_hi, _mm256_mul_pd(hi, hi));
    }
  }
  *finite = _mm_testz_si128(bad, bad) != 0;
  if (kSumSquares) {
    double lanes[4];
    _mm256_storeu_pd(lanes, _mm256_add_pd(sum_lo, sum_hi));
    *acc += (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  }
  return i;
}
#endif

void copy_f64(const void* in, void* out, int64_t n) {
  const double* __restrict__ src = static_cast<const double*>(in);
  double* __restrict__ dst = static_cast<double*>(out);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
}

template <typename Dst>
void cast_from(int src, const void* in, void* out, int64_t n) {
  switch (src) {
    case kFloat32: cast_loop<F32, Dst>(in, out, n); break;
    case kFloat16: cast_loop<F16, Dst>(in, out, n); break;
    case kBfloat16: cast_loop<BF16, Dst>(in, out, n); break;
    default: cast_loop<F64, Dst>(in, out, n); break;
  }
}

void cast(int src, int dst, const void* in, void* out, int64_t n) {
  switch (dst) {
    case kFloat32: cast_from<F32>(src, in, out, n); break;
    case kFloat16: cast_from<F16>(src, in, out, n); break;
    case kBfloat16: cast_from<BF16>(src, in, out, n); break;
    default:
      // float64 output: exact widening, or a plain copy from float64.
      if (src == kFloat64) {
        copy_f64(in, out, n);
      } else if (src == kFloat32) {
        const float* __restrict__ s = static_cast<const float*>(in);
        double* __restrict__ d = static_cast<double*>(out);
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) d[i] = s[i];
      } else {
        cast_from<F64>(src, in, out, n);
      }
      break;
  }
}

// Results are checked after rounding to the storage type, so an unscale that overflows the storage
// type is reported as non-finite.
template <typename T, bool kWrite, bool kSumSquares>
bool unscale_loop(void* data, int64_t n, float inv_scale, double* sum_squares) {
  typename T::storage* __restrict__ p = static_cast<typename T::storage*>(data);
  unsigned bad = 0;
  double acc = 0.0;
  int64_t start = 0;
#if defined(__F16C__)
  if constexpr (std::is_same<T, F16>::value) {
    bool finite = true;
    start = unscale_f16_f16c<kWrite, kSumSquares>(p, n, inv_scale, &finite, &acc);
    bad = finite ? 0u : 1u;
  }
#endif
#pragma omp simd reduction(| : bad) reduction(+ : acc)
  for (int64_t i = start; i < n; ++i) {
    const typename T::storage r = T::store(T::load(p[i]) * inv_scale);
    if (kWrite) p[i] = r;
    bad |= T::finite(r) ? 0u : 1u;
    if (kSumSquares) {
      const double v = static_cast<double>(T::load(r));
      acc += v * v;
    }
  }
  if (kSumSquares) *sum_squares += acc;
  return bad == 0u;
}

// float64 keeps float64 math: rounding a float64 gradient through float32 would change it.
template <bool kWrite, bool kSumSquares>
bool unscale_f64(void* data, int64_t n, float inv_scale, double* sum_squares) {
  double* __restrict__ p = static_cast<double*>(data);
  const double s = inv_scale;
  unsigned bad = 0;
  double acc = 0.0;
#pragma omp simd reduction(| : bad) reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) {
    const double r = p[i] * s;
    if (kWrite) p[i] = r;
    bad |= F64::finite(r) ? 0u : 1u;
    if (kSumSquares) acc += r * r;
  }
  if (kSumSquares) *sum_squares += acc;
  return bad == 0u;
}

template <typename T>
bool unscale_typed(void* data, int64_t n, float inv_scale, bool write, double* sum_squares) {
  if (write) {
    return sum_squares ? unscale_loop<T, true, true>(data, n, inv_scale, sum_squares)
                       : unscale_loop<T, true, false>(data, n, inv_scale, sum_squares);
  }
  return sum_squares ? unscale_loop<T, false, true>(data, n, inv_scale, sum_squares)
                     : unscale_loop<T, false, false>(data, n, inv_scale, sum_squares);
}

bool unscale(int dtype, void* data, int64_t n, float inv_scale, bool write, double* sum_squares) {
  switch (dtype) {
    case kFloat32: return unscale_typed<F32>(data, n, inv_scale, write, sum_squares);
    case kFloat16: return unscale_typed<F16>(data, n, inv_scale, write, sum_squares);
    case kBfloat16: return unscale_typed<BF16>(data, n, inv_scale, write, sum_squares);
    default:
      if (write) {
        return sum_squares ? unscale_f64<true, true>(data, n, inv_scale, sum_squares)
                           : unscale_f64<true, false>(data, n, inv_scale, sum_squares);
      }
      return sum_squares ? unscale_f64<false, true>(data, n, inv_scale, sum_squares)
                         : unscale_f64<false, false>(data, n, inv_scale, sum_squares);
  }
}

// ---- optimizer updates: the element rules of update_rules.h over one chunk ---------------------------------
// This file is compiled with -ffp-contract=off, so results agree bit for bit with MXNet's float32 arithmetic.

// W: storage of weight and grad (F32, or F16/BF16 with float32 master weights).
template <typename W, bool kMaster>
struct Params {
  typename W::storage* __restrict__ weight;
  const typename W::storage* __restrict__ grad;
  float* __restrict__ s0;
  float* __restrict__ s1;
  float* __restrict__ master;
  Params(const UpdateSet& set, int64_t b)
      : weight(static_cast<typename W::storage*>(set.weight.data) + b),
        grad(static_cast<const typename W::storage*>(set.grad) + b),
        s0(set.state0 ? set.state0 + b : nullptr),
        s1(set.state1 ? set.state1 + b : nullptr),
        master(kMaster ? set.master + b : nullptr) {}
  inline float load_w(int64_t i) const { return kMaster ? master[i] : W::load(weight[i]); }
  inline void store_w(int64_t i, float w) const {
    if (kMaster) master[i] = w;
    weight[i] = W::store(w);
  }
};

template <typename W, bool kMaster, bool kMomentum, bool kClip>
void sgd_loop(const UpdateHyper& h, const UpdateSet& set, int64_t b, int64_t e) {
  const Params<W, kMaster> p(set, b);
  const UpdateScalars k = update_scalars(h, set, h.rescale_grad);
  float unused = 0.0f;
  const int64_t n = e - b;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    p.store_w(i, sgd_element<kMomentum, kClip>(k, p.load_w(i), W::load(p.grad[i]), kMomentum ? &p.s0[i] : &unused));
  }
}

template <typename W, bool kMaster, bool kDecoupled, bool kClip>
void adam_loop(const UpdateHyper& h, const UpdateSet& set, int64_t b, int64_t e) {
  const Params<W, kMaster> p(set, b);
  const UpdateScalars k = update_scalars(h, set, h.rescale_grad);
  const int64_t n = e - b;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    p.store_w(i, adam_element<kDecoupled, kClip>(k, p.load_w(i), W::load(p.grad[i]), &p.s0[i], &p.s1[i]));
  }
}

template <typename W, bool kMaster>
void update_typed(const UpdateHyper& h, const UpdateSet& set, int64_t b, int64_t e) {
  const bool clip_on = h.clip_gradient >= 0.0f;
  switch (h.rule) {
    case kSgd:
      return clip_on ? sgd_loop<W, kMaster, false, true>(h, set, b, e)
                     : sgd_loop<W, kMaster, false, false>(h, set, b, e);
    case kSgdMomentum:
      return clip_on ? sgd_loop<W, kMaster, true, true>(h, set, b, e)
                     : sgd_loop<W, kMaster, true, false>(h, set, b, e);
    case kAdam:
      return clip_on ? adam_loop<W, kMaster, false, true>(h, set, b, e)
                     : adam_loop<W, kMaster, false, false>(h, set, b, e);
    default:
      return clip_on ? adam_loop<W, kMaster, true, true>(h, set, b, e)
                     : adam_loop<W, kMaster, true, false>(h, set, b, e);
  }
}

// bf16-true: bfloat16 weights, gradients and states, stored as kStore says (Bf16Store).
enum Bf16Store : int { kStoreNearest, kStoreKahan, kStoreStochastic };

template <int kStore>
struct Bf16Params {
  static constexpr bool kKahan = kStore == kStoreKahan;
  uint16_t* __restrict__ weight;
  const uint16_t* __restrict__ grad;
  uint16_t* __restrict__ s0;
  uint16_t* __restrict__ s1;
  uint16_t* __restrict__ comp;
  uint64_t seed, begin;
  Bf16Params(const UpdateSet& set, int64_t b)
      : weight(static_cast<uint16_t*>(set.weight.data) + b),
        grad(static_cast<const uint16_t*>(set.grad) + b),
        s0(set.bf16_state0 ? set.bf16_state0 + b : nullptr),
        s1(set.bf16_state1 ? set.bf16_state1 + b : nullptr),
        comp(kKahan ? set.compensation + b : nullptr),
        seed(set.seed),
        begin(static_cast<uint64_t>(b)) {}
  // The random bits of element i (stochastic rounding only).
  inline uint64_t draw(int64_t i) const {
    return kStore == kStoreStochastic ? counter_hash(seed, begin + static_cast<uint64_t>(i)) : 0;
  }
  inline float load_w(int64_t i) const { return compensated_load<kKahan>(weight[i], kKahan ? comp[i] : 0); }
  inline void store_w(int64_t i, float w, uint64_t r) const {
    if (kStore == kStoreStochastic) {
      weight[i] = stochastic_bf16_bits(w, r);
      return;
    }
    uint16_t unused = 0;
    compensated_store<kKahan>(w, &weight[i], kKahan ? &comp[i] : &unused);
  }
  // A state rounded to bfloat16: stochastically from bits [16 * slot, 16 * slot + 16) of r, else to nearest.
  static inline uint16_t store_s(float v, uint64_t r, int slot) {
    return kStore == kStoreStochastic ? stochastic_bf16_bits(v, r >> (16 * slot)) : BF16::store(v);
  }
};

template <int kStore, bool kMomentum, bool kClip>
void sgd_loop_bf16(const UpdateHyper& h, const UpdateSet& set, int64_t b, int64_t e) {
  const Bf16Params<kStore> p(set, b);
  const UpdateScalars k = update_scalars(h, set, h.rescale_grad);
  const int64_t n = e - b;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t r = p.draw(i);
    float m = kMomentum ? BF16::load(p.s0[i]) : 0.0f;
    p.store_w(i, sgd_element<kMomentum, kClip>(k, p.load_w(i), BF16::load(p.grad[i]), &m), r);
    if (kMomentum) p.s0[i] = p.store_s(m, r, 1);
  }
}

template <int kStore, bool kDecoupled, bool kClip>
void adam_loop_bf16(const UpdateHyper& h, const UpdateSet& set, int64_t b, int64_t e) {
  const Bf16Params<kStore> p(set, b);
  const UpdateScalars k = update_scalars(h, set, h.rescale_grad);
  const int64_t n = e - b;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t r = p.draw(i);
    float mean = BF16::load(p.s0[i]), var = BF16::load(p.s1[i]);
    p.store_w(i, adam_element<kDecoupled, kClip>(k, p.load_w(i), BF16::load(p.grad[i]), &mean, &var), r);
    p.s0[i] = p.store_s(mean, r, 1);
    p.s1[i] = p.store_s(var, r, 2);
  }
}

template <int kStore>
void update_bf16(const UpdateHyper& h, const UpdateSet& set, int64_t b, int64_t e) {
  const bool clip_on = h.clip_gradient >= 0.0f;
  switch (h.rule) {
    case kSgd:
      return clip_on ? sgd_loop_bf16<kStore, false, true>(h, set, b, e)
                     : sgd_loop_bf16<kStore, false, false>(h, set, b, e);
    case kSgdMomentum:
      return clip_on ? sgd_loop_bf16<kStore, true, true>(h, set, b, e)
                     : sgd_loop_bf16<kStore, true, false>(h, set, b, e);
    case kAdam:
      return clip_on ? adam_loop_bf16<kStore, false, true>(h, set, b, e)
                     : adam_loop_bf16<kStore, false, false>(h, set, b, e);
    default:
      return clip_on ? adam_loop_bf16<kStore, true, true>(h, set, b, e)
                     : adam_loop_bf16<kStore, true, false>(h, set, b, e);
  }
}

void update_bf16_true(const UpdateHyper& h, const UpdateSet& set, int64_t b, int64_t e) {
  if (set.compensation) return update_bf16<kStoreKahan>(h, set, b, e);
  return set.stochastic ? update_bf16<kStoreStochastic>(h, set, b, e) : update_bf16<kStoreNearest>(h, set, b, e);
}

void update(const UpdateHyper& h, const UpdateSet& set, int64_t b, int64_t e) {
  if (set.bf16_states) return update_bf16_true(h, set, b, e);
  switch (set.weight.dtype) {
    case kFloat16: return update_typed<F16, true>(h, set, b, e);
    case kBfloat16: return update_typed<BF16, true>(h, set, b, e);
    default: return set.master ? update_typed<F32, true>(h, set, b, e) : update_typed<F32, false>(h, set, b, e);
  }
}

// Batch normalisation over one contiguous run of a channel (see batch_norm.h): float32 math, sums of a run in
// float32 lanes, then float64 across runs.
template <typename T>
void bn_moments_loop(const void* x, int64_t n, float shift, double* s1, double* s2) {
  const typename T::storage* __restrict__ p = static_cast<const typename T::storage*>(x);
  float a = 0.0f, b = 0.0f;
#pragma omp simd reduction(+ : a, b)
  for (int64_t i = 0; i < n; ++i) {
    const float d = T::load(p[i]) - shift;
    a += d;
    b += d * d;
  }
  *s1 += a;
  *s2 += b;
}

template <typename T, bool kAddend, bool kRelu>
void bn_affine_run(const void* x, void* y, int64_t n, float a, float b, const void* addend, float relu_max) {
  const typename T::storage* __restrict__ p = static_cast<const typename T::storage*>(x);
  const typename T::storage* __restrict__ r = static_cast<const typename T::storage*>(addend);
  typename T::storage* __restrict__ q = static_cast<typename T::storage*>(y);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float v = kAddend ? T::load(p[i]) * a + b + T::load(r[i]) : T::load(p[i]) * a + b;
    q[i] = T::store(kRelu ? std::min(v > 0.f ? v : 0.f, relu_max) : v);
  }
}

template <typename T>
void bn_affine_loop(const void* x, void* y, int64_t n, float a, float b, const void* addend, bool relu,
                    float relu_max) {
  if (addend != nullptr) {
    return relu ? bn_affine_run<T, true, true>(x, y, n, a, b, addend, relu_max)
                : bn_affine_run<T, true, false>(x, y, n, a, b, addend, relu_max);
  }
  return relu ? bn_affine_run<T, false, true>(x, y, n, a, b, nullptr, relu_max)
              : bn_affine_run<T, false, false>(x, y, n, a, b, nullptr, relu_max);
}

template <typename T, bool kCapped>
void relu_mask_run(const void* dy, const void* y, void* dst, int64_t n, float relu_max) {
  const typename T::storage* __restrict__ g = static_cast<const typename T::storage*>(dy);
  const typename T::storage* __restrict__ out = static_cast<const typename T::storage*>(y);
  typename T::storage* __restrict__ q = static_cast<typename T::storage*>(dst);
  const typename T::storage zero = T::store(0.f);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float v = T::load(out[i]);
    q[i] = v > 0.f && (!kCapped || v < relu_max) ? g[i] : zero;
  }
}

template <typename T>
void relu_mask_loop(const void* dy, const void* y, void* dst, int64_t n, float relu_max) {
  return std::isinf(relu_max) ? relu_mask_run<T, false>(dy, y, dst, n, relu_max)
                              : relu_mask_run<T, true>(dy, y, dst, n, relu_max);
}

template <typename T>
void bn_grad_moments_loop(const void* dy, const void* x, int64_t n, float shift, double* sdy, double* sdyx) {
  const typename T::storage* __restrict__ g = static_cast<const typename T::storage*>(dy);
  const typename T::storage* __restrict__ p = static_cast<const typename T::storage*>(x);
  float a = 0.0f, b = 0.0f;
#pragma omp simd reduction(+ : a, b)
  for (int64_t i = 0; i < n; ++i) {
    const float d = T::load(g[i]);
    a += d;
    b += d * (T::load(p[i]) - shift);
  }
  *sdy += a;
  *sdyx += b;
}

// dy may be dx (a fused ReLU's masked gradient, written into dx first): each element is read before it is written.
template <typename T>
void bn_grad_apply_loop(const void* dy, const void* x, void* dx, int64_t n, float a, float b, float c) {
  const typename T::storage* g = static_cast<const typename T::storage*>(dy);
  const typename T::storage* __restrict__ p = static_cast<const typename T::storage*>(x);
  typename T::storage* q = static_cast<typename T::storage*>(dx);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) q[i] = T::store(T::load(g[i]) * a + T::load(p[i]) * b + c);
}

void bn_moments(int dtype, const void* x, int64_t n, float shift, double* s1, double* s2) {
  switch (dtype) {
    case kBfloat16: return bn_moments_loop<BF16>(x, n, shift, s1, s2);
    case kFloat16: return bn_moments_loop<F16>(x, n, shift, s1, s2);
    default: return bn_moments_loop<F32>(x, n, shift, s1, s2);
  }
}

void bn_affine(int dtype, const void* x, void* y, int64_t n, float a, float b, const void* addend, bool relu,
               float relu_max) {
  switch (dtype) {
    case kBfloat16: return bn_affine_loop<BF16>(x, y, n, a, b, addend, relu, relu_max);
    case kFloat16: return bn_affine_loop<F16>(x, y, n, a, b, addend, relu, relu_max);
    default: return bn_affine_loop<F32>(x, y, n, a, b, addend, relu, relu_max);
  }
}

void relu_mask(int dtype, const void* dy, const void* y, void* dst, int64_t n, float relu_max) {
  switch (dtype) {
    case kBfloat16: return relu_mask_loop<BF16>(dy, y, dst, n, relu_max);
    case kFloat16: return relu_mask_loop<F16>(dy, y, dst, n, relu_max);
    default: return relu_mask_loop<F32>(dy, y, dst, n, relu_max);
  }
}

void bn_grad_moments(int dtype, const void* dy, const void* x, int64_t n, float shift, double* sdy, double* sdyx) {
  switch (dtype) {
    case kBfloat16: return bn_grad_moments_loop<BF16>(dy, x, n, shift, sdy, sdyx);
    case kFloat16: return bn_grad_moments_loop<F16>(dy, x, n, shift, sdy, sdyx);
    default: return bn_grad_moments_loop<F32>(dy, x, n, shift, sdy, sdyx);
  }
}

void bn_grad_apply(int dtype, const void* dy, const void* x, void* dx, int64_t n, float a, float b, float c) {
  switch (dtype) {
    case kBfloat16: return bn_grad_apply_loop<BF16>(dy, x, dx, n, a, b, c);
    case kFloat16: return bn_grad_apply_loop<F16>(dy, x, dx, n, a, b, c);
    default: return bn_grad_apply_loop<F32>(dy, x, dx, n, a, b, c);
  }
}

// Rows over the last axis (rows.h): layer normalisation statistics and softmax, float32 math.
template <typename T>
void row_moments_loop(const void* x, int64_t n, float* mean, float* var) {
  const typename T::storage* __restrict__ p = static_cast<const typename T::storage*>(x);
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += T::load(p[i]);
  const float m = s / static_cast<float>(n);
  float q = 0.0f;  // about the mean: no cancellation when |mean| >> std
#pragma omp simd reduction(+ : q)
  for (int64_t i = 0; i < n; ++i) {
    const float d = T::load(p[i]) - m;
    q += d * d;
  }
  *mean = m;
  *var = q / static_cast<float>(n);
}

void row_moments(int dtype, const void* x, int64_t n, float* mean, float* var) {
  if (dtype == kBfloat16) return row_moments_loop<BF16>(x, n, mean, var);
  return row_moments_loop<F32>(x, n, mean, var);
}

// exp(x) for x <= 0 (Cephes' expf: 2^k times a degree-6 polynomial on |r| <= ln(2) / 2, within 1e-7 relative);
// 0 below -87.3 (float32's normal range), NaN for NaN. Branch-free, without calls, so that the row loops vectorise: k is rounded
// by adding 1.5 * 2^23 (its bits then hold k), and the result is picked with a bit mask (the compiler may not
// if-convert a conditional product, which could trap).
inline float exp_nonpositive(float x) {
  const float c = std::max(x, -87.33654f);
  const float t = c * 1.44269504088896341f + 12582912.0f;
  const float k = t - 12582912.0f;
  const int32_t ki = __builtin_bit_cast(int32_t, t) - 0x4B400000;
  float r = c - k * 0.693359375f;
  r = r + k * 2.12194440e-4f;
  const float z = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = (p * z + r + 1.0f) * __builtin_bit_cast(float, (ki + 127) << 23);
  return __builtin_bit_cast(float, select_u32(!(x < -87.33654f), __builtin_bit_cast(uint32_t, e), 0u));  // NaN stays
}

template <typename X, typename Y, bool kLog>
void softmax_row_loop(const void* x, void* y, int64_t valid, int64_t n, float scale, float* tmp) {
  // x and y may be the same row (nnvm/inplace.cc): every element of it is read before the first is written
  const typename X::storage* p = static_cast<const typename X::storage*>(x);
  typename Y::storage* q = static_cast<typename Y::storage*>(y);
  float* __restrict__ e = tmp;
  if (valid > 0) {
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int64_t i = 0; i < valid; ++i) m = std::max(m, X::load(p[i]) * scale);
    float s = 0.0f;
    if (kLog) {
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < valid; ++i) s += exp_nonpositive(X::load(p[i]) * scale - m);
      const float offset = m + std::log(s);
#pragma omp simd
      for (int64_t i = 0; i < valid; ++i) q[i] = Y::store(X::load(p[i]) * scale - offset);
    } else {  // the exponentials once, kept in float32 (one rounding of the result)
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < valid; ++i) {
        e[i] = exp_nonpositive(X::load(p[i]) * scale - m);
        s += e[i];
      }
      const float inv = 1.0f / s;
#pragma omp simd
      for (int64_t i = 0; i < valid; ++i) q[i] = Y::store(e[i] * inv);
    }
  }
  if (valid < n) std::memset(q + valid, 0, (n - valid) * sizeof(*q));  // +0 in float32 and bfloat16
}

template <typename Y, typename D, bool kLog>
void softmax_grad_row_loop(const void* y, const void* dy, void* dx, int64_t valid, int64_t n, float scale) {
  const typename Y::storage* __restrict__ p = static_cast<const typename Y::storage*>(y);
  const typename Y::storage* __restrict__ g = static_cast<const typename Y::storage*>(dy);
  typename D::storage* __restrict__ q = static_cast<typename D::storage*>(dx);
  float s = 0.0f;  // sum(dy * y), or sum(dy) for log-softmax
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < valid; ++i) s += kLog ? Y::load(g[i]) : Y::load(g[i]) * Y::load(p[i]);
  if (kLog) {
#pragma omp simd
    for (int64_t i = 0; i < valid; ++i) q[i] = D::store(scale * (Y::load(g[i]) - exp_nonpositive(Y::load(p[i])) * s));
  } else {
#pragma omp simd
    for (int64_t i = 0; i < valid; ++i) q[i] = D::store(scale * Y::load(p[i]) * (Y::load(g[i]) - s));
  }
  if (valid < n) std::memset(q + valid, 0, (n - valid) * sizeof(*q));
}

template <typename A, typename B>
void softmax_row_typed(const void* x, void* y, int64_t valid, int64_t n, float scale, bool log, float* tmp) {
  return log ? softmax_row_loop<A, B, true>(x, y, valid, n, scale, tmp)
             : softmax_row_loop<A, B, false>(x, y, valid, n, scale, tmp);
}

template <typename A, typename B>
void softmax_grad_row_typed(const void* y, const void* dy, void* dx, int64_t valid, int64_t n, float scale, bool log) {
  return log ? softmax_grad_row_loop<A, B, true>(y, dy, dx, valid, n, scale)
             : softmax_grad_row_loop<A, B, false>(y, dy, dx, valid, n, scale);
}

void softmax_row(int x_dtype, const void* x, int y_dtype, void* y, int64_t valid, int64_t n, float scale, bool log,
                 float* tmp) {
  if (x_dtype == kBfloat16) {
    return y_dtype == kBfloat16 ? softmax_row_typed<BF16, BF16>(x, y, valid, n, scale, log, tmp)
                                : softmax_row_typed<BF16, F32>(x, y, valid, n, scale, log, tmp);
  }
  return y_dtype == kBfloat16 ? softmax_row_typed<F32, BF16>(x, y, valid, n, scale, log, tmp)
                              : softmax_row_typed<F32, F32>(x, y, valid, n, scale, log, tmp);
}

void softmax_grad_row(int y_dtype, const void* y, const void* dy, int dx_dtype, void* dx, int64_t valid, int64_t n,
                      float scale, bool log) {
  if (y_dtype == kBfloat16) {
    return dx_dtype == kBfloat16 ? softmax_grad_row_typed<BF16, BF16>(y, dy, dx, valid, n, scale, log)
                                 : softmax_grad_row_typed<BF16, F32>(y, dy, dx, valid, n, scale, log);
  }
  return dx_dtype == kBfloat16 ? softmax_grad_row_typed<F32, BF16>(y, dy, dx, valid, n, scale, log)
                               : softmax_grad_row_typed<F32, F32>(y, dy, dx, valid, n, scale, log);
}

// Dropout (dropout.h): a counter-based draw per element (counter_hash.h).
template <typename T>
void dropout_loop(const void* x, void* y, uint8_t* mask, int64_t begin, int64_t end, uint64_t seed,
                  uint64_t keep_below, float scale) {
  const typename T::storage* p = static_cast<const typename T::storage*>(x);  // y may be x (nnvm/inplace.cc)
  typename T::storage* q = static_cast<typename T::storage*>(y);
  uint8_t* __restrict__ m = mask;
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    const bool keep = (counter_hash(seed, static_cast<uint64_t>(i)) >> 32) < keep_below;
    m[i] = keep;
    q[i] = T::store(keep ? T::load(p[i]) * scale : 0.0f);
  }
}

template <typename T>
void dropout_grad_loop(const void* dy, void* dx, const uint8_t* mask, int64_t begin, int64_t end, float scale) {
  const typename T::storage* __restrict__ g = static_cast<const typename T::storage*>(dy);
  typename T::storage* __restrict__ q = static_cast<typename T::storage*>(dx);
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) q[i] = T::store(mask[i] ? T::load(g[i]) * scale : 0.0f);
}

void dropout(int dtype, const void* x, void* y, uint8_t* mask, int64_t begin, int64_t end, uint64_t seed,
             uint64_t keep_below, float scale) {
  if (dtype == kBfloat16) return dropout_loop<BF16>(x, y, mask, begin, end, seed, keep_below, scale);
  return dropout_loop<F32>(x, y, mask, begin, end, seed, keep_below, scale);
}

void dropout_grad(int dtype, const void* dy, void* dx, const uint8_t* mask, int64_t begin, int64_t end, float scale) {
  if (dtype == kBfloat16) return dropout_grad_loop<BF16>(dy, dx, mask, begin, end, scale);
  return dropout_grad_loop<F32>(dy, dx, mask, begin, end, scale);
}

// Products of two runs, either of which may be one value repeated (kA / kB false): broadcast_mul (broadcast.h).
template <typename A, typename B, typename Y, bool kA, bool kB>
void mul_run(const void* a, const void* b, void* y, int64_t n) {
  const typename A::storage* __restrict__ p = static_cast<const typename A::storage*>(a);
  const typename B::storage* __restrict__ q = static_cast<const typename B::storage*>(b);
  typename Y::storage* __restrict__ r = static_cast<typename Y::storage*>(y);
  const float pa = A::load(p[0]), qb = B::load(q[0]);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) r[i] = Y::store((kA ? A::load(p[i]) : pa) * (kB ? B::load(q[i]) : qb));
}

template <typename A, typename B, bool kA, bool kB>
void mul_acc_run(const void* a, const void* b, float* acc, bool reduce, int64_t n) {
  const typename A::storage* __restrict__ p = static_cast<const typename A::storage*>(a);
  const typename B::storage* __restrict__ q = static_cast<const typename B::storage*>(b);
  const float pa = A::load(p[0]), qb = B::load(q[0]);
  if (!reduce) {
    float* __restrict__ r = acc;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) r[i] += (kA ? A::load(p[i]) : pa) * (kB ? B::load(q[i]) : qb);
    return;
  }
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += (kA ? A::load(p[i]) : pa) * (kB ? B::load(q[i]) : qb);
  *acc += sum;
}

// Calls f with a tag of the storage type of a float32 or bfloat16 dtype.
template <typename F>
void with_type(int dtype, F f) {
  if (dtype == kBfloat16) return f(BF16());
  return f(F32());
}

void mul(int a_dtype, const void* a, int a_step, int b_dtype, const void* b, int b_step, int y_dtype, void* y,
         int64_t n) {
  if (n <= 0) return;
  with_type(a_dtype, [&](auto ta) {
    with_type(b_dtype, [&](auto tb) {
      with_type(y_dtype, [&](auto ty) {
        using A = decltype(ta);
        using B = decltype(tb);
        using Y = decltype(ty);
        if (a_step && b_step) return mul_run<A, B, Y, true, true>(a, b, y, n);
        if (a_step) return mul_run<A, B, Y, true, false>(a, b, y, n);
        if (b_step) return mul_run<A, B, Y, false, true>(a, b, y, n);
        return mul_run<A, B, Y, false, false>(a, b, y, n);
      });
    });
  });
}

void mul_acc(int a_dtype, const void* a, int a_step, int b_dtype, const void* b, int b_step, float* acc, bool reduce,
             int64_t n) {
  if (n <= 0) return;
  with_type(a_dtype, [&](auto ta) {
    with_type(b_dtype, [&](auto tb) {
      using A = decltype(ta);
      using B = decltype(tb);
      if (a_step && b_step) return mul_acc_run<A, B, true, true>(a, b, acc, reduce, n);
      if (a_step) return mul_acc_run<A, B, true, false>(a, b, acc, reduce, n);
      if (b_step) return mul_acc_run<A, B, false, true>(a, b, acc, reduce, n);
      return mul_acc_run<A, B, false, false>(a, b, acc, reduce, n);
    });
  });
}

const CpuLoops kLoops = {AMP_STR(AMP_ISA), cast,           unscale,       update,    bn_moments,
                         bn_affine,        bn_grad_moments, bn_grad_apply, relu_mask, row_moments,
                         softmax_row,      softmax_grad_row, dropout,      dropout_grad, mul,
                         mul_acc};

}  // namespace
}  // namespace AMP_CONCAT(isa_, AMP_ISA)

const CpuLoops* AMP_CONCAT(cpu_loops_, AMP_ISA)() { return &AMP_CONCAT(isa_, AMP_ISA)::kLoops; }

}  // namespace mxnet_amp
