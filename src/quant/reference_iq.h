// Internal to src/quant: the non-linear 4-bit types IQ4_NL and IQ4_XS (reference_iq.cc), split
// from reference.cc like the K-quants, and the decoders of the 2- and 3-bit i-quants
// (reference_iq_low.cc). Everyone else calls quant/reference.h.
#pragma once

#include <cstdint>

#include "quant/blocks.h"

namespace pagoda {

// The index of kIQ4Values' value nearest v (v in grid units: the element over its scale); ties
// go to the lower level. The encoders and GPTQ (gptq.cc) pick every index with it.
int iq4_nearest_index(float v);

// IQ4_XS sub-block g's 6-bit scale code ls (its scale is d * (ls - 32)).
inline int iq4_xs_scale_code(const BlockIQ4_XS& b, int g) {
  return ((b.scales_l[g / 2] >> (4 * (g % 2))) & 0xf) | (((b.scales_h >> (2 * g)) & 3) << 4);
}

// IQ4_NL converts num_blocks blocks of 32 elements, IQ4_XS super-blocks of 256.
void dequantize_iq4_nl(const uint8_t* src, float* dst, int64_t num_blocks);
void dequantize_iq4_xs(const uint8_t* src, float* dst, int64_t num_blocks);

// Super-blocks of 256. Decoding only: pagoda does not write these types.
void dequantize_iq2_xxs(const uint8_t* src, float* dst, int64_t num_blocks);
void dequantize_iq2_xs(const uint8_t* src, float* dst, int64_t num_blocks);
void dequantize_iq2_s(const uint8_t* src, float* dst, int64_t num_blocks);
void dequantize_iq3_xxs(const uint8_t* src, float* dst, int64_t num_blocks);
void dequantize_iq3_s(const uint8_t* src, float* dst, int64_t num_blocks);

// weights: one non-negative weight per element of src; the scales and indices minimise
// sum w (x - y)^2, nullptr weighing every element 1. With weights the result is never worse, on
// that weighted error, than the unweighted encoding of the same block.
void quantize_iq4_nl(const float* src, const float* weights, uint8_t* dst, int64_t num_blocks);
void quantize_iq4_xs(const float* src, const float* weights, uint8_t* dst, int64_t num_blocks);

}  // namespace pagoda
