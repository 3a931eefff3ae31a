#include "model/gemma4_plan.h"

#include "format/gguf_writer.h"

namespace pagoda {

std::vector<float> gemma4_rope_freqs(const ModelConfig& c) {
  const uint32_t pairs = c.head_dim / 2;
  const auto rotated = static_cast<uint32_t>(static_cast<float>(c.head_dim) * c.global_rotary_fraction / 2);
  std::vector<float> freqs(pairs, 1e30f);  // a divisor that leaves the angle 0: no rotation
  for (uint32_t i = 0; i < rotated && i < pairs; ++i) freqs[i] = 1.0f;
  return freqs;
}

void write_layer_layout(const ModelConfig& c, GgufWriter& w, const std::string& a) {
  std::vector<GgufValue> pattern;
  for (uint32_t l = 0; l < c.num_layers; ++l) {
    pattern.push_back(GgufWriter::make_bool(c.layer_sliding(l)));
  }
  w.add_value(a + "attention.sliding_window_pattern",
              GgufWriter::make_array(GgufType::kBool, std::move(pattern)));
  const uint32_t sliding_head = c.head_dim_sliding ? c.head_dim_sliding : c.head_dim;
  w.add_u32(a + "attention.key_length_swa", sliding_head);
  w.add_u32(a + "attention.value_length_swa", sliding_head);
  w.add_u32(a + "rope.dimension_count_swa", c.rotary_dim_sliding ? c.rotary_dim_sliding : sliding_head);
  w.add_f32(a + "rope.freq_base_swa", c.rope_theta_sliding);
  w.add_u32(a + "attention.shared_kv_layers", c.kv_shared_layers);
  w.add_u32(a + "embedding_length_per_layer_input", c.per_layer_input_dim);
  if (c.final_logit_softcap > 0) w.add_f32(a + "final_logit_softcapping", c.final_logit_softcap);
}

std::vector<PlannedTensor> plan_gemma4_tensors(const ModelConfig& c, const WeightRecipe& recipe) {
  const uint64_t hidden = c.hidden_size, vocab = c.vocab_size, ple = c.per_layer_input_dim;
  const uint64_t all_ple = ple * c.num_layers;
  const bool has_output = !c.tie_embeddings;
  std::vector<PlannedTensor> plan;
  // A weight matrix of `rows` x `cols` (times `experts` stacked when not 0), typed by the recipe.
  auto matrix = [&](std::string name, uint64_t rows, uint64_t cols, uint64_t experts = 0) {
    const DType type = recipe_type(recipe, name, cols, has_output, c.num_layers);
    std::vector<uint64_t> shape = {cols, rows};
    if (experts) shape.push_back(experts);
    plan.push_back({std::move(name), type, std::move(shape), false, true});
  };
  // Norm weights near 1 but not 1, so that a norm applied to the wrong tensor shows.
  auto norm = [&](std::string name, uint64_t n) {
    plan.push_back({std::move(name), DType::kF32, {n}, false, false, 0.1f, 1.0f});
  };
  // Per-head Q/K norm weights near 0.35: attention is not scaled by 1/sqrt(d) (the norms stand
  // in for it), so weights of 1 would give scores of std sqrt(d) and an all-but-argmax softmax
  // in which float rounding flips which token a head attends to.
  auto qk_norm = [&](std::string name, uint64_t n) {
    plan.push_back({std::move(name), DType::kF32, {n}, false, false, 0.05f, 0.35f});
  };
  matrix("token_embd.weight", vocab, hidden);
  if (ple != 0) {
    matrix("per_layer_token_embd.weight", vocab, all_ple);
    matrix("per_layer_model_proj.weight", all_ple, hidden);
    norm("per_layer_proj_norm.weight", ple);
  }
  PlannedTensor freqs{"rope_freqs.weight", DType::kF32, {c.head_dim / 2}, false, false};
  freqs.values = gemma4_rope_freqs(c);
  plan.push_back(std::move(freqs));
  for (uint32_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const uint64_t hd = c.layer_head_dim(l), q_dim = uint64_t{c.num_heads} * hd;
    const uint64_t kv_dim = c.kv_row_elements(l), ff = c.layer_ffn_size(l);
    const bool own_kv = l < c.kv_layer_count();
    norm(p + "attn_norm.weight", hidden);
    matrix(p + "attn_q.weight", q_dim, hidden);
    if (own_kv) {
      matrix(p + "attn_k.weight", kv_dim, hidden);
      if (c.layer_sliding(l) || !c.global_v_is_k) matrix(p + "attn_v.weight", kv_dim, hidden);
    }
    matrix(p + "attn_output.weight", hidden, q_dim);
    qk_norm(p + "attn_q_norm.weight", hd);
    if (own_kv) qk_norm(p + "attn_k_norm.weight", hd);
    norm(p + "post_attention_norm.weight", hidden);
    norm(p + "ffn_norm.weight", hidden);
    matrix(p + "ffn_gate.weight", ff, hidden);
    matrix(p + "ffn_up.weight", ff, hidden);
    matrix(p + "ffn_down.weight", hidden, ff);
    norm(p + "post_ffw_norm.weight", hidden);
    if (c.num_experts != 0) {
      const uint64_t experts = c.num_experts, eff = c.expert_ffn_size();
      // The router's input is scaled by 1/sqrt(hidden): weights of std 1 give logits of std
      // about 1, as a trained router's.
      plan.push_back({p + "ffn_gate_inp.weight", DType::kF32, {hidden, experts}, false, false, 1.0f});
      norm(p + "ffn_gate_inp.scale", hidden);
      norm(p + "pre_ffw_norm_2.weight", hidden);
      norm(p + "post_ffw_norm_1.weight", hidden);
      norm(p + "post_ffw_norm_2.weight", hidden);
      matrix(p + "ffn_gate_exps.weight", eff, hidden, experts);
      matrix(p + "ffn_up_exps.weight", eff, hidden, experts);
      matrix(p + "ffn_down_exps.weight", hidden, eff, experts);
      plan.push_back({p + "ffn_down_exps.scale", DType::kF32, {experts}, false, false, 0.2f, 1.0f});
    }
    if (ple != 0) {
      matrix(p + "inp_gate.weight", ple, hidden);
      matrix(p + "proj.weight", hidden, ple);
      norm(p + "post_norm.weight", hidden);
    }
    // The layer's output scale, a little under 1.
    plan.push_back({p + "layer_output_scale.weight", DType::kF32, {1}, false, false, 0.05f, 0.9f});
  }
  norm("output_norm.weight", hidden);
  if (has_output) matrix("output.weight", vocab, hidden);
  return plan;
}

}  // namespace pagoda
