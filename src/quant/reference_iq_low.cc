// Decoding of the 2- and 3-bit i-quants IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S (layouts in
// quant/blocks.h). pagoda reads and runs files of these types but does not write them: their
// encoders search the grids under an importance matrix and are left to llama.cpp's quantizer.
//
// The grids come from quant/iq_grids.h, generated at build time from the gguf Python package
// (scripts/make_iq_grids.py). Each value is computed as that package computes it, in float:
// the group scale first (d * (0.5 + ls) * 0.25, ...), then times the grid magnitude, then the
// sign, so the results are bit for bit the package's.
#include <cstring>

#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/iq_grids.h"
#include "quant/reference_iq.h"
#include "quant/reference_k.h"

namespace pagoda {
namespace {

// The full 8-bit sign mask of a 7-bit sign code: the stored bits, plus bit 7 set when they
// hold an odd number of minus signs (the encoder keeps every group's count even).
constexpr uint8_t full_signs(uint32_t code) {
  return static_cast<uint8_t>(code | (__builtin_parity(code) << 7));
}

// dst[j] = db * grid[j] * (bit j of signs ? -1 : 1) for j < n.
void put_group(const uint8_t* grid, uint8_t signs, float db, int n, float* dst) {
  for (int j = 0; j < n; ++j) {
    dst[j] = db * static_cast<float>(grid[j]) * ((signs >> j) & 1 ? -1.0f : 1.0f);
  }
}

void decode_iq2_xxs(const BlockIQ2_XXS& b, float* y) {
  const float d = fp16_to_fp32(b.d);
  for (int s = 0; s < kSuperBlockSize / 32; ++s) {
    uint32_t aux[2];
    std::memcpy(aux, b.qs + 4 * s, sizeof(aux));
    const float db = d * (0.5f + static_cast<float>(aux[1] >> 28)) * 0.25f;
    for (int l = 0; l < 4; ++l) {
      const uint8_t index = static_cast<uint8_t>(aux[0] >> (8 * l));
      put_group(iq_grids::kIQ2XXSGrid[index], full_signs((aux[1] >> (7 * l)) & 127), db, 8,
                y + 32 * s + 8 * l);
    }
  }
}

void decode_iq2_xs(const BlockIQ2_XS& b, float* y) {
  const float d = fp16_to_fp32(b.d);
  for (int g = 0; g < kSuperBlockSize / 8; ++g) {
    const int ls = (b.scales[g / 4] >> (4 * ((g / 2) % 2))) & 0xf;
    const float db = d * (0.5f + static_cast<float>(ls)) * 0.25f;
    put_group(iq_grids::kIQ2XSGrid[b.qs[g] & 511], full_signs(b.qs[g] >> 9), db, 8, y + 8 * g);
  }
}

void decode_iq2_s(const BlockIQ2_S& b, float* y) {
  const float d = fp16_to_fp32(b.d);
  for (int g = 0; g < kSuperBlockSize / 8; ++g) {
    const int ls = (b.scales[g / 4] >> (4 * ((g / 2) % 2))) & 0xf;
    const float db = d * (0.5f + static_cast<float>(ls)) * 0.25f;
    const int index = b.qs[g] | ((b.qh[g / 4] >> (2 * (g % 4))) & 3) << 8;
    put_group(iq_grids::kIQ2SGrid[index], b.signs[g], db, 8, y + 8 * g);
  }
}

void decode_iq3_xxs(const BlockIQ3_XXS& b, float* y) {
  const float d = fp16_to_fp32(b.d);
  const uint8_t* scales_and_signs = b.qs + kSuperBlockSize / 4;
  for (int s = 0; s < kSuperBlockSize / 32; ++s) {
    uint32_t aux;
    std::memcpy(&aux, scales_and_signs + 4 * s, 4);
    const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
    for (int l = 0; l < 4; ++l) {
      const uint8_t signs = full_signs((aux >> (7 * l)) & 127);
      float* out = y + 32 * s + 8 * l;
      put_group(iq_grids::kIQ3XXSGrid[b.qs[8 * s + 2 * l]], signs, db, 4, out);
      put_group(iq_grids::kIQ3XXSGrid[b.qs[8 * s + 2 * l + 1]], signs >> 4, db, 4, out + 4);
    }
  }
}

void decode_iq3_s(const BlockIQ3_S& b, float* y) {
  const float d = fp16_to_fp32(b.d);
  for (int s = 0; s < kSuperBlockSize / 32; ++s) {
    const int ls = (b.scales[s / 2] >> (4 * (s % 2))) & 0xf;
    const float db = d * static_cast<float>(1 + 2 * ls);
    for (int h = 0; h < 4; ++h) {  // halves of a sign byte: 4 values each
      for (int half = 0; half < 2; ++half) {
        const int i = 8 * s + 2 * h + half;  // the group of 4
        const int index = b.qs[i] | ((b.qh[i / 8] >> (i % 8)) & 1) << 8;
        put_group(iq_grids::kIQ3SGrid[index], b.signs[4 * s + h] >> (4 * half), db, 4, y + 4 * i);
      }
    }
  }
}

template <typename Block, void (*decode)(const Block&, float*)>
void dequantize_blocks(const uint8_t* src, float* dst, int64_t num_blocks) {
  for (int64_t i = 0; i < num_blocks; ++i) {
    decode(load_block<Block>(src, i), dst + i * kSuperBlockSize);
  }
}

}  // namespace

void dequantize_iq2_xxs(const uint8_t* src, float* dst, int64_t num_blocks) {
  dequantize_blocks<BlockIQ2_XXS, decode_iq2_xxs>(src, dst, num_blocks);
}
void dequantize_iq2_xs(const uint8_t* src, float* dst, int64_t num_blocks) {
  dequantize_blocks<BlockIQ2_XS, decode_iq2_xs>(src, dst, num_blocks);
}
void dequantize_iq2_s(const uint8_t* src, float* dst, int64_t num_blocks) {
  dequantize_blocks<BlockIQ2_S, decode_iq2_s>(src, dst, num_blocks);
}
void dequantize_iq3_xxs(const uint8_t* src, float* dst, int64_t num_blocks) {
  dequantize_blocks<BlockIQ3_XXS, decode_iq3_xxs>(src, dst, num_blocks);
}
void dequantize_iq3_s(const uint8_t* src, float* dst, int64_t num_blocks) {
  dequantize_blocks<BlockIQ3_S, decode_iq3_s>(src, dst, num_blocks);
}

}  // namespace pagoda
