/*!
 * \file library.cc
 * \brief Library entry point checked by mx.library.load (accepts MXNet 1.9.x), and the instruction
 *        set the CPU kernels dispatched to, for mxnet.amp._ext.cpu_isa().
 */
#include "mxnet/lib_api.h"
#include "../kernels/multi_tensor.h"

mxnet::ext::MXReturnValue initialize(int version) {
  if (version >= 10900 && version < 11000) return mxnet::ext::MX_SUCCESS;
  MX_ERROR_MSG << "libmxnet_amp was built for MXNet 1.9.x; this MXNet reports version " << version;
  return mxnet::ext::MX_FAIL;
}

extern "C" const char* mxnet_amp_cpu_isa() { return mxnet_amp::cpu_isa(); }
