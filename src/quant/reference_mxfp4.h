// Internal to src/quant: MXFP4 (reference_mxfp4.cc). Everyone else calls quant/reference.h.
#pragma once

#include <cstdint>

namespace pagoda {

// num_blocks blocks of 32. The encoder is ggml's reference one, byte for byte: the shared
// exponent puts the block's largest magnitude in [4, 8) times 2^(e - 128) (the doubled grid's
// top binade), then each element takes its nearest grid value, ties to the first in grid order.
void dequantize_mxfp4(const uint8_t* src, float* dst, int64_t num_blocks);
void quantize_mxfp4(const float* src, uint8_t* dst, int64_t num_blocks);

}  // namespace pagoda
