#include "model/recipe.h"

#include "core/error.h"
#include "format/gguf.h"
#include "model/architecture.h"
#include "model/gemma4_plan.h"
#include "model/model_file.h"
#include "model/qwen35_plan.h"
#include "quant/weight_types.h"

namespace pagoda {
namespace {

constexpr WeightRecipe kRecipes[] = {
    {"f32", DType::kF32, DType::kF32, false, 0},
    {"f16", DType::kF16, DType::kF16, false, 1},
    {"bf16", DType::kBF16, DType::kBF16, false, 32},
    {"q4_0", DType::kQ4_0, DType::kQ6_K, false, 2},
    {"q4_1", DType::kQ4_1, DType::kQ6_K, false, 3},
    {"q5_0", DType::kQ5_0, DType::kQ6_K, false, 8},
    {"q5_1", DType::kQ5_1, DType::kQ6_K, false, 9},
    {"q8_0", DType::kQ8_0, DType::kQ8_0, false, 7},
    {"q4_k", DType::kQ4_K, DType::kQ6_K, false, 14},
    {"q4_k_m", DType::kQ4_K, DType::kQ6_K, true, 15},
    {"q5_k_m", DType::kQ5_K, DType::kQ6_K, true, 17},
    {"q6_k", DType::kQ6_K, DType::kQ6_K, false, 18},
    // llama.cpp's LLAMA_FTYPE_MOSTLY_IQ4_NL / _IQ4_XS: the output matrix Q6_K, the rest (an
    // untied token table included) the base type.
    {"iq4_nl", DType::kIQ4_NL, DType::kQ6_K, false, 25},
    {"iq4_xs", DType::kIQ4_XS, DType::kQ6_K, false, 30},
    // pagoda's own FP8_E4M3 (core/dtype.h), every matrix, as q8_0 is; llama_ftype has no FP8,
    // so general.file_type takes the type's private number too.
    {"fp8", DType::kFP8_E4M3, DType::kFP8_E4M3, false, 0xF8E4},
    // llama.cpp's LLAMA_FTYPE_MOSTLY_MXFP4_MOE, gpt-oss's published type: the experts MXFP4,
    // every other matrix (the output one too) Q8_0. A file already in it is copied as it is.
    {"mxfp4_moe", DType::kQ8_0, DType::kQ8_0, false, 38, DType::kMXFP4},
};

// The layer of "blk.N.<rest>", or -1.
int64_t layer_of(std::string_view name) {
  if (name.substr(0, 4) != "blk.") return -1;
  const size_t dot = name.find('.', 4);
  if (dot == std::string_view::npos || dot == 4) return -1;
  int64_t layer = 0;
  for (size_t i = 4; i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9' || layer > (int64_t{1} << 30)) return -1;
    layer = layer * 10 + (name[i] - '0');
  }
  return layer;
}

}  // namespace

std::span<const WeightRecipe> weight_recipes() { return kRecipes; }

const WeightRecipe* find_weight_recipe(std::string_view name) {
  for (const WeightRecipe& r : kRecipes) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

const WeightRecipe* file_recipe(const ModelFile& file) {
  const GgufValue* number =
      file.gguf() != nullptr ? file.gguf()->find("general.file_type") : nullptr;
  if (number == nullptr || !number->is_unsigned()) return nullptr;
  for (const WeightRecipe& r : kRecipes) {
    if (r.file_type == number->u) return &r;
  }
  return nullptr;
}

std::string weight_recipe_names() {
  std::string names;
  for (const WeightRecipe& r : kRecipes) {
    if (!names.empty()) names += ' ';
    names += r.name;
  }
  return names;
}

const WeightRecipe& weight_recipe(std::string_view name, std::string_view who) {
  if (const WeightRecipe* r = find_weight_recipe(name)) return *r;
  fail(who, ": unknown type '", name, "' (known: ", weight_recipe_names(), ")");
}

bool kquant_mix_more_bits(uint32_t layer, uint32_t num_layers) {
  return layer < num_layers / 8 || layer >= 7 * num_layers / 8 || (layer - num_layers / 8) % 3 == 2;
}

DType quant_fallback_type(DType type, uint64_t cols) {
  if (cols % dtype_traits(type).block_size == 0) return type;
  // The table's partner with smaller blocks; a 32-block type has none to give way to.
  const WeightType* t = find_weight_type(type);
  const DType fallback = t != nullptr && t->fallback ? *t->fallback : type;
  return cols % dtype_traits(fallback).block_size == 0 ? fallback : DType::kF16;
}

DType recipe_type(const WeightRecipe& recipe, std::string_view name, uint64_t cols,
                  bool has_output, uint32_t num_layers) {
  DType type = recipe.base;
  if (recipe.experts && name.find("_exps.") != std::string_view::npos) {
    type = *recipe.experts;
  } else if (name == "output.weight" || (!has_output && name == "token_embd.weight")) {
    type = recipe.more;
  } else if (recipe.kquant_mix &&
             (name.find("attn_v.weight") != std::string_view::npos ||
              name.find("ffn_down") != std::string_view::npos)) {
    const int64_t layer = layer_of(name);
    if (layer >= 0 && num_layers > 0 && kquant_mix_more_bits(static_cast<uint32_t>(layer), num_layers)) {
      type = recipe.more;
    }
  }
  return quant_fallback_type(type, cols);
}

std::vector<PlannedTensor> plan_model_tensors(const ModelConfig& c, const WeightRecipe& recipe) {
  const Architecture& arch = architecture_of(c, "a model of architecture " + c.architecture);
  if (arch.name == "gemma4") return plan_gemma4_tensors(c, recipe);
  if (arch.name == "qwen35" || arch.name == "qwen35moe") return plan_qwen35_tensors(c, recipe);
  const uint64_t hidden = c.hidden_size, ff = c.intermediate_size, vocab = c.vocab_size;
  const uint64_t q_dim = uint64_t{c.num_heads} * c.head_dim, kv_dim = uint64_t{c.num_kv_heads} * c.head_dim;
  const bool has_output = !c.tie_embeddings;
  std::vector<PlannedTensor> plan;
  // A weight matrix of `rows` x `cols` (times `experts` stacked when not 0), typed by the recipe.
  auto matrix = [&](std::string name, uint64_t rows, uint64_t cols, uint64_t experts = 0) {
    const DType type = recipe_type(recipe, name, cols, has_output, c.num_layers);
    std::vector<uint64_t> shape = {cols, rows};
    if (experts) shape.push_back(experts);
    plan.push_back({std::move(name), type, std::move(shape), false, true});
  };
  auto vec = [&](std::string name, uint64_t n, bool norm) {
    plan.push_back({std::move(name), DType::kF32, {n}, norm, false});
  };
  matrix("token_embd.weight", vocab, hidden);
  if (c.rope_scaling_type == "longrope") {
    // Divisors of each rotary frequency, positive as trained ones are: the long ones larger.
    const uint64_t pairs = (c.rotary_dim ? c.rotary_dim : c.head_dim) / 2;
    plan.push_back({"rope_factors_long.weight", DType::kF32, {pairs}, false, false, 1.0f, 4.0f});
    plan.push_back({"rope_factors_short.weight", DType::kF32, {pairs}, false, false, 0.1f, 1.2f});
  }
  for (uint32_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    vec(p + "attn_norm.weight", hidden, true);
    if (arch.fused_qkv) {
      matrix(p + "attn_qkv.weight", q_dim + 2 * kv_dim, hidden);
    } else {
      matrix(p + "attn_q.weight", q_dim, hidden);
      matrix(p + "attn_k.weight", kv_dim, hidden);
      matrix(p + "attn_v.weight", kv_dim, hidden);
    }
    matrix(p + "attn_output.weight", hidden, q_dim);
    if (arch.output_and_expert_biases) vec(p + "attn_output.bias", hidden, false);
    if (arch.attention_sinks) {
      // Logits of the size of the scores, so that a synthetic model's sinks matter.
      plan.push_back({p + "attn_sinks.weight", DType::kF32, {c.num_heads}, false, false, 1.0f});
    }
    if (arch.qkv_bias) {
      vec(p + "attn_q.bias", q_dim, false);
      vec(p + "attn_k.bias", kv_dim, false);
      vec(p + "attn_v.bias", kv_dim, false);
    }
    if (arch.qk_norm) {
      vec(p + "attn_q_norm.weight", c.head_dim, true);
      vec(p + "attn_k_norm.weight", c.head_dim, true);
    }
    if (arch.post_norms) vec(p + "post_attention_norm.weight", hidden, true);
    vec(p + std::string(arch.ffn_norm_name) + ".weight", hidden, true);
    if (c.num_experts) {
      const uint64_t eff = c.expert_ffn_size(), experts = c.num_experts;
      // The router stays F32, as llama.cpp leaves it.
      plan.push_back({p + "ffn_gate_inp.weight", DType::kF32, {hidden, experts}, false, false});
      if (arch.output_and_expert_biases) vec(p + "ffn_gate_inp.bias", experts, false);
      matrix(p + "ffn_gate_exps.weight", eff, hidden, experts);
      matrix(p + "ffn_up_exps.weight", eff, hidden, experts);
      matrix(p + "ffn_down_exps.weight", hidden, eff, experts);
      if (arch.output_and_expert_biases) {
        // Gate and up biases wide enough that the clamped SwiGLU's limit (7) is reached.
        plan.push_back({p + "ffn_gate_exps.bias", DType::kF32, {eff, experts}, false, false, 5.0f});
        plan.push_back({p + "ffn_up_exps.bias", DType::kF32, {eff, experts}, false, false, 5.0f});
        plan.push_back({p + "ffn_down_exps.bias", DType::kF32, {hidden, experts}, false, false});
      }
    } else if (arch.fused_gate_up) {
      matrix(p + "ffn_up.weight", 2 * ff, hidden);
      matrix(p + "ffn_down.weight", hidden, ff);
    } else {
      matrix(p + "ffn_gate.weight", ff, hidden);
      matrix(p + "ffn_up.weight", ff, hidden);
      matrix(p + "ffn_down.weight", hidden, ff);
    }
    if (arch.post_norms) vec(p + "post_ffw_norm.weight", hidden, true);
  }
  vec("output_norm.weight", hidden, true);
  if (has_output) matrix("output.weight", vocab, hidden);
  return plan;
}

}  // namespace pagoda
