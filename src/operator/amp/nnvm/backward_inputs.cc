/*!
 * \file backward_inputs.cc
 * \brief What the backward of this library's ops keeps alive: only the forward tensors its kernel reads.
 *
 * lib_api (MX_LIBRARY_VERSION 11) gives an extension op's backward node every forward input and output besides
 * the output gradients, so a graph keeps each of them until backward has run, whether the kernel reads it or not:
 * a product's output beside the attention heads split from it, the scores both as the product's output and as
 * softmax's input. MXNet's own ops list what their backward reads. Here the gradient function lib_api registered
 * is wrapped: it still builds the backward node (same op, same number of inputs), then each forward tensor the
 * kernel never reads (kUnread) is replaced in the node's inputs by an output gradient of the same shape, which the
 * node reads anyway; the kernel finds what it expects in every slot it reads. A slot holding a copy made by
 * amp_fanout reads the copied tensor instead, so the copies are freed after forward. The wrapper is set through
 * nnvm::Op::set_attr at graph_infer.cc's priority, so installing it is idempotent like the inference functions.
 *
 * Compiled as graph_infer.cc is (MXNet's headers, the wheel's std::string ABI). FGradient takes its arguments by
 * reference, which GCC 4.8's and later std::function invokers pass alike.
 */
#include <cstddef>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "nnvm/op.h"
#include "nnvm/op_attr_types.h"
#include "backward_inputs.h"

namespace mxnet_amp_nnvm {
namespace {

/*!
 * \brief A forward tensor an op's backward kernel never reads (src/operator/amp/ops/: the *_backward functions).
 *        input >= 0: forward input `input`, kLast: the last one; else forward output `output`. Unless the node's
 *        attribute `unless_attr` has the value `unless_value` (nullptr: any value; a fused ReLU or ReLU6 reads the
 *        output it masks by); for kLast, only where it has that value (with_sum=True: the last input is the fused
 *        residual sum's addend, whose gradient is the output's). It is replaced by output gradient `grad`, which has
 *        its shape. kEvery (input and output): every input i and output i, each replaced by output gradient i (a
 *        cast's backward reads the gradients alone). kAll (input and output): every input and output, each replaced
 *        by output gradient 0 (a fan-out's copies and data all have its shape).
 */
struct Unread {
  const char* op;
  int input;
  int output;
  int grad;
  const char* unless_attr;
  const char* unless_value;
};

constexpr int kEvery = -2;
constexpr int kLast = -3;
constexpr int kAll = -4;

const Unread kUnread[] = {
    {"amp_multi_cast", kEvery, kEvery, 0, nullptr, nullptr},
    {"amp_multi_widest_cast", kEvery, kEvery, 0, nullptr, nullptr},
    {"amp_fanout", kAll, kAll, 0, nullptr, nullptr},
    {"amp_fully_connected", -1, 0, 0, "act_type", nullptr},
    {"amp_fully_connected", kLast, -1, 0, "with_sum", "True"},
    {"amp_convolution", kLast, -1, 0, "with_sum", "True"},
    {"amp_batch_norm", kLast, -1, 0, "with_sum", "True"},
    {"amp_convolution", -1, 0, 0, "act_type", nullptr},
    {"amp_deconvolution", -1, 0, 0, "act_type", nullptr},
    {"amp_batch_norm", -1, 0, 0, "act_type", nullptr},  // its saved mean and 1/std (outputs 1, 2) are read
    {"amp_batch_dot", -1, 0, 0, nullptr, nullptr},
    {"amp_matmul", -1, 0, 0, nullptr, nullptr},
    {"amp_selfatt_qk", -1, 0, 0, nullptr, nullptr},
    {"amp_selfatt_valatt", -1, 0, 0, nullptr, nullptr},
    {"amp_encdec_qk", -1, 0, 0, nullptr, nullptr},
    {"amp_encdec_valatt", -1, 0, 0, nullptr, nullptr},
    {"amp_layer_norm", -1, 0, 0, nullptr, nullptr},   // the input's moments are recomputed from it
    {"amp_softmax", 0, -1, 0, nullptr, nullptr},      // the output is read; the data only for its shape
    {"amp_log_softmax", 0, -1, 0, nullptr, nullptr},
    {"amp_dropout", 0, -1, 0, nullptr, nullptr},      // the mask (output 1) and the mode are read
    {"amp_dropout", -1, 0, 0, nullptr, nullptr},
    {"amp_pooling", -1, 0, 0, nullptr, nullptr},      // the data is read: the choice is recomputed from it
};

// amp_fanout, whose copies the backward nodes read from the copied tensor (set when the wrappers are installed).
const nnvm::Op*& fanout_op() {
  static const nnvm::Op* op = nullptr;
  return op;
}

// The gradient functions lib_api registered, by op (copied before the wrappers replace them).
std::map<std::string, nnvm::FGradient>& originals() {
  static std::map<std::string, nnvm::FGradient> functions;
  return functions;
}

// Where Node::inputs lies in libmxnet's nnvm::Node, against this file's view of it: as declared, or 8 bytes earlier.
// The wheel was built by GCC 4.8, whose std::unordered_map (NodeAttrs::dict, before inputs) lacks the
// _M_single_bucket member that GCC >= 4.9 added. Each is tried in turn and used only where the entries found there
// are the node's (lib_api_layout).
const ptrdiff_t kInputsShifts[] = {-static_cast<ptrdiff_t>(sizeof(void*)), 0};

std::vector<nnvm::NodeEntry>* inputs_at(nnvm::Node* node, ptrdiff_t shift) {
  return reinterpret_cast<std::vector<nnvm::NodeEntry>*>(reinterpret_cast<char*>(node) +
                                                         offsetof(nnvm::Node, inputs) + shift);
}

// lib_api's backward node reads the output gradients, then the forward inputs, then the forward outputs.
bool lib_api_layout(const std::vector<nnvm::NodeEntry>& backward, const std::vector<nnvm::NodeEntry>& forward,
                    const nnvm::Node* node, const std::vector<nnvm::NodeEntry>& ograds) {
  const size_t n_out = ograds.size();
  if (forward.size() > 1024 || backward.size() != 2 * n_out + forward.size()) return false;
  for (size_t j = 0; j < n_out; ++j) {
    const nnvm::NodeEntry& g = backward[j];
    const nnvm::NodeEntry& y = backward[n_out + forward.size() + j];
    if (g.node != ograds[j].node || g.index != ograds[j].index || y.node.get() != node || y.index != j) return false;
  }
  for (size_t i = 0; i < forward.size(); ++i) {
    if (backward[n_out + i].node != forward[i].node || backward[n_out + i].index != forward[i].index) return false;
  }
  return true;
}

bool applies(const Unread& u, const nnvm::NodeAttrs& attrs) {
  if (u.unless_attr == nullptr) return true;
  const auto it = attrs.dict.find(u.unless_attr);
  const bool has = it != attrs.dict.end() && (u.unless_value == nullptr || it->second == u.unless_value);
  return u.input == kLast ? has : !has;
}

std::vector<nnvm::NodeEntry> trimmed(const std::string& op, const nnvm::ObjectPtr& node,
                                     const std::vector<nnvm::NodeEntry>& ograds) {
  std::vector<nnvm::NodeEntry> grads = originals().at(op)(node, ograds);
  if (grads.empty() || !grads[0].node) return grads;
  std::vector<nnvm::NodeEntry>* backward_inputs = nullptr;
  const std::vector<nnvm::NodeEntry>* forward_inputs = nullptr;
  ptrdiff_t shift = 0;
  for (const ptrdiff_t s : kInputsShifts) {
    backward_inputs = inputs_at(grads[0].node.get(), s);
    forward_inputs = inputs_at(node.get(), s);
    shift = s;
    if (lib_api_layout(*backward_inputs, *forward_inputs, node.get(), ograds)) break;
    backward_inputs = nullptr;
  }
  if (backward_inputs == nullptr) return grads;  // not lib_api's layout: leave the node as it is
  std::vector<nnvm::NodeEntry>& in = *backward_inputs;
  const size_t n_out = ograds.size(), n_in = forward_inputs->size();
  for (const Unread& u : kUnread) {
    if (op != u.op || !applies(u, node->attrs)) continue;
    if (u.input == kEvery) {  // input i and output i have output gradient i's shape (n_in == n_out)
      for (size_t i = 0; i < n_out && n_in == n_out; ++i) in[n_out + i] = in[n_out + n_in + i] = ograds[i];
      continue;
    }
    if (u.input == kAll) {
      for (size_t i = 0; i < n_in + n_out && n_out > 0; ++i) in[n_out + i] = ograds[0];
      continue;
    }
    if (static_cast<size_t>(u.grad) >= n_out) continue;
    if (u.input == kLast) {
      if (n_in > 0) in[n_out + n_in - 1] = ograds[u.grad];
      continue;
    }
    const size_t slot = u.input >= 0 ? n_out + u.input : n_out + n_in + u.output;
    if ((u.input >= 0 && static_cast<size_t>(u.input) >= n_in) ||
        (u.input < 0 && static_cast<size_t>(u.output) >= n_out)) {
      continue;
    }
    in[slot] = ograds[u.grad];
  }
  // A forward input copied by amp_fanout is read from the fan-out's own input: the same values, one tensor kept for
  // every reader's backward (often kept for its producer's backward anyway), and each copy freed after forward.
  // (attrs.op is a node's first member in either layout.)
  for (size_t i = 0; i < n_in; ++i) {
    nnvm::NodeEntry& entry = in[n_out + i];
    if (!entry.node || entry.node->attrs.op == nullptr || entry.node->attrs.op != fanout_op()) continue;
    const std::vector<nnvm::NodeEntry>& copied = *inputs_at(entry.node.get(), shift);
    if (copied.size() == 1 && copied[0].node) entry = copied[0];
  }
  return grads;
}

}  // namespace

int install_backward_inputs(GetOpFn get_op, GetAttrMapFn get_attr_map, int priority) {
  fanout_op() = op_named(get_op, "amp_fanout");
  const dmlc::any* map = get_attr_map("FGradient");
  if (map == nullptr) throw std::invalid_argument("no op has attribute FGradient");
  const auto& gradients = nnvm::get<nnvm::OpMap<nnvm::FGradient>>(*map);
  int installed = 0;
  std::set<std::string> done;
  for (const Unread& u : kUnread) {
    if (!done.insert(u.op).second) continue;
    const nnvm::Op* op = op_named(get_op, u.op);
    if (!gradients.count(op)) throw std::invalid_argument(std::string("op ") + u.op + " has no gradient");
    if (!originals().count(u.op)) originals()[u.op] = gradients[op];
    const std::string name = u.op;
    nnvm::FGradient wrapper = [name](const nnvm::ObjectPtr& node, const std::vector<nnvm::NodeEntry>& ograds) {
      return trimmed(name, node, ograds);
    };
    installed += set_attr_once<nnvm::FGradient>(op, "FGradient", wrapper, priority);
  }
  return installed;
}

}  // namespace mxnet_amp_nnvm
