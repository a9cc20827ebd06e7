/*!
 * \file glue.h
 * \brief Helpers shared by the lib_api glue of the mxnet.amp ops: attribute parsing, validation with
 *        messages naming the op and the input, MXTensor -> TensorRef.
 */
#ifndef MXNET_AMP_OPS_GLUE_H_
#define MXNET_AMP_OPS_GLUE_H_

#include <exception>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "mxnet/lib_api.h"
#include "../kernels/multi_tensor.h"

// The lib_api names every op's glue uses (the ops' registrations run at namespace scope too).
using mxnet::ext::MX_FAIL;
using mxnet::ext::MX_SUCCESS;
using mxnet::ext::MXReturnValue;
using mxnet::ext::MXTensor;
using mxnet::ext::OpResource;

namespace mxnet_amp {

using Attrs = std::unordered_map<std::string, std::string>;
using Shapes = std::vector<std::vector<unsigned int>>;

/*! \brief Reads the positive integer attribute "num_args"; on failure reports an error naming op. */
bool parse_num_args(const char* op, const Attrs& attrs, int* num_args);

/*! \brief Reads a float attribute (default when absent); on failure reports an error naming op. */
bool parse_float(const char* op, const Attrs& attrs, const char* key, float fallback, float* value);

/*! \brief Reads a double attribute (default when absent); on failure reports an error naming op. */
bool parse_double(const char* op, const Attrs& attrs, const char* key, double fallback, double* value);

/*! \brief Reads exactly n comma-separated floats from a required attribute (e.g. per-parameter lrs). */
bool parse_float_list(const char* op, const Attrs& attrs, const char* key, size_t n, std::vector<float>* values);

/*! \brief Reads a boolean attribute ("True"/"False"/"1"/"0"/"true"/"false", default when absent). */
bool parse_bool(const char* op, const Attrs& attrs, const char* key, bool fallback, bool* value);

/*!
 * \brief Reads the act_type attribute of a kernel that fuses a ReLU: absent (*relu false), "relu" (*relu_max
 *        INFINITY) or "relu6" (MobileNets' clip to [0, 6]: *relu_max 6).
 */
bool parse_relu(const char* op, const Attrs& attrs, bool* relu, float* relu_max);

/*! \brief Reads a tuple attribute such as "(3, 3)", "[2,2]" or "(1,)": integers >= minimum, empty when absent
 *         or "None"; on failure reports an error naming op. */
bool parse_tuple(const char* op, const Attrs& attrs, const char* key, long minimum, std::vector<long>* values);

/*! \brief Reads the "dtype" attribute: float32, float16 or bfloat16. */
bool parse_target_dtype(const char* op, const Attrs& attrs, int* dtype);

/*! \brief Reads an output's "dtype" attribute: float32 or bfloat16; absent or "None": -1 (the op's default). */
bool parse_output_dtype(const char* op, const Attrs& attrs, int* dtype);

/*! \brief A shape as Python writes a tuple: "(2, 3)", "(4,)", "()". */
template <typename T>
std::string shape_text(const std::vector<T>& shape) {
  std::string text = "(";
  for (size_t d = 0; d < shape.size(); ++d) text += (d ? ", " : "") + std::to_string(shape[d]);
  return text + (shape.size() == 1 ? ",)" : ")");
}

/*! \brief The data dtype of an op on float32 or bfloat16 data: unknown (-1) becomes float32; another is an error
 *         naming op. */
bool check_data_dtype(const char* op, int* dtype);

/*! \brief Checks that every input dtype is a float dtype; the error names op, input and dtype. */
bool check_float_inputs(const char* op, const std::vector<int>& dtypes);

/*! \brief Dense tensors [begin, begin + count) as TensorRefs; fails (naming op/input) on sparse ones. */
bool to_refs(const char* op, const char* role, std::vector<mxnet::ext::MXTensor>* tensors,
             size_t begin, size_t count, std::vector<TensorRef>* refs);

/*! \brief Whether the tensors live on a GPU (all tensors of one call share a context). */
bool on_gpu(const std::vector<mxnet::ext::MXTensor>& tensors);

/*! \brief Whether the tensors live on the CPU; if not, reports that op runs on CPU only. */
bool check_cpu(const char* op, const std::vector<mxnet::ext::MXTensor>& tensors);

/*! \brief The result of a CUDA launch (nullptr or its error string); an error is reported naming op. */
mxnet::ext::MXReturnValue cuda_result(const char* op, const char* error);

/*! \brief Reports that op got GPU tensors in a build without CUDA kernels. */
mxnet::ext::MXReturnValue no_cuda(const char* op);

/*!
 * \brief A lib_api callback F that never lets a C++ exception unwind into libmxnet.so (lib_api's _opCall*
 *        entry points catch nothing): an exception becomes MX_FAIL with its message, which MXNet raises as an
 *        MXNetError naming the op. Use it as AMP_GUARDED(f) wherever a callback is registered.
 */
template <auto F>
struct Guarded;

template <typename... Args, MXReturnValue (*F)(Args...)>
struct Guarded<F> {
  static MXReturnValue call(Args... args) noexcept {
    try {
      return F(args...);
    } catch (const std::bad_alloc&) {
      MX_ERROR_MSG << "out of memory (std::bad_alloc) in libmxnet_amp";
    } catch (const std::exception& e) {
      MX_ERROR_MSG << "libmxnet_amp: " << e.what();
    } catch (...) {
      MX_ERROR_MSG << "libmxnet_amp: unknown C++ exception";
    }
    return MX_FAIL;
  }
};

#define AMP_GUARDED(f) (&::mxnet_amp::Guarded<f>::call)

}  // namespace mxnet_amp

#endif  // MXNET_AMP_OPS_GLUE_H_
