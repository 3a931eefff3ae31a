// Hyper-parameters of a model, from GGUF metadata ("<arch>.*" keys) or a Hugging Face
// config.json. Fields a file does not set stay 0 / empty; validate() says which are required.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pagoda {

class GgufFile;

struct ModelConfig {
  std::string architecture;  // "llama", "qwen2", "qwen3", "gemma3", ...
  std::string name;          // general.name, when set
  uint32_t num_layers = 0;
  uint32_t hidden_size = 0;
  uint32_t intermediate_size = 0;
  uint32_t num_heads = 0;
  uint32_t num_kv_heads = 0;
  std::vector<uint32_t> num_kv_heads_per_layer;  // when the file gives one per layer
  uint32_t head_dim = 0;        // key/value head size (hidden_size / num_heads unless set)
  uint32_t rotary_dim = 0;      // leading head dimensions RoPE rotates (0: all of head_dim)
  uint32_t vocab_size = 0;
  uint32_t context_length = 0;  // trained context
  float rms_norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  float rope_scaling_factor = 0.0f;  // 0: none
  // "", "none", "linear", "yarn", "llama3" are computed, and "longrope" with its factors;
  // rope_scaling_problem() refuses others.
  std::string rope_scaling_type;
  // Llama 3 scaling (HF rope_scaling; GGUF files carry the result as rope_freqs.weight instead).
  float rope_low_freq_factor = 1.0f;
  float rope_high_freq_factor = 4.0f;
  uint32_t rope_original_context = 8192;  // Llama 3 and YaRN: the context before scaling
  // YaRN: rotation counts bounding the correction range (llama.cpp's and HF's defaults).
  float rope_yarn_beta_fast = 32.0f;
  float rope_yarn_beta_slow = 1.0f;
  // YaRN's attention factor (HF attention_factor, GGUF rope.scaling.yarn_attn_factor); 0: the
  // default 0.1 * ln(factor) + 1.
  float rope_yarn_attn_factor = 0.0f;
  // Multiplies cos and sin of every rotation (GGUF rope.scaling.attn_factor), YaRN or not.
  float rope_attn_factor = 1.0f;
  // LongRoPE from a config.json (rope_scaling "longrope"): per-pair divisors of the frequencies
  // for a context past rope_original_context and for one within it. A GGUF file carries them as
  // the rope_factors_long / rope_factors_short tensors instead.
  std::vector<float> rope_long_factors, rope_short_factors;
  uint32_t sliding_window = 0;       // 0: every layer attends globally
  // Layers that differ from each other (Gemma 4; empty or 0 elsewhere): 1 for each layer that
  // attends within sliding_window (GGUF attention.sliding_window_pattern), those layers' head
  // size, rotated dimensions and RoPE base (key_length_swa, rope.dimension_count_swa,
  // rope.freq_base_swa), each layer's feed-forward size, the last kv_shared_layers layers
  // reading the K/V of the last earlier layer of their kind, and per-layer input embeddings.
  std::vector<uint8_t> sliding_layers;
  std::vector<uint32_t> intermediate_per_layer;
  uint32_t head_dim_sliding = 0;
  uint32_t rotary_dim_sliding = 0;
  float rope_theta_sliding = 10000.0f;
  uint32_t kv_shared_layers = 0;
  uint32_t per_layer_input_dim = 0;  // embedding_length_per_layer_input
  float final_logit_softcap = 0;     // logits = cap * tanh(logits / cap); 0: none
  // The global layers rotate this fraction of their head (Gemma 4's "proportional" RoPE; GGUF
  // files carry it as rope_freqs.weight), and have no V projection (V = K) when set; synth
  // writes files so.
  float global_rotary_fraction = 1.0f;
  bool global_v_is_k = false;
  bool tie_embeddings = false;
  // Mixture of experts: 0 experts is a dense feed-forward block.
  uint32_t num_experts = 0;
  uint32_t num_experts_used = 0;      // top-k per token
  uint32_t expert_intermediate = 0;   // each expert's FFN size (0: intermediate_size)
  bool expert_gating_sigmoid = false;  // scores by sigmoid, not softmax over the experts
  bool expert_weights_norm = true;     // the chosen experts' weights divided by their sum
  // Qwen3.5-MoE's shared expert beside the routed ones (expert_shared_feed_forward_length; 0:
  // intermediate_size, llama.cpp's default).
  uint32_t shared_expert_intermediate = 0;

  // Hybrid linear attention (Qwen3.5, GGUF "qwen35" and "qwen35moe"): Gated DeltaNet layers beside full-attention
  // ones, every full_attention_interval-th layer (N-1, 2N-1, ...) attending fully. The DeltaNet
  // layers' GGUF ssm.* keys: conv1d taps, key (and value) head size, value heads x head size,
  // key heads (group_count) and value heads (time_step_rank). 0 everywhere else.
  uint32_t full_attention_interval = 0;
  uint32_t ssm_conv_kernel = 0;
  uint32_t ssm_state_size = 0;
  uint32_t ssm_inner_size = 0;
  uint32_t ssm_group_count = 0;
  uint32_t ssm_time_step_rank = 0;
  // Multi-axis RoPE sections (rope.dimension_sections); text positions are equal on every axis,
  // which makes the rotation llama.cpp's NEOX one. Written for llama.cpp, not read back.
  std::vector<int32_t> rope_sections;

  // Encoders and embeddings. BERT attends both ways (GGUF attention.causal false), adds a token
  // type's row (token_type_count of them) and keeps LayerNorm's epsilon in rms_norm_eps.
  bool causal_attention = true;
  uint32_t token_type_count = 0;
  // How a text's token vectors become one embedding: "" (the model says nothing), "none",
  // "mean", "cls", "last" (GGUF pooling_type 0-3; a folder's 1_Pooling/config.json), and
  // whether it is then L2-normalised (a folder's modules.json lists Normalize).
  std::string pooling;
  bool normalize_embeddings = false;

  bool hybrid() const { return full_attention_interval != 0; }
  // A Gated DeltaNet layer (a recurrent state per sequence, no K/V).
  bool layer_recurrent(uint32_t layer) const {
    return hybrid() && (layer + 1) % full_attention_interval != 0;
  }
  uint32_t expert_ffn_size() const { return expert_intermediate ? expert_intermediate : intermediate_size; }

  // Hyper-parameters the file sets in a form pagoda cannot use, one line each ("metadata key
  // ... "). The tokenizer and `inspect` do not need them; validate() refuses the first.
  std::vector<std::string> unreadable;

  // Each layer's shape: sliding-window or not, head size, KV heads, feed-forward size.
  bool layer_sliding(uint32_t layer) const {
    return layer < sliding_layers.size() && sliding_layers[layer] != 0;
  }
  uint32_t layer_head_dim(uint32_t layer) const {
    return layer_sliding(layer) && head_dim_sliding != 0 ? head_dim_sliding : head_dim;
  }
  // 0 for a hybrid model's recurrent layers, which hold no K/V.
  uint32_t layer_kv_heads(uint32_t layer) const {
    if (layer_recurrent(layer)) return 0;
    return layer < num_kv_heads_per_layer.size() ? num_kv_heads_per_layer[layer] : num_kv_heads;
  }
  uint32_t layer_ffn_size(uint32_t layer) const {
    return layer < intermediate_per_layer.size() ? intermediate_per_layer[layer] : intermediate_size;
  }
  // Layers that hold K/V of their own: the first kv_layer_count(); a later layer reads
  // kv_source_layer(layer)'s (llama.cpp: the last earlier one of the same kind).
  uint32_t kv_layer_count() const { return num_layers - kv_shared_layers; }
  uint32_t kv_source_layer(uint32_t layer) const {
    if (layer < kv_layer_count()) return layer;
    return kv_layer_count() - (layer_sliding(layer) ? 2 : 1);
  }
  // One token's K (or V) row in layer `layer`, in elements.
  uint64_t kv_row_elements(uint32_t layer) const {
    return uint64_t{layer_kv_heads(layer)} * layer_head_dim(layer);
  }

  // K and V for one token across all layers, in bytes, at `bytes_per_element` (2 for F16).
  // Counts each layer's KV heads and head size, and only the layers that hold K/V.
  uint64_t kv_bytes_per_token(uint32_t bytes_per_element) const {
    uint64_t elements = 0;
    for (uint32_t l = 0; l < kv_layer_count(); ++l) elements += kv_row_elements(l);
    return 2ull * elements * bytes_per_element;
  }
  // Throws Error naming `source` and the first missing or inconsistent field.
  void validate(const std::string& source) const;
};

// One line saying why pagoda cannot compute the model's RoPE scaling, or "" when it can.
std::string rope_scaling_problem(const ModelConfig& c);

ModelConfig config_from_gguf(const GgufFile& file);
// Parses a Hugging Face config.json text; `source` names it in errors.
ModelConfig config_from_hf_json(const std::string& json_text, const std::string& source);

}  // namespace pagoda
