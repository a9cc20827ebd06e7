/*!
 * \file pooling.cc
 * \brief The loops of pooling.h: one plane per task on the call's team.
 */
#include "pooling.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "tensor_math.h"

namespace mxnet_amp {
namespace {

// Window (oy, ox) of a plane: the first position of its largest value, or -1 where the window holds no value.
// The value comes back in *best.
template <typename Load>
int64_t window_max(const Load& at, const PoolGeometry& g, int64_t oy, int64_t ox, float* best) {
  const int64_t y0 = std::max<int64_t>(oy * g.sh - g.ph, 0), y1 = std::min(oy * g.sh - g.ph + g.kh, g.h);
  const int64_t x0 = std::max<int64_t>(ox * g.sw - g.pw, 0), x1 = std::min(ox * g.sw - g.pw + g.kw, g.w);
  int64_t arg = -1;
  float m = std::numeric_limits<float>::lowest();
  for (int64_t yy = y0; yy < y1; ++yy) {
    for (int64_t xx = x0; xx < x1; ++xx) {
      const float v = at(yy * g.w + xx);
      if (arg < 0 || v > m || (v != v && m == m)) {  // the first NaN wins and stays
        m = v;
        arg = yy * g.w + xx;
      }
    }
  }
  *best = m;
  return arg;
}

}  // namespace

void max_pool_forward(const void* x, void* y, int dtype, const PoolGeometry& g, int threads) {
  const int64_t in_plane = g.h * g.w, out_plane = g.oh * g.ow;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t p = 0; p < g.planes; ++p) {
    const auto at = [&](int64_t i) { return load(x, dtype, p * in_plane + i); };
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        float m;
        window_max(at, g, oy, ox, &m);
        store(y, dtype, p * out_plane + oy * g.ow + ox, m);  // exact: m is a value of the data
      }
    }
  }
}

void max_pool_backward(const void* x, const void* dy, void* dx, int dtype, const PoolGeometry& g, int threads) {
  const int64_t in_plane = g.h * g.w, out_plane = g.oh * g.ow;
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> sum(static_cast<size_t>(in_plane));
#pragma omp for schedule(static)
    for (int64_t p = 0; p < g.planes; ++p) {
      std::fill(sum.begin(), sum.end(), 0.f);
      const auto at = [&](int64_t i) { return load(x, dtype, p * in_plane + i); };
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          float m;
          const int64_t arg = window_max(at, g, oy, ox, &m);
          if (arg >= 0) sum[arg] += load(dy, dtype, p * out_plane + oy * g.ow + ox);
        }
      }
      for (int64_t i = 0; i < in_plane; ++i) store(dx, dtype, p * in_plane + i, sum[i]);
    }
  }
}

}  // namespace mxnet_amp
