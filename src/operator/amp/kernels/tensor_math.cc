/*!
 * \file tensor_math.cc
 * \brief The element loops of tensor_math.h.
 */
#include "tensor_math.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

namespace mxnet_amp {
namespace {

// Typed element access: the loops below are instantiated per dtype, so they vectorize (load/store switch on
// the dtype at every element).
inline float get(const float* p, int64_t i) { return p[i]; }
inline float get(const uint16_t* p, int64_t i) { return bf16_bits_to_float(p[i]); }
inline void put(float* p, int64_t i, float v) { p[i] = v; }
inline void put(uint16_t* p, int64_t i, float v) { p[i] = float_to_bf16_bits(v); }

// Calls f with a typed pointer (float* or uint16_t*) for p of dtype.
template <typename P, typename F>
void typed(P* p, int dtype, F f) {
  using F32 = typename std::conditional<std::is_const<P>::value, const float, float>::type;
  using B16 = typename std::conditional<std::is_const<P>::value, const uint16_t, uint16_t>::type;
  if (dtype == kMathBfloat16) {
    f(static_cast<B16*>(p));
  } else {
    f(static_cast<F32*>(p));
  }
}

int64_t element_size(int dtype) { return dtype == kMathBfloat16 ? 2 : 4; }

}  // namespace

void convert_into(void* dst, int dst_dtype, const void* src, int src_dtype, int64_t n, int threads) {
  typed(dst, dst_dtype, [&](auto* d) {
    typed(src, src_dtype, [&](const auto* s) {
#pragma omp parallel for schedule(static) num_threads(threads)
      for (int64_t i = 0; i < n; ++i) put(d, i, get(s, i));
    });
  });
}

void concat_rows(void* whole, void* const* parts, const int64_t* row_bytes, int n_parts, int64_t rows, bool split,
                 int threads) {
  constexpr int64_t kPiece = 64 << 10;  // a long row is copied in pieces, so that few rows still use every thread
  std::vector<int64_t> offset(n_parts + 1, 0), pieces(n_parts + 1, 0);
  for (int i = 0; i < n_parts; ++i) {
    offset[i + 1] = offset[i] + row_bytes[i];
    pieces[i + 1] = pieces[i] + std::max<int64_t>(1, (row_bytes[i] + kPiece - 1) / kPiece);
  }
  const int64_t per_row = pieces[n_parts], tasks = rows * per_row;
  char* w = static_cast<char*>(whole);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t r = t / per_row, k = t % per_row;
    const int i = static_cast<int>(std::upper_bound(pieces.begin(), pieces.end(), k) - pieces.begin()) - 1;
    const int64_t begin = (k - pieces[i]) * kPiece, bytes = std::min(kPiece, row_bytes[i] - begin);
    if (bytes <= 0) continue;
    char* part = static_cast<char*>(parts[i]) + r * row_bytes[i] + begin;
    char* at = w + r * offset[n_parts] + offset[i] + begin;
    if (split) {
      std::memcpy(part, at, bytes);
    } else {
      std::memcpy(at, part, bytes);
    }
  }
}

void sum_arrays(void* dst, int dst_dtype, const void* const* srcs, int n_srcs, int src_dtype, int64_t n,
                int threads) {
  constexpr int64_t kBlock = 4096;  // a block's float32 sums stay in L1 while each source is added
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  typed(dst, dst_dtype, [&](auto* d) {
    typed(srcs[0], src_dtype, [&](const auto* first) {
      using Src = typename std::remove_pointer<decltype(first)>::type;
#pragma omp parallel for schedule(static) num_threads(threads)
      for (int64_t b = 0; b < blocks; ++b) {
        float acc[kBlock];
        const int64_t begin = b * kBlock, count = std::min(kBlock, n - begin);
        for (int64_t i = 0; i < count; ++i) acc[i] = get(first, begin + i);
        for (int k = 1; k < n_srcs; ++k) {
          const Src* s = static_cast<const Src*>(srcs[k]);
          for (int64_t i = 0; i < count; ++i) acc[i] += get(s, begin + i);
        }
        for (int64_t i = 0; i < count; ++i) put(d, begin + i, acc[i]);
      }
    });
  });
}

void relu_mask(void* dst, int dst_dtype, const void* dy, int dy_dtype, const void* y, int y_dtype, int64_t n,
               float relu_max, int threads) {
  const bool capped = !std::isinf(relu_max);
  typed(dst, dst_dtype, [&](auto* d) {
    typed(dy, dy_dtype, [&](const auto* g) {
      typed(y, y_dtype, [&](const auto* out) {
#pragma omp parallel for schedule(static) num_threads(threads)
        for (int64_t i = 0; i < n; ++i) {
          const float v = get(out, i);
          put(d, i, v > 0.f && (!capped || v < relu_max) ? get(g, i) : 0.f);
        }
      });
    });
  });
}

void column_sums(void* dst, int dst_dtype, const void* src, int src_dtype, int64_t rows, int64_t cols,
                 int threads) {
  constexpr int64_t kBlock = 256;  // columns per task: rows are read in order, the sums stay in L1
  const int64_t blocks = (cols + kBlock - 1) / kBlock;
  typed(dst, dst_dtype, [&](auto* d) {
    typed(src, src_dtype, [&](const auto* s) {
#pragma omp parallel for schedule(static) num_threads(threads)
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t begin = b * kBlock, end = std::min(cols, begin + kBlock);
        float acc[kBlock] = {};
        for (int64_t i = 0; i < rows; ++i) {
          for (int64_t j = begin; j < end; ++j) acc[j - begin] += get(s, i * cols + j);
        }
        for (int64_t j = begin; j < end; ++j) put(d, j, acc[j - begin]);
      }
    });
  });
}

void zero_fill(void* dst, int dtype, int64_t n, int threads) {
  constexpr int64_t kChunk = 1 << 16;  // elements per task
  const int64_t chunks = (n + kChunk - 1) / kChunk, size = element_size(dtype);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk, count = std::min(n, begin + kChunk) - begin;
    std::memset(static_cast<char*>(dst) + begin * size, 0, count * size);
  }
}

void zero_columns(void* dst, int dtype, int64_t rows, int64_t row_length, int64_t first, int64_t count,
                  int threads) {
  const int64_t size = element_size(dtype);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t r = 0; r < rows; ++r) {
    std::memset(static_cast<char*>(dst) + (r * row_length + first) * size, 0, count * size);
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
