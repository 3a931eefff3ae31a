// Internal to src/quant: FP8_E4M3 weights (reference_fp8.cc), pagoda's own type (core/dtype.h):
// blocks of 32 E4M3 codes with one F16 scale. Everyone else calls quant/reference.h.
#pragma once

#include <cstdint>

namespace pagoda {

// Each converts num_blocks blocks of 32 elements: x = d * e4m3(code).
void dequantize_fp8_e4m3(const uint8_t* src, float* dst, int64_t num_blocks);
// Round to nearest (even) on the block scale d = F16(amax / 448), dividing by d as stored, as
// the FP8 KV cache codes its groups (backend/kv_format.cc).
void quantize_fp8_e4m3(const float* src, uint8_t* dst, int64_t num_blocks);
// The same codes for each of 32 scales amax / 448 * 2^(k / 32), k = 0 .. 31 (past a factor of 2
// E4M3's grid repeats, but for the subnormals), keeping the one with the least weighted error
// sum w (x - y)^2; k = 0 is quantize_fp8_e4m3's scale, so never a higher weighted error than it.
void quantize_fp8_e4m3_weighted(const float* src, const float* weights, uint8_t* dst,
                                int64_t num_blocks);

}  // namespace pagoda
