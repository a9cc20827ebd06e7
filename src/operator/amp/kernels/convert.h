/*!
 * \file convert.h
 * \brief Scalar float32 <-> float16 / bfloat16 conversions shared by the CPU and CUDA kernels.
 *
 * Integer-only code (no dependence on the FPU's rounding or flush-to-zero modes), branch-free enough
 * for the compiler to vectorise.
 * - float16: bit-identical to numpy.astype(float16) (numpy's npy_floatbits_to_halfbits): round to
 *   nearest even, overflow to +-inf, subnormals kept, NaN payload kept (top mantissa bits) and still NaN.
 * - bfloat16: bit-identical to MXNet's amp_cast for normal numbers, inf and NaN: round to nearest even,
 *   NaN becomes (bits >> 16) | 0x0040 (sign and top payload kept, quiet bit set). Subnormals are rounded
 *   the same way (IEEE behaviour, sign of zero kept); MXNet's oneDNN amp_cast flushes them to zero.
 * No MXNet headers.
 */
#ifndef MXNET_AMP_KERNELS_CONVERT_H_
#define MXNET_AMP_KERNELS_CONVERT_H_

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define AMP_HD __host__ __device__ __forceinline__
#else
#define AMP_HD inline __attribute__((always_inline))
#endif

namespace mxnet_amp {

AMP_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

AMP_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

/*! \brief cond ? a : b as bit masks: keeps the loops free of control flow so they vectorise. */
AMP_HD uint32_t select_u32(bool cond, uint32_t a, uint32_t b) {
  const uint32_t mask = 0u - static_cast<uint32_t>(cond);
  return (a & mask) | (b & ~mask);
}

/*! \brief float32 -> float16 bits, identical to numpy's npy_floatbits_to_halfbits. */
AMP_HD uint16_t float_to_half_bits(float value) {
  const uint32_t f = float_bits(value);
  const uint32_t sign = (f >> 16) & 0x8000u;
  const uint32_t f_exp = f & 0x7f800000u;
  const uint32_t f_sig = f & 0x007fffffu;
  // Normal range: rebias the exponent, round the significand to 10 bits, ties to even (a carry
  // into the exponent is the correct result, up to inf).
  const uint32_t tie = select_u32((f_sig & 0x3fffu) == 0x1000u, 0u, 0x1000u);
  const uint32_t normal = ((f_exp - 0x38000000u) >> 13) + ((f_sig + tie) >> 13);
  // Subnormal range (float32 exponent 102..112): shift in the implicit bit, round ties to even
  // looking at every bit shifted out; below exponent 102 the result is a signed zero.
  const uint32_t e = f_exp >> 23;
  const uint32_t shift = select_u32(e - 102u <= 11u, 113u - e, 0u);
  const uint32_t sub_sig = (0x00800000u + f_sig) >> shift;
  const uint32_t sub_tie =
      select_u32(((sub_sig & 0x3fffu) != 0x1000u) | ((f & 0x7ffu) != 0u), 0x1000u, 0u);
  const uint32_t subnormal = select_u32(f_exp < 0x33000000u, 0u, (sub_sig + sub_tie) >> 13);
  // Inf and NaN (NaN keeps its top payload bits and stays NaN); finite overflow gives inf.
  const uint32_t nan_sig = f_sig >> 13;
  const uint32_t special =
      0x7c00u + nan_sig + static_cast<uint32_t>((nan_sig == 0u) & (f_sig != 0u));
  const uint32_t big = select_u32(f_exp == 0x7f800000u, special, 0x7c00u);
  uint32_t h = select_u32(f_exp <= 0x38000000u, subnormal, normal);
  h = select_u32(f_exp >= 0x47800000u, big, h);
  return static_cast<uint16_t>(sign | h);
}

/*! \brief float16 bits -> float32, exact (NaN payload kept, like numpy). */
AMP_HD float half_bits_to_float(uint16_t bits) {
  const uint32_t h = bits;
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t h_exp = h & 0x7c00u;
  const uint32_t h_sig = h & 0x03ffu;
  const uint32_t normal = ((h_exp + 0x1c000u) | h_sig) << 13;
  const uint32_t special = 0x7f800000u | (h_sig << 13);
  // Zero or subnormal: h_sig * 2^-24, exact (and a normal float32, so flush-to-zero cannot hit it).
  const uint32_t small = float_bits(static_cast<float>(static_cast<int32_t>(h_sig)) * 5.9604644775390625e-08f);
  uint32_t out = select_u32(h_exp == 0u, small, normal);
  out = select_u32(h_exp == 0x7c00u, special, out);
  return bits_float(sign | out);
}

/*! \brief float32 -> bfloat16 bits: round to nearest even; NaN -> (bits >> 16) | 0x40. */
AMP_HD uint16_t float_to_bf16_bits(float value) {
  const uint32_t f = float_bits(value);
  const uint32_t rounded = (f + 0x7fffu + ((f >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>(select_u32((f & 0x7fffffffu) > 0x7f800000u, (f >> 16) | 0x40u, rounded));
}

/*! \brief bfloat16 bits -> float32, exact. */
AMP_HD float bf16_bits_to_float(uint16_t b) {
  return bits_float(static_cast<uint32_t>(b) << 16);
}

}  // namespace mxnet_amp

#endif  // MXNET_AMP_KERNELS_CONVERT_H_
