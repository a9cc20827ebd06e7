/*!
 * \file library.cc
 * \brief Library entry point checked by mx.library.load (accepts MXNet 1.9.x), the instruction set the
 *        CPU kernels dispatched to (mxnet.amp._ext.cpu_isa()) and whether CUDA kernels are built in.
 */
#include "mxnet/lib_api.h"
#include "../kernels/multi_tensor.h"

mxnet::ext::MXReturnValue initialize(int version) {
  if (version >= 10900 && version < 11000) return mxnet::ext::MX_SUCCESS;
  MX_ERROR_MSG << "libmxnet_amp was built for MXNet 1.9.x; this MXNet reports version " << version;
  return mxnet::ext::MX_FAIL;
}

extern "C" const char* mxnet_amp_cpu_isa() { return mxnet_amp::cpu_isa(); }

// 1 when the library was built with its CUDA kernels (-DMXNET_AMP_CUDA=ON), for mxnet.amp._ext.cuda_kernels().
extern "C" int mxnet_amp_cuda_kernels() {
#if defined(MXNET_AMP_CUDA)
  return 1;
#else
  return 0;
#endif
}
