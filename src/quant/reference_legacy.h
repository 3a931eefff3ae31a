// Internal to src/quant: the plain types and the legacy 32-element blocks (reference_legacy.cc),
// split from reference.cc like the K-quants. Everyone else calls quant/reference.h.
#pragma once

#include <cstdint>

namespace pagoda {

// The plain types convert n elements.
void dequantize_f32(const uint8_t* src, float* dst, int64_t n);
void quantize_f32(const float* src, uint8_t* dst, int64_t n);
void dequantize_f16(const uint8_t* src, float* dst, int64_t n);
void quantize_f16(const float* src, uint8_t* dst, int64_t n);
void dequantize_bf16(const uint8_t* src, float* dst, int64_t n);
void quantize_bf16(const float* src, uint8_t* dst, int64_t n);

// The legacy types convert num_blocks blocks of 32 elements. The plain quantizers repeat
// ggml's reference arithmetic (byte-equal to llama.cpp's); the weighted ones search the block
// scale (and min) for the least weighted error sum w (x - y)^2 (reference_weighted.cc).
void dequantize_q4_0(const uint8_t* src, float* dst, int64_t num_blocks);
void quantize_q4_0(const float* src, uint8_t* dst, int64_t num_blocks);
void dequantize_q4_1(const uint8_t* src, float* dst, int64_t num_blocks);
void quantize_q4_1(const float* src, uint8_t* dst, int64_t num_blocks);
void dequantize_q5_0(const uint8_t* src, float* dst, int64_t num_blocks);
void quantize_q5_0(const float* src, uint8_t* dst, int64_t num_blocks);
void dequantize_q5_1(const uint8_t* src, float* dst, int64_t num_blocks);
void quantize_q5_1(const float* src, uint8_t* dst, int64_t num_blocks);
void dequantize_q8_0(const uint8_t* src, float* dst, int64_t num_blocks);
void quantize_q8_0(const float* src, uint8_t* dst, int64_t num_blocks);
void quantize_q4_0_weighted(const float* src, const float* weights, uint8_t* dst, int64_t num_blocks);
void quantize_q4_1_weighted(const float* src, const float* weights, uint8_t* dst, int64_t num_blocks);
void quantize_q5_0_weighted(const float* src, const float* weights, uint8_t* dst, int64_t num_blocks);
void quantize_q5_1_weighted(const float* src, const float* weights, uint8_t* dst, int64_t num_blocks);

}  // namespace pagoda
