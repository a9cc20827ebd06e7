/*!
 * \file conv_gemm.cc
 * \brief libmxnet_amp_onednn.so: convolutions with few output positions as one matrix product.
 *
 * oneDNN's direct convolutions are slow when the output has a handful of positions and many channels (a
 * ResNet's last stage on 64x64 images: 2x2 positions, 512 channels, where most kernel taps read padding):
 * 130 GFLOP/s, where a matrix product of the same size runs at 1300. Such convolutions are computed here as
 * im2col + one oneDNN matmul over the whole batch, with the columns laid out [C*taps, N*positions]:
 *   forward          Y'[O, NP] = W[O, C*taps] x col[C*taps, NP]       (float32; addend and bias summed in
 *                                                                      first, ReLU a post-op; one rounding)
 *   backward data    dcol[C*taps, NP] = W^T x dY'[O, NP], then col2im (float32 sums)
 *   backward weights dW[O, C*taps] = dY'[O, NP] x col^T               (diff_bias: row sums of dY')
 * where Y' / dY' are the output / its gradient with batch and channel swapped ([O, N, P]; oneDNN reorders
 * swap them). Products accumulate in float32 like the convolution primitives'.
 */
#include <omp.h>

#include <cstring>
#include <unordered_map>
#include <stdexcept>
#include <vector>

#include "../kernels/tensor_math.h"
#include "common.h"
#include "conv_gemm.h"

namespace mxnet_amp_onednn {
namespace {

using dnnl::memory;

// At most this many output positions per image; beyond, oneDNN's direct convolutions are as fast.
constexpr int64_t kMaxPositions = 8;
// At most this many elements in the column matrix (64 MiB of bfloat16).
constexpr int64_t kMaxColumnElements = int64_t(1) << 25;

// The convolution's geometry as 3-D (1-D and 2-D ones get leading dimensions of size 1).
struct Shape {
  int64_t in[3], out[3], kernel[3], stride[3], dilate[3], pad[3];
  int64_t positions() const { return out[0] * out[1] * out[2]; }
  int64_t taps() const { return kernel[0] * kernel[1] * kernel[2]; }
  int64_t volume() const { return in[0] * in[1] * in[2]; }
};

Shape shape_of(const AmpConv& c) {
  Shape s;
  const int lead = 3 - c.spatial;
  for (int i = 0; i < 3; ++i) {
    const bool real = i >= lead;
    const int j = i - lead;
    s.in[i] = real ? c.in_size[j] : 1;
    s.out[i] = real ? c.out_size[j] : 1;
    s.kernel[i] = real ? c.kernel[j] : 1;
    s.stride[i] = real ? c.stride[j] : 1;
    s.dilate[i] = real ? c.dilate[j] : 1;
    s.pad[i] = real ? c.pad[j] : 0;
  }
  return s;
}

// Calls fn(row, n, position, input offset or -1 for padding) for every element of the column matrix of
// channel c's taps; rows are c * taps + tap.
template <typename Fn>
void for_each_column(const Shape& s, int64_t batch, int64_t channel, Fn fn) {
  const int64_t taps = s.taps(), positions = s.positions();
  for (int64_t tap = 0; tap < taps; ++tap) {
    const int64_t k0 = tap / (s.kernel[1] * s.kernel[2]), k1 = tap / s.kernel[2] % s.kernel[1];
    const int64_t k2 = tap % s.kernel[2];
    const int64_t row = channel * taps + tap;
    for (int64_t n = 0; n < batch; ++n) {
      int64_t position = 0;
      for (int64_t o0 = 0; o0 < s.out[0]; ++o0) {
        const int64_t i0 = o0 * s.stride[0] - s.pad[0] + k0 * s.dilate[0];
        for (int64_t o1 = 0; o1 < s.out[1]; ++o1) {
          const int64_t i1 = o1 * s.stride[1] - s.pad[1] + k1 * s.dilate[1];
          for (int64_t o2 = 0; o2 < s.out[2]; ++o2, ++position) {
            const int64_t i2 = o2 * s.stride[2] - s.pad[2] + k2 * s.dilate[2];
            const bool inside = i0 >= 0 && i0 < s.in[0] && i1 >= 0 && i1 < s.in[1] && i2 >= 0 && i2 < s.in[2];
            fn(row, n, position, inside ? (i0 * s.in[1] + i1) * s.in[2] + i2 : -1);
          }
        }
      }
    }
  }
}

// col[row, n * P + position] = x[n, c, input position] (0 in the padding); T: the element's bits.
template <typename T>
void im2col(const Shape& s, int64_t batch, int64_t channels, const T* x, T* col) {
  const int64_t np = batch * s.positions(), volume = s.volume();
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < channels; ++c) {
    for_each_column(s, batch, c, [&](int64_t row, int64_t n, int64_t position, int64_t at) {
      col[row * np + n * s.positions() + position] = at < 0 ? T(0) : x[(n * channels + c) * volume + at];
    });
  }
}

// dx[n, c, input position] = sum of the column elements that read it (float32, in a fixed order).
void col2im(const Shape& s, int64_t batch, int64_t channels, const float* col, float* dx) {
  const int64_t np = batch * s.positions(), volume = s.volume();
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t n = 0; n < batch; ++n) std::memset(dx + (n * channels + c) * volume, 0, volume * sizeof(float));
    for_each_column(s, batch, c, [&](int64_t row, int64_t n, int64_t position, int64_t at) {
      if (at >= 0) dx[(n * channels + c) * volume + at] += col[row * np + n * s.positions() + position];
    });
  }
}

memory::desc strided(const memory::dims& dims, int dtype, const memory::dims& strides) {
  return memory::desc(dims, to_data_type(dtype), strides);
}

dnnl::reorder reorder_of(const memory::desc& from, const memory::desc& to) {
  auto& engine = cpu_engine();
  return dnnl::reorder(dnnl::reorder::primitive_desc(engine, from, engine, to));
}

struct Cached {
  dnnl::matmul matmul;
  memory::desc a, b, c, scratchpad;
  memory::desc nop, onp;     // the output (forward) or its gradient as [N, O, P] and as [O, N, P]
  dnnl::reorder swap;        // nop -> onp: the addend (forward) or diff_dst (backward)
  dnnl::reorder unswap;      // forward: onp -> nop, the result
  memory::desc dx32, dx;     // backward data into a bfloat16 out: float32 sums -> out
  dnnl::reorder convert;
};

std::shared_ptr<Cached> create(const AmpConv& c, const Shape& s) {
  const int64_t n = c.batch, o = c.out_channels, ck = c.in_channels * s.taps(), p = s.positions(), np = n * p;
  auto entry = std::make_shared<Cached>();
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  // Forward: the result and the addend (out_dtype) against the float32 product; backward: diff_dst (dtype).
  const bool forward = c.pass == AMP_CONV_FORWARD;
  entry->nop = strided({n, o, p}, forward ? c.out_dtype : c.dtype, {o * p, p, 1});
  entry->onp = strided({n, o, p}, forward ? kFloat32 : c.dtype, {p, np, 1});
  if (c.pass != AMP_CONV_FORWARD || c.addend != nullptr) entry->swap = reorder_of(entry->nop, entry->onp);
  dnnl::matmul::primitive_desc pd;
  if (c.pass == AMP_CONV_FORWARD) {
    entry->a = strided({o, ck}, c.dtype, {ck, 1});
    entry->b = strided({ck, np}, c.dtype, {np, 1});
    entry->c = strided({o, np}, kFloat32, {np, 1});
    // A per-row bias would make oneDNN fall back to its reference matmul: the bias and the addend are
    // written into the product's float32 destination first and summed in by the sum post-op.
    dnnl::post_ops ops;
    if (c.addend != nullptr || c.bias_dtype >= 0) ops.append_sum(1.f);
    append_relu(c, &ops);
    attr.set_post_ops(ops);
    pd = dnnl::matmul::primitive_desc(cpu_engine(), entry->a, entry->b, entry->c, attr);
    entry->unswap = reorder_of(entry->onp, entry->nop);
  } else if (c.pass == AMP_CONV_BACKWARD_DATA) {
    entry->a = strided({ck, o}, c.dtype, {1, ck});  // W^T
    entry->b = strided({o, np}, c.dtype, {np, 1});
    entry->c = strided({ck, np}, kFloat32, {np, 1});
    pd = dnnl::matmul::primitive_desc(cpu_engine(), entry->a, entry->b, entry->c, attr);
    if (c.out_dtype != kFloat32) {
      const memory::dims dims = {n * c.in_channels * s.volume()};
      entry->dx32 = strided(dims, kFloat32, {1});
      entry->dx = strided(dims, c.out_dtype, {1});
      entry->convert = reorder_of(entry->dx32, entry->dx);
    }
  } else if (c.pass == AMP_CONV_BACKWARD_WEIGHTS) {
    entry->a = strided({o, np}, c.dtype, {np, 1});
    entry->b = strided({np, ck}, c.dtype, {1, np});  // col^T
    entry->c = strided({o, ck}, c.out_dtype, {ck, 1});
    pd = dnnl::matmul::primitive_desc(cpu_engine(), entry->a, entry->b, entry->c, attr);
  } else {
    throw std::invalid_argument("pass must be 0, 1 or 2");
  }
  entry->matmul = dnnl::matmul(pd);
  entry->scratchpad = pd.scratchpad_desc();
  return entry;
}

void columns(const AmpConv& c, const Shape& s, void* col) {
  if (c.dtype == kBfloat16) {
    im2col(s, c.batch, c.in_channels, static_cast<const uint16_t*>(c.data), static_cast<uint16_t*>(col));
  } else {
    im2col(s, c.batch, c.in_channels, static_cast<const uint32_t*>(c.data), static_cast<uint32_t*>(col));
  }
}

// y'[o, :] = bias[o] (+ the addend already there), float32; on the call's team (CallTeam in conv.cc).
void add_bias(const AmpConv& c, float* y, int64_t np) {
  mxnet_amp::add_channel_bias(y, kFloat32, c.addend == nullptr ? nullptr : y, kFloat32, c.bias, c.bias_dtype, 1,
                              c.out_channels, np, omp_get_max_threads());
}

// diff_bias[o] = sum over n and positions of diff_dst, from its swapped copy dy' [O, NP].
void bias_gradient(const AmpConv& c, const void* dy, int64_t np) {
  mxnet_amp::channel_sums(c.diff_bias, c.bias_dtype, dy, c.dtype, 1, c.out_channels, np, omp_get_max_threads());
}

}  // namespace

bool conv_gemm_eligible(const AmpConv& c) {
  if (c.groups != 1 || c.spatial < 1 || c.spatial > 3) return false;
  const Shape s = shape_of(c);
  return s.positions() <= kMaxPositions &&
         c.in_channels * s.taps() * c.batch * s.positions() <= kMaxColumnElements;
}

void conv_gemm_run(const AmpConv& c) {
  const Shape s = shape_of(c);
  const auto entry = cached<Cached>(conv_key(c), [&c, &s] { return create(c, s); });
  auto& engine = cpu_engine();
  dnnl::stream stream(engine);
  const int64_t np = c.batch * s.positions();
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SCRATCHPAD, memory(entry->scratchpad, engine, thread_buffer(0, entry->scratchpad.get_size()))}};
  if (c.pass == AMP_CONV_FORWARD) {
    void* col = thread_buffer(1, entry->b.get_size());
    columns(c, s, col);
    memory y(entry->c, engine, thread_buffer(2, entry->c.get_size()));
    float* sums = static_cast<float*>(y.get_data_handle());
    if (c.addend != nullptr) {  // the sum post-op adds what dst holds: the addend, swapped, in float32
      memory addend(entry->nop, engine, const_cast<void*>(c.addend));
      memory swapped(entry->onp, engine, sums);
      entry->swap.execute(stream, addend, swapped);
      stream.wait();
    }
    if (c.bias_dtype >= 0) add_bias(c, sums, np);
    args[DNNL_ARG_SRC] = memory(entry->a, engine, const_cast<void*>(c.weight));
    args[DNNL_ARG_WEIGHTS] = memory(entry->b, engine, col);
    args[DNNL_ARG_DST] = y;
    entry->matmul.execute(stream, args);
    memory swapped(entry->onp, engine, y.get_data_handle()), out(entry->nop, engine, c.out);
    entry->unswap.execute(stream, swapped, out);
    stream.wait();
    return;
  }
  // Both gradients read diff_dst swapped to [O, N, P].
  memory dy(entry->onp, engine, thread_buffer(2, entry->onp.get_size()));
  memory dy_user(entry->nop, engine, const_cast<void*>(c.diff_dst));
  entry->swap.execute(stream, dy_user, dy);
  if (c.pass == AMP_CONV_BACKWARD_DATA) {
    memory dcol(entry->c, engine, thread_buffer(1, entry->c.get_size()));
    args[DNNL_ARG_SRC] = memory(entry->a, engine, const_cast<void*>(c.weight));
    args[DNNL_ARG_WEIGHTS] = memory(entry->b, engine, dy.get_data_handle());
    args[DNNL_ARG_DST] = dcol;
    entry->matmul.execute(stream, args);
    stream.wait();
    const bool direct = c.out_dtype == kFloat32;
    float* dx = direct ? static_cast<float*>(c.out)
                       : static_cast<float*>(thread_buffer(3, entry->dx32.get_size()));
    col2im(s, c.batch, c.in_channels, static_cast<const float*>(dcol.get_data_handle()), dx);
    if (!direct) {
      memory from(entry->dx32, engine, dx), to(entry->dx, engine, c.out);
      entry->convert.execute(stream, from, to);
      stream.wait();
    }
    return;
  }
  void* col = thread_buffer(1, entry->b.get_size());
  columns(c, s, col);
  args[DNNL_ARG_SRC] = memory(entry->a, engine, dy.get_data_handle());
  args[DNNL_ARG_WEIGHTS] = memory(entry->b, engine, col);
  args[DNNL_ARG_DST] = memory(entry->c, engine, c.out);
  entry->matmul.execute(stream, args);
  stream.wait();
  if (c.bias_dtype >= 0) bias_gradient(c, dy.get_data_handle(), np);
}

}  // namespace mxnet_amp_onednn
