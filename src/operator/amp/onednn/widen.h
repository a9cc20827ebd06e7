/*!
 * \file widen.h
 * \brief bfloat16 storage on float32 arithmetic, where this CPU's oneDNN 3 creates no bfloat16 primitive (below
 *        avx512_core: CPU class (a), or oneDNN held there by ONEDNN_MAX_CPU_ISA).
 *
 * A pass that reads or writes bfloat16 tensors then runs on float32 copies: each bfloat16 input is widened (exactly)
 * into a buffer of this call, each bfloat16 output is computed into a float32 buffer and rounded into the caller's
 * tensor (nearest even) when the pass is done. The numerics are those of the float32 kernel on bfloat16 values with
 * bfloat16 results, which training graphs on CPUs with bfloat16 primitives compute too (up to the order of float32
 * accumulation); the tensors a graph keeps stay bfloat16, half the bytes of float32.
 *
 * The buffers belong to the calling thread and are kept for its next pass, each as large as the largest it held
 * (counted with the scratch buffers: cache_counters().buffer_bytes): a graph's passes need the same sizes step after
 * step, and buffers of megabytes allocated and freed per pass fragmented the heap (a BERT-style encoder's training
 * step peaked 30-60 MB higher with them, AMD EPYC class (a), 2026-12-06).
 */
#ifndef MXNET_AMP_ONEDNN_WIDEN_H_
#define MXNET_AMP_ONEDNN_WIDEN_H_

#include <cstdint>
#include <initializer_list>
#include <vector>

namespace mxnet_amp_onednn {

/*! \brief Whether oneDNN 3 creates bfloat16 primitives on this CPU (asked of oneDNN once: a small bf16 matmul). */
bool bf16_primitives();

/*!
 * \brief Elements of float32 copy per tensor that a widened pass over a batch aims at: a convolution's batch is cut
 *        into chunks of images that fit (at least one image), a product's rows (or, for a weight gradient, its depth)
 *        and LayerNorm's and softmax's rows likewise, so the buffers stay a few megabytes whatever the batch
 *        (ResNet-18 at batch 128 held 112 MB of them uncut, 10 MB in chunks of 2^18 values, and its step ran 7% faster than
 *        with chunks of 2^20: AMD EPYC class (a), 2026-12-06).
 */
constexpr int64_t kWidenedChunk = int64_t{1} << 18;

/*! \brief Bytes of one element of MXNet dtype code dtype (float32 4, bfloat16 and float16 2). */
inline int64_t element_bytes(int dtype) { return dtype == 0 ? 4 : 2; }

/*! \brief Elements a strided view covers, from its first to its last (0 when a dimension is 0). */
int64_t span(int ndims, const int64_t* dims, const int64_t* strides);

/*! \brief The float32 copies of one pass (see the file comment), on a team of threads. */
class Widening {
 public:
  explicit Widening(int threads);
  ~Widening();
  Widening(const Widening&) = delete;
  Widening& operator=(const Widening&) = delete;

  /*! \brief Whether a pass over tensors of these dtypes (MXNet codes; -1: absent) needs float32 copies here. */
  static bool needed(std::initializer_list<int> dtypes);

  /*!
   * \brief The float32 values of input p, n elements of *dtype: p itself when float32 (or NULL), else a widened copy;
   *        *dtype becomes float32.
   */
  const void* input(const void* p, int* dtype, int64_t n);

  /*!
   * \brief Where the pass writes output p, n elements of *dtype: p itself when float32, else a float32 buffer that
   *        finish() rounds into p (holding p's values first when keep: a strided output with gaps, an output the pass
   *        adds to); *dtype becomes float32.
   */
  void* output(void* p, int* dtype, int64_t n, bool keep = false);

  /*! \brief Rounds the float32 results into the caller's bfloat16 outputs. */
  void finish();

  /*! \brief A float32 buffer of n elements for the pass's own use (not initialised). */
  float* scratch(int64_t n) { return buffer(n); }

 private:
  struct Result {
    void* to;
    const float* from;
    int64_t n;
  };
  float* buffer(int64_t n);

  int threads_;
  int first_slot_;  // this thread's buffers from here on are this pass's (a pass inside a pass takes the next ones)
  int slots_ = 0;
  std::vector<Result> results_;
};

}  // namespace mxnet_amp_onednn

#endif  // MXNET_AMP_ONEDNN_WIDEN_H_
