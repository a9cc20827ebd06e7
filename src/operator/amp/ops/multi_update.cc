/*!
 * \file multi_update.cc
 * \brief lib_api glue for amp_multi_update: one fused optimizer step (SGD, SGD with momentum, Adam,
 *        AdamW) over many parameters, skipped on the device when the step's gradients were not finite.
 *
 * Inputs: per parameter, weight, grad, its float32 states (momentum; or mean and var) and, with
 * multi_precision, its float32 master weights; then the finite flag (float32 (1,), from
 * amp_multi_unscale_check) and the loss scaler's state (float64 (6,), amp_scaler_update; element 0 is the
 * scale the loss was multiplied by). Weights, states and master weights are updated in place (mutable
 * inputs) unless the flag is 0. With attribute check_grads=True there is no flag input: the op checks the
 * gradients itself (the check of amp_multi_unscale_check, one pass before the update), for a step whose
 * parameters all go through this one call. With bf16_weights (kahan, round or stochastic: mxnet.amp's bf16-true
 * weights), every weight, grad and state is bfloat16 and, with kahan, a bfloat16 compensation follows the states
 * (no master weights); stochastic rounds with random bits from attribute seeds, one uint64 per parameter. The
 * gradient multiplier is rescale_grad / scale, computed here so the host never reads the scale. Output: float32
 * (1,), 1.0 if the update was applied (the gradients were finite), else 0.0.
 *
 * The per-parameter values that depend on the optimizer's update counts (lrs, etas, seeds) follow from whether
 * the previous step was applied, which the host has not read yet. With attribute lrs_if_skipped, one more input
 * follows the scaler state: the previous step's output; when it is 0, lrs_if_skipped (and etas_if_skipped,
 * seeds_if_skipped where the rule takes them) replace lrs (etas, seeds). Read where the update runs: no host sync.
 */
#include <cerrno>
#include <cstdlib>
#include <string>
#include <vector>

#include "glue.h"
#include "../kernels/multi_tensor.h"
#include "../kernels/scaler_rule.h"
#if defined(MXNET_AMP_CUDA)
#include "../kernels/cuda_kernels.h"
#endif

namespace mxnet_amp {
namespace {

constexpr char kOp[] = "amp_multi_update";

struct Params {
  int rule;
  int num_params;
  bool master;
  int bf16;  // kBf16Off, kBf16Kahan, kBf16Round or kBf16Stochastic
  double rescale_grad;
  float clip_gradient, momentum, beta1, beta2, epsilon;
  std::vector<float> lrs, wds, etas;
  std::vector<uint64_t> seeds;  // kBf16Stochastic
  bool check;                   // check_grads: no flag input, the gradients are checked here
  bool alternative;             // the previous step's output is an input; the *_if_skipped lists follow
  std::vector<float> lrs_if_skipped, etas_if_skipped;
  std::vector<uint64_t> seeds_if_skipped;
};

enum Bf16Mode : int { kBf16Off = 0, kBf16Kahan = 1, kBf16Round = 2, kBf16Stochastic = 3 };

int states_of(int rule) { return rule == kSgd ? 0 : (rule == kSgdMomentum ? 1 : 2); }
int stride_of(const Params& p) { return 2 + states_of(p.rule) + (p.master || p.bf16 == kBf16Kahan ? 1 : 0); }
// Inputs after the parameters: the finite flag (unless check), the scaler state and, with alternative lists, the
// previous step's output. Their positions relative to the first input after the parameters (-1: absent):
struct Tail {
  int flag, state, previous, size;
};
Tail tail_of(const Params& p) {
  const int flag = p.check ? -1 : 0, state = flag + 1;
  return {flag, state, p.alternative ? state + 1 : -1, state + (p.alternative ? 2 : 1)};
}

bool parse_bf16(const Attrs& attrs, Params* p) {
  const auto it = attrs.find("bf16_weights");
  const std::string s = it == attrs.end() ? std::string("off") : it->second;
  p->bf16 = s == "off" ? kBf16Off
                       : (s == "kahan" ? kBf16Kahan
                                       : (s == "round" ? kBf16Round : (s == "stochastic" ? kBf16Stochastic : -1)));
  if (p->bf16 < 0) {
    MX_ERROR_MSG << kOp << ": attribute bf16_weights must be one of off, kahan, round, stochastic (got '" << s
                 << "')";
    return false;
  }
  if (p->bf16 != kBf16Off && p->master) {
    MX_ERROR_MSG << kOp << ": bf16_weights=" << s << " keeps no master weights; multi_precision must be False";
    return false;
  }
  return true;
}

// Attribute key (seeds, seeds_if_skipped): n comma-separated unsigned 64-bit integers (stochastic rounding only).
bool parse_seeds(const Attrs& attrs, const char* key, size_t n, std::vector<uint64_t>* seeds) {
  const auto it = attrs.find(key);
  const std::string s = it == attrs.end() ? std::string() : it->second;
  seeds->clear();
  const char* c = s.c_str();
  while (*c != '\0' && seeds->size() < n + 1) {
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(c, &end, 10);  // NOLINT(runtime/int)
    if (end == c || errno != 0 || *c == '-' || (*end != ',' && *end != '\0')) break;
    seeds->push_back(static_cast<uint64_t>(v));
    c = *end == ',' ? end + 1 : end;
  }
  if (seeds->size() != n || *c != '\0') {
    MX_ERROR_MSG << kOp << ": attribute " << key << " must be " << n << " comma-separated unsigned 64-bit integers "
                 << "with bf16_weights=stochastic (got '" << s << "')";
    return false;
  }
  return true;
}

bool parse_rule(const Attrs& attrs, int* rule) {
  const auto it = attrs.find("rule");
  const std::string s = it == attrs.end() ? std::string("<missing>") : it->second;
  if (s == "sgd") {
    *rule = kSgd;
  } else if (s == "sgd_mom") {
    *rule = kSgdMomentum;
  } else if (s == "adam") {
    *rule = kAdam;
  } else if (s == "adamw") {
    *rule = kAdamW;
  } else {
    MX_ERROR_MSG << kOp << ": attribute rule must be one of sgd, sgd_mom, adam, adamw (got '" << s << "')";
    return false;
  }
  return true;
}

bool parse_params(const Attrs& attrs, Params* p) {
  if (!parse_rule(attrs, &p->rule) || !parse_bool(kOp, attrs, "multi_precision", false, &p->master) ||
      !parse_bool(kOp, attrs, "check_grads", false, &p->check) || !parse_bf16(attrs, p)) {
    return false;
  }
  int num_args = 0;
  if (!parse_num_args(kOp, attrs, &num_args)) return false;
  p->alternative = attrs.count("lrs_if_skipped") != 0;
  const int stride = stride_of(*p), tail = tail_of(*p).size;
  if (num_args < stride + tail || (num_args - tail) % stride != 0) {
    MX_ERROR_MSG << kOp << ": got " << num_args << " inputs; rule " << attrs.at("rule") << " needs " << stride
                 << " per parameter plus " << (p->check ? "" : "the flag, ") << "the scaler state"
                 << (p->alternative ? " and the previous step's output" : "");
    return false;
  }
  p->num_params = (num_args - tail) / stride;
  const size_t n = static_cast<size_t>(p->num_params);
  return parse_double(kOp, attrs, "rescale_grad", 1.0, &p->rescale_grad) &&
         parse_float(kOp, attrs, "clip_gradient", -1.0f, &p->clip_gradient) &&
         parse_float(kOp, attrs, "momentum", 0.0f, &p->momentum) &&
         parse_float(kOp, attrs, "beta1", 0.9f, &p->beta1) &&
         parse_float(kOp, attrs, "beta2", 0.999f, &p->beta2) &&
         parse_float(kOp, attrs, "epsilon", 1e-8f, &p->epsilon) &&
         parse_float_list(kOp, attrs, "lrs", n, &p->lrs) && parse_float_list(kOp, attrs, "wds", n, &p->wds) &&
         (p->rule != kAdamW || parse_float_list(kOp, attrs, "etas", n, &p->etas)) &&
         (p->bf16 != kBf16Stochastic || parse_seeds(attrs, "seeds", n, &p->seeds)) &&
         (!p->alternative || parse_float_list(kOp, attrs, "lrs_if_skipped", n, &p->lrs_if_skipped)) &&
         (!p->alternative || p->rule != kAdamW ||
          parse_float_list(kOp, attrs, "etas_if_skipped", n, &p->etas_if_skipped)) &&
         (!p->alternative || p->bf16 != kBf16Stochastic ||
          parse_seeds(attrs, "seeds_if_skipped", n, &p->seeds_if_skipped));
}

MXReturnValue parse(const Attrs& attrs, int* num_in, int* num_out) {
  Params p;
  if (!parse_params(attrs, &p)) return MX_FAIL;
  *num_in = p.num_params * stride_of(p) + tail_of(p).size;
  *num_out = 1;
  return MX_SUCCESS;
}

const char* role_of(const Params& p, int k) {
  static const char* const kSgdMom[] = {"weight", "grad", "momentum", "master weight"};
  static const char* const kAdamRoles[] = {"weight", "grad", "mean", "var", "master weight"};
  if (k < 2) return kSgdMom[k];
  if (k == 2 + states_of(p.rule)) return p.master ? "master weight" : "compensation";
  if (p.rule == kSgd) return "master weight";
  return p.rule == kSgdMomentum ? kSgdMom[k] : kAdamRoles[k];
}

MXReturnValue infer_type(const Attrs& attrs, std::vector<int>* in, std::vector<int>* out) {
  Params p;
  if (!parse_params(attrs, &p)) return MX_FAIL;
  const int stride = stride_of(p);
  for (int i = 0; i < p.num_params; ++i) {
    const int weight = (*in)[i * stride];
    const bool low = weight == kFloat16 || weight == kBfloat16;
    if (weight != kFloat32 && !low) {
      MX_ERROR_MSG << kOp << ": parameter " << i << " has dtype " << dtype_name(weight)
                   << "; supported: float32, float16, bfloat16";
      return MX_FAIL;
    }
    if (p.bf16 != kBf16Off && weight != kBfloat16) {
      MX_ERROR_MSG << kOp << ": parameter " << i << " has dtype " << dtype_name(weight)
                   << "; bf16_weights=" << attrs.at("bf16_weights") << " needs bfloat16 weights";
      return MX_FAIL;
    }
    if (low && !p.master && p.bf16 == kBf16Off) {
      MX_ERROR_MSG << kOp << ": parameter " << i << " is " << dtype_name(weight)
                   << "; low-precision weights need multi_precision=True (float32 master weights)";
      return MX_FAIL;
    }
    for (int k = 1; k < stride; ++k) {
      const int want = k == 1 || p.bf16 != kBf16Off ? weight : kFloat32;
      if ((*in)[i * stride + k] != want) {
        MX_ERROR_MSG << kOp << ": parameter " << i << ": " << role_of(p, k) << " has dtype "
                     << dtype_name((*in)[i * stride + k]) << ", expected " << dtype_name(want);
        return MX_FAIL;
      }
    }
  }
  const Tail tail = tail_of(p);
  const int* after = &(*in)[p.num_params * stride];
  const bool flag_ok = tail.flag < 0 || after[tail.flag] == kFloat32;
  const bool previous_ok = tail.previous < 0 || after[tail.previous] == kFloat32;
  if (!flag_ok || after[tail.state] != kFloat64 || !previous_ok) {
    MX_ERROR_MSG << kOp << ": " << (!flag_ok ? "the finite flag" : !previous_ok ? "the previous step's output"
                                                                                 : "the scaler state")
                 << " has dtype " << dtype_name(after[!flag_ok ? tail.flag : !previous_ok ? tail.previous : tail.state])
                 << "; the flag and the previous step's output must be float32, the scaler state float64";
    return MX_FAIL;
  }
  (*out)[0] = kFloat32;
  return MX_SUCCESS;
}

MXReturnValue infer_shape(const Attrs& attrs, Shapes* in, Shapes* out) {
  (*out)[0] = std::vector<unsigned int>{1};
  return MX_SUCCESS;
}

MXReturnValue mutate_inputs(const Attrs& attrs, std::vector<int>* indices) {
  Params p;
  if (!parse_params(attrs, &p)) return MX_FAIL;
  const int stride = stride_of(p);
  for (int i = 0; i < p.num_params; ++i) {
    for (int k = 0; k < stride; ++k) {
      if (k != 1) indices->push_back(i * stride + k);
    }
  }
  return MX_SUCCESS;
}

MXReturnValue forward(const Attrs& attrs, std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                      const OpResource& res) {
  Params p;
  if (!parse_params(attrs, &p)) return MX_FAIL;
  const int stride = stride_of(p);
  const Tail tail = tail_of(p);
  MXTensor* after = &(*inputs)[p.num_params * stride];
  MXTensor* flag = tail.flag >= 0 ? &after[tail.flag] : nullptr;
  MXTensor& state = after[tail.state];
  MXTensor* previous = tail.previous >= 0 ? &after[tail.previous] : nullptr;
  const int64_t flag_size = flag != nullptr ? flag->size() : 1;
  const int64_t previous_size = previous != nullptr ? previous->size() : 1;
  if (flag_size != 1 || state.size() != kScalerStateSize || previous_size != 1) {
    MX_ERROR_MSG << kOp << ": the finite flag and the previous step's output must hold 1 value and the scaler "
                 << "state " << kScalerStateSize << " (got " << flag_size << ", " << previous_size << " and "
                 << state.size() << ")";
    return MX_FAIL;
  }
  const bool gpu = on_gpu(*outputs);
#if !defined(MXNET_AMP_CUDA)
  if (gpu) return no_cuda(kOp);
#endif
  if (gpu && p.bf16 != kBf16Off) {
    MX_ERROR_MSG << kOp << ": bf16_weights=" << attrs.at("bf16_weights") << " has CPU kernels only";
    return MX_FAIL;
  }
  UpdateHyper hyper{p.rule, 1.0f, p.clip_gradient, p.momentum, p.beta1, p.beta2, p.epsilon};
  std::vector<UpdateSet> sets(p.num_params);
  const int states = states_of(p.rule);
  for (int i = 0; i < p.num_params; ++i) {
    MXTensor* t = &(*inputs)[i * stride];
    for (int k = 0; k < stride; ++k) {
      if (t[k].stype != mxnet::ext::kDefaultStorage || t[k].size() != t[0].size()) {
        MX_ERROR_MSG << kOp << ": parameter " << i << ": " << role_of(p, k) << " must be dense with "
                     << t[0].size() << " elements like its weight (got " << t[k].size() << ")";
        return MX_FAIL;
      }
    }
    UpdateSet& s = sets[i];
    s.weight = {t[0].data_ptr, t[0].size(), static_cast<int>(t[0].dtype)};
    s.grad = t[1].data_ptr;
    const bool bf16 = p.bf16 != kBf16Off;
    s.state0 = states > 0 && !bf16 ? t[2].data<float>() : nullptr;
    s.state1 = states > 1 && !bf16 ? t[3].data<float>() : nullptr;
    s.master = p.master ? t[2 + states].data<float>() : nullptr;
    s.bf16_states = bf16;
    s.bf16_state0 = states > 0 && bf16 ? static_cast<uint16_t*>(t[2].data_ptr) : nullptr;
    s.bf16_state1 = states > 1 && bf16 ? static_cast<uint16_t*>(t[3].data_ptr) : nullptr;
    s.compensation = p.bf16 == kBf16Kahan ? static_cast<uint16_t*>(t[2 + states].data_ptr) : nullptr;
    s.lr = p.lrs[i];
    s.wd = p.wds[i];
    s.eta = p.rule == kAdamW ? p.etas[i] : 1.0f;
    s.stochastic = p.bf16 == kBf16Stochastic;
    s.seed = s.stochastic ? p.seeds[i] : 0;
    s.lr_if_skipped = p.alternative ? p.lrs_if_skipped[i] : s.lr;
    s.eta_if_skipped = p.alternative && p.rule == kAdamW ? p.etas_if_skipped[i] : s.eta;
  }
  float* applied = (*outputs)[0].data<float>();
  std::vector<TensorRef> grads;
  if (p.check) {  // the check writes its flag into the output, which then serves as the update's flag
    grads.reserve(sets.size());
    for (const UpdateSet& s : sets) grads.push_back({const_cast<void*>(s.grad), s.weight.size, s.weight.dtype});
  }
  const float* finite_flag = p.check ? applied : flag->data<float>();
#if defined(MXNET_AMP_CUDA)
  if (gpu) {
    if (p.check) {
      const char* err = cuda_multi_tensor_unscale_check(kDefaultChunkSize, applied, nullptr, grads.data(),
                                                        p.num_params, 1.0f, res.get_cuda_stream());
      if (err != nullptr) return cuda_result(kOp, err);
    }
    return cuda_result(kOp, cuda_multi_tensor_update(kDefaultChunkSize, hyper, sets.data(), p.num_params,
                                                     finite_flag, state.data<double>(), p.rescale_grad,
                                                     previous != nullptr ? previous->data<float>() : nullptr,
                                                     applied, res.get_cuda_stream()));
  }
#endif
  if (p.check) cpu_multi_tensor_unscale_check(kDefaultChunkSize, applied, nullptr, grads.data(), p.num_params, 1.0f);
  const float finite = *finite_flag;
  *applied = finite != 0.0f ? 1.0f : 0.0f;
  if (finite == 0.0f) return MX_SUCCESS;
  if (previous != nullptr && *previous->data<float>() == 0.0f) {
    for (int i = 0; i < p.num_params; ++i) {
      sets[i].lr = sets[i].lr_if_skipped;
      sets[i].eta = sets[i].eta_if_skipped;
      if (sets[i].stochastic) sets[i].seed = p.seeds_if_skipped[i];
    }
  }
  hyper.rescale_grad = static_cast<float>(p.rescale_grad * (1.0 / *state.data<double>()));
  cpu_multi_tensor_update(kDefaultChunkSize, hyper, sets.data(), p.num_params);
  return MX_SUCCESS;
}

}  // namespace
}  // namespace mxnet_amp

REGISTER_OP(amp_multi_update)
    .setParseAttrs(AMP_GUARDED(mxnet_amp::parse))
    .setInferType(AMP_GUARDED(mxnet_amp::infer_type))
    .setInferShape(AMP_GUARDED(mxnet_amp::infer_shape))
    .setMutateInputs(AMP_GUARDED(mxnet_amp::mutate_inputs))
    .setForward(AMP_GUARDED(mxnet_amp::forward), "cpu")
#if defined(MXNET_AMP_CUDA)
    .setForward(AMP_GUARDED(mxnet_amp::forward), "gpu")
#endif
    ;
