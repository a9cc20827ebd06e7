/*!
 * \file rows.h
 * \brief Kernels over the last axis of a rows x cols tensor: the statistics of a layer normalisation (for its
 *        oneDNN 3 backward) and softmax / log-softmax with a valid length per row and a temperature (MXNet's
 *        softmax(data, length, use_length=True, temperature=t)), forward and backward. Float32 or bfloat16
 *        storage, float32 math. No MXNet or oneDNN headers; rows in parallel on the caller's OpenMP team
 *        (team.h), each row through the loops of this CPU's instruction set (cpu_loops.h).
 */
#ifndef MXNET_AMP_KERNELS_ROWS_H_
#define MXNET_AMP_KERNELS_ROWS_H_

#include <stdint.h>

namespace mxnet_amp {

/*! \brief mean[r] and var[r] (biased) of row r of x (rows x cols, dtype float32 or bfloat16), cols > 0. */
void cpu_row_moments(const void* x, int dtype, int64_t rows, int64_t cols, float* mean, float* var, int threads);

/*!
 * \brief Softmax over rows. Forward: dst = softmax(src / temperature) over each row's first length[r] values (all
 *        cols without lengths; lengths clamped to [0, cols]), 0 beyond; log-softmax with log. Backward: diff_src
 *        from dst and diff_dst, 0 beyond each row's length.
 */
struct SoftmaxRows {
  int64_t rows = 0, cols = 0;
  int src_dtype = 0;              /*!< of src and diff_src */
  int dst_dtype = 0;              /*!< of dst and diff_dst */
  const void* src = nullptr;      /*!< forward */
  void* dst = nullptr;            /*!< forward: written; backward: read */
  const void* diff_dst = nullptr; /*!< backward */
  void* diff_src = nullptr;       /*!< backward */
  const void* lengths = nullptr;  /*!< rows integers, or nullptr: every row full */
  int length_bytes = 4;           /*!< 4 (int32) or 8 (int64) */
  float temperature = 1.0f;
  bool log = false;
  int threads = 1;
};

void cpu_softmax_forward(const SoftmaxRows& s);
void cpu_softmax_backward(const SoftmaxRows& s);

}  // namespace mxnet_amp

#endif  // MXNET_AMP_KERNELS_ROWS_H_
