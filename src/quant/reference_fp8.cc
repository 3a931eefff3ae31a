#include "quant/reference_fp8.h"

#include <cmath>

#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/fp8.h"
#include "quant/reference_k.h"

namespace pagoda {
namespace {

float block_amax(const float* x) {
  float amax = 0.0f;
  for (int j = 0; j < kBlockSize; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  return amax;
}

// The codes of x under the stored scale `d_bits`; returns sum w (x - d e4m3(code))^2 (w null:
// all ones).
double encode_block(const float* x, const float* w, uint16_t d_bits, uint8_t* codes) {
  const float d = fp16_to_fp32(d_bits);
  const bool usable = d > 0.0f && std::isfinite(d);
  double err = 0.0;
  for (int j = 0; j < kBlockSize; ++j) {
    codes[j] = usable ? fp32_to_fp8_e4m3(x[j] / d) : 0;
    const double diff = static_cast<double>(x[j]) - static_cast<double>(d) * fp8_e4m3_to_fp32(codes[j]);
    err += (w != nullptr ? w[j] : 1.0) * diff * diff;
  }
  return err;
}

}  // namespace

void dequantize_fp8_e4m3(const uint8_t* src, float* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    const auto b = load_block<BlockFP8>(src, i);
    const float d = fp16_to_fp32(b.d);
    float* y = dst + i * kBlockSize;
    for (int j = 0; j < kBlockSize; ++j) y[j] = fp8_e4m3_to_fp32(b.qs[j]) * d;
  }
}

void quantize_fp8_e4m3(const float* src, uint8_t* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    const float* x = src + i * kBlockSize;
    BlockFP8 b{};
    b.d = fp32_to_fp16(block_amax(x) / kFp8E4M3Max);
    encode_block(x, nullptr, b.d, b.qs);
    store_block(b, dst, i);
  }
}

void quantize_fp8_e4m3_weighted(const float* src, const float* weights, uint8_t* dst,
                                int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    const float* x = src + i * kBlockSize;
    const float* w = weights + i * kBlockSize;
    const float base = block_amax(x) / kFp8E4M3Max;
    BlockFP8 best{};
    best.d = fp32_to_fp16(base);
    double best_err = encode_block(x, w, best.d, best.qs);
    uint16_t last = best.d;
    for (int k = 1; k < 32; ++k) {
      BlockFP8 b{};
      b.d = fp32_to_fp16(base * std::exp2(static_cast<float>(k) / 32.0f));
      if (b.d == last) continue;  // F16 gave the previous scale again
      last = b.d;
      const double err = encode_block(x, w, b.d, b.qs);
      if (err < best_err) {
        best_err = err;
        best = b;
      }
    }
    store_block(best, dst, i);
  }
}

}  // namespace pagoda
