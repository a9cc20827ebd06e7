/*!
 * \file layout_ops.h
 * \brief Op tables of the amp_layout pass, as plain data: which ops can carry a channels-last tensor.
 *
 * An op that is in none of these tables needs its inputs in the original channels-first layout; the
 * pass puts a transpose back in front of it.
 */
#ifndef MXNET_AMP_PASSES_LAYOUT_OPS_H_
#define MXNET_AMP_PASSES_LAYOUT_OPS_H_

#include <set>
#include <string>

namespace mxnet_amp {
namespace layout {

/*! \brief Ops rewritten to channels-last: their weight is (O|I, C, spatial...) like their data. */
inline const std::set<std::string>& ConvOps() {
  static const std::set<std::string> ops = {"Convolution", "Deconvolution"};
  return ops;
}

/*!
 * \brief Ops whose output i has the layout of input i (of input 0 when i is past the last input):
 * element-wise in the values, indifferent to the order of the axes. Dropout qualifies only without
 * `axes`, LeakyReLU only when not `prelu` (checked by the pass).
 */
inline const std::set<std::string>& FollowOps() {
  static const std::set<std::string> ops = {
      "Activation", "relu", "sigmoid", "tanh", "softsign", "Cast", "cast", "amp_cast", "amp_round",
      "amp_multicast", "amp_multi_cast", "amp_multi_widest_cast", "clip", "_copy", "identity",
      "BlockGrad", "stop_gradient", "Dropout", "LeakyReLU", "exp", "log", "sqrt", "rsqrt", "square",
      "abs", "negative", "erf", "hard_sigmoid", "_mul_scalar", "_plus_scalar", "_minus_scalar",
      "_rminus_scalar", "_div_scalar", "_rdiv_scalar", "_power_scalar", "_maximum_scalar",
      "_minimum_scalar", "_npx_relu", "_npx_sigmoid", "_npx_activation", "_npi_exp", "_npi_sqrt",
      "_npi_tanh", "_npi_multiply_scalar", "_npi_add_scalar", "_npi_subtract_scalar",
      "_npi_true_divide_scalar"};
  return ops;
}

/*!
 * \brief Element-wise ops over several inputs of one rank (equal shapes, or broadcasting such as a
 * per-channel (N, C, 1, 1) operand): permuting the axes of every input permutes the output alike.
 */
inline const std::set<std::string>& ElementwiseOps() {
  static const std::set<std::string> ops = {
      "elemwise_add", "elemwise_sub", "elemwise_mul", "elemwise_div", "_plus", "_Plus", "_add",
      "_minus", "_Minus", "_sub", "_mul", "_Mul", "_div", "_Div", "_maximum", "_minimum",
      "broadcast_add", "broadcast_plus", "broadcast_sub", "broadcast_minus", "broadcast_mul",
      "broadcast_div", "broadcast_maximum", "broadcast_minimum", "add_n", "ElementWiseSum",
      "where", "_npi_add", "_npi_subtract", "_npi_multiply", "_npi_true_divide"};
  return ops;
}

/*! \brief Ops with an axis attribute (name, default) that follows the channels-last permutation. */
struct AxisOp {
  const char* attr;
  int default_axis;
};

inline bool FindAxisOp(const std::string& op, AxisOp* out) {
  if (op == "Concat" || op == "concat") { *out = {"dim", 1}; return true; }
  if (op == "slice_axis") { *out = {"axis", 0}; return true; }
  if (op == "SliceChannel" || op == "split") { *out = {"axis", 1}; return true; }
  if (op == "BatchNorm") { *out = {"axis", 1}; return true; }
  return false;
}

}  // namespace layout
}  // namespace mxnet_amp

#endif  // MXNET_AMP_PASSES_LAYOUT_OPS_H_
