// Internal to src/quant: importance-weighted fits of one legacy 32-element block
// (reference_weighted.cc), split from reference.cc, which packs them. Everyone else calls
// quantize_row_weighted in quant/reference.h.
#pragma once

#include <cstdint>

#include "quant/blocks.h"

namespace pagoda {

// A block as it will be stored: F16 scale (and min) bits and each element's stored quant.
struct BlockFit {
  uint16_t d_bits = 0;
  uint16_t m_bits = 0;  // affine fits only
  int q[kBlockSize] = {};
};

// x ~= d * (q - levels), q in 0..2 levels - 1 (Q4_0: levels 8, Q5_0: 16), chosen to minimise
// sum w (x - y)^2 over the block's elements with the weights w (non-negative).
BlockFit fit_symmetric_block(const float* x, const float* w, int levels);

// x ~= d * q + m, q in 0..max_q (Q4_1: 15, Q5_1: 31), minimising the same weighted error.
BlockFit fit_affine_block(const float* x, const float* w, int max_q);

}  // namespace pagoda
