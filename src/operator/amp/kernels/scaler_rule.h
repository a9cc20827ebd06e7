/*!
 * \file scaler_rule.h
 * \brief One step of the loss scaler (mxnet.amp.loss_scaler.next_state) on its float64 device state, shared
 *        by the CPU glue and the CUDA kernel of amp_scaler_update.
 */
#ifndef MXNET_AMP_KERNELS_SCALER_RULE_H_
#define MXNET_AMP_KERNELS_SCALER_RULE_H_

#include "convert.h"

namespace mxnet_amp {

/*! \brief Elements of the state: scale, growth_tracker, steps, skipped_steps, last_overflow_step (0: none),
 *         steps_at_floor. */
constexpr int kScalerStateSize = 6;

struct ScalerRule {
  bool dynamic;
  double growth_factor, backoff_factor, growth_interval, min_scale, max_scale;
};

/*! \brief Advances state (kScalerStateSize doubles) by one step; returns the new scale. */
AMP_HD double scaler_step(const ScalerRule& r, double* s, bool finite) {
  double &scale = s[0], &tracker = s[1], &steps = s[2], &skipped = s[3], &last = s[4], &at_floor = s[5];
  steps += 1.0;
  if (finite) {
    if (r.dynamic && ++tracker >= r.growth_interval) {
      const double grown = scale * r.growth_factor;
      scale = grown < r.max_scale ? grown : r.max_scale;
      tracker = 0.0;
    }
  } else {
    skipped += 1.0;
    last = steps;
    if (r.dynamic) {
      const double backed = scale * r.backoff_factor;
      scale = backed > r.min_scale ? backed : r.min_scale;
      tracker = 0.0;
    }
  }
  at_floor = r.dynamic && scale <= r.min_scale ? at_floor + 1.0 : 0.0;
  return scale;
}

}  // namespace mxnet_amp

#endif  // MXNET_AMP_KERNELS_SCALER_RULE_H_
