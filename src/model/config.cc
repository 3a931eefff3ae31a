#include "model/config.h"

#include "core/error.h"
#include "format/gguf.h"

namespace pagoda {

void ModelConfig::validate(const std::string& source) const {
  auto need = [&](uint64_t value, const char* what) {
    if (value == 0) fail(source, ": the model does not set ", what);
  };
  if (!unreadable.empty()) fail(source, ": ", unreadable.front());
  need(architecture.size(), "its architecture");
  if (std::string rope = rope_scaling_problem(*this); !rope.empty()) fail(source, ": ", rope);
  need(num_layers, "the layer count");
  need(hidden_size, "the hidden size");
  need(num_heads, "the attention head count");
  need(num_kv_heads, "the KV head count");
  need(head_dim, "the head size");
  if (num_experts != 0 && (num_experts_used == 0 || num_experts_used > num_experts)) {
    fail(source, ": ", num_experts_used, " experts used per token of ", num_experts);
  }
  for (uint32_t l = 0; l < num_kv_heads_per_layer.size(); ++l) {
    if (num_kv_heads_per_layer[l] == 0 || num_heads % num_kv_heads_per_layer[l] != 0) {
      fail(source, ": layer ", l, "'s ", num_kv_heads_per_layer[l], " KV heads do not divide ",
           num_heads, " attention heads");
    }
  }
  if (num_heads % num_kv_heads != 0) {
    fail(source, ": ", num_heads, " attention heads are not a multiple of ", num_kv_heads,
         " KV heads");
  }
}

std::string rope_scaling_problem(const ModelConfig& c) {
  const std::string& type = c.rope_scaling_type;
  if (type.empty() || type == "none" || type == "linear" || type == "yarn" || type == "llama3") {
    return "";
  }
  if (type == "longrope" && !c.rope_long_factors.empty()) return "";
  return str_cat("RoPE scaling '", type,
                 "' is not supported (pagoda computes linear, llama3, yarn and longrope)");
}

namespace {

// Reads the "<arch>.*" hyper-parameters without ever throwing: a key of an unexpected type or
// value is noted in ModelConfig::unreadable (the weights' loader refuses it; `inspect` and the
// tokenizer commands do not need it) and the field stays at its default.
class GgufConfigReader {
 public:
  GgufConfigReader(const GgufFile& f, ModelConfig& c) : f_(f), c_(c) {}

  // A per-layer array (Gemma 4 writes head_count_kv so) is accepted when every layer has the
  // same value; `per_layer` (when given) keeps the array either way.
  uint32_t u32(const std::string& key, std::vector<uint32_t>* per_layer = nullptr) {
    const GgufValue* v = f_.find(key);
    if (v != nullptr && v->type == GgufType::kArray) return u32_array(key, per_layer);
    auto value = guard([&] { return f_.try_u64(key); });
    if (value && *value > UINT32_MAX) {
      note(str_cat("metadata key '", key, "' value ", *value, " is too large"));
      return 0;
    }
    return value ? static_cast<uint32_t>(*value) : 0;
  }
  float f32(const std::string& key, float fallback) {
    auto v = guard([&] { return f_.try_f64(key); });
    return v ? static_cast<float>(*v) : fallback;
  }
  std::string str(const std::string& key) {
    return guard([&] { return f_.try_string(key); }).value_or("");
  }
  bool flag(const std::string& key, bool fallback) {
    return guard([&] { return f_.try_bool(key); }).value_or(fallback);
  }

 private:
  template <class Read>
  auto guard(Read read) -> decltype(read()) {
    try {
      return read();
    } catch (const Error& e) {
      note(e.what());
      return std::nullopt;
    }
  }
  uint32_t u32_array(const std::string& key, std::vector<uint32_t>* per_layer) {
    std::vector<int64_t> values;
    try {
      values = f_.get_int_array(key);
    } catch (const Error& e) {
      note(e.what());
      return 0;
    }
    std::vector<uint32_t> out;
    for (int64_t v : values) {
      if (v < 0 || v > int64_t{UINT32_MAX}) {
        note(str_cat("metadata key '", key, "' holds the value ", v, ", out of range"));
        return 0;
      }
      out.push_back(static_cast<uint32_t>(v));
    }
    if (per_layer != nullptr) *per_layer = out;
    if (out.empty()) return 0;
    if (per_layer_ok) return out.front();
    for (uint32_t v : out) {
      if (v != out.front()) {
        note(str_cat("metadata key '", key, "' gives each layer its own value (", v, " and ",
                     out.front(), "); pagoda's forward pass needs one value for every layer"));
        break;
      }
    }
    return out.front();
  }
  void note(std::string message) { c_.unreadable.push_back(std::move(message)); }

 public:
  bool per_layer_ok = false;  // the family's forward pass reads per-layer arrays

 private:
  const GgufFile& f_;
  ModelConfig& c_;
};

// Gemma 4's per-layer shapes (ModelConfig::sliding_layers and the fields after it).
void read_layer_layout(const GgufFile& f, const std::string& a, GgufConfigReader& r,
                       ModelConfig& c) {
  // An array of booleans (llama.cpp's converter) or of integers.
  if (const GgufValue* v = f.find(a + "attention.sliding_window_pattern")) {
    if (v->type != GgufType::kArray) {
      c.unreadable.push_back(str_cat("metadata key '", a, "attention.sliding_window_pattern' "
                                     "is not an array; pagoda reads one flag per layer"));
    }
    for (const GgufValue& e : v->array) c.sliding_layers.push_back(e.u != 0 || e.i != 0 ? 1 : 0);
  }
  c.head_dim_sliding = r.u32(a + "attention.key_length_swa");
  c.rotary_dim_sliding = r.u32(a + "rope.dimension_count_swa");
  c.rope_theta_sliding = r.f32(a + "rope.freq_base_swa", c.rope_theta_sliding);
  c.kv_shared_layers = r.u32(a + "attention.shared_kv_layers");
  c.per_layer_input_dim = r.u32(a + "embedding_length_per_layer_input");
  c.final_logit_softcap = r.f32(a + "final_logit_softcapping", 0.0f);
  const auto sized = [&](size_t n) { return n == 0 || n == c.num_layers; };
  if (!sized(c.sliding_layers.size()) || !sized(c.num_kv_heads_per_layer.size()) ||
      !sized(c.intermediate_per_layer.size())) {
    c.unreadable.push_back(str_cat("a per-layer array does not have one value for each of the ",
                                   c.num_layers, " layers"));
  }
  if (c.kv_shared_layers != 0 &&
      (c.kv_shared_layers + 2 > c.num_layers || !c.layer_sliding(c.kv_layer_count() - 2) ||
       c.layer_sliding(c.kv_layer_count() - 1))) {
    c.unreadable.push_back(str_cat(
        "metadata key '", a, "attention.shared_kv_layers' is ", c.kv_shared_layers,
        "; the two layers before the shared ones must be a sliding-window one, then a global one"));
  }
}

}  // namespace

// Qwen3.5's Gated DeltaNet keys; llama.cpp's default interval is 4 when the file has none.
void read_hybrid_layout(const GgufFile& f, const std::string& a, GgufConfigReader& r,
                        ModelConfig& c) {
  c.full_attention_interval = r.u32(a + "full_attention_interval");
  if (c.full_attention_interval == 0) c.full_attention_interval = 4;
  c.ssm_conv_kernel = r.u32(a + "ssm.conv_kernel");
  c.ssm_state_size = r.u32(a + "ssm.state_size");
  c.ssm_inner_size = r.u32(a + "ssm.inner_size");
  c.ssm_group_count = r.u32(a + "ssm.group_count");
  c.ssm_time_step_rank = r.u32(a + "ssm.time_step_rank");
  if (f.has(a + "attention.recurrent_layers")) {
    c.unreadable.push_back(str_cat("metadata key '", a, "attention.recurrent_layers' is not read; "
                                   "pagoda places the layers by full_attention_interval"));
  }
}

ModelConfig config_from_gguf(const GgufFile& f) {
  ModelConfig c;
  GgufConfigReader r(f, c);
  c.architecture = r.str("general.architecture");
  c.name = r.str("general.name");
  const std::string a = c.architecture + ".";
  auto u32 = [&](const std::string& key) { return r.u32(key); };
  r.per_layer_ok = c.architecture == "gemma4";
  c.num_layers = u32(a + "block_count");
  c.hidden_size = u32(a + "embedding_length");
  c.intermediate_size = r.u32(a + "feed_forward_length", &c.intermediate_per_layer);
  c.num_heads = u32(a + "attention.head_count");
  c.num_kv_heads = r.u32(a + "attention.head_count_kv", &c.num_kv_heads_per_layer);
  if (c.num_kv_heads == 0) c.num_kv_heads = c.num_heads;  // absent means plain multi-head
  c.head_dim = u32(a + "attention.key_length");
  if (c.head_dim == 0 && c.num_heads != 0) c.head_dim = c.hidden_size / c.num_heads;
  c.rotary_dim = u32(a + "rope.dimension_count");
  c.context_length = u32(a + "context_length");
  c.vocab_size = u32(a + "vocab_size");
  if (c.vocab_size == 0 && f.has("tokenizer.ggml.tokens")) {
    c.vocab_size = static_cast<uint32_t>(f.find("tokenizer.ggml.tokens")->array.size());
  }
  c.rms_norm_eps = r.f32(a + "attention.layer_norm_rms_epsilon", c.rms_norm_eps);
  c.rope_theta = r.f32(a + "rope.freq_base", c.rope_theta);
  c.rope_scaling_type = r.str(a + "rope.scaling.type");
  c.rope_scaling_factor = r.f32(a + "rope.scaling.factor", 0.0f);
  // llama.cpp's reading: a factor without a type is linear scaling.
  if (c.rope_scaling_type.empty() && c.rope_scaling_factor > 0) c.rope_scaling_type = "linear";
  c.rope_attn_factor = r.f32(a + "rope.scaling.attn_factor", c.rope_attn_factor);
  c.rope_original_context = r.u32(a + "rope.scaling.original_context_length");
  if (c.rope_original_context == 0) c.rope_original_context = c.context_length;
  c.rope_yarn_beta_fast = r.f32(a + "rope.scaling.yarn_beta_fast", c.rope_yarn_beta_fast);
  c.rope_yarn_beta_slow = r.f32(a + "rope.scaling.yarn_beta_slow", c.rope_yarn_beta_slow);
  c.rope_yarn_attn_factor = r.f32(a + "rope.scaling.yarn_attn_factor", 0.0f);
  c.sliding_window = u32(a + "attention.sliding_window");
  c.tie_embeddings = !f.tensors().empty() && f.find_tensor("output.weight") == nullptr;
  c.num_experts = u32(a + "expert_count");
  c.num_experts_used = u32(a + "expert_used_count");
  c.expert_intermediate = u32(a + "expert_feed_forward_length");
  c.expert_gating_sigmoid = u32(a + "expert_gating_func") == 2;  // llama.cpp: 1 softmax, 2 sigmoid
  c.expert_weights_norm = r.flag(a + "expert_weights_norm", c.expert_weights_norm);
  c.shared_expert_intermediate = u32(a + "expert_shared_feed_forward_length");
  c.causal_attention = r.flag(a + "attention.causal", true);
  if (c.architecture == "qwen35" || c.architecture == "qwen35moe") read_hybrid_layout(f, a, r, c);
  if (r.per_layer_ok) read_layer_layout(f, a, r, c);
  // GGUF has no key for a Normalize module; llama-server L2-normalises embeddings by default.
  c.normalize_embeddings = true;
  c.token_type_count = u32("tokenizer.ggml.token_type_count");
  if (f.has(a + "attention.layer_norm_epsilon")) {
    c.rms_norm_eps = r.f32(a + "attention.layer_norm_epsilon", c.rms_norm_eps);
  }
  if (f.has(a + "pooling_type")) {
    static const char* const kPooling[] = {"none", "mean", "cls", "last"};
    const uint32_t p = u32(a + "pooling_type");
    if (p < 4) {
      c.pooling = kPooling[p];
    } else {
      c.unreadable.push_back(str_cat("metadata key '", a, "pooling_type' is ", p,
                                     "; pagoda pools by none (0), mean (1), cls (2) or last (3)"));
    }
  }
  return c;
}

}  // namespace pagoda
