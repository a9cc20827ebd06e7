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
};

const CpuLoops* cpu_loops_baseline();
const CpuLoops* cpu_loops_avx2();
const CpuLoops* cpu_loops_avx512();

}  // namespace mxnet_amp

#endif  // MXNET_AMP_KERNELS_CPU_LOOPS_H_
