#include "quant/weight_types.h"

#include <cctype>
#include <iterator>

#include "core/error.h"
#include "quant/blocks.h"
#include "quant/reference_fp8.h"
#include "quant/reference_iq.h"
#include "quant/reference_k.h"
#include "quant/reference_legacy.h"

namespace pagoda {
namespace {

// The searches of the K-quants and IQ4 types take weights; without them every element weighs 1.
template <WeightedQuantizeBlocksFn quantize>
void unit_weights(const float* src, uint8_t* dst, int64_t num_blocks) {
  quantize(src, nullptr, dst, num_blocks);
}

// Every type GGUF files may hold, in GGUF's order. A type pagoda computes with has its codec;
// one it only recognises (to name it in an error) has its traits alone. The 2- and 3-bit
// i-quants are decoded but never encoded (reference_iq_low.cc).
//
// The weighted searches' spans and sigma2 factors are llama.cpp's (it doubles sigma2 for Q3_K,
// Q4_K, Q5_K and the IQ4 types); its Q6_K weighs by importance alone, but here Q6_K follows the
// same formula as the rest, with Q2_K's factor, so that one rule holds for every type.
constexpr WeightType kTypes[] = {
    // {type, name, block, bytes}, dequantize, quantize, weighted search, span, sigma2, fallback
    {{DType::kF32, "F32", 1, 4}, dequantize_f32, quantize_f32},
    {{DType::kF16, "F16", 1, 2}, dequantize_f16, quantize_f16},
    {{DType::kQ4_0, "Q4_0", 32, 18}, dequantize_q4_0, quantize_q4_0, quantize_q4_0_weighted, 0, 1.0f},
    {{DType::kQ4_1, "Q4_1", 32, 20}, dequantize_q4_1, quantize_q4_1, quantize_q4_1_weighted, 0, 1.0f},
    {{DType::kQ5_0, "Q5_0", 32, 22}, dequantize_q5_0, quantize_q5_0, quantize_q5_0_weighted, 0, 1.0f},
    {{DType::kQ5_1, "Q5_1", 32, 24}, dequantize_q5_1, quantize_q5_1, quantize_q5_1_weighted, 0, 1.0f},
    {{DType::kQ8_0, "Q8_0", 32, 34}, dequantize_q8_0, quantize_q8_0},
    {{DType::kQ8_1, "Q8_1", 32, 36}},
    {{DType::kQ2_K, "Q2_K", 256, 84}, dequantize_q2_k, unit_weights<quantize_q2_k>, quantize_q2_k,
     kSuperBlockSize, 1.0f, DType::kQ4_0},
    {{DType::kQ3_K, "Q3_K", 256, 110}, dequantize_q3_k, unit_weights<quantize_q3_k>, quantize_q3_k,
     kSuperBlockSize, 2.0f, DType::kQ4_0},
    {{DType::kQ4_K, "Q4_K", 256, 144}, dequantize_q4_k, unit_weights<quantize_q4_k>, quantize_q4_k,
     kSuperBlockSize, 2.0f, DType::kQ5_0},
    {{DType::kQ5_K, "Q5_K", 256, 176}, dequantize_q5_k, unit_weights<quantize_q5_k>, quantize_q5_k,
     kSuperBlockSize, 2.0f, DType::kQ5_1},
    {{DType::kQ6_K, "Q6_K", 256, 210}, dequantize_q6_k, unit_weights<quantize_q6_k>, quantize_q6_k,
     kSuperBlockSize, 1.0f, DType::kQ8_0},
    {{DType::kQ8_K, "Q8_K", 256, 292}, dequantize_q8_k, quantize_q8_k},
    {{DType::kIQ2_XXS, "IQ2_XXS", 256, 66}, dequantize_iq2_xxs},
    {{DType::kIQ2_XS, "IQ2_XS", 256, 74}, dequantize_iq2_xs},
    {{DType::kIQ3_XXS, "IQ3_XXS", 256, 98}, dequantize_iq3_xxs},
    {{DType::kIQ1_S, "IQ1_S", 256, 50}},
    {{DType::kIQ4_NL, "IQ4_NL", 32, 18}, dequantize_iq4_nl, unit_weights<quantize_iq4_nl>,
     quantize_iq4_nl, kBlockSize, 2.0f},
    {{DType::kIQ3_S, "IQ3_S", 256, 110}, dequantize_iq3_s},
    {{DType::kIQ2_S, "IQ2_S", 256, 82}, dequantize_iq2_s},
    // The same grid in blocks of 32 takes the rows IQ4_XS's super-blocks cannot.
    {{DType::kIQ4_XS, "IQ4_XS", 256, 136}, dequantize_iq4_xs, unit_weights<quantize_iq4_xs>,
     quantize_iq4_xs, kSuperBlockSize, 2.0f, DType::kIQ4_NL},
    {{DType::kI8, "I8", 1, 1}},
    {{DType::kI16, "I16", 1, 2}},
    {{DType::kI32, "I32", 1, 4}},
    {{DType::kI64, "I64", 1, 8}},
    {{DType::kF64, "F64", 1, 8}},
    {{DType::kIQ1_M, "IQ1_M", 256, 56}},
    {{DType::kBF16, "BF16", 1, 2}, dequantize_bf16, quantize_bf16},
    {{DType::kTQ1_0, "TQ1_0", 256, 54}},
    {{DType::kTQ2_0, "TQ2_0", 256, 66}},
    {{DType::kMXFP4, "MXFP4", 32, 17}},
    // pagoda's own: E4M3 codes with an F16 scale per 32 (reference_fp8.h). Its search weighs
    // like the legacy types' (sigma2 from the whole row).
    {{DType::kFP8_E4M3, "FP8_E4M3", 32, 34}, dequantize_fp8_e4m3, quantize_fp8_e4m3,
     quantize_fp8_e4m3_weighted, 0, 1.0f},
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
