/*!
 * \file batch_norm.cc
 * \brief Batch normalisation drivers: channels in parallel, each channel's runs through the loops of this
 *        CPU's instruction set (cpu_loops.h). Statistics in float64 across runs.
 *
 * Backward, in training (N values per channel, xhat = (x - mean) * invstd):
 *   dbeta = sum(dy), dgamma = sum(dy * xhat), dx = gamma * invstd * (dy - dbeta / N - xhat * dgamma / N);
 * in inference the statistics are constants: dx = gamma * invstd * dy. A fused ReLU masks dy first; a fused
 * residual sum's addend gets that gradient as it is.
 */
#include "batch_norm.h"

#include <cmath>
#include <cstring>

#include "convert.h"
#include "cpu_loops.h"
#include "multi_tensor.h"

namespace mxnet_amp {
namespace {

const char* run_at(const void* base, int dtype, const BatchNormShape& s, int64_t o, int64_t c) {
  return static_cast<const char*>(base) + ((o * s.channels + c) * s.inner) * dtype_bytes(dtype);
}

char* run_at(void* base, int dtype, const BatchNormShape& s, int64_t o, int64_t c) {
  return static_cast<char*>(base) + ((o * s.channels + c) * s.inner) * dtype_bytes(dtype);
}

float first_value(const void* x, int dtype) {
  switch (dtype) {
    case kBfloat16: return bf16_bits_to_float(*static_cast<const uint16_t*>(x));
    case kFloat16: return half_bits_to_float(*static_cast<const uint16_t*>(x));
    default: return *static_cast<const float*>(x);
  }
}

}  // namespace

void cpu_batch_norm_forward(const BatchNormForward& a) {
  const BatchNormShape& s = a.shape;
  const CpuLoops& l = cpu_loops();
  const double count = static_cast<double>(s.outer) * static_cast<double>(s.inner);
#pragma omp parallel for schedule(static) num_threads(a.threads)
  for (int64_t c = 0; c < s.channels; ++c) {
    double mean, var;
    if (a.training && count > 0) {
      // Moments about the channel's first value: no cancellation when |mean| >> std.
      const float shift = first_value(run_at(a.x, a.dtype, s, 0, c), a.dtype);
      double s1 = 0.0, s2 = 0.0;
      for (int64_t o = 0; o < s.outer; ++o) l.bn_moments(a.dtype, run_at(a.x, a.dtype, s, o, c), s.inner, shift, &s1, &s2);
      const double m1 = s1 / count;
      mean = shift + m1;
      var = s2 / count - m1 * m1;
      var = var > 0.0 ? var : 0.0;
      a.moving_mean[c] = static_cast<float>(a.moving_mean[c] * a.momentum + mean * (1.0f - a.momentum));
      a.moving_var[c] = static_cast<float>(a.moving_var[c] * a.momentum + var * (1.0f - a.momentum));
    } else {
      mean = a.moving_mean[c];
      var = a.moving_var[c];
    }
    const double invstd = 1.0 / std::sqrt(var + static_cast<double>(a.eps));
    a.saved_mean[c] = static_cast<float>(mean);
    a.saved_invstd[c] = static_cast<float>(invstd);
    const double scale = (a.gamma != nullptr ? a.gamma[c] : 1.0f) * invstd;
    const float mul = static_cast<float>(scale), add = static_cast<float>(a.beta[c] - mean * scale);
    for (int64_t o = 0; o < s.outer; ++o) {
      l.bn_affine(a.dtype, run_at(a.x, a.dtype, s, o, c), run_at(a.y, a.dtype, s, o, c), s.inner, mul, add,
                  a.addend != nullptr ? run_at(a.addend, a.dtype, s, o, c) : nullptr, a.relu, a.relu_max);
    }
  }
}

void cpu_batch_norm_backward(const BatchNormBackward& a) {
  const BatchNormShape& s = a.shape;
  const CpuLoops& l = cpu_loops();
  const double count = static_cast<double>(s.outer) * static_cast<double>(s.inner);
#pragma omp parallel for schedule(static) num_threads(a.threads)
  for (int64_t c = 0; c < s.channels; ++c) {
    const double mean = a.saved_mean[c], invstd = a.saved_invstd[c];
    // The gradient reaching the normalisation: dy, where a fused ReLU's output is inside (0, relu_max) (else 0). It is
    // also the addend's gradient: written there, or else into dx, which the last pass then overwrites in place.
    const void* dy = a.dy;
    if (a.relu || a.daddend != nullptr) {
      void* g = a.daddend != nullptr ? a.daddend : a.dx;
      for (int64_t o = 0; o < s.outer; ++o) {
        const int64_t bytes = s.inner * dtype_bytes(a.dtype);
        if (a.relu) {
          l.relu_mask(a.dtype, run_at(a.dy, a.dtype, s, o, c), run_at(a.y, a.dtype, s, o, c),
                      run_at(g, a.dtype, s, o, c), s.inner, a.relu_max);
        } else {
          std::memcpy(run_at(g, a.dtype, s, o, c), run_at(a.dy, a.dtype, s, o, c), bytes);
        }
      }
      dy = g;
    }
    double sdy = 0.0, sdyx = 0.0;  // sum(dy), sum(dy * (x - mean))
    for (int64_t o = 0; o < s.outer; ++o) {
      l.bn_grad_moments(a.dtype, run_at(dy, a.dtype, s, o, c), run_at(a.x, a.dtype, s, o, c), s.inner,
                        static_cast<float>(mean), &sdy, &sdyx);
    }
    const double dgamma = sdyx * invstd, g = a.gamma != nullptr ? a.gamma[c] : 1.0;
    a.dbeta[c] = static_cast<float>(sdy);
    a.dgamma[c] = a.gamma != nullptr ? static_cast<float>(dgamma) : 0.0f;
    // dx = A * dy + B * x + C
    double A = g * invstd, B = 0.0, C = 0.0;
    if (a.training && count > 0) {
      B = -A * invstd * dgamma / count;
      C = -A * sdy / count - B * mean;
    }
    for (int64_t o = 0; o < s.outer; ++o) {
      l.bn_grad_apply(a.dtype, run_at(dy, a.dtype, s, o, c), run_at(a.x, a.dtype, s, o, c),
                      run_at(a.dx, a.dtype, s, o, c), s.inner, static_cast<float>(A), static_cast<float>(B),
                      static_cast<float>(C));
    }
  }
}

}  // namespace mxnet_amp
