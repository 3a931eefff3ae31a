#include "quant/weight_types.h"

#include <cctype>
#include <iterator>

#include "core/error.h"
#include "quant/blocks.h"
#include "quant/reference_fp8.h"
#include "quant/reference_iq.h"
#include "quant/reference_k.h"
#include "quant/reference_legacy.h"
#include "quant/reference_mxfp4.h"

namespace pagoda {
namespace {

// The searches of the K-quants and IQ4 types take weights; without them every element weighs 1.
template <WeightedQuantizeBlocksFn quantize>
void unit_weights(const float* src, uint8_t* dst, int64_t num_blocks) {
  quantize(src, nullptr, dst, num_blocks);
}

// Every type GGUF files may hold, in GGUF's order. A type pagoda computes with has its codec;
// one it only recognises (to name it in an error) has its traits alone. The 2- and 3-bit
// i-quants are decoded but never encoded (reference_iq_low.cc). Fields a row leaves out keep
// WeightType's defaults: no codec, no weighted search, no fallback. Block sizes in bytes are the
// block structs' of quant/blocks.h where pagoda has one.
//
// The weighted searches' spans and sigma2 factors are llama.cpp's (it doubles sigma2 for Q3_K,
// Q4_K, Q5_K and the IQ4 types); its Q6_K weighs by importance alone, but here Q6_K follows the
// same formula as the rest, with Q2_K's factor, so that one rule holds for every type.
constexpr WeightType kTypes[] = {
    {.traits = {.type = DType::kF32, .name = "F32", .block_size = 1, .type_size = 4},
     .dequantize = dequantize_f32,
     .quantize = quantize_f32},
    {.traits = {.type = DType::kF16, .name = "F16", .block_size = 1, .type_size = 2},
     .dequantize = dequantize_f16,
     .quantize = quantize_f16},
    {.traits = {.type = DType::kQ4_0, .name = "Q4_0",
                .block_size = kBlockSize, .type_size = sizeof(BlockQ4_0)},
     .dequantize = dequantize_q4_0,
     .quantize = quantize_q4_0,
     .quantize_weighted = quantize_q4_0_weighted,
     .weighted_span = 0,
     .sigma2_factor = 1.0f},
    {.traits = {.type = DType::kQ4_1, .name = "Q4_1",
                .block_size = kBlockSize, .type_size = sizeof(BlockQ4_1)},
     .dequantize = dequantize_q4_1,
     .quantize = quantize_q4_1,
     .quantize_weighted = quantize_q4_1_weighted,
     .weighted_span = 0,
     .sigma2_factor = 1.0f},
    {.traits = {.type = DType::kQ5_0, .name = "Q5_0",
                .block_size = kBlockSize, .type_size = sizeof(BlockQ5_0)},
     .dequantize = dequantize_q5_0,
     .quantize = quantize_q5_0,
     .quantize_weighted = quantize_q5_0_weighted,
     .weighted_span = 0,
     .sigma2_factor = 1.0f},
    {.traits = {.type = DType::kQ5_1, .name = "Q5_1",
                .block_size = kBlockSize, .type_size = sizeof(BlockQ5_1)},
     .dequantize = dequantize_q5_1,
     .quantize = quantize_q5_1,
     .quantize_weighted = quantize_q5_1_weighted,
     .weighted_span = 0,
     .sigma2_factor = 1.0f},
    {.traits = {.type = DType::kQ8_0, .name = "Q8_0",
                .block_size = kBlockSize, .type_size = sizeof(BlockQ8_0)},
     .dequantize = dequantize_q8_0,
     .quantize = quantize_q8_0},
    {.traits = {.type = DType::kQ8_1, .name = "Q8_1", .block_size = kBlockSize, .type_size = 36}},
    {.traits = {.type = DType::kQ2_K, .name = "Q2_K",
                .block_size = kSuperBlockSize, .type_size = sizeof(BlockQ2_K)},
     .dequantize = dequantize_q2_k,
     .quantize = unit_weights<quantize_q2_k>,
     .quantize_weighted = quantize_q2_k,
     .weighted_span = kSuperBlockSize,
     .sigma2_factor = 1.0f,
     .fallback = DType::kQ4_0},
    {.traits = {.type = DType::kQ3_K, .name = "Q3_K",
                .block_size = kSuperBlockSize, .type_size = sizeof(BlockQ3_K)},
     .dequantize = dequantize_q3_k,
     .quantize = unit_weights<quantize_q3_k>,
     .quantize_weighted = quantize_q3_k,
     .weighted_span = kSuperBlockSize,
     .sigma2_factor = 2.0f,
     .fallback = DType::kQ4_0},
    {.traits = {.type = DType::kQ4_K, .name = "Q4_K",
                .block_size = kSuperBlockSize, .type_size = sizeof(BlockQ4_K)},
     .dequantize = dequantize_q4_k,
     .quantize = unit_weights<quantize_q4_k>,
     .quantize_weighted = quantize_q4_k,
     .weighted_span = kSuperBlockSize,
     .sigma2_factor = 2.0f,
     .fallback = DType::kQ5_0},
    {.traits = {.type = DType::kQ5_K, .name = "Q5_K",
                .block_size = kSuperBlockSize, .type_size = sizeof(BlockQ5_K)},
     .dequantize = dequantize_q5_k,
     .quantize = unit_weights<quantize_q5_k>,
     .quantize_weighted = quantize_q5_k,
     .weighted_span = kSuperBlockSize,
     .sigma2_factor = 2.0f,
     .fallback = DType::kQ5_1},
    {.traits = {.type = DType::kQ6_K, .name = "Q6_K",
                .block_size = kSuperBlockSize, .type_size = sizeof(BlockQ6_K)},
     .dequantize = dequantize_q6_k,
     .quantize = unit_weights<quantize_q6_k>,
     .quantize_weighted = quantize_q6_k,
     .weighted_span = kSuperBlockSize,
     .sigma2_factor = 1.0f,
     .fallback = DType::kQ8_0},
    {.traits = {.type = DType::kQ8_K, .name = "Q8_K",
                .block_size = kSuperBlockSize, .type_size = sizeof(BlockQ8_K)},
     .dequantize = dequantize_q8_k,
     .quantize = quantize_q8_k},
    {.traits = {.type = DType::kIQ2_XXS, .name = "IQ2_XXS",
                .block_size = kSuperBlockSize, .type_size = sizeof(BlockIQ2_XXS)},
     .dequantize = dequantize_iq2_xxs},
    {.traits = {.type = DType::kIQ2_XS, .name = "IQ2_XS",
                .block_size = kSuperBlockSize, .type_size = sizeof(BlockIQ2_XS)},
     .dequantize = dequantize_iq2_xs},
    {.traits = {.type = DType::kIQ3_XXS, .name = "IQ3_XXS",
                .block_size = kSuperBlockSize, .type_size = sizeof(BlockIQ3_XXS)},
     .dequantize = dequantize_iq3_xxs},
    {.traits = {.type = DType::kIQ1_S, .name = "IQ1_S",
                .block_size = kSuperBlockSize, .type_size = 50}},
    {.traits = {.type = DType::kIQ4_NL, .name = "IQ4_NL",
                .block_size = kBlockSize, .type_size = sizeof(BlockIQ4_NL)},
     .dequantize = dequantize_iq4_nl,
     .quantize = unit_weights<quantize_iq4_nl>,
     .quantize_weighted = quantize_iq4_nl,
     .weighted_span = kBlockSize,
     .sigma2_factor = 2.0f},
    {.traits = {.type = DType::kIQ3_S, .name = "IQ3_S",
                .block_size = kSuperBlockSize, .type_size = sizeof(BlockIQ3_S)},
     .dequantize = dequantize_iq3_s},
    {.traits = {.type = DType::kIQ2_S, .name = "IQ2_S",
                .block_size = kSuperBlockSize, .type_size = sizeof(BlockIQ2_S)},
     .dequantize = dequantize_iq2_s},
    // The same grid in blocks of 32 takes the rows IQ4_XS's super-blocks cannot.
    {.traits = {.type = DType::kIQ4_XS, .name = "IQ4_XS",
                .block_size = kSuperBlockSize, .type_size = sizeof(BlockIQ4_XS)},
     .dequantize = dequantize_iq4_xs,
     .quantize = unit_weights<quantize_iq4_xs>,
     .quantize_weighted = quantize_iq4_xs,
     .weighted_span = kSuperBlockSize,
     .sigma2_factor = 2.0f,
     .fallback = DType::kIQ4_NL},
    {.traits = {.type = DType::kI8, .name = "I8", .block_size = 1, .type_size = 1}},
    {.traits = {.type = DType::kI16, .name = "I16", .block_size = 1, .type_size = 2}},
    {.traits = {.type = DType::kI32, .name = "I32", .block_size = 1, .type_size = 4}},
    {.traits = {.type = DType::kI64, .name = "I64", .block_size = 1, .type_size = 8}},
    {.traits = {.type = DType::kF64, .name = "F64", .block_size = 1, .type_size = 8}},
    {.traits = {.type = DType::kIQ1_M, .name = "IQ1_M",
                .block_size = kSuperBlockSize, .type_size = 56}},
    {.traits = {.type = DType::kBF16, .name = "BF16", .block_size = 1, .type_size = 2},
     .dequantize = dequantize_bf16,
     .quantize = quantize_bf16},
    {.traits = {.type = DType::kTQ1_0, .name = "TQ1_0",
                .block_size = kSuperBlockSize, .type_size = 54}},
    {.traits = {.type = DType::kTQ2_0, .name = "TQ2_0",
                .block_size = kSuperBlockSize, .type_size = 66}},
    // gpt-oss's expert weights; ggml's encoder has no weighted search either.
    {.traits = {.type = DType::kMXFP4, .name = "MXFP4",
                .block_size = kBlockSize, .type_size = sizeof(BlockMXFP4)},
     .dequantize = dequantize_mxfp4,
     .quantize = quantize_mxfp4},
    // pagoda's own: E4M3 codes with an F16 scale per 32 (reference_fp8.h). Its search weighs
    // like the legacy types' (sigma2 from the whole row).
    {.traits = {.type = DType::kFP8_E4M3, .name = "FP8_E4M3",
                .block_size = kBlockSize, .type_size = sizeof(BlockFP8)},
     .dequantize = dequantize_fp8_e4m3,
     .quantize = quantize_fp8_e4m3,
     .quantize_weighted = quantize_fp8_e4m3_weighted,
     .weighted_span = 0,
     .sigma2_factor = 1.0f},
};
static_assert(std::size(kTypes) == kNumWeightTypes);

}  // namespace

std::span<const WeightType> weight_types() { return kTypes; }

int weight_type_index(DType type) {
  for (int i = 0; i < kNumWeightTypes; ++i) {
    if (kTypes[i].traits.type == type) return i;
  }
  return -1;
}

const WeightType* find_weight_type(DType type) {
  const int i = weight_type_index(type);
  return i < 0 ? nullptr : &kTypes[i];
}

// core/dtype.h's lookups, over the same rows.
std::optional<DTypeTraits> dtype_traits(uint32_t type) {
  for (const auto& t : kTypes) {
    if (static_cast<uint32_t>(t.traits.type) == type) return t.traits;
  }
  return std::nullopt;
}

const DTypeTraits& dtype_traits(DType type) {
  if (const WeightType* t = find_weight_type(type)) return t->traits;
  fail("unknown dtype ", static_cast<uint32_t>(type));
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& t : kTypes) {
    const std::string_view known = t.traits.name;
    if (known.size() != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < name.size(); ++i) {
      same &= std::toupper(static_cast<unsigned char>(name[i])) == known[i];
    }
    if (same) return t.traits.type;
  }
  return std::nullopt;
}

}  // namespace pagoda
