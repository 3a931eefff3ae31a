// Tensor element types, numbered as GGUF numbers them (ggml_type). Their traits come from the
// one weight-type table, quant/weight_types.cc, which defines the lookups below: each row there
// also names the type's codec, so core declares them and that table answers.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace pagoda {

enum class DType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ8_1 = 9,
  kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kQ8_K = 15,
  kIQ2_XXS = 16, kIQ2_XS = 17, kIQ3_XXS = 18, kIQ1_S = 19, kIQ4_NL = 20, kIQ3_S = 21,
  kIQ2_S = 22, kIQ4_XS = 23, kI8 = 24, kI16 = 25, kI32 = 26, kI64 = 27, kF64 = 28,
  kIQ1_M = 29, kBF16 = 30, kTQ1_0 = 34, kTQ2_0 = 35, kMXFP4 = 39,
  // pagoda-private, not a ggml type: blocks of 32 FP8 E4M3 codes (quant/fp8.h) after one F16
  // scale, 34 bytes (BlockFP8 in quant/blocks.h). Numbered far past ggml's sequential types
  // (they end at 39, MXFP4, in the llama.cpp pagoda compares with) so no future ggml type takes
  // it; files holding it are pagoda-only: llama.cpp and the gguf package refuse the number.
  kFP8_E4M3 = 0xF8E4,  // 63716: "F8 E4"
};

struct DTypeTraits {
  DType type;
  std::string_view name;      // as GGUF tools print it: "F32", "Q4_K", ...
  uint32_t block_size;        // elements per block (1 for plain types)
  uint32_t type_size;         // bytes per block
};

// nullopt for a number that is no known type (the caller names the tensor in its error).
std::optional<DTypeTraits> dtype_traits(uint32_t type);
const DTypeTraits& dtype_traits(DType type);
std::optional<DType> dtype_from_name(std::string_view name);  // case-insensitive

}  // namespace pagoda
