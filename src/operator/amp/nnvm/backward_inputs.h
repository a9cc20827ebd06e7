/*!
 * \file backward_inputs.h
 * \brief Backward nodes of this library's ops that keep only the forward tensors their kernels read
 *        (backward_inputs.cc); installed with graph_infer.cc's inference functions.
 */
#ifndef MXNET_AMP_NNVM_BACKWARD_INPUTS_H_
#define MXNET_AMP_NNVM_BACKWARD_INPUTS_H_

#include "op_attr.h"

namespace mxnet_amp_nnvm {

/*!
 * \brief Wraps the FGradient of the ops with unread forward tensors at priority; returns how many it set (0 where
 *        they were set at that priority already). Throws std::invalid_argument when an op or its gradient is missing.
 */
int install_backward_inputs(GetOpFn get_op, GetAttrMapFn get_attr_map, int priority);

}  // namespace mxnet_amp_nnvm

#endif  // MXNET_AMP_NNVM_BACKWARD_INPUTS_H_
