// The one table of weight types: per type, its traits (GGUF number, name, block and byte
// sizes), its scalar reference codec, its importance-weighted search and the type a row that is
// no whole number of blocks falls back to. core/dtype.h's lookups, quant/reference.h's
// dispatch, the recipes' fallbacks and the CPU backend's kernel tables (indexed by a type's row)
// all read it; a new weight type is one row here plus its kernels (docs/ARCHITECTURE.md).
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "core/dtype.h"

namespace pagoda {

// Each converts num_blocks whole blocks of the type (one element for the plain types).
using DequantizeBlocksFn = void (*)(const uint8_t* src, float* dst, int64_t num_blocks);
using QuantizeBlocksFn = void (*)(const float* src, uint8_t* dst, int64_t num_blocks);
// weights: one non-negative weight per element of src; the encoding minimises
// sum w (x - deq)^2.
using WeightedQuantizeBlocksFn = void (*)(const float* src, const float* weights, uint8_t* dst,
                                          int64_t num_blocks);

struct WeightType {
  DTypeTraits traits;
  // The scalar reference (quant/reference.h); null where pagoda has no code for the type.
  DequantizeBlocksFn dequantize = nullptr;
  QuantizeBlocksFn quantize = nullptr;
  // quantize_row_weighted's search; null where it falls back to `quantize`. Its weights are
  // importance * sqrt(sigma2 + x^2), sigma2 = sigma2_factor * the mean square over each
  // `weighted_span` elements (0: the whole row).
  WeightedQuantizeBlocksFn quantize_weighted = nullptr;
  int64_t weighted_span = 0;
  float sigma2_factor = 1.0f;
  // What a row of a length that is no whole number of blocks gets instead, as llama.cpp's
  // quantizer chooses (model/recipe.h); none for the types without a smaller-block partner.
  std::optional<DType> fallback = std::nullopt;
};

// Rows of the table; the CPU backend sizes its kernel tables by it.
inline constexpr int kNumWeightTypes = 33;

std::span<const WeightType> weight_types();
// nullptr for a type the table does not hold.
const WeightType* find_weight_type(DType type);
// The row of `type` in weight_types(), 0 .. kNumWeightTypes - 1; -1 for none. Dense whatever
// the type numbers are, so tables indexed by it stay small beside pagoda-private numbers.
int weight_type_index(DType type);

}  // namespace pagoda
