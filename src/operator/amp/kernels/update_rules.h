/*!
 * \file update_rules.h
 * \brief The optimizer update of one element (SGD, SGD with momentum, Adam, AdamW), shared by the CPU loops
 *        and the CUDA kernels, and the bfloat16 storage of bf16-true weights (Kahan-compensated, or stochastically
 *        rounded).
 *
 * Each function repeats MXNet 1.9.1's float32 expression operation by operation (see UpdateSet in
 * multi_tensor.h); callers compile it without floating-point contraction on CPUs, where that makes the results
 * MXNet's bit for bit.
 */
#ifndef MXNET_AMP_KERNELS_UPDATE_RULES_H_
#define MXNET_AMP_KERNELS_UPDATE_RULES_H_

#include <math.h>

#include "convert.h"
#include "multi_tensor.h"

namespace mxnet_amp {

/*! \brief The scalars of one parameter's update, derived once per call. */
struct UpdateScalars {
  float momentum, lr, lr_wd, lr_rescale, rescale, clip, wd, eta, beta1, beta2, one_minus_beta1, one_minus_beta2;
  float epsilon;
};

AMP_HD UpdateScalars update_scalars(const UpdateHyper& h, const UpdateSet& s, float rescale) {
  return {h.momentum, s.lr, s.lr * s.wd, s.lr * rescale, rescale, h.clip_gradient, s.wd, s.eta, h.beta1, h.beta2,
          1.0f - h.beta1, 1.0f - h.beta2, h.epsilon};
}

AMP_HD float clip_to(float x, float bound) { return x > bound ? bound : (x < -bound ? -bound : x); }

/*! \brief SGD: returns the new weight; *m is the momentum (read and written when kMomentum). */
template <bool kMomentum, bool kClip>
AMP_HD float sgd_element(const UpdateScalars& p, float w, float g, float* m) {
  const float m0 = kMomentum ? *m : 0.0f;
  const float step = kClip ? p.lr * clip_to(p.rescale * g, p.clip) : p.lr_rescale * g;
  const float m1 = p.momentum * m0 - p.lr_wd * w - step;
  if (kMomentum) *m = m1;
  return w + m1;
}

/*! \brief Adam (kDecoupled: AdamW): returns the new weight; *mean and *var are read and written. */
template <bool kDecoupled, bool kClip>
AMP_HD float adam_element(const UpdateScalars& p, float w, float g, float* mean, float* var) {
  float d = kDecoupled ? p.rescale * g : g * p.rescale + w * p.wd;
  if (kClip) d = clip_to(d, p.clip);
  const float m = p.beta1 * *mean + p.one_minus_beta1 * d;
  const float v = kDecoupled ? p.beta2 * *var + p.one_minus_beta2 * (d * d) : p.beta2 * *var + p.one_minus_beta2 * d * d;
  *mean = m;
  *var = v;
  return kDecoupled ? w - p.eta * (p.lr * m / (sqrtf(v) + p.epsilon) + p.wd * w)
                    : w - p.lr * m / (sqrtf(v) + p.epsilon);
}

/*! \brief The precise value of a bfloat16 weight w with Kahan compensation c (kKahan), or w alone. */
template <bool kKahan>
AMP_HD float compensated_load(uint16_t w, uint16_t c) {
  return kKahan ? bf16_bits_to_float(w) + bf16_bits_to_float(c) : bf16_bits_to_float(w);
}

/*!
 * \brief Stores the updated precise weight x as bfloat16: *w = bf16(x) and, with kKahan, *c = bf16(x - *w), what
 *        the rounding of w lost (x - float(*w) is exact in float32). w + c then carries about 16 significant
 *        bits, so updates far below half a bfloat16 ulp of w accumulate in c instead of vanishing.
 */
template <bool kKahan>
AMP_HD void compensated_store(float x, uint16_t* w, uint16_t* c) {
  const uint16_t rounded = float_to_bf16_bits(x);
  *w = rounded;
  if (kKahan) *c = float_to_bf16_bits(x - bf16_bits_to_float(rounded));
}

/*!
 * \brief float32 -> bfloat16 bits, rounded stochastically: the low 16 bits of random are added to the 16 bits
 *        that bfloat16 drops, then those are cut off. x rounds up to the next bfloat16 (in magnitude) with
 *        probability (dropped bits) / 2^16, so the result's expectation is x (unbiased), and it is always one
 *        of the two bfloat16 values around x. Inf and NaN round to nearest (they stay Inf and NaN); finite
 *        values at or beyond the largest finite bfloat16 are cut to it (they stay finite).
 */
AMP_HD uint16_t stochastic_bf16_bits(float x, uint64_t random) {
  const uint32_t bits = float_bits(x);
  const uint32_t magnitude = bits & 0x7fffffffu;
  const uint32_t noise = magnitude >= 0x7f7f0000u ? 0u : static_cast<uint32_t>(random & 0xffffu);
  const uint16_t cut = static_cast<uint16_t>((bits + noise) >> 16);
  return magnitude >= 0x7f800000u ? float_to_bf16_bits(x) : cut;
}

}  // namespace mxnet_amp

#endif  // MXNET_AMP_KERNELS_UPDATE_RULES_H_
