/*!
 * \file op_attr.h
 * \brief Looking up libmxnet's ops by name and setting their attributes once: what graph_infer.cc,
 *        backward_inputs.cc and inplace.cc share.
 */
#ifndef MXNET_AMP_NNVM_OP_ATTR_H_
#define MXNET_AMP_NNVM_OP_ATTR_H_

#include <cstring>
#include <stdexcept>
#include <string>

#include "nnvm/op.h"

namespace mxnet_amp_nnvm {

/*! \brief libmxnet's nnvm::Op::Get and nnvm::Op::GetAttrMap, looked up by name (no link-time dependency). */
using GetOpFn = const nnvm::Op* (*)(const std::string&);
using GetAttrMapFn = const dmlc::any* (*)(const std::string&);

/*! \brief The op registered as name; throws std::invalid_argument naming it when there is none. */
inline const nnvm::Op* op_named(GetOpFn get_op, const std::string& name) {
  const nnvm::Op* op = get_op(name);
  if (op == nullptr) throw std::invalid_argument("op " + name + " is not registered");
  return op;
}

/*!
 * \brief Sets op's attribute attr to value at priority through nnvm::Op::set_attr; false (and nothing changed) when
 *        it is set at that priority already, so installing twice is harmless. Other errors propagate.
 */
template <typename T>
bool set_attr_once(const nnvm::Op* op, const char* attr, const T& value, int priority) {
  try {
    const_cast<nnvm::Op*>(op)->set_attr<T>(attr, value, priority);
  } catch (const std::exception& e) {
    if (std::strstr(e.what(), "already registered with same plevel=") == nullptr) throw;
    return false;
  }
  return true;
}

}  // namespace mxnet_amp_nnvm

#endif  // MXNET_AMP_NNVM_OP_ATTR_H_
