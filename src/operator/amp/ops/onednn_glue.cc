/*!
 * \file onednn_glue.cc
 * \brief Helpers shared by the glue of the oneDNN 3 ops.
 */
#include "onednn_glue.h"

#include <cerrno>
#include <cstdlib>

#include "../kernels/convert.h"

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

void zero(MXTensor* t) {
  for (int64_t i = 0; i < t->size(); ++i) store(t->data_ptr, static_cast<int>(t->dtype), i, 0.f);
}

void* scratch(Scratch* keep, int64_t floats) {
  keep->emplace_back(static_cast<size_t>(floats));
  return keep->back().data();
}

void* in_dtype(const MXTensor& t, int dtype, Scratch* keep) {
  if (static_cast<int>(t.dtype) == dtype) return t.data_ptr;
  void* out = scratch(keep, t.size());
  const CallTeam team;
  convert_into(out, dtype, t.data_ptr, static_cast<int>(t.dtype), t.size(), team.threads());
  return out;
}

void* relu_masked(const MXTensor& dy, const MXTensor& y, int dtype, Scratch* keep) {
  void* out = scratch(keep, dy.size());
  const CallTeam team;
  relu_mask(out, dtype, dy.data_ptr, static_cast<int>(dy.dtype), y.data_ptr, static_cast<int>(y.dtype), dy.size(),
            team.threads());
  return out;
}

}  // namespace mxnet_amp
