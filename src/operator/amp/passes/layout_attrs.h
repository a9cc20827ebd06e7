/*!
 * \file layout_attrs.h
 * \brief Helpers of the amp_layout pass: reading node attributes (shapes inferred by MXNet, tuples)
 * and naming layouts and the transposes between them.
 */
#ifndef MXNET_AMP_PASSES_LAYOUT_ATTRS_H_
#define MXNET_AMP_PASSES_LAYOUT_ATTRS_H_

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "mxnet/lib_api.h"

namespace mxnet_amp {
namespace layout {

using Shape = std::vector<int64_t>;

/*! \brief Shapes of a node's outputs from `__ext_shape__` ("[[1,4,8,8],None]"); unknown -> empty. */
inline std::vector<Shape> OutputShapes(const mxnet::ext::Node* n) {
  std::vector<Shape> shapes;
  auto it = n->attrs.find(MX_STR_SHAPE);
  if (it == n->attrs.end()) return shapes;
  const std::string& s = it->second;
  int depth = 0;
  Shape cur;
  std::string num;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '[') {
      if (++depth == 2) cur.clear();
    } else if (c == ']' || c == ',') {
      if (!num.empty()) { cur.push_back(std::stoll(num)); num.clear(); }
      if (c == ']' && depth-- == 2) shapes.push_back(cur);
    } else if (c == 'N' && depth == 1) {  // "None": shape not inferred
      shapes.push_back(Shape());
      i += 3;
    } else if ((c >= '0' && c <= '9') || c == '-') {
      num += c;
    }
  }
  return shapes;
}

/*! \brief Number of integers in a tuple attribute such as "(3, 3)"; -1 when absent. */
inline int TupleLength(const mxnet::ext::Node* n, const char* key) {
  auto it = n->attrs.find(key);
  if (it == n->attrs.end()) return -1;
  int count = 0;
  bool in_num = false;
  for (char c : it->second) {
    bool digit = (c >= '0' && c <= '9') || c == '-';
    if (digit && !in_num) ++count;
    in_num = digit;
  }
  return count;
}

/*! \brief The integers of a tuple attribute such as "(3, 3)"; empty when absent. */
inline std::vector<int64_t> TupleValues(const mxnet::ext::Node* n, const char* key) {
  std::vector<int64_t> values;
  auto it = n->attrs.find(key);
  if (it == n->attrs.end()) return values;
  std::string num;
  for (char c : it->second + ",") {
    if ((c >= '0' && c <= '9') || c == '-') {
      num += c;
    } else if (!num.empty()) {
      values.push_back(std::stoll(num));
      num.clear();
    }
  }
  return values;
}

inline std::string Attr(const mxnet::ext::Node* n, const char* key, const std::string& fallback) {
  auto it = n->attrs.find(key);
  return it == n->attrs.end() ? fallback : it->second;
}

inline bool IsTrue(const std::string& v) { return v == "1" || v == "True" || v == "true"; }

/*! \brief transpose axes taking a rank-r channels-first tensor to channels-last, or back. */
inline std::vector<int64_t> AxesValues(int rank, bool to_last) {
  std::vector<int64_t> axes = {0};
  if (to_last) {
    for (int a = 2; a < rank; ++a) axes.push_back(a);
    axes.push_back(1);
  } else {
    axes.push_back(rank - 1);
    for (int a = 1; a < rank - 1; ++a) axes.push_back(a);
  }
  return axes;
}

inline std::string Axes(int rank, bool to_last) {
  std::ostringstream os;
  std::vector<int64_t> axes = AxesValues(rank, to_last);
  for (size_t a = 0; a < axes.size(); ++a) os << (a ? ", " : "(") << axes[a];
  os << ")";
  return os.str();
}

/*! \brief Whether n is a transpose (already in the graph) by the given layout change. */
inline bool IsLayoutTranspose(const mxnet::ext::Node* n, int rank, bool to_last) {
  return n->op == "transpose" && n->inputs.size() == 1 &&
         TupleValues(n, "axes") == AxesValues(rank, to_last);
}

inline std::string LayoutName(int rank, bool last) {
  if (rank == 4) return last ? "NHWC" : "NCHW";
  return last ? "NDHWC" : "NCDHW";
}

/*! \brief Position of channels-first axis `axis` in the channels-last tensor. */
inline int MovedAxis(int axis, int rank) { return axis == 0 ? 0 : (axis == 1 ? rank - 1 : axis - 1); }

inline size_t ElementSize(mxnet::ext::MXDType t) {
  switch (static_cast<int>(t)) {
    case mxnet::ext::kFloat64: case mxnet::ext::kInt64: return 8;
    case mxnet::ext::kFloat32: case mxnet::ext::kInt32: return 4;
    case mxnet::ext::kFloat16: case 12: return 2;  // 12: bfloat16
    default: return 1;
  }
}

}  // namespace layout
}  // namespace mxnet_amp

#endif  // MXNET_AMP_PASSES_LAYOUT_ATTRS_H_
