/*!
 * \file fanout_op.cc
 * \brief lib_api glue for amp_fanout: one float32 or bfloat16 array read by several nodes, as num_outputs copies of
 *        it, one per reader; its backward adds the readers' gradients in float32 and rounds once.
 *
 * For training graphs storing bfloat16 on float32 arithmetic (CPU class (a)), where MXNet adds the gradients of a
 * tensor read twice with add_n, which has no oneDNN kernel there and adds bfloat16 element by element: 538 ms for
 * 2 M values (ResNet-18's first stage at batch 128), against 2 ms in float32 (AMD EPYC, class (a), 2026-12-06).
 * Each copy has one reader, so MXNet never adds; this kernel does.
 * Attribute: num_outputs (>= 1). Input: the data. Outputs: num_outputs copies of it.
 * Backward: inputs [dy_0 .. dy_{n-1}, data, y_0 .. y_{n-1}] (data and copies are not read: nnvm/backward_inputs.cc
 * gives their slots dy_0), output [dx = the sum of the dy_k].
 */
#include <cstdlib>
#include <cstring>
#include <vector>

#include "glue.h"
#include "../kernels/team.h"
#include "../kernels/tensor_math.h"

namespace mxnet_amp {
namespace {

constexpr char kFanout[] = "amp_fanout";

bool parse_fanout(const Attrs& attrs, int* n) {
  const auto it = attrs.find("num_outputs");
  const char* text = it == attrs.end() ? "" : it->second.c_str();
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (it == attrs.end() || end == text || *end != '\0' || v < 1 || v > 1024) {
    MX_ERROR_MSG << kFanout << ": attribute num_outputs must be an integer in [1, 1024] (got '"
                 << (it == attrs.end() ? "(absent)" : it->second) << "')";
    return false;
  }
  *n = static_cast<int>(v);
  return true;
}

MXReturnValue parse(const Attrs& attrs, int* num_in, int* num_out) {
  if (!parse_fanout(attrs, num_out)) return MX_FAIL;
  *num_in = 1;
  return MX_SUCCESS;
}

MXReturnValue infer_type(const Attrs& attrs, std::vector<int>* in, std::vector<int>* out) {
  if (!check_data_dtype(kFanout, &(*in)[0])) return MX_FAIL;
  out->assign(out->size(), (*in)[0]);
  return MX_SUCCESS;
}

MXReturnValue infer_shape(const Attrs& attrs, Shapes* in, Shapes* out) {
  out->assign(out->size(), (*in)[0]);
  return MX_SUCCESS;
}

MXReturnValue forward(const Attrs& attrs, std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                      const OpResource& res) {
  const MXTensor& x = (*inputs)[0];
  if (on_gpu(*inputs)) {
    MX_ERROR_MSG << kFanout << ": runs on CPU only (got GPU tensors)";
    return MX_FAIL;
  }
  const int64_t bytes = x.size() * dtype_bytes(static_cast<int>(x.dtype));
  for (MXTensor& y : *outputs) {
    if (y.data_ptr != x.data_ptr) std::memcpy(y.data_ptr, x.data_ptr, bytes);
  }
  return MX_SUCCESS;
}

MXReturnValue backward(const Attrs& attrs, std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                       const OpResource& res) {
  const size_t n = (inputs->size() - 1) / 2;  // [dy_0 .. dy_{n-1}, data, y_0 .. y_{n-1}]
  MXTensor& dx = (*outputs)[0];
  std::vector<const void*> dys;
  for (size_t k = 0; k < n; ++k) {
    const MXTensor& dy = (*inputs)[k];
    if (dy.dtype != dx.dtype || dy.size() != dx.size()) {
      MX_ERROR_MSG << kFanout << ": output gradient " << k << " (" << dtype_name(dy.dtype) << ", " << dy.size()
                   << " elements) must have the data's dtype and size (" << dtype_name(dx.dtype) << ", " << dx.size()
                   << ")";
      return MX_FAIL;
    }
    dys.push_back(dy.data_ptr);
  }
  const CallTeam team;  // the cores divided among the library calls running (kernels/team.h)
  sum_arrays(dx.data_ptr, static_cast<int>(dx.dtype), dys.data(), static_cast<int>(n), static_cast<int>(dx.dtype),
             dx.size(), team.threads());
  return MX_SUCCESS;
}

}  // namespace
}  // namespace mxnet_amp

REGISTER_OP(amp_fanout)
    .setParseAttrs(AMP_GUARDED(mxnet_amp::parse))
    .setInferType(AMP_GUARDED(mxnet_amp::infer_type))
    .setInferShape(AMP_GUARDED(mxnet_amp::infer_shape))
    .setForward(AMP_GUARDED(mxnet_amp::forward), "cpu")
    .setBackward(AMP_GUARDED(mxnet_amp::backward), "cpu");
