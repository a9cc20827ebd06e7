/*!
 * \file inplace.h
 * \brief Ops of this library whose output may take its input's storage in MXNet's memory plan (inplace.cc);
 *        installed with graph_infer.cc's inference functions.
 */
#ifndef MXNET_AMP_NNVM_INPLACE_H_
#define MXNET_AMP_NNVM_INPLACE_H_

#include "op_attr.h"

namespace mxnet_amp_nnvm {

/*!
 * \brief Sets FInplaceOption on the ops whose kernels may write their output over their input, at priority; returns
 *        how many it set (0 where they were set at that priority already). Throws std::invalid_argument when an op
 *        is missing.
 */
int install_inplace(GetOpFn get_op, int priority);

}  // namespace mxnet_amp_nnvm

#endif  // MXNET_AMP_NNVM_INPLACE_H_
