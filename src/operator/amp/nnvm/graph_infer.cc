/*!
 * \file graph_infer.cc
 * \brief Shape and type inference of this library's ops inside MXNet graphs, installed into MXNet's op
 *        registry after mx.library.load, where lib_api 11 cannot express it.
 *
 * lib_api (MX_LIBRARY_VERSION 11) hands a library's inferShape the input shapes only, as unsigned ints,
 * and treats whatever it returns as known. Inside a graph that breaks three ways:
 *  - an input whose rank is unknown (a weight variable bound from the data shape alone) makes MXNet's own
 *    glue size a buffer from ndim == -1, which throws std::bad_alloc before the library is called;
 *  - an unknown dimension (-1, e.g. an RNN begin state's batch size) reaches the library as 4294967295
 *    and comes back as that known size ("Provided = [1,4294967295,64]");
 *  - an output shape known from a consumer never flows back to the input (MXNet's amp_cast does that).
 * Its type glue likewise hands the library output types of 0 (float32) rather than unknown, so an input
 * type not known yet is an error there. So the ops get MXNet-native inference functions: FInferShape unifies
 * each input with its output in both directions and leaves unknowns unknown; FInferType makes amp_round
 * float32 on both sides and the casts' outputs the target (or widest) dtype once it is known. They are set
 * with a higher priority level than the lib_api glue, through nnvm::Op::set_attr, on the attribute maps of
 * the loaded libmxnet.so (looked up by name: the library keeps no link-time dependency on MXNet).
 *
 * Two ABIs of the wheel have to be matched. Its std::string is the pre-C++11 one: this file is compiled
 * with _GLIBCXX_USE_CXX11_ABI=0 and shares no string with the other files. The wheels were built by GCC 4.8,
 * whose std::function invoker takes pointer arguments by value where GCC >= 5 passes them by reference
 * (a source build may be either). No std::function is handed to libmxnet's code to call except the inference
 * functions, whose invoker is set to the caller's convention, and one probe that finds that convention out
 * at run time: a raw std::function given to libmxnet's own exported nnvm::Op::UpdateAttrMap, whose invoker
 * compares the argument it receives with the attribute map nnvm::Op::GetAttrMap returns for the same key.
 * Where that comparison is inconclusive nothing is installed and the caller is told so.
 *
 * Installing is idempotent: an attribute already set at this file's priority (by an earlier install in this
 * process, from this copy of the library or another) is left as it is.
 */
#include <dlfcn.h>

#include <cstring>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "mxnet/tuple.h"
#include "nnvm/op.h"
#include "../kernels/multi_tensor.h"
#include "backward_inputs.h"
#include "inplace.h"

namespace {

using mxnet_amp_nnvm::GetAttrMapFn;
using mxnet_amp_nnvm::GetOpFn;
using mxnet_amp_nnvm::op_named;
using mxnet_amp_nnvm::set_attr_once;

GetAttrMapFn g_get_attr_map = nullptr;

// Level above lib_api's (10 for a new op, 11 for an overwritten one).
constexpr int kPriority = 20;
using mxnet_amp::kFloat32;

std::string shape_str(const mxnet::TShape& s) {
  if (!mxnet::ndim_is_known(s)) return "unknown";
  std::ostringstream os;
  os << s;
  return os.str();
}

// Merges two shapes of one tensor into *a and *b; unknown ranks and dimensions take the other's.
void unify(const nnvm::NodeAttrs& attrs, size_t index, mxnet::TShape* a, mxnet::TShape* b) {
  if (!mxnet::ndim_is_known(*a)) {
    *a = *b;
    return;
  }
  if (!mxnet::ndim_is_known(*b)) {
    *b = *a;
    return;
  }
  bool same = a->ndim() == b->ndim();
  for (int d = 0; same && d < a->ndim(); ++d) {
    if (!mxnet::dim_size_is_known((*a)[d])) (*a)[d] = (*b)[d];
    if (!mxnet::dim_size_is_known((*b)[d])) (*b)[d] = (*a)[d];
    same = (*a)[d] == (*b)[d];
  }
  if (!same) {
    throw std::invalid_argument(attrs.op->name + ": input " + std::to_string(index) + " has shape " +
                                shape_str(*a) + " but output " + std::to_string(index) +
                                " has shape " + shape_str(*b) + "; they must be equal");
  }
}

// Input i and output i of amp_round, amp_multi_cast and amp_multi_widest_cast have one shape.
bool elementwise_shape(const nnvm::NodeAttrs& attrs, mxnet::ShapeVector* in, mxnet::ShapeVector* out) {
  for (size_t i = 0; i < out->size(); ++i) unify(attrs, i, &(*in)[i], &(*out)[i]);
  return mxnet::shape_is_known(*in) && mxnet::shape_is_known(*out);
}

// amp_multi_unscale_check: any input shapes; one flag (and one sum of squares) of shape (1,).
bool flag_shape(const nnvm::NodeAttrs& attrs, mxnet::ShapeVector* in, mxnet::ShapeVector* out) {
  for (size_t i = 0; i < out->size(); ++i) {
    mxnet::TShape one(1, 1);
    unify(attrs, i, &one, &(*out)[i]);
  }
  return mxnet::shape_is_known(*in);
}

std::string dtype_text(int code) {
  return std::string(mxnet_amp::dtype_name(code)) + " (code " + std::to_string(code) + ")";
}

// amp_round: float32 in, float32 out, whichever side is known first.
bool round_type(const nnvm::NodeAttrs& attrs, std::vector<int>* in, std::vector<int>* out) {
  for (std::vector<int>* side : {in, out}) {
    int& t = (*side)[0];
    if (t == -1) t = kFloat32;
    if (t != kFloat32) {
      throw std::invalid_argument(attrs.op->name + ": " + (side == in ? "input" : "output") +
                                  " 0 must be float32 (got " + dtype_text(t) + ")");
    }
  }
  return true;
}

// Every known input a float dtype; returns whether all are known.
bool check_float(const nnvm::NodeAttrs& attrs, const std::vector<int>& in) {
  bool known = true;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == -1) {
      known = false;
    } else if (!mxnet_amp::is_float_dtype(in[i])) {
      throw std::invalid_argument(attrs.op->name + ": input " + std::to_string(i) + " has dtype " +
                                  dtype_text(in[i]) + "; supported: float32, float64, float16, bfloat16");
    }
  }
  return known;
}

void assign_outputs(const nnvm::NodeAttrs& attrs, int dtype, std::vector<int>* out) {
  for (size_t i = 0; i < out->size(); ++i) {
    int& t = (*out)[i];
    if (t != -1 && t != dtype) {
      throw std::invalid_argument(attrs.op->name + ": output " + std::to_string(i) + " must be " +
                                  dtype_text(dtype) + " (got " + dtype_text(t) + ")");
    }
    t = dtype;
  }
}

// amp_multi_cast: every output has the "dtype" attribute's type (parsed and checked by the op's glue).
bool cast_type(const nnvm::NodeAttrs& attrs, std::vector<int>* in, std::vector<int>* out) {
  const auto it = attrs.dict.find("dtype");
  const std::string name = it == attrs.dict.end() ? "" : it->second;
  const int dtype = name == "float16" ? mxnet_amp::kFloat16 : name == "bfloat16" ? mxnet_amp::kBfloat16
                                                                                 : kFloat32;
  const bool known = check_float(attrs, *in);
  assign_outputs(attrs, dtype, out);
  return known;
}

// amp_multi_widest_cast: every output has the widest input type, once every input type is known.
bool widest_type(const nnvm::NodeAttrs& attrs, std::vector<int>* in, std::vector<int>* out) {
  if (!check_float(attrs, *in)) return false;
  assign_outputs(attrs, mxnet_amp::widest_dtype(in->data(), static_cast<int>(in->size())), out);
  return true;
}

// amp_multi_unscale_check: float inputs, float32 flag (and sum of squares).
bool flag_type(const nnvm::NodeAttrs& attrs, std::vector<int>* in, std::vector<int>* out) {
  const bool known = check_float(attrs, *in);
  assign_outputs(attrs, kFloat32, out);
  return known;
}

template <typename V>
using InferFn = bool (*)(const nnvm::NodeAttrs&, std::vector<V>*, std::vector<V>*);

// std::function's invoker as GCC 4.8 calls it: the functor storage, then the arguments by value.
template <typename V, InferFn<V> F>
bool invoke_gcc4(const void* functor, const nnvm::NodeAttrs& attrs, std::vector<V>* in,
                 std::vector<V>* out) {
  return F(attrs, in, out);
}

template <typename V, InferFn<V> F>
nnvm::FInferNodeEntryAttr<V> make_infer(bool gcc4_caller) {
  nnvm::FInferNodeEntryAttr<V> fn(F);
  // libstdc++'s layout: functor storage (16 bytes), manager, invoker; the same in GCC 4.8 and 12.
  static_assert(sizeof(fn) == 32, "unexpected std::function layout");
  if (gcc4_caller) {
    auto invoker = &invoke_gcc4<V, F>;
    std::memcpy(reinterpret_cast<char*>(&fn) + 24, &invoker, sizeof(invoker));
  }
  return fn;
}

// Sets attr of op_name to fn at kPriority; false when it is set at that priority already (installed before).
template <typename V>
bool install(GetOpFn get_op, const char* op_name, const char* attr, const nnvm::FInferNodeEntryAttr<V>& fn) {
  return set_attr_once<nnvm::FInferNodeEntryAttr<V>>(op_named(get_op, op_name), attr, fn, kPriority);
}

// libstdc++'s std::function<void(dmlc::any*)> as raw memory (the same in GCC 4.8 and 12): functor storage,
// manager (non-null: the function is not empty), invoker.
struct RawFunction {
  void* storage[2];
  bool (*manager)(void*, const void*, int);
  void (*invoker)(const void*, void*);
};
static_assert(sizeof(RawFunction) == sizeof(std::function<void(dmlc::any*)>), "unexpected std::function layout");

const void* g_probe_argument = nullptr;
int g_probe_calls = 0;

bool probe_manager(void*, const void*, int) { return false; }  // nothing to copy or destroy
void probe_invoker(const void*, void* argument) {
  g_probe_argument = argument;
  ++g_probe_calls;
}

using UpdateAttrMapFn = void (*)(const std::string&, RawFunction*);  // std::function by invisible reference

}  // namespace

/*!
 * \brief How an invoker that received argument for a call with the pointer expected was called: 1 when the
 *        pointer came by value (GCC 4), 2 when by reference (GCC >= 5), 0 when neither (inconclusive).
 */
extern "C" int mxnet_amp_classify_invoker_argument(const void* argument, const void* expected) {
  if (argument == nullptr || expected == nullptr) return 0;
  if (argument == expected) return 1;
  if (*static_cast<const void* const*>(argument) == expected) return 2;
  return 0;
}

/*!
 * \brief The calling convention of std::function invokers in the loaded libmxnet.so at libmxnet_path: 1 (GCC 4,
 *        pointers by value) or 2 (GCC >= 5, by reference), found by calling its nnvm::Op::UpdateAttrMap with a
 *        probe; 0 when inconclusive, with *message saying why (a static string).
 */
extern "C" int mxnet_amp_libmxnet_invoker_convention(const char* libmxnet_path, const char** message) {
  static std::string text;
  void* lib = dlopen(libmxnet_path, RTLD_LAZY | RTLD_NOLOAD);
  if (lib == nullptr) {
    text = std::string("libmxnet.so is not loaded from ") + libmxnet_path;
    *message = text.c_str();
    return 0;
  }
  auto update = reinterpret_cast<UpdateAttrMapFn>(
      dlsym(lib, "_ZN4nnvm2Op13UpdateAttrMapERKSsSt8functionIFvPN4dmlc3anyEEE"));
  auto get_map = reinterpret_cast<GetAttrMapFn>(dlsym(lib, "_ZN4nnvm2Op10GetAttrMapERKSs"));
  dlclose(lib);
  if (update == nullptr || get_map == nullptr) {
    text = std::string("nnvm::Op::UpdateAttrMap / GetAttrMap (pre-C++11 string ABI) not exported by ") +
           libmxnet_path;
    *message = text.c_str();
    return 0;
  }
  const std::string key = "FInferShape";  // every MXNet build has ops with shape inference
  const dmlc::any* expected = get_map(key);
  RawFunction probe{{nullptr, nullptr}, &probe_manager, &probe_invoker};
  g_probe_argument = nullptr;
  g_probe_calls = 0;
  update(key, &probe);
  const int convention = g_probe_calls == 1 ? mxnet_amp_classify_invoker_argument(g_probe_argument, expected) : 0;
  if (convention == 0) {
    text = "the probe's invoker was called " + std::to_string(g_probe_calls) +
           " time(s) with an argument that is neither the attribute map nor a reference to it";
    *message = text.c_str();
  }
  return convention;
}


// nnvm::Op::set_attr (inline, above) calls this to edit an attribute map. libmxnet's own would call the
// updater through its own std::function convention, so it is called here; every attribute set exists already.
void nnvm::Op::UpdateAttrMap(const std::string& key, std::function<void(dmlc::any*)> updater) {
  const dmlc::any* map = g_get_attr_map(key);
  if (map == nullptr) throw std::invalid_argument("no op has attribute " + key);
  updater(const_cast<dmlc::any*>(map));
}

/*!
 * \brief Installs the functions above into the registry of the libmxnet.so at libmxnet_path, which has
 *        loaded this library's ops already, for callers of the given invoker convention (1 or 2, see
 *        mxnet_amp_libmxnet_invoker_convention). Not thread-safe: call it right after loading. Idempotent:
 *        attributes installed before are kept. Returns nullptr on success, else a message; *installed is the
 *        number of attributes set by this call (0 when every one was there already).
 */
extern "C" const char* mxnet_amp_install_graph_inference(const char* libmxnet_path, int convention,
                                                         int* installed) {
  static std::string error;
  *installed = 0;
  if (convention != 1 && convention != 2) {
    error = "invoker convention must be 1 (GCC 4) or 2 (GCC >= 5), got " + std::to_string(convention);
    return error.c_str();
  }
  void* lib = dlopen(libmxnet_path, RTLD_LAZY | RTLD_NOLOAD);
  if (lib == nullptr) {
    error = std::string("libmxnet.so is not loaded from ") + libmxnet_path;
    return error.c_str();
  }
  auto get_op = reinterpret_cast<GetOpFn>(dlsym(lib, "_ZN4nnvm2Op3GetERKSs"));
  g_get_attr_map = reinterpret_cast<GetAttrMapFn>(dlsym(lib, "_ZN4nnvm2Op10GetAttrMapERKSs"));
  dlclose(lib);
  if (get_op == nullptr || g_get_attr_map == nullptr) {
    error = std::string("nnvm::Op::Get / GetAttrMap (pre-C++11 string ABI) not found in ") +
            libmxnet_path + " (not an MXNet 1.9.1 build?)";
    return error.c_str();
  }
  try {
    const bool gcc4 = convention == 1;
    const auto same_shape = make_infer<mxnet::TShape, elementwise_shape>(gcc4);
    for (const char* name : {"amp_round", "amp_multi_cast", "amp_multi_widest_cast"}) {
      *installed += install(get_op, name, "FInferShape", same_shape);
    }
    *installed += install(get_op, "amp_multi_unscale_check", "FInferShape",
                          make_infer<mxnet::TShape, flag_shape>(gcc4));
    *installed += install(get_op, "amp_round", "FInferType", make_infer<int, round_type>(gcc4));
    *installed += install(get_op, "amp_multi_cast", "FInferType", make_infer<int, cast_type>(gcc4));
    *installed += install(get_op, "amp_multi_widest_cast", "FInferType", make_infer<int, widest_type>(gcc4));
    *installed += install(get_op, "amp_multi_unscale_check", "FInferType", make_infer<int, flag_type>(gcc4));
    *installed += mxnet_amp_nnvm::install_backward_inputs(get_op, g_get_attr_map, kPriority);
    *installed += mxnet_amp_nnvm::install_inplace(get_op, kPriority);
  } catch (const std::exception& e) {
    error = e.what();
    return error.c_str();
  }
  return nullptr;
}
