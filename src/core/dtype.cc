#include "core/dtype.h"

#include <array>
#include <cctype>

#include "core/error.h"

namespace pagoda {
namespace {

constexpr std::array kTraits = {
    DTypeTraits{DType::kF32, "F32", 1, 4},         DTypeTraits{DType::kF16, "F16", 1, 2},
    DTypeTraits{DType::kQ4_0, "Q4_0", 32, 18},     DTypeTraits{DType::kQ4_1, "Q4_1", 32, 20},
    DTypeTraits{DType::kQ5_0, "Q5_0", 32, 22},     DTypeTraits{DType::kQ5_1, "Q5_1", 32, 24},
    DTypeTraits{DType::kQ8_0, "Q8_0", 32, 34},     DTypeTraits{DType::kQ8_1, "Q8_1", 32, 36},
    DTypeTraits{DType::kQ2_K, "Q2_K", 256, 84},    DTypeTraits{DType::kQ3_K, "Q3_K", 256, 110},
    DTypeTraits{DType::kQ4_K, "Q4_K", 256, 144},   DTypeTraits{DType::kQ5_K, "Q5_K", 256, 176},
    DTypeTraits{DType::kQ6_K, "Q6_K", 256, 210},   DTypeTraits{DType::kQ8_K, "Q8_K", 256, 292},
    DTypeTraits{DType::kIQ2_XXS, "IQ2_XXS", 256, 66}, DTypeTraits{DType::kIQ2_XS, "IQ2_XS", 256, 74},
    DTypeTraits{DType::kIQ3_XXS, "IQ3_XXS", 256, 98}, DTypeTraits{DType::kIQ1_S, "IQ1_S", 256, 50},
    DTypeTraits{DType::kIQ4_NL, "IQ4_NL", 32, 18}, DTypeTraits{DType::kIQ3_S, "IQ3_S", 256, 110},
    DTypeTraits{DType::kIQ2_S, "IQ2_S", 256, 82},  DTypeTraits{DType::kIQ4_XS, "IQ4_XS", 256, 136},
    DTypeTraits{DType::kI8, "I8", 1, 1},           DTypeTraits{DType::kI16, "I16", 1, 2},
    DTypeTraits{DType::kI32, "I32", 1, 4},         DTypeTraits{DType::kI64, "I64", 1, 8},
    DTypeTraits{DType::kF64, "F64", 1, 8},         DTypeTraits{DType::kIQ1_M, "IQ1_M", 256, 56},
    DTypeTraits{DType::kBF16, "BF16", 1, 2},       DTypeTraits{DType::kTQ1_0, "TQ1_0", 256, 54},
    DTypeTraits{DType::kTQ2_0, "TQ2_0", 256, 66},  DTypeTraits{DType::kMXFP4, "MXFP4", 32, 17},
};

}  // namespace

std::optional<DTypeTraits> dtype_traits(uint32_t type) {
  for (const auto& t : kTraits) {
    if (static_cast<uint32_t>(t.type) == type) return t;
  }
  return std::nullopt;
}

const DTypeTraits& dtype_traits(DType type) {
  for (const auto& t : kTraits) {
    if (t.type == type) return t;
  }
  fail("unknown dtype ", static_cast<uint32_t>(type));
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& t : kTraits) {
    if (t.name.size() != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < name.size(); ++i) {
      same &= std::toupper(static_cast<unsigned char>(name[i])) == t.name[i];
    }
    if (same) return t.type;
  }
  return std::nullopt;
}

}  // namespace pagoda
