/*!
 * \file broadcast.cc
 * \brief The broadcast products of broadcast.h: the dimensions collapsed to runs, each run through cpu_loops.h.
 */
#include "broadcast.h"

#include <omp.h>

#include <algorithm>

#include "cpu_loops.h"
#include "tensor_math.h"

namespace mxnet_amp {
namespace {

int64_t element_bytes(int dtype) { return dtype == kBfloat16 ? 2 : 4; }

// Element strides of a contiguous array of shape aligned to full's ndim dimensions (0 where its size is 1).
std::vector<int64_t> strides_in(const std::vector<int64_t>& shape, size_t ndim) {
  std::vector<int64_t> strides(ndim, 0);
  int64_t step = 1;
  for (size_t k = 0; k < shape.size(); ++k) {
    const size_t d = ndim - 1 - k;
    const int64_t size = shape[shape.size() - 1 - k];
    strides[d] = size == 1 ? 0 : step;
    step *= size;
  }
  return strides;
}

// The iteration: dims of the output without those of size 1, adjacent ones merged where all three arrays are
// contiguous across them; the last one is the run.
struct Walk {
  std::vector<int64_t> dims, sx, sz, sd;

  Walk(const std::vector<int64_t>& full, const std::vector<int64_t>& x, const std::vector<int64_t>& z,
       const std::vector<int64_t>& d) {
    const std::vector<int64_t> ax = strides_in(x, full.size()), az = strides_in(z, full.size()),
                               ad = strides_in(d, full.size());
    for (size_t k = 0; k < full.size(); ++k) {
      if (full[k] == 1) continue;
      const bool merge = !dims.empty() && sx.back() == ax[k] * full[k] && sz.back() == az[k] * full[k] &&
                         sd.back() == ad[k] * full[k];
      if (merge) {
        dims.back() *= full[k];
        sx.back() = ax[k], sz.back() = az[k], sd.back() = ad[k];
      } else {
        dims.push_back(full[k]), sx.push_back(ax[k]), sz.push_back(az[k]), sd.push_back(ad[k]);
      }
    }
    if (dims.empty()) dims = {1}, sx = {0}, sz = {0}, sd = {0};
  }

  int64_t runs() const {
    int64_t n = 1;
    for (size_t k = 0; k + 1 < dims.size(); ++k) n *= dims[k];
    return n;
  }

  // The element offsets of run r's first element in x, z and d.
  void offsets(int64_t r, int64_t* ox, int64_t* oz, int64_t* od) const {
    *ox = *oz = *od = 0;
    for (size_t k = dims.size() - 1; k-- > 0;) {
      const int64_t i = r % dims[k];
      r /= dims[k];
      *ox += i * sx[k], *oz += i * sz[k], *od += i * sd[k];
    }
  }

  // Whether two runs can write one element of d: an outer dimension that d is broadcast along.
  bool runs_meet() const {
    for (size_t k = 0; k + 1 < dims.size(); ++k) {
      if (sd[k] == 0) return true;
    }
    return false;
  }
};

// Element offset of an array of dtype, as a pointer.
const void* at(const void* p, int64_t offset, int dtype) {
  return static_cast<const char*>(p) + offset * element_bytes(dtype);
}
void* at(void* p, int64_t offset, int dtype) { return static_cast<char*>(p) + offset * element_bytes(dtype); }

}  // namespace

bool broadcast_shape(const std::vector<int64_t>& a, const std::vector<int64_t>& b, std::vector<int64_t>* out) {
  const size_t ndim = std::max(a.size(), b.size());
  out->assign(ndim, 1);
  for (size_t k = 0; k < ndim; ++k) {
    const int64_t p = k < a.size() ? a[a.size() - 1 - k] : 1, q = k < b.size() ? b[b.size() - 1 - k] : 1;
    if (p != q && p != 1 && q != 1) return false;
    (*out)[ndim - 1 - k] = p == 1 ? q : p;
  }
  return true;
}

void cpu_broadcast_mul(const Strided& x, const Strided& z, void* dst, int dst_dtype,
                       const std::vector<int64_t>& dst_shape, const std::vector<int64_t>& full, int threads) {
  int64_t dst_size = 1, full_size = 1;
  for (int64_t s : dst_shape) dst_size *= s;
  for (int64_t s : full) full_size *= s;
  if (dst_size == 0) return;
  if (full_size == 0) return zero_fill(dst, dst_dtype, dst_size, threads);  // sums over nothing
  const CpuLoops& l = cpu_loops();
  const Walk w(full, x.shape, z.shape, dst_shape);
  const int64_t runs = w.runs(), n = w.dims.back();
  const int kx = w.sx.back() != 0, kz = w.sz.back() != 0;
  const bool reduce = w.sd.back() == 0;
  if (!w.runs_meet()) {  // each run writes elements of its own: the product, or one sum per run
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t r = 0; r < runs; ++r) {
      int64_t ox, oz, od;
      w.offsets(r, &ox, &oz, &od);
      if (!reduce) {
        l.mul(x.dtype, at(x.data, ox, x.dtype), kx, z.dtype, at(z.data, oz, z.dtype), kz, dst_dtype,
              at(dst, od, dst_dtype), n);
      } else {
        float sum = 0.0f;
        l.mul_acc(x.dtype, at(x.data, ox, x.dtype), kx, z.dtype, at(z.data, oz, z.dtype), kz, &sum, true, n);
        store(dst, dst_dtype, od, sum);
      }
    }
    return;
  }
  // Runs meet: float32 sums per thread, added in the end and rounded once.
  const int team = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, runs)));
  std::vector<float> sums(static_cast<size_t>(team) * dst_size, 0.0f);
#pragma omp parallel num_threads(team)
  {
    const int t = omp_get_thread_num(), count = omp_get_num_threads();
    float* mine = sums.data() + static_cast<size_t>(t) * dst_size;
    for (int64_t r = runs * t / count; r < runs * (t + 1) / count; ++r) {
      int64_t ox, oz, od;
      w.offsets(r, &ox, &oz, &od);
      l.mul_acc(x.dtype, at(x.data, ox, x.dtype), kx, z.dtype, at(z.data, oz, z.dtype), kz, mine + od, reduce, n);
    }
  }
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < dst_size; ++i) {
    float sum = 0.0f;
    for (int t = 0; t < team; ++t) sum += sums[static_cast<size_t>(t) * dst_size + i];
    store(dst, dst_dtype, i, sum);
  }
}

}  // namespace mxnet_amp
