#include "model/qwen35_plan.h"

#include "format/gguf_writer.h"

namespace pagoda {

void write_hybrid_layout(const ModelConfig& c, GgufWriter& w, const std::string& a) {
  w.add_u32(a + "full_attention_interval", c.full_attention_interval);
  w.add_u32(a + "ssm.conv_kernel", c.ssm_conv_kernel);
  w.add_u32(a + "ssm.state_size", c.ssm_state_size);
  w.add_u32(a + "ssm.inner_size", c.ssm_inner_size);
  w.add_u32(a + "ssm.group_count", c.ssm_group_count);
  w.add_u32(a + "ssm.time_step_rank", c.ssm_time_step_rank);
  if (!c.rope_sections.empty()) w.add_i32_array(a + "rope.dimension_sections", c.rope_sections);
}

namespace {

// Qwen3.5-MoE's feed-forward block of layer prefix `p`: the router (F32, as llama.cpp leaves
// it), the stacked routed experts, and the shared expert with its gate vector.
template <typename Matrix>
void plan_experts(const ModelConfig& c, const std::string& p, Matrix& matrix,
                  std::vector<PlannedTensor>& plan) {
  const uint64_t hidden = c.hidden_size, eff = c.expert_ffn_size(), experts = c.num_experts;
  const uint64_t sff = shared_expert_ffn_size(c);
  plan.push_back({p + "ffn_gate_inp.weight", DType::kF32, {hidden, experts}, false, false});
  matrix(p + "ffn_gate_exps.weight", eff, hidden, experts);
  matrix(p + "ffn_up_exps.weight", eff, hidden, experts);
  matrix(p + "ffn_down_exps.weight", hidden, eff, experts);
  plan.push_back({p + "ffn_gate_inp_shexp.weight", DType::kF32, {hidden}, false, false});
  matrix(p + "ffn_gate_shexp.weight", sff, hidden);
  matrix(p + "ffn_up_shexp.weight", sff, hidden);
  matrix(p + "ffn_down_shexp.weight", hidden, sff);
}

}  // namespace

std::vector<PlannedTensor> plan_qwen35_tensors(const ModelConfig& c, const WeightRecipe& recipe) {
  const uint64_t hidden = c.hidden_size, ff = c.intermediate_size, vocab = c.vocab_size;
  const uint64_t q_dim = uint64_t{c.num_heads} * c.head_dim, kv_dim = uint64_t{c.num_kv_heads} * c.head_dim;
  const uint64_t key_dim = uint64_t{c.ssm_group_count} * c.ssm_state_size;
  const uint64_t value_dim = c.ssm_inner_size, v_heads = c.ssm_time_step_rank;
  const bool has_output = !c.tie_embeddings;
  std::vector<PlannedTensor> plan;
  auto matrix = [&](std::string name, uint64_t rows, uint64_t cols, uint64_t experts = 0) {
    const DType type = recipe_type(recipe, name, cols, has_output, c.num_layers);
    std::vector<uint64_t> shape = {cols, rows};
    if (experts) shape.push_back(experts);
    plan.push_back({std::move(name), type, std::move(shape), false, true});
  };
  auto vec = [&](std::string name, uint64_t n, bool norm, float std = 0, float mean = 0) {
    plan.push_back({std::move(name), DType::kF32, {n}, norm, false, std, mean});
  };
  matrix("token_embd.weight", vocab, hidden);
  for (uint32_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    vec(p + "attn_norm.weight", hidden, true);
    if (c.layer_recurrent(l)) {
      matrix(p + "attn_qkv.weight", 2 * key_dim + value_dim, hidden);
      matrix(p + "attn_gate.weight", value_dim, hidden);
      // Conv taps of std 0.5 (the default 0.02 would leave the delta rule's inputs near zero),
      // dt biases near 0 and decay rates A = -exp(A_log) clearly negative, so that the
      // recurrence forgets at a rate a test can see.
      plan.push_back({p + "ssm_conv1d.weight", DType::kF32,
                      {c.ssm_conv_kernel, 2 * key_dim + value_dim}, false, false, 0.5f});
      vec(p + "ssm_dt.bias", v_heads, false, 0.5f);
      vec(p + "ssm_a", v_heads, false, 0.3f, -0.8f);
      matrix(p + "ssm_beta.weight", v_heads, hidden);
      matrix(p + "ssm_alpha.weight", v_heads, hidden);
      vec(p + "ssm_norm.weight", c.ssm_state_size, true);
      matrix(p + "ssm_out.weight", hidden, value_dim);
    } else {
      matrix(p + "attn_q.weight", 2 * q_dim, hidden);  // each head's query, then its gate
      matrix(p + "attn_k.weight", kv_dim, hidden);
      matrix(p + "attn_v.weight", kv_dim, hidden);
      matrix(p + "attn_output.weight", hidden, q_dim);
      vec(p + "attn_q_norm.weight", c.head_dim, true);
      vec(p + "attn_k_norm.weight", c.head_dim, true);
    }
    vec(p + "post_attention_norm.weight", hidden, true);
    if (c.num_experts != 0) {
      plan_experts(c, p, matrix, plan);
    } else {
      matrix(p + "ffn_gate.weight", ff, hidden);
      matrix(p + "ffn_up.weight", ff, hidden);
      matrix(p + "ffn_down.weight", hidden, ff);
    }
  }
  vec("output_norm.weight", hidden, true);
  if (has_output) matrix("output.weight", vocab, hidden);
  return plan;
}

}  // namespace pagoda
