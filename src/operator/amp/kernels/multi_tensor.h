/*!
 * \file multi_tensor.h
 * \brief Fused multi-tensor kernels of mxnet.amp: plain C++ entry points, no MXNet headers.
 *
 * Every entry point takes its arguments in the same order: (chunk_size, flags/results, tensor lists,
 * scalars). Tensors are dense and contiguous; a data pointer only needs the alignment of its element
 * type (views at any element offset are fine). Callers validate dtypes and sizes (see ops/); the
 * kernels never touch memory outside [data, data + size).
 */
#ifndef MXNET_AMP_KERNELS_MULTI_TENSOR_H_
#define MXNET_AMP_KERNELS_MULTI_TENSOR_H_

#include <stdint.h>

namespace mxnet_amp {

/*! \brief Floating point dtype codes, equal to MXNet's (mshadow) type flags. */
enum DType : int { kFloat32 = 0, kFloat64 = 1, kFloat16 = 2, kBfloat16 = 12 };

/*! \brief One dense tensor: data pointer, number of elements, dtype code. */
struct TensorRef {
  void* data;
  int64_t size;
  int dtype;
};

/*! \brief Elements per work item: tensors are split into chunks of this many elements. */
constexpr int64_t kDefaultChunkSize = int64_t(1) << 16;

/*! \brief Whether dtype is one of the DType codes above. */
bool is_float_dtype(int dtype);

/*! \brief Name of a dtype code ("float32", ..., or "dtype code <n>"), for error messages. */
const char* dtype_name(int dtype);

/*! \brief Bytes per element of a float dtype code (0 for other codes). */
int dtype_bytes(int dtype);

/*!
 * \brief The widest of n float dtypes: float64 > float32 > float16, bfloat16; float16 mixed with
 *        bfloat16 gives float32, the narrowest type that holds both exactly.
 */
int widest_dtype(const int* dtypes, int n);

/*! \brief Instruction set the CPU kernels dispatched to at run time ("avx512", "avx2", "baseline"). */
const char* cpu_isa();

/*!
 * \brief outputs[i] = cast(inputs[i]) for i < n, one call. Math in float32 (float64 -> float64 is a
 *        copy); inputs[i].size must equal outputs[i].size; an input may not overlap a different output.
 */
void cpu_multi_tensor_cast(int64_t chunk_size, const TensorRef* inputs, const TensorRef* outputs,
                           int n);

/*!
 * \brief In place, tensors[i] *= inv_scale (no writes when inv_scale == 1.0), reading each element
 *        once. Sets *finite_flag to 1.0f if every result is finite, else 0.0f. When sum_squares is not
 *        null, also sets *sum_squares to the sum of squares of all results (double accumulation,
 *        deterministic for a given chunk_size).
 */
void cpu_multi_tensor_unscale_check(int64_t chunk_size, float* finite_flag, float* sum_squares,
                                    const TensorRef* tensors, int n, float inv_scale);

/*! \brief Optimizer update rules of cpu_multi_tensor_update (formulas: see UpdateSet). */
enum UpdateRule : int { kSgd = 0, kSgdMomentum = 1, kAdam = 2, kAdamW = 3 };

/*! \brief Hyper-parameters shared by every parameter of one update call. */
struct UpdateHyper {
  int rule;             // an UpdateRule
  float rescale_grad;   // gradient multiplier (1 / (batch size * loss scale) and the like)
  float clip_gradient;  // clip rescale_grad * grad to [-c, c]; c < 0: no clipping
  float momentum;       // kSgdMomentum
  float beta1, beta2, epsilon;  // kAdam, kAdamW
};

/*!
 * \brief One parameter of an update call. weight and grad share one dtype; state0/state1/master are
 *        float32 and weight.size long. With master (float32 master weights of a float16/bfloat16
 *        weight), the update runs on master and weight receives master rounded to its dtype; without
 *        it weight must be float32. Per element, in float32 and in this order (MXNet 1.9.1's kernels:
 *        multi_sgd_(mom_)update, adam_update, contrib.adamw_update; c(x) clips when clip_gradient >= 0):
 *        - kSgd / kSgdMomentum (state0 = momentum, absent for kSgd):
 *          m = momentum * m - (lr * wd) * w - (c < 0 ? (lr * rescale) * g : lr * c(rescale * g));
 *          w = w + m
 *        - kAdam (state0 = mean, state1 = var; lr already bias-corrected): d = c(g * rescale + w * wd);
 *          mean = beta1 * mean + (1 - beta1) * d; var = beta2 * var + (1 - beta2) * d * d;
 *          w = w - lr * mean / (sqrt(var) + epsilon)
 *        - kAdamW: d = c(rescale * g); mean as kAdam; var = beta2 * var + (1 - beta2) * (d * d);
 *          w = w - eta * (lr * mean / (sqrt(var) + epsilon) + wd * w)
 *        bfloat16 weights without master weights ("bf16-true", when bf16_states is set): grad is bfloat16,
 *        the states are bfloat16 in bf16_state0/bf16_state1 (state0/state1 null), and compensation, when not
 *        null, is a bfloat16 Kahan compensation c of each weight. The rule above runs in float32 on the
 *        precise weight x = w + c and the float32 states; then w = bf16(x'), c = bf16(x' - w) (see
 *        compensated_store in update_rules.h). A null compensation rounds x' to bfloat16 plainly, to nearest, or,
 *        with stochastic, stochastically: element i of the tensor draws r = counter_hash(seed, i)
 *        (counter_hash.h); w = stochastic_bf16_bits(x', r) (update_rules.h), the states too, from bits 16-31
 *        (state0) and 32-47 (state1) of r. The same seed gives the same result whatever the chunking.
 */
struct UpdateSet {
  TensorRef weight;
  const void* grad;
  float* state0;
  float* state1;
  float* master;
  float lr, wd, eta;
  bool bf16_states;
  uint16_t* bf16_state0;
  uint16_t* bf16_state1;
  uint16_t* compensation;
  bool stochastic;  // bf16_states without compensation: stochastic rounding, random bits from seed
  uint64_t seed;
  float lr_if_skipped, eta_if_skipped;  // lr and eta when the previous step was skipped (see its flag)
};

/*! \brief Applies hyper.rule to the n parameters of sets, in parallel chunks of chunk_size elements. */
void cpu_multi_tensor_update(int64_t chunk_size, const UpdateHyper& hyper, const UpdateSet* sets, int n);

}  // namespace mxnet_amp

#endif  // MXNET_AMP_KERNELS_MULTI_TENSOR_H_
