// Internal to src/quant: how the K-quant encoders (reference_k.cc) choose a super-block's
// codes (reference_k_search.cc). Each works on one super-block of 256 elements with one
// non-negative weight per element and minimises sum w (x - y)^2 over it.
#pragma once

#include <cstdint>

namespace pagoda {

// Codes a super-block whose groups of `group` elements are x ~= d * sc * q - dmin * m: fits
// every group, codes scales and mins with `max_code`, re-rounds every element into q.
void quantize_affine_super_block(const float* x, const float* w, int group, int max_q, int max_code,
                                 uint16_t* d_bits, uint16_t* dmin_bits, int* sc, int* m, int* q);

// Codes a super-block of 16 groups of 16 as x ~= d * sc * q; q is returned offset by +levels.
// Returns d's F16 bits.
uint16_t quantize_symmetric_super_block(const float* x, const float* w, int levels, int max_code,
                                        int* sc, int* q);

// Super-block i's weights: the caller's, or all ones (plain squared error) without them.
const float* super_block_weights(const float* weights, int64_t i);

}  // namespace pagoda
