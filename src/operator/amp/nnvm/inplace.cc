/*!
 * \file inplace.cc
 * \brief Outputs that may take their input's storage: MXNet's FInplaceOption for this library's ops.
 *
 * lib_api (MX_LIBRARY_VERSION 11) declares no in-place option, so MXNet's memory plan gave every output storage of
 * its own, even where the input is read by nothing else: attention's scores and the probabilities softmax makes of
 * them (3 MB each per layer of a BERT-style encoder at 8 x 128 tokens, bfloat16), and dropout after it. The planner
 * shares the storage only where the input has no other reader (backward's included) and both have the same size
 * and element size (a float32 output of bfloat16 data gets its own). The kernels read each row (softmax) or element
 * (dropout) before writing it (kernels/cpu_loops_isa.cc), and oneDNN's softmax runs in place.
 *
 * Compiled as graph_infer.cc is; the option function takes NodeAttrs by reference, which GCC 4.8's and later
 * std::function invokers pass alike (as FGradient in backward_inputs.cc).
 */
#include "inplace.h"

#include <utility>
#include <vector>

#include "nnvm/op_attr_types.h"

namespace mxnet_amp_nnvm {
namespace {

// Ops whose output 0 may be written over their input 0.
const char* const kInplace[] = {"amp_softmax", "amp_log_softmax", "amp_dropout"};

}  // namespace

int install_inplace(GetOpFn get_op, int priority) {
  int installed = 0;
  const nnvm::FInplaceOption first = [](const nnvm::NodeAttrs&) {
    return std::vector<std::pair<int, int>>{{0, 0}};
  };
  for (const char* name : kInplace) {
    installed += set_attr_once<nnvm::FInplaceOption>(op_named(get_op, name), "FInplaceOption", first, priority);
  }
  return installed;
}

}  // namespace mxnet_amp_nnvm
