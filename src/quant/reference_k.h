// Internal to src/quant: the K-quant halves of the scalar reference (reference_k.cc), split
// from reference.cc to keep each file readable. Everyone else calls quant/reference.h.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace pagoda {

// Block i of an array at any byte address: copying keeps the reference free of alignment and
// aliasing assumptions (a GGUF tensor may start at any offset the file chose).
template <typename Block>
Block load_block(const uint8_t* src, int64_t i) {
  Block block;
  std::memcpy(&block, src + i * static_cast<int64_t>(sizeof(Block)), sizeof(Block));
  return block;
}

template <typename Block>
void store_block(const Block& block, uint8_t* dst, int64_t i) {
  std::memcpy(dst + i * static_cast<int64_t>(sizeof(Block)), &block, sizeof(Block));
}

// Round half to even, as ggml's nearest_int; inputs are bounded quant levels.
inline int nearest_int(float x) { return static_cast<int>(std::nearbyint(x)); }

// The element of largest magnitude with its sign; the first one on ties, as ggml picks it.
inline float signed_absmax(const float* x, int n) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

// Q4_K / Q5_K group g's 6-bit scale and min codes from the 12 packed bytes.
void unpack_scale_min_k4(const uint8_t* packed, int g, int* scale, int* min);

// A super-block's 256 levels as the decoder reads them, written into zeroed fields: Q4_K and
// Q5_K take 0..15 / 0..31 (qh null for Q4_K), Q6_K 0..63 (the stored value, signed level + 32).
// The encoders and GPTQ (gptq.cc), which rounds each level itself, share them.
void pack_levels_k4(const int* q, uint8_t* qs, uint8_t* qh);
void pack_levels_q6_k(const int* q, uint8_t* ql, uint8_t* qh);

// Each converts num_blocks super-blocks of 256 elements.
void dequantize_q2_k(const uint8_t* src, float* dst, int64_t num_blocks);
void dequantize_q3_k(const uint8_t* src, float* dst, int64_t num_blocks);
void dequantize_q4_k(const uint8_t* src, float* dst, int64_t num_blocks);
void dequantize_q5_k(const uint8_t* src, float* dst, int64_t num_blocks);
void dequantize_q6_k(const uint8_t* src, float* dst, int64_t num_blocks);
void dequantize_q8_k(const uint8_t* src, float* dst, int64_t num_blocks);

// weights: one non-negative weight per element of src, the error each choice minimises being
// sum w (x - y)^2; nullptr weighs every element 1 (plain squared error).
void quantize_q2_k(const float* src, const float* weights, uint8_t* dst, int64_t num_blocks);
void quantize_q3_k(const float* src, const float* weights, uint8_t* dst, int64_t num_blocks);
void quantize_q4_k(const float* src, const float* weights, uint8_t* dst, int64_t num_blocks);
void quantize_q5_k(const float* src, const float* weights, uint8_t* dst, int64_t num_blocks);
void quantize_q6_k(const float* src, const float* weights, uint8_t* dst, int64_t num_blocks);
// One scale per super-block, fixed by its extreme element: nothing to search.
void quantize_q8_k(const float* src, uint8_t* dst, int64_t num_blocks);

}  // namespace pagoda
