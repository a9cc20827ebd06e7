/*!
 * \file counter_hash.h
 * \brief The counter-based random draw of the CPU loops (dropout masks, stochastic rounding of bf16-true
 *        weights): element i of a call with seed s draws SplitMix64's finaliser of s + i * golden ratio, a
 *        function of (s, i) only, so the result does not depend on how the elements are split among threads.
 */
#ifndef MXNET_AMP_KERNELS_COUNTER_HASH_H_
#define MXNET_AMP_KERNELS_COUNTER_HASH_H_

#include <stdint.h>

#include "convert.h"

namespace mxnet_amp {

/*! \brief 64 random bits of element i under seed (SplitMix64: Steele, Lea and Flood, 2014). */
AMP_HD uint64_t counter_hash(uint64_t seed, uint64_t i) {
  uint64_t z = seed + i * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace mxnet_amp

#endif  // MXNET_AMP_KERNELS_COUNTER_HASH_H_
