/*!
 * \file onednn_loader.h
 * \brief Opens libmxnet_amp_onednn.so (the oneDNN 3 matrix products, convolutions, layer normalisation and
 *        softmax) next to libmxnet_amp.so, once.
 *
 * Loaded on first use, not at library load: without oneDNN 3 (not installed, or MXNET_AMP_ONEDNN=0 in
 * the environment) libmxnet_amp.so still loads and its other ops work; the oneDNN 3 ops then fail
 * with the reason, and mxnet.amp never routes MXNet ops to them.
 */
#ifndef MXNET_AMP_OPS_ONEDNN_LOADER_H_
#define MXNET_AMP_OPS_ONEDNN_LOADER_H_

#include "../onednn/api.h"

namespace mxnet_amp {

/*! \brief The matmul entry point, or nullptr when oneDNN 3 is unavailable (onednn_info says why). */
AmpMatmulFn onednn_matmul();

/*! \brief The convolution entry point, or nullptr when oneDNN 3 is unavailable (onednn_info says why). */
AmpConvFn onednn_conv();

/*! \brief The layer normalisation entry point, or nullptr when oneDNN 3 is unavailable. */
AmpLayerNormFn onednn_layer_norm();

/*! \brief The softmax entry point, or nullptr when oneDNN 3 is unavailable. */
AmpSoftmaxFn onednn_softmax();

/*! \brief "oneDNN 3.2.0, cpu isa ..." when available, else why not. */
const char* onednn_info();

/*! \brief Whether oneDNN 3 runs bfloat16 primitives here (false where its kernels widen bfloat16 operands, and
 *         where it is unavailable). */
bool onednn_bf16_primitives();

}  // namespace mxnet_amp

#endif  // MXNET_AMP_OPS_ONEDNN_LOADER_H_
