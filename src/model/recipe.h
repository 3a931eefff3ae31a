// Weight recipes: which GGUF type each weight matrix of a model gets under a file type
// ("q4_k_m", ...), following llama.cpp's basic rules: the output matrix (the token table when
// the two are tied) gets `more` bits, and in the K-quant mixes so do attn_v and ffn_down of the
// layers llama.cpp picks. One table, used by `pagoda quantize` (real files), `pagoda synth`
// (random weights) and `pagoda estimate` (sizes without a file); and one list of the tensors a
// model of a given shape has, which synth writes and estimate counts.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "model/config.h"

namespace pagoda {

class ModelFile;

struct WeightRecipe {
  std::string_view name;  // "q4_k_m"
  DType base;             // most matrices
  DType more;             // the output matrix; attn_v / ffn_down of some layers in K mixes
  bool kquant_mix;        // whether those layers' attn_v / ffn_down get `more`
  uint32_t file_type;     // general.file_type (llama_ftype)
  // The stacked expert matrices' (*_exps) type where it is not `base` (mxfp4_moe).
  std::optional<DType> experts = std::nullopt;
};

std::span<const WeightRecipe> weight_recipes();
// nullptr when `name` is no recipe.
const WeightRecipe* find_weight_recipe(std::string_view name);
// The recipe whose number the GGUF file's general.file_type holds; nullptr for none, for a
// number pagoda has no recipe for, or for safetensors.
const WeightRecipe* file_recipe(const ModelFile& file);
// Throws Error "<who>: unknown type 'x' (known: f32 f16 ...)".
const WeightRecipe& weight_recipe(std::string_view name, std::string_view who);
// "f32 f16 bf16 ...": for errors and help texts.
std::string weight_recipe_names();

// llama.cpp's choice of the layers whose attn_v / ffn_down get more bits in a K-quant mix
// (Q4_K_M, Q5_K_M): the first and last eighth of the layers, and every third in between.
bool kquant_mix_more_bits(uint32_t layer, uint32_t num_layers);
// The type a row of `cols` elements really gets: rows that are no whole number of blocks fall
// back the way llama.cpp's quantizer does (Q2_K / Q3_K to Q4_0, Q4_K to Q5_0, Q5_K to Q5_1,
// Q6_K to Q8_0, IQ4_XS to IQ4_NL: the weight-type table's `fallback`, quant/weight_types.h; F16
// when that does not fit either).
DType quant_fallback_type(DType type, uint64_t cols);

// The type the recipe gives the weight matrix `name` (GGUF tensor naming) whose rows hold
// `cols` elements. `has_output`: the model has an output.weight of its own (else the token
// table is the output matrix).
DType recipe_type(const WeightRecipe& recipe, std::string_view name, uint64_t cols,
                  bool has_output, uint32_t num_layers);

// One tensor of a model as pagoda synth writes it.
struct PlannedTensor {
  std::string name;
  DType type;
  std::vector<uint64_t> shape;  // GGUF order: [cols, rows(, experts)]
  bool norm = false;            // a norm's weight (synth writes ones)
  bool from_recipe = false;     // a weight matrix whose type the recipe chose
  float std = 0;                // synth's random values' standard deviation; 0: its default
  float mean = 0;               // and their mean
  std::vector<float> values = {};  // an F32 vector's values, when fixed (Gemma 4's rope_freqs)
};

// Every tensor of a model of shape `config` (a family in the architecture registry), in file
// order, typed by `recipe`.
std::vector<PlannedTensor> plan_model_tensors(const ModelConfig& config, const WeightRecipe& recipe);

}  // namespace pagoda
