/*!
 * \file tensor_math.cc
 * \brief The element loops of tensor_math.h.
 */
#include "tensor_math.h"

#include <vector>

namespace mxnet_amp {

void convert_into(void* dst, int dst_dtype, const void* src, int src_dtype, int64_t n, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) store(dst, dst_dtype, i, load(src, src_dtype, i));
}

void relu_mask(void* dst, int dst_dtype, const void* dy, int dy_dtype, const void* y, int y_dtype, int64_t n,
               int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) store(dst, dst_dtype, i, load(y, y_dtype, i) > 0.f ? load(dy, dy_dtype, i) : 0.f);
}

void column_sums(void* dst, int dst_dtype, const void* src, int src_dtype, int64_t rows, int64_t cols,
                 int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t j = 0; j < cols; ++j) {
    float s = 0.f;
    for (int64_t i = 0; i < rows; ++i) s += load(src, src_dtype, i * cols + j);
    store(dst, dst_dtype, j, s);
  }
}

void add_channel_bias(void* y, int y_dtype, const void* acc, int acc_dtype, const void* bias, int bias_dtype,
                      int64_t batch, int64_t channels, int64_t inner, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t nc = 0; nc < batch * channels; ++nc) {
    const float b = load(bias, bias_dtype, nc % channels);
    for (int64_t i = nc * inner; i < (nc + 1) * inner; ++i) {
      store(y, y_dtype, i, acc == nullptr ? b : load(acc, acc_dtype, i) + b);
    }
  }
}

void channel_sums(void* db, int db_dtype, const void* g, int g_dtype, int64_t batch, int64_t channels,
                  int64_t inner, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t c = 0; c < channels; ++c) {
    float s = 0.f;
    for (int64_t n = 0; n < batch; ++n) {
      for (int64_t i = (n * channels + c) * inner; i < (n * channels + c + 1) * inner; ++i) s += load(g, g_dtype, i);
    }
    store(db, db_dtype, c, s);
  }
}

void sum_broadcast_into(const float* full, int nb, const int64_t* full_dims, const int64_t* like_dims,
                        const int64_t* like_strides, int64_t rows, int64_t cols, void* like, int like_dtype,
                        int threads) {
  const int64_t rc = rows * cols;
  int64_t nfull = 1, nlike = 1;
  for (int d = 0; d < nb; ++d) {
    nfull *= full_dims[d];
    nlike *= like_dims[d];
  }
  std::vector<float> acc(nlike * rc, 0.f);
  // Each output matrix sums its own inputs, in batch order: a fixed order, whatever the team.
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t dst = 0; dst < nlike; ++dst) {
    float* to = acc.data() + dst * rc;
    for (int64_t i = 0; i < nfull; ++i) {
      int64_t rest = i, at = 0, scale = 1;
      for (int d = nb - 1; d >= 0; --d) {
        const int64_t idx = rest % full_dims[d];
        rest /= full_dims[d];
        if (like_dims[d] != 1) at += idx * scale;
        scale *= like_dims[d];
      }
      if (at != dst) continue;
      const float* src = full + i * rc;
      for (int64_t j = 0; j < rc; ++j) to[j] += src[j];
    }
  }
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < nlike; ++i) {
    int64_t rest = i, off = 0;
    for (int d = nb - 1; d >= 0; --d) {
      off += (rest % like_dims[d]) * like_strides[d];
      rest /= like_dims[d];
    }
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        store(like, like_dtype, off + r * like_strides[nb] + c * like_strides[nb + 1], acc[i * rc + r * cols + c]);
      }
    }
  }
}

}  // namespace mxnet_amp
