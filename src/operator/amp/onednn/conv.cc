/*!
 * \file conv.cc
 * \brief libmxnet_amp_onednn.so: convolutions with oneDNN 3 (bfloat16 or float32, float32 accumulation),
 *        forward and both gradients, behind the C interface of api.h.
 *
 * MXNet hands extension ops plain NC[D][H]W arrays, while oneDNN 3's fast convolutions (AMX tiles on Xeons
 * with amx_bf16, AVX512-BF16 elsewhere) want blocked or channels-last layouts of their own choosing. Each
 * call therefore reorders its plain inputs into the layouts the primitive picked, runs it, and reorders its
 * result back; a reorder is one pass over a tensor, a small cost beside the convolution it enables
 * (bench/bench_conv.py). Residual sums and ReLU are fused as post-ops, so a ResNet block's tail costs no extra
 * pass. Convolutions with few output positions (the last stages of a ResNet on small images) run as one
 * matrix product instead: conv_gemm.cc. Threads, the primitive cache and scratch memory: common.h.
 */
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "api.h"
#include "common.h"
#include "conv_gemm.h"
#include "widen.h"

namespace mxnet_amp_onednn {
namespace {

using dnnl::memory;

// One tensor argument of the primitive: the caller's plain layout, the primitive's, and the reorders
// between them (when they differ).
struct Operand {
  int arg = 0;
  memory::desc user, inner;
  bool moved = false;
  dnnl::reorder to_inner, to_user;
};

struct Cached {
  dnnl::primitive primitive;
  std::vector<Operand> operands;
  memory::desc scratchpad;
};

}  // namespace

std::string conv_key(const AmpConv& c) {
  int32_t relu_max_bits = 0;
  if (c.relu) std::memcpy(&relu_max_bits, &c.relu_max, sizeof(relu_max_bits));
  std::vector<int64_t> k = {c.pass,        c.spatial, c.batch,      c.in_channels, c.out_channels,
                            c.groups,      c.dtype,   c.out_dtype,  c.bias_dtype,  c.relu,
                            c.addend != nullptr, relu_max_bits, c.hard_act};
  for (const int64_t* v : {c.in_size, c.out_size, c.kernel, c.stride, c.dilate, c.pad}) {
    k.insert(k.end(), v, v + c.spatial);
  }
  return key_of(k);
}

void append_relu(const AmpConv& c, dnnl::post_ops* ops) {
  // hard sigmoid max(0, min(1, x / 6 + 1 / 2)) = clip(x + 3, 0, 6) / 6; hard swish: x times that
  if (c.hard_act == AMP_ACT_HARD_SIGMOID) ops->append_eltwise(dnnl::algorithm::eltwise_hardsigmoid, 1.f / 6, 0.5f);
  if (c.hard_act == AMP_ACT_HARD_SWISH) ops->append_eltwise(dnnl::algorithm::eltwise_hardswish, 1.f / 6, 0.5f);
  if (!c.relu) return;
  if (std::isinf(c.relu_max)) {
    ops->append_eltwise(dnnl::algorithm::eltwise_relu, 0.f, 0.f);
  } else {
    ops->append_eltwise(dnnl::algorithm::eltwise_clip, 0.f, c.relu_max);
  }
}

namespace {

struct Geometry {
  memory::dims src, weights, dst, bias, strides, dilates, pad_l, pad_r;
};

Geometry geometry(const AmpConv& c) {
  if (c.spatial < 1 || c.spatial > AMP_CONV_MAX_SPATIAL) {
    throw std::invalid_argument("spatial must be 1.." + std::to_string(AMP_CONV_MAX_SPATIAL));
  }
  if (c.groups < 1 || c.in_channels % c.groups != 0 || c.out_channels % c.groups != 0) {
    throw std::invalid_argument("groups (" + std::to_string(c.groups) + ") must divide the input (" +
                                std::to_string(c.in_channels) + ") and output (" +
                                std::to_string(c.out_channels) + ") channels");
  }
  Geometry g;
  g.src = {c.batch, c.in_channels};
  g.dst = {c.batch, c.out_channels};
  if (c.groups > 1) {
    g.weights = {c.groups, c.out_channels / c.groups, c.in_channels / c.groups};
  } else {
    g.weights = {c.out_channels, c.in_channels};
  }
  g.bias = {c.out_channels};
  for (int i = 0; i < c.spatial; ++i) {
    const int64_t extent = c.dilate[i] * (c.kernel[i] - 1) + 1;
    if (c.out_size[i] != (c.in_size[i] + 2 * c.pad[i] - extent) / c.stride[i] + 1) {
      throw std::invalid_argument("output size " + std::to_string(c.out_size[i]) + " of spatial dimension " +
                                  std::to_string(i) + " does not match the geometry");
    }
    g.src.push_back(c.in_size[i]);
    g.dst.push_back(c.out_size[i]);
    g.weights.push_back(c.kernel[i]);
    g.strides.push_back(c.stride[i]);
    g.dilates.push_back(c.dilate[i] - 1);  // oneDNN counts the gaps
    g.pad_l.push_back(c.pad[i]);
    // What makes the output size exact: MXNet's floor may leave the right edge short (negative padding).
    g.pad_r.push_back((c.out_size[i] - 1) * c.stride[i] + extent - c.in_size[i] - c.pad[i]);
  }
  return g;
}

memory::desc any_desc(const memory::dims& dims, int dtype) {
  return memory::desc(dims, to_data_type(dtype), memory::format_tag::any);
}

Operand operand(int arg, const memory::dims& dims, int dtype, const memory::desc& inner) {
  Operand o;
  o.arg = arg;
  o.user = plain_desc(dims, to_data_type(dtype));
  o.inner = inner;
  o.moved = o.user != o.inner;
  if (o.moved) {
    auto& engine = cpu_engine();
    o.to_inner = dnnl::reorder(dnnl::reorder::primitive_desc(engine, o.user, engine, o.inner));
    o.to_user = dnnl::reorder(dnnl::reorder::primitive_desc(engine, o.inner, engine, o.user));
  }
  return o;
}

std::shared_ptr<Cached> create(const AmpConv& c) {
  const Geometry g = geometry(c);
  auto& engine = cpu_engine();
  const auto algo = dnnl::algorithm::convolution_direct;
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  auto entry = std::make_shared<Cached>();
  const memory::desc no_bias;
  const memory::desc bias = c.bias_dtype >= 0 ? plain_desc(g.bias, to_data_type(c.bias_dtype)) : no_bias;
  if (c.pass == AMP_CONV_FORWARD) {
    dnnl::post_ops ops;
    if (c.addend != nullptr) ops.append_sum(1.f);
    append_relu(c, &ops);
    attr.set_post_ops(ops);
    const dnnl::convolution_forward::primitive_desc pd(
        engine, dnnl::prop_kind::forward_inference, algo, any_desc(g.src, c.dtype), any_desc(g.weights, c.dtype),
        bias, any_desc(g.dst, c.out_dtype), g.strides, g.dilates, g.pad_l, g.pad_r, attr);
    entry->primitive = dnnl::convolution_forward(pd);
    entry->scratchpad = pd.scratchpad_desc();
    entry->operands = {operand(DNNL_ARG_SRC, g.src, c.dtype, pd.src_desc()),
                       operand(DNNL_ARG_WEIGHTS, g.weights, c.dtype, pd.weights_desc()),
                       operand(DNNL_ARG_DST, g.dst, c.out_dtype, pd.dst_desc())};
    if (c.bias_dtype >= 0) entry->operands.push_back(operand(DNNL_ARG_BIAS, g.bias, c.bias_dtype, bias));
    return entry;
  }
  // The backward passes need the forward primitive they differentiate as a hint.
  const dnnl::convolution_forward::primitive_desc hint(
      engine, dnnl::prop_kind::forward_training, algo, any_desc(g.src, c.dtype), any_desc(g.weights, c.dtype),
      bias, any_desc(g.dst, c.dtype), g.strides, g.dilates, g.pad_l, g.pad_r);
  if (c.pass == AMP_CONV_BACKWARD_DATA) {
    const dnnl::convolution_backward_data::primitive_desc pd(
        engine, algo, any_desc(g.src, c.out_dtype), any_desc(g.weights, c.dtype), any_desc(g.dst, c.dtype),
        g.strides, g.dilates, g.pad_l, g.pad_r, hint, attr);
    entry->primitive = dnnl::convolution_backward_data(pd);
    entry->scratchpad = pd.scratchpad_desc();
    entry->operands = {operand(DNNL_ARG_DIFF_DST, g.dst, c.dtype, pd.diff_dst_desc()),
                       operand(DNNL_ARG_WEIGHTS, g.weights, c.dtype, pd.weights_desc()),
                       operand(DNNL_ARG_DIFF_SRC, g.src, c.out_dtype, pd.diff_src_desc())};
    return entry;
  }
  if (c.pass != AMP_CONV_BACKWARD_WEIGHTS) throw std::invalid_argument("pass must be 0, 1 or 2");
  const dnnl::convolution_backward_weights::primitive_desc pd(
      engine, algo, any_desc(g.src, c.dtype), any_desc(g.weights, c.out_dtype), bias, any_desc(g.dst, c.dtype),
      g.strides, g.dilates, g.pad_l, g.pad_r, hint, attr);
  entry->primitive = dnnl::convolution_backward_weights(pd);
  entry->scratchpad = pd.scratchpad_desc();
  entry->operands = {operand(DNNL_ARG_SRC, g.src, c.dtype, pd.src_desc()),
                     operand(DNNL_ARG_DIFF_DST, g.dst, c.dtype, pd.diff_dst_desc()),
                     operand(DNNL_ARG_DIFF_WEIGHTS, g.weights, c.out_dtype, pd.diff_weights_desc())};
  if (c.bias_dtype >= 0) entry->operands.push_back(operand(DNNL_ARG_DIFF_BIAS, g.bias, c.bias_dtype, bias));
  return entry;
}

// The caller's pointer an operand reads (nullptr: none) and the one it writes (nullptr: it is an input).
void pointers(const AmpConv& c, int arg, const void** read, void** write) {
  *read = nullptr;
  *write = nullptr;
  switch (arg) {
    case DNNL_ARG_SRC: *read = c.data; break;
    case DNNL_ARG_WEIGHTS: *read = c.weight; break;
    case DNNL_ARG_BIAS: *read = c.bias; break;
    case DNNL_ARG_DIFF_DST: *read = c.diff_dst; break;
    case DNNL_ARG_DST: *read = c.addend; *write = c.out; break;  // the addend is summed into the output
    case DNNL_ARG_DIFF_SRC:
    case DNNL_ARG_DIFF_WEIGHTS: *write = c.out; break;
    case DNNL_ARG_DIFF_BIAS: *write = c.diff_bias; break;
    default: throw std::logic_error("unexpected convolution argument");
  }
}

// c on float32 copies where its bfloat16 tensors have no bfloat16 primitive here (widen.h); else c itself.
AmpConv widened(const AmpConv& c, Widening* w) {
  if (!Widening::needed({c.dtype, c.out_dtype, c.bias_dtype, c.weight_dtype})) return c;
  geometry(c);  // checks spatial and groups before the sizes below use them
  int64_t src = c.batch * c.in_channels, dst = c.batch * c.out_channels;
  int64_t weights = c.out_channels * (c.in_channels / c.groups);
  for (int i = 0; i < c.spatial; ++i) {
    src *= c.in_size[i];
    dst *= c.out_size[i];
    weights *= c.kernel[i];
  }
  AmpConv f = c;
  const auto in = [&c, w](const void* p, int64_t n) {
    int dtype = c.dtype;
    return w->input(p, &dtype, n);
  };
  f.dtype = kFloat32;
  f.weight = w->input(c.weight, &f.weight_dtype, weights);
  switch (c.pass) {
    case AMP_CONV_FORWARD: {
      f.data = in(c.data, src);
      f.bias = w->input(c.bias, &f.bias_dtype, c.out_channels);
      int addend_dtype = c.out_dtype;  // the addend has the output's dtype
      f.addend = w->input(c.addend, &addend_dtype, dst);
      f.out = w->output(c.out, &f.out_dtype, dst);
      break;
    }
    case AMP_CONV_BACKWARD_DATA:
      f.diff_dst = in(c.diff_dst, dst);
      f.out = w->output(c.out, &f.out_dtype, src);
      break;
    case AMP_CONV_BACKWARD_WEIGHTS:
      f.diff_dst = in(c.diff_dst, dst);
      f.data = in(c.data, src);
      f.out = w->output(c.out, &f.out_dtype, weights);
      f.diff_bias = w->output(c.diff_bias, &f.bias_dtype, c.out_channels);
      break;
    default: throw std::invalid_argument("pass must be an AmpConvPass");
  }
  return f;
}

void run_pass(const AmpConv& c) {
  if (conv_gemm_eligible(c)) return conv_gemm_run(c);
  const auto entry = cached<Cached>(conv_key(c), [&c] { return create(c); });
  auto& engine = cpu_engine();
  dnnl::stream stream(engine);
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SCRATCHPAD, memory(entry->scratchpad, engine, thread_buffer(0, entry->scratchpad.get_size()))}};
  std::vector<std::pair<const Operand*, memory>> results;  // moved outputs, reordered back afterwards
  int slot = 1;
  for (const Operand& o : entry->operands) {
    const void* read;
    void* write;
    pointers(c, o.arg, &read, &write);
    if (read == nullptr && write == nullptr) throw std::invalid_argument("a pointer of the pass is NULL");
    if (!o.moved) {
      void* ptr = write != nullptr ? write : const_cast<void*>(read);
      if (write != nullptr && read != nullptr && read != write) std::memcpy(write, read, o.user.get_size());
      args[o.arg] = memory(o.user, engine, ptr);
      continue;
    }
    memory inner(o.inner, engine, thread_buffer(slot++, o.inner.get_size()));
    if (read != nullptr) {
      memory user(o.user, engine, const_cast<void*>(read));
      o.to_inner.execute(stream, user, inner);
    }
    if (write != nullptr) results.emplace_back(&o, memory(o.user, engine, write));
    args[o.arg] = inner;
  }
  entry->primitive.execute(stream, args);
  for (auto& r : results) r.first->to_user.execute(stream, args[r.first->arg], r.second);
  stream.wait();
}

// Images first to first + count of c's batch (pointers moved to them; the weight gradient stays whole).
AmpConv images(const AmpConv& c, int64_t first, int64_t count, int64_t in_image, int64_t out_image) {
  AmpConv part = c;
  part.batch = count;
  const auto moved = [first](const void* p, int64_t per_image, int dtype) -> const void* {
    return p == nullptr ? nullptr : static_cast<const char*>(p) + first * per_image * element_bytes(dtype);
  };
  part.data = moved(c.data, in_image, c.dtype);
  part.diff_dst = moved(c.diff_dst, out_image, c.dtype);
  part.addend = moved(c.addend, out_image, c.out_dtype);
  if (c.pass != AMP_CONV_BACKWARD_WEIGHTS) {
    part.out = const_cast<void*>(moved(c.out, c.pass == AMP_CONV_FORWARD ? out_image : in_image, c.out_dtype));
  }
  return part;
}

// c on float32 copies of chunks of its batch (widen.h: kWidenedChunk); the weight (and bias) gradients of the
// chunks add up in float32.
void run_widened(const AmpConv& c, const CallTeam& team) {
  geometry(c);
  int64_t in_image = c.in_channels, out_image = c.out_channels, weights = c.out_channels * (c.in_channels / c.groups);
  for (int i = 0; i < c.spatial; ++i) {
    in_image *= c.in_size[i];
    out_image *= c.out_size[i];
    weights *= c.kernel[i];
  }
  const int64_t chunk = std::max<int64_t>(1, std::min(c.batch, kWidenedChunk / std::max<int64_t>(
                                                                    1, std::max(in_image, out_image))));
  const bool sums = c.pass == AMP_CONV_BACKWARD_WEIGHTS && chunk < c.batch;
  Widening outer(team.threads());
  AmpConv whole = c;
  whole.weight = outer.input(c.weight, &whole.weight_dtype, weights);  // once, not per chunk
  float* more[2] = {nullptr, nullptr};  // a later chunk's weight and bias gradients, added to the first's
  if (sums) {
    whole.out = outer.output(c.out, &whole.out_dtype, weights);
    whole.diff_bias = outer.output(c.diff_bias, &whole.bias_dtype, c.out_channels);
    more[0] = outer.scratch(weights);
    more[1] = c.diff_bias != nullptr ? outer.scratch(c.out_channels) : nullptr;
  }
  for (int64_t first = 0; first < c.batch; first += chunk) {
    AmpConv part = images(whole, first, std::min(chunk, c.batch - first), in_image, out_image);
    const bool added = sums && first > 0;
    if (added) {
      part.out = more[0];
      part.diff_bias = more[1];
    }
    Widening inner(team.threads());
    run_pass(widened(part, &inner));
    inner.finish();
    if (added) {
      auto* dw = static_cast<float*>(whole.out);
      for (int64_t i = 0; i < weights; ++i) dw[i] += more[0][i];
      auto* db = static_cast<float*>(whole.diff_bias);
      for (int64_t i = 0; more[1] != nullptr && i < c.out_channels; ++i) db[i] += more[1][i];
    }
  }
  outer.finish();
}

void run(const AmpConv& c) {
  const CallTeam team;  // before creating the primitive: it splits work by the team size
  if (Widening::needed({c.dtype, c.out_dtype, c.bias_dtype, c.weight_dtype})) return run_widened(c, team);
  if (c.weight != nullptr && c.weight_dtype != c.dtype) {
    throw std::invalid_argument("the weight's dtype must be the data's where oneDNN 3 runs bfloat16 primitives");
  }
  run_pass(c);
}

}  // namespace
}  // namespace mxnet_amp_onednn

extern "C" __attribute__((visibility("default"))) int mxnet_amp_onednn_conv(const AmpConv* c, char* error,
                                                                            int error_len) {
  return mxnet_amp_onednn::guarded([c] { mxnet_amp_onednn::run(*c); }, error, error_len);
}
