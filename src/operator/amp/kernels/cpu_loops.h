/*!
 * \file cpu_loops.h
 * \brief Per-instruction-set tables of the single-chunk CPU loops.
 *
 * cpu_loops_isa.cc is compiled once per instruction set (baseline, AVX2, AVX-512) into its own
 * namespace; cpu_kernels.cc picks one table at run time. Private to the kernels.
 */
#ifndef MXNET_AMP_KERNELS_CPU_LOOPS_H_
#define MXNET_AMP_KERNELS_CPU_LOOPS_H_

#include <stdint.h>

#include "multi_tensor.h"

namespace mxnet_amp {

struct CpuLoops {
  /*! \brief Instruction set name. */
  const char* isa;
  /*! \brief out[0:n] = cast(in[0:n]) from dtype src to dtype dst. */
  void (*cast)(int src, int dst, const void* in, void* out, int64_t n);
  /*!
   * \brief data[0:n] *= inv_scale in place (only when write), returns whether all results are
   *        finite; adds the sum of squares of the results to *sum_squares when it is not null.
   */
  bool (*unscale)(int dtype, void* data, int64_t n, float inv_scale, bool write, double* sum_squares);
  /*! \brief Elements [begin, end) of one parameter's optimizer update (see UpdateSet). */
  void (*update)(const UpdateHyper& hyper, const UpdateSet& set, int64_t begin, int64_t end);
  /*!
   * \brief Batch-norm moments of x[0:n] (dtype float32, float16 or bfloat16): adds sum(x - shift) to *s1 and
   *        sum((x - shift)^2) to *s2 (float32 within the run, then float64).
   */
  void (*bn_moments)(int dtype, const void* x, int64_t n, float shift, double* s1, double* s2);
  /*!
   * \brief y[0:n] = x * a + b (+ addend where not null; relu: min(max(0, that), relu_max)), x, y and addend of one
   *        dtype (float32 math, one rounding); relu_max is INFINITY for a ReLU, 6 for a ReLU6.
   */
  void (*bn_affine)(int dtype, const void* x, void* y, int64_t n, float a, float b, const void* addend, bool relu,
                    float relu_max);
  /*! \brief Adds sum(dy) to *sdy and sum(dy * (x - shift)) to *sdyx; dy and x of one dtype. */
  void (*bn_grad_moments)(int dtype, const void* dy, const void* x, int64_t n, float shift, double* sdy,
                          double* sdyx);
  /*! \brief dx[0:n] = dy * a + x * b + c; dy, x and dx of one dtype (dy may be dx: in place). */
  void (*bn_grad_apply)(int dtype, const void* dy, const void* x, void* dx, int64_t n, float a, float b, float c);
  /*!
   * \brief dst[0:n] = 0 < y < relu_max ? dy : 0 (the gradient through a ReLU capped at relu_max, whose output is y;
   *        INFINITY: a plain ReLU, y > 0); dy, y and dst of one dtype.
   */
  void (*relu_mask)(int dtype, const void* dy, const void* y, void* dst, int64_t n, float relu_max);
  /*! \brief Mean and biased variance of x[0:n] (float32 or bfloat16), n > 0: a layer normalisation's row. */
  void (*row_moments)(int dtype, const void* x, int64_t n, float* mean, float* var);
  /*!
   * \brief One softmax row: y[0:valid] = softmax(x[0:valid] * scale) (log-softmax with log), y[valid:n] = 0
   *        (0 <= valid <= n); x and y float32 or bfloat16, float32 math and one rounding; tmp: n floats of scratch.
   */
  void (*softmax_row)(int x_dtype, const void* x, int y_dtype, void* y, int64_t valid, int64_t n, float scale,
                      bool log, float* tmp);
  /*!
   * \brief One softmax row's gradient: dx[0:valid] = scale * y * (dy - sum(dy * y)) (log-softmax: scale * (dy -
   *        exp(y) * sum(dy))), dx[valid:n] = 0; y and dy of y_dtype, dx of dx_dtype.
   */
  void (*softmax_grad_row)(int y_dtype, const void* y, const void* dy, int dx_dtype, void* dx, int64_t valid,
                           int64_t n, float scale, bool log);
  /*!
   * \brief Dropout of elements [begin, end): mask[i] = draw(seed, i) < keep_below, y[i] = mask[i] ? x[i] * scale : 0
   *        (x and y float32 or bfloat16), draw(seed, i) the top 32 bits of a 64-bit mix of seed + i * golden ratio.
   */
  void (*dropout)(int dtype, const void* x, void* y, uint8_t* mask, int64_t begin, int64_t end, uint64_t seed,
                  uint64_t keep_below, float scale);
  /*! \brief dx[i] = mask[i] ? dy[i] * scale : 0 for i in [begin, end). */
  void (*dropout_grad)(int dtype, const void* dy, void* dx, const uint8_t* mask, int64_t begin, int64_t end,
                       float scale);
  /*!
   * \brief y[i] = a[i * a_step] * b[i * b_step] for i < n, each step 0 (one value for the run) or 1; a, b and y
   *        float32 or bfloat16 each, float32 math and one rounding.
   */
  void (*mul)(int a_dtype, const void* a, int a_step, int b_dtype, const void* b, int b_step, int y_dtype, void* y,
              int64_t n);
  /*!
   * \brief acc[i] += a[i * a_step] * b[i * b_step] for i < n, or with reduce acc[0] += the sum of those products
   *        (float32 lanes); steps 0 or 1, a and b float32 or bfloat16 each.
   */
  void (*mul_acc)(int a_dtype, const void* a, int a_step, int b_dtype, const void* b, int b_step, float* acc,
                  bool reduce, int64_t n);
};

/*! \brief The table of the best instruction set of this CPU (chosen once). */
const CpuLoops& cpu_loops();

const CpuLoops* cpu_loops_baseline();
const CpuLoops* cpu_loops_avx2();
const CpuLoops* cpu_loops_avx512();

}  // namespace mxnet_amp

#endif  // MXNET_AMP_KERNELS_CPU_LOOPS_H_
