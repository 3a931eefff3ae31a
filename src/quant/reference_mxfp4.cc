// MXFP4: 32 E2M1 values (kFP4Values, doubled) sharing one E8M0 exponent (quant/blocks.h).
#include "quant/reference_mxfp4.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/blocks.h"

namespace pagoda {
namespace {

// ggml's best_index_mxfp4: the first of the 16 grid values nearest x at step d (index 0 before
// index 8 for the two zeros).
int nearest_fp4(float x, float d) {
  int best = 0;
  float best_err = std::fabs(static_cast<float>(kFP4Values[0]) * d - x);
  for (int i = 1; i < 16; ++i) {
    const float err = std::fabs(static_cast<float>(kFP4Values[i]) * d - x);
    if (err < best_err) {
      best = i;
      best_err = err;
    }
  }
  return best;
}

// floor(log2(amax)) - 2 + 127, as ggml computes it in float (log2f, so a magnitude a hair under
// a power of two may round up to it, as it does there), kept within the byte.
uint8_t shared_exponent(float amax) {
  if (!(amax > 0.0f)) return 0;
  const float e = std::floor(std::log2(amax)) - 2.0f + 127.0f;
  return static_cast<uint8_t>(std::clamp(e, 0.0f, 255.0f));
}

}  // namespace

void dequantize_mxfp4(const uint8_t* src, float* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    BlockMXFP4 b;
    std::memcpy(&b, src + i * static_cast<int64_t>(sizeof(b)), sizeof(b));
    const float d = e8m0_half(b.e);
    float* y = dst + i * kBlockSize;
    for (int j = 0; j < kBlockSize / 2; ++j) {
      y[j] = static_cast<float>(kFP4Values[b.qs[j] & 0xf]) * d;
      y[j + kBlockSize / 2] = static_cast<float>(kFP4Values[b.qs[j] >> 4]) * d;
    }
  }
}

void quantize_mxfp4(const float* src, uint8_t* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    const float* x = src + i * kBlockSize;
    float amax = 0.0f;
    for (int j = 0; j < kBlockSize; ++j) amax = std::max(amax, std::fabs(x[j]));
    BlockMXFP4 b;
    b.e = shared_exponent(amax);
    const float d = e8m0_half(b.e);
    for (int j = 0; j < kBlockSize / 2; ++j) {
      b.qs[j] = static_cast<uint8_t>(nearest_fp4(x[j], d) | nearest_fp4(x[j + kBlockSize / 2], d) << 4);
    }
    std::memcpy(dst + i * static_cast<int64_t>(sizeof(b)), &b, sizeof(b));
  }
}

}  // namespace pagoda
