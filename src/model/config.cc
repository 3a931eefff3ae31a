#include "model/config.h"

#include "core/error.h"
#include "format/gguf.h"

namespace pagoda {

void ModelConfig::validate(const std::string& source) const {
  auto need = [&](uint64_t value, const char* what) {
    if (value == 0) fail(source, ": the model does not set ", what);
  };
  need(architecture.size(), "its architecture");
  need(num_layers, "the layer count");
  need(hidden_size, "the hidden size");
  need(num_heads, "the attention head count");
  need(num_kv_heads, "the KV head count");
  need(head_dim, "the head size");
  if (num_experts != 0 && (num_experts_used == 0 || num_experts_used > num_experts)) {
    fail(source, ": ", num_experts_used, " experts used per token of ", num_experts);
  }
  if (num_heads % num_kv_heads != 0) {
    fail(source, ": ", num_heads, " attention heads are not a multiple of ", num_kv_heads,
         " KV heads");
  }
}

ModelConfig config_from_gguf(const GgufFile& f) {
  ModelConfig c;
  c.architecture = f.get_string("general.architecture");
  c.name = f.try_string("general.name").value_or("");
  const std::string a = c.architecture + ".";
  auto u32 = [&](const std::string& key) -> uint32_t {
    auto v = f.try_u64(key);
    if (v && *v > UINT32_MAX) fail(f.name(), ": metadata key '", key, "' value ", *v, " is too large");
    return v ? static_cast<uint32_t>(*v) : 0;
  };
  c.num_layers = u32(a + "block_count");
  c.hidden_size = u32(a + "embedding_length");
  c.intermediate_size = u32(a + "feed_forward_length");
  c.num_heads = u32(a + "attention.head_count");
  c.num_kv_heads = u32(a + "attention.head_count_kv");
  if (c.num_kv_heads == 0) c.num_kv_heads = c.num_heads;  // absent means plain multi-head
  c.head_dim = u32(a + "attention.key_length");
  if (c.head_dim == 0 && c.num_heads != 0) c.head_dim = c.hidden_size / c.num_heads;
  c.rotary_dim = u32(a + "rope.dimension_count");
  c.context_length = u32(a + "context_length");
  c.vocab_size = u32(a + "vocab_size");
  if (c.vocab_size == 0 && f.has("tokenizer.ggml.tokens")) {
    c.vocab_size = static_cast<uint32_t>(f.find("tokenizer.ggml.tokens")->array.size());
  }
  c.rms_norm_eps = static_cast<float>(
      f.try_f64(a + "attention.layer_norm_rms_epsilon").value_or(c.rms_norm_eps));
  c.rope_theta = static_cast<float>(f.try_f64(a + "rope.freq_base").value_or(c.rope_theta));
  c.rope_scaling_type = f.try_string(a + "rope.scaling.type").value_or("");
  c.rope_scaling_factor = static_cast<float>(f.try_f64(a + "rope.scaling.factor").value_or(0.0));
  c.sliding_window = u32(a + "attention.sliding_window");
  c.tie_embeddings = !f.tensors().empty() && f.find_tensor("output.weight") == nullptr;
  c.num_experts = u32(a + "expert_count");
  c.num_experts_used = u32(a + "expert_used_count");
  c.expert_intermediate = u32(a + "expert_feed_forward_length");
  c.expert_gating_sigmoid = u32(a + "expert_gating_func") == 2;  // llama.cpp: 1 softmax, 2 sigmoid
  if (auto norm = f.try_bool(a + "expert_weights_norm")) c.expert_weights_norm = *norm;
  return c;
}

}  // namespace pagoda
