/*!
 * \file onednn_glue.cc
 * \brief Helpers shared by the glue of the oneDNN 3 ops.
 */
#include "onednn_glue.h"
#include "onednn_loader.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "../kernels/convert.h"
#include "../kernels/multi_tensor.h"

namespace mxnet_amp {

bool parse_int(const char* op, const Attrs& attrs, const char* key, long minimum, long* value) {
  const auto it = attrs.find(key);
  if (it == attrs.end()) {
    MX_ERROR_MSG << op << ": missing attribute " << key;
    return false;
  }
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(it->second.c_str(), &end, 10);
  if (errno != 0 || end == it->second.c_str() || *end != '\0' || v < minimum) {
    MX_ERROR_MSG << op << ": attribute " << key << " must be an integer >= " << minimum << " (got '"
                 << it->second << "')";
    return false;
  }
  *value = v;
  return true;
}

bool parse_out_dtype(const char* op, const Attrs& attrs, int* dtype) {
  const auto it = attrs.find("out_dtype");
  *dtype = -1;
  if (it == attrs.end() || it->second == "None") return true;
  if (it->second == "float32") {
    *dtype = kFloat32;
  } else if (it->second == "bfloat16") {
    *dtype = kBfloat16;
  } else {
    MX_ERROR_MSG << op << ": attribute out_dtype must be float32 or bfloat16 (got '" << it->second << "')";
    return false;
  }
  return true;
}

MXReturnValue infer_operand_types(const char* op, int out_dtype, std::vector<int>* in, std::vector<int>* out) {
  int dtype = -1;
  for (int t : *in) dtype = dtype == -1 ? t : dtype;
  if (dtype == -1) dtype = kFloat32;
  for (size_t i = 0; i < in->size(); ++i) {
    if ((*in)[i] == -1) (*in)[i] = dtype;
    if ((*in)[i] != dtype || (dtype != kFloat32 && dtype != kBfloat16)) {
      MX_ERROR_MSG << op << ": input " << i << " has dtype " << dtype_name((*in)[i]) << "; all inputs must "
                   << "be float32, or all bfloat16 (input 0: " << dtype_name((*in)[0]) << ")";
      return MX_FAIL;
    }
  }
  for (int& t : *out) t = out_dtype == -1 ? dtype : out_dtype;
  return MX_SUCCESS;
}

bool parse_param_dtype(const char* op, const Attrs& attrs, int* dtype) {
  const auto it = attrs.find("param_dtype");
  *dtype = -1;
  if (it == attrs.end() || it->second == "None") return true;
  if (it->second != "float32") {
    MX_ERROR_MSG << op << ": attribute param_dtype must be float32 or None (got '" << it->second << "')";
    return false;
  }
  *dtype = kFloat32;
  return true;
}

MXReturnValue infer_data_param_types(const char* op, int out_dtype, int param_dtype, std::vector<int>* in,
                                     std::vector<int>* out) {
  if (param_dtype == -1) return infer_operand_types(op, out_dtype, in, out);
  int& data = (*in)[0];
  if (data == -1) data = kFloat32;
  if (data != kFloat32 && data != kBfloat16) {
    MX_ERROR_MSG << op << ": the data has dtype " << dtype_name(data) << "; it must be float32 or bfloat16";
    return MX_FAIL;
  }
  for (size_t i = 1; i < in->size(); ++i) {
    if ((*in)[i] == -1) (*in)[i] = param_dtype;
    if ((*in)[i] != param_dtype) {
      MX_ERROR_MSG << op << ": input " << i << " has dtype " << dtype_name((*in)[i]) << "; with param_dtype="
                   << dtype_name(param_dtype) << " every parameter must have it";
      return MX_FAIL;
    }
  }
  for (int& t : *out) t = out_dtype == -1 ? data : out_dtype;
  return MX_SUCCESS;
}

void zero(MXTensor* t) {
  const CallTeam team;
  zero_fill(t->data_ptr, static_cast<int>(t->dtype), t->size(), team.threads());
}

void* scratch(Scratch* keep, int64_t floats) {
  keep->emplace_back(new float[static_cast<size_t>(floats)]);  // not initialised: every user writes it first
  return keep->back().get();
}

namespace {

// out = t converted to dtype, through the cast loops of this CPU's instruction set, on this call's team.
void convert(const MXTensor& t, void* out, int dtype) {
  const CallTeam team;
  const TensorRef from = {t.data_ptr, t.size(), static_cast<int>(t.dtype)}, to = {out, t.size(), dtype};
  cpu_multi_tensor_cast(kDefaultChunkSize, &from, &to, 1);
}

}  // namespace

void* in_dtype(const MXTensor& t, int dtype, Scratch* keep) {
  if (static_cast<int>(t.dtype) == dtype) return t.data_ptr;
  void* out = scratch(keep, t.size());
  convert(t, out, dtype);
  return out;
}

void* weight_in_dtype(const MXTensor& w, int dtype, int* used) {
  *used = static_cast<int>(w.dtype);
  if (*used == dtype) return w.data_ptr;
  // float32 beside bfloat16 data where the kernels widen every operand to float32 anyway: read as they are (no copy,
  // no rounding pass; the products of bfloat16 activations and the float32 weights)
  if (*used == kFloat32 && dtype == kBfloat16 && !onednn_bf16_primitives()) return w.data_ptr;
  *used = dtype;
  thread_local std::vector<char> buffer;
  const size_t bytes = static_cast<size_t>(w.size()) * dtype_bytes(dtype);
  if (buffer.size() < bytes) std::vector<char>(bytes).swap(buffer);
  convert(w, buffer.data(), dtype);
  return buffer.data();
}

void* relu_masked(const MXTensor& dy, const MXTensor& y, int dtype, float relu_max, Scratch* keep) {
  void* out = scratch(keep, dy.size());
  const CallTeam team;
  relu_mask(out, dtype, dy.data_ptr, static_cast<int>(dy.dtype), y.data_ptr, static_cast<int>(y.dtype), dy.size(),
            relu_max, team.threads());
  return out;
}

View View::t() const {
  View v = *this;
  std::swap(v.dims[nb], v.dims[nb + 1]);
  std::swap(v.strides[nb], v.strides[nb + 1]);
  return v;
}

int64_t View::batch_size() const {
  int64_t n = 1;
  for (int i = 0; i < nb; ++i) n *= dims[i];
  return n;
}

View contiguous(void* ptr, int dtype, const std::vector<int64_t>& dims) {
  View v;
  v.ptr = ptr;
  v.dtype = dtype;
  v.nb = static_cast<int>(dims.size()) - 2;
  int64_t stride = 1;
  for (int i = static_cast<int>(dims.size()) - 1; i >= 0; --i) {
    v.dims[i] = dims[i];
    v.strides[i] = stride;
    stride *= dims[i];
  }
  return v;
}

View with_ptr(View v, void* ptr, int dtype) {
  v.ptr = ptr;
  v.dtype = dtype;
  return v;
}

bool gemm(const char* op, const View& a, const View& b, const View& c, const Epilogue& e) {
  if (c.strides[c.nb + 1] != 1 && e.bias == nullptr) return gemm(op, b.t(), a.t(), c.t(), e);
  AmpMatmulFn fn = onednn_matmul();
  if (fn == nullptr) {
    MX_ERROR_MSG << op << ": oneDNN 3 kernels unavailable: " << onednn_info();
    return false;
  }
  AmpMatmul m;
  m.ndims = c.nb + 2;
  m.a_dtype = a.dtype;
  m.b_dtype = b.dtype;
  m.c_dtype = c.dtype;
  m.bias_dtype = e.bias == nullptr ? -1 : e.bias_dtype;
  m.act = e.act;
  m.alpha = e.alpha;
  std::copy(a.dims, a.dims + kMaxDims, m.a_dims);
  std::copy(a.strides, a.strides + kMaxDims, m.a_strides);
  std::copy(b.dims, b.dims + kMaxDims, m.b_dims);
  std::copy(b.strides, b.strides + kMaxDims, m.b_strides);
  std::copy(c.dims, c.dims + kMaxDims, m.c_dims);
  std::copy(c.strides, c.strides + kMaxDims, m.c_strides);
  m.a = a.ptr;
  m.b = b.ptr;
  m.bias = e.bias;
  m.addend = e.addend;
  m.c = c.ptr;
  char error[512] = {0};
  if (fn(&m, error, sizeof(error)) != 0) {
    MX_ERROR_MSG << op << ": " << error;
    return false;
  }
  return true;
}

}  // namespace mxnet_amp
