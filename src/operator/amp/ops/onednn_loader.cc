/*!
 * \file onednn_loader.cc
 * \brief dlopen of libmxnet_amp_onednn.so; the status for mxnet.amp._ext (mxnet_amp_onednn_available).
 */
#include "onednn_loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace mxnet_amp {
namespace {

struct Backend {
  AmpMatmulFn matmul = nullptr;
  AmpConvFn conv = nullptr;
  AmpLayerNormFn layer_norm = nullptr;
  AmpSoftmaxFn softmax = nullptr;
  AmpBf16PrimitivesFn bf16_primitives = nullptr;
  std::string info;
};

std::string own_directory() {
  Dl_info dl;
  if (dladdr(reinterpret_cast<void*>(&onednn_info), &dl) == 0 || dl.dli_fname == nullptr) return ".";
  const std::string path = dl.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

Backend open_backend() {
  Backend b;
  const char* env = std::getenv("MXNET_AMP_ONEDNN");
  if (env != nullptr && std::strcmp(env, "0") == 0) {
    b.info = "disabled by MXNET_AMP_ONEDNN=0";
    return b;
  }
  const std::string path = own_directory() + "/" + AMP_ONEDNN_LIBRARY;
  // RTLD_LOCAL: oneDNN 3's dnnl_* symbols stay out of the global namespace (MXNet bundles oneDNN 2).
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    b.info = std::string("cannot load ") + path + ": " + (why ? why : "unknown error") +
             " (built without oneDNN 3, or libdnnl.so.3 missing: pip install onednn-cpu-gomp)";
    return b;
  }
  auto info = reinterpret_cast<AmpOnednnInfoFn>(dlsym(handle, AMP_ONEDNN_INFO_SYMBOL));
  b.matmul = reinterpret_cast<AmpMatmulFn>(dlsym(handle, AMP_MATMUL_SYMBOL));
  b.conv = reinterpret_cast<AmpConvFn>(dlsym(handle, AMP_CONV_SYMBOL));
  b.layer_norm = reinterpret_cast<AmpLayerNormFn>(dlsym(handle, AMP_LAYER_NORM_SYMBOL));
  b.softmax = reinterpret_cast<AmpSoftmaxFn>(dlsym(handle, AMP_SOFTMAX_SYMBOL));
  b.bf16_primitives = reinterpret_cast<AmpBf16PrimitivesFn>(dlsym(handle, AMP_BF16_PRIMITIVES_SYMBOL));
  if (info == nullptr || b.matmul == nullptr || b.conv == nullptr || b.layer_norm == nullptr ||
      b.softmax == nullptr || b.bf16_primitives == nullptr) {
    b = Backend();
    b.info = path + " lacks one of the symbols " AMP_MATMUL_SYMBOL " / " AMP_CONV_SYMBOL " / " AMP_LAYER_NORM_SYMBOL
             " / " AMP_SOFTMAX_SYMBOL " / " AMP_ONEDNN_INFO_SYMBOL
             " / " AMP_BF16_PRIMITIVES_SYMBOL " (a libmxnet_amp_onednn.so of another version?)";
    return b;
  }
  b.info = info();
  return b;
}

const Backend& backend() {
  static const Backend b = open_backend();
  return b;
}

}  // namespace

AmpMatmulFn onednn_matmul() { return backend().matmul; }

AmpConvFn onednn_conv() { return backend().conv; }

AmpLayerNormFn onednn_layer_norm() { return backend().layer_norm; }

AmpSoftmaxFn onednn_softmax() { return backend().softmax; }

bool onednn_bf16_primitives() {
  static const bool yes = backend().bf16_primitives != nullptr && backend().bf16_primitives() != 0;
  return yes;
}

const char* onednn_info() { return backend().info.c_str(); }

}  // namespace mxnet_amp

/*! \brief 1 when the oneDNN 3 kernels are usable (*info: their version and ISA), else 0 (*info: why). */
extern "C" int mxnet_amp_onednn_available(const char** info) {
  *info = mxnet_amp::onednn_info();
  return mxnet_amp::onednn_matmul() != nullptr ? 1 : 0;
}
