/*!
 * \file glue.cc
 * \brief Attribute parsing and validation shared by the mxnet.amp ops.
 */
#include "glue.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace mxnet_amp {

using mxnet::ext::MXTensor;

bool parse_num_args(const char* op, const Attrs& attrs, int* num_args) {
  const auto it = attrs.find("num_args");
  if (it == attrs.end()) {
    MX_ERROR_MSG << op << ": missing attribute num_args (the number of input arrays); pass "
                 << "num_args=len(arrays)";
    return false;
  }
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(it->second.c_str(), &end, 10);
  if (errno != 0 || end == it->second.c_str() || *end != '\0' || n < 1 || n > (1 << 24)) {
    MX_ERROR_MSG << op << ": num_args must be an integer >= 1 (got '" << it->second
                 << "'); an empty list of arrays is not allowed";
    return false;
  }
  *num_args = static_cast<int>(n);
  return true;
}

bool parse_float(const char* op, const Attrs& attrs, const char* key, float fallback,
                 float* value) {
  const auto it = attrs.find(key);
  if (it == attrs.end()) {
    *value = fallback;
    return true;
  }
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  if (end == it->second.c_str() || *end != '\0') {
    MX_ERROR_MSG << op << ": attribute " << key << " must be a number (got '" << it->second << "')";
    return false;
  }
  *value = static_cast<float>(v);
  return true;
}

bool parse_double(const char* op, const Attrs& attrs, const char* key, double fallback, double* value) {
  const auto it = attrs.find(key);
  if (it == attrs.end()) {
    *value = fallback;
    return true;
  }
  char* end = nullptr;
  *value = std::strtod(it->second.c_str(), &end);
  if (end == it->second.c_str() || *end != '\0') {
    MX_ERROR_MSG << op << ": attribute " << key << " must be a number (got '" << it->second << "')";
    return false;
  }
  return true;
}

bool parse_float_list(const char* op, const Attrs& attrs, const char* key, size_t n, std::vector<float>* values) {
  const auto it = attrs.find(key);
  if (it == attrs.end()) {
    MX_ERROR_MSG << op << ": missing attribute " << key << " (" << n << " comma-separated numbers)";
    return false;
  }
  values->clear();
  const char* at = it->second.c_str();
  while (*at != '\0') {
    char* end = nullptr;
    const float v = std::strtof(at, &end);
    if (end == at || (*end != ',' && *end != '\0')) break;
    values->push_back(v);
    at = *end == ',' ? end + 1 : end;
  }
  if (*at != '\0' || values->size() != n) {
    MX_ERROR_MSG << op << ": attribute " << key << " must hold " << n << " comma-separated numbers (got '"
                 << it->second << "')";
    return false;
  }
  return true;
}

bool parse_bool(const char* op, const Attrs& attrs, const char* key, bool fallback, bool* value) {
  const auto it = attrs.find(key);
  if (it == attrs.end()) {
    *value = fallback;
    return true;
  }
  const std::string& s = it->second;
  if (s == "True" || s == "true" || s == "1") {
    *value = true;
  } else if (s == "False" || s == "false" || s == "0") {
    *value = false;
  } else {
    MX_ERROR_MSG << op << ": attribute " << key << " must be True or False (got '" << s << "')";
    return false;
  }
  return true;
}

bool parse_relu(const char* op, const Attrs& attrs, bool* relu, float* relu_max) {
  const auto it = attrs.find("act_type");
  *relu = it != attrs.end();
  *relu_max = INFINITY;
  if (!*relu || it->second == "relu") return true;
  if (it->second == "relu6") {
    *relu_max = 6.f;
    return true;
  }
  MX_ERROR_MSG << op << ": attribute act_type must be relu or relu6 (got '" << it->second << "')";
  return false;
}

bool parse_tuple(const char* op, const Attrs& attrs, const char* key, long minimum, std::vector<long>* values) {
  values->clear();
  const auto it = attrs.find(key);
  if (it == attrs.end() || it->second == "None") return true;
  std::string s = it->second;
  for (char& ch : s) {
    if (ch == '(' || ch == ')' || ch == '[' || ch == ']' || ch == ',') ch = ' ';
  }
  const char* p = s.c_str();
  while (true) {
    while (*p == ' ') ++p;
    if (*p == '\0') break;
    char* end = nullptr;
    const long v = std::strtol(p, &end, 10);
    if (end == p || v < minimum || (*end != ' ' && *end != '\0')) {
      MX_ERROR_MSG << op << ": attribute " << key << " must be a tuple of integers >= " << minimum
                   << " (got '" << it->second << "')";
      return false;
    }
    values->push_back(v);
    p = end;
  }
  return true;
}

bool parse_target_dtype(const char* op, const Attrs& attrs, int* dtype) {
  const auto it = attrs.find("dtype");
  const std::string s = it == attrs.end() ? std::string() : it->second;
  if (s == "float32") {
    *dtype = kFloat32;
  } else if (s == "float16") {
    *dtype = kFloat16;
  } else if (s == "bfloat16") {
    *dtype = kBfloat16;
  } else {
    MX_ERROR_MSG << op << ": attribute dtype must be one of float32, float16, bfloat16 (got '"
                 << (it == attrs.end() ? "<missing>" : s) << "')";
    return false;
  }
  return true;
}

bool check_cpu(const char* op, const std::vector<MXTensor>& tensors) {
  if (!on_gpu(tensors)) return true;
  MX_ERROR_MSG << op << ": runs on CPU only (got GPU tensors)";
  return false;
}

bool parse_output_dtype(const char* op, const Attrs& attrs, int* dtype) {
  const auto it = attrs.find("dtype");
  *dtype = -1;
  if (it == attrs.end() || it->second == "None") return true;
  *dtype = it->second == "float32" ? kFloat32 : it->second == "bfloat16" ? kBfloat16 : -2;
  if (*dtype == -2) {
    MX_ERROR_MSG << op << ": attribute dtype must be float32, bfloat16 or None (got '" << it->second << "')";
    return false;
  }
  return true;
}

bool check_data_dtype(const char* op, int* dtype) {
  if (*dtype == -1) *dtype = kFloat32;
  if (*dtype != kFloat32 && *dtype != kBfloat16) {
    MX_ERROR_MSG << op << ": input 0 (data) must be float32 or bfloat16 (got " << dtype_name(*dtype) << ")";
    return false;
  }
  return true;
}

bool check_float_inputs(const char* op, const std::vector<int>& dtypes) {
  for (size_t i = 0; i < dtypes.size(); ++i) {
    if (!is_float_dtype(dtypes[i])) {
      MX_ERROR_MSG << op << ": input " << i << " has dtype " << dtype_name(dtypes[i]) << " (code "
                   << dtypes[i] << "); supported: float32, float64, float16, bfloat16";
      return false;
    }
  }
  return true;
}

bool to_refs(const char* op, const char* role, std::vector<MXTensor>* tensors, size_t begin,
             size_t count, std::vector<TensorRef>* refs) {
  refs->clear();
  refs->reserve(count);
  for (size_t i = begin; i < begin + count; ++i) {
    MXTensor& t = (*tensors)[i];
    if (t.stype != mxnet::ext::kDefaultStorage) {
      MX_ERROR_MSG << op << ": " << role << " " << i - begin << " has sparse storage; only dense "
                   << "arrays are supported";
      return false;
    }
    refs->push_back({t.data_ptr, t.size(), static_cast<int>(t.dtype)});
  }
  return true;
}

bool on_gpu(const std::vector<MXTensor>& tensors) {
  return !tensors.empty() && tensors[0].ctx.dev_type == "gpu";
}

mxnet::ext::MXReturnValue cuda_result(const char* op, const char* error) {
  if (error == nullptr) return mxnet::ext::MX_SUCCESS;
  MX_ERROR_MSG << op << ": CUDA launch failed: " << error;
  return mxnet::ext::MX_FAIL;
}

mxnet::ext::MXReturnValue no_cuda(const char* op) {
  MX_ERROR_MSG << op << ": this build of libmxnet_amp has no CUDA kernels (build with -DMXNET_AMP_CUDA=ON)";
  return mxnet::ext::MX_FAIL;
}

}  // namespace mxnet_amp
