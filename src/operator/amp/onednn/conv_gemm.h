/*!
 * \file conv_gemm.h
 * \brief Convolutions with few output positions as one matrix product (im2col + oneDNN 3 matmul).
 */
#ifndef MXNET_AMP_ONEDNN_CONV_GEMM_H_
#define MXNET_AMP_ONEDNN_CONV_GEMM_H_

#include <string>

#include "api.h"
#include "common.h"

namespace mxnet_amp_onednn {

/*! \brief The primitive-cache key of a convolution problem (its geometry, dtypes and fusions). */
std::string conv_key(const AmpConv& c);

/*! \brief Appends c's fused activation to ops (forward): its ReLU (where c.relu, capped at c.relu_max where finite)
 *         or its hard sigmoid or hard swish (c.hard_act). */
void append_relu(const AmpConv& c, dnnl::post_ops* ops);

/*! \brief Whether c runs faster as im2col + one matrix product (few output positions, no groups). */
bool conv_gemm_eligible(const AmpConv& c);

/*! \brief Runs one pass of c as im2col + matrix product; same contract as the convolution primitive. */
void conv_gemm_run(const AmpConv& c);

}  // namespace mxnet_amp_onednn

#endif  // MXNET_AMP_ONEDNN_CONV_GEMM_H_
