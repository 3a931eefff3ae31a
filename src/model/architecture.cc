#include "model/architecture.h"

#include <algorithm>

#include "core/error.h"
#include "model/model.h"

namespace pagoda {
namespace {

// Gemma3TextConfig's defaults: multimodal gemma-3 files nest a text_config that leaves out
// every value equal to them, so they must be known here.
void gemma3_defaults(ModelConfig& c) {
  c.vocab_size = 262208;
  c.hidden_size = 2304;
  c.intermediate_size = 9216;
  c.num_layers = 26;
  c.num_heads = 8;
  c.num_kv_heads = 4;
  c.head_dim = 256;
  c.context_length = 131072;
  c.rms_norm_eps = 1e-6f;
  c.rope_theta = 1000000.0f;
  c.sliding_window = 4096;
  c.tie_embeddings = true;
}

std::vector<Architecture> make_table() {
  std::vector<Architecture> t;
  Architecture llama;
  llama.name = "llama";
  llama.gguf_aliases = {"mistral"};
  llama.hf_model_types = {"llama", "mistral"};
  llama.gguf_rope_adjacent_pairs = true;
  llama.load = load_llama;
  llama.longrope = true;
  t.push_back(llama);

  Architecture qwen2;
  qwen2.name = "qwen2";
  qwen2.hf_model_types = {"qwen2"};
  qwen2.qkv_bias = true;
  qwen2.load = load_llama;
  qwen2.longrope = true;
  t.push_back(qwen2);

  Architecture qwen3;
  qwen3.name = "qwen3";
  qwen3.hf_model_types = {"qwen3"};
  qwen3.qk_norm = true;
  qwen3.load = load_llama;
  qwen3.longrope = true;
  t.push_back(qwen3);

  Architecture qwen3moe;
  qwen3moe.name = "qwen3moe";
  qwen3moe.hf_model_types = {"qwen3_moe"};
  qwen3moe.qk_norm = true;
  qwen3moe.load = load_llama;
  qwen3moe.longrope = true;
  t.push_back(qwen3moe);

  Architecture phi3;
  phi3.name = "phi3";
  phi3.hf_model_types = {"phi3"};
  phi3.fused_qkv = true;
  phi3.fused_gate_up = true;
  phi3.uses_sliding_window = false;
  phi3.load = load_llama;
  phi3.longrope = true;
  t.push_back(phi3);

  Architecture gemma3;
  gemma3.name = "gemma3";
  gemma3.hf_model_types = {"gemma3", "gemma3_text"};
  gemma3.hf_text_config = "text_config";
  gemma3.hf_defaults = gemma3_defaults;
  gemma3.qk_norm = true;
  gemma3.post_norms = true;
  gemma3.global_attention_every = 6;
  gemma3.local_rope_base = 10000.0f;
  gemma3.hf_layer_names = {{"post_attention_layernorm", "post_attention_norm"},
                           {"pre_feedforward_layernorm", "ffn_norm"},
                           {"post_feedforward_layernorm", "post_ffw_norm"}};
  // Gemma3ForConditionalGeneration, as transformers 4.50 and 4.52+ name it.
  gemma3.hf_text_prefixes = {{"language_model.model.", "model."},
                             {"language_model.lm_head.", "lm_head."},
                             {"model.language_model.", "model."}};
  gemma3.hf_ignored_prefixes = {"vision_tower.", "multi_modal_projector.", "model.vision_tower.",
                                "model.multi_modal_projector."};
  gemma3.hf_norm_offset = 1.0f;
  gemma3.fallback_chat_template = "gemma";  // Gemma GGUF files often ship without one
  gemma3.load = load_gemma3;
  t.push_back(gemma3);

  // Gemma 4 as llama.cpp's converter writes it (model/gemma4.cc); no Hugging Face checkpoint is
  // read (convert it with llama.cpp). Its layers' shapes come from per-layer metadata arrays.
  Architecture gemma4;
  gemma4.name = "gemma4";
  gemma4.qk_norm = true;
  gemma4.post_norms = true;
  gemma4.load = load_gemma4;
  t.push_back(gemma4);

  // Sliding-window layers first (0, 2, ...), as llama.cpp's swa pattern 2 places them, with
  // the model's own RoPE base (local_rope_base 0). No Hugging Face checkpoint is read: its
  // experts are MXFP4 blocks and scales in tensors of their own (convert them with llama.cpp).
  Architecture gpt_oss;
  gpt_oss.name = "gpt-oss";
  gpt_oss.qkv_bias = true;
  gpt_oss.global_attention_every = 2;
  gpt_oss.attention_sinks = true;
  gpt_oss.output_and_expert_biases = true;
  gpt_oss.ffn_norm_name = "post_attention_norm";
  gpt_oss.load = load_gpt_oss;
  t.push_back(gpt_oss);

  // Qwen3.5 as llama.cpp's converter writes it (model/qwen35.cc): Gated DeltaNet layers beside
  // full-attention ones whose Q projection carries an output gate; no Hugging Face checkpoint
  // is read (convert it with llama.cpp).
  Architecture qwen35;
  qwen35.name = "qwen35";
  qwen35.qk_norm = true;
  qwen35.load = load_qwen35;
  t.push_back(qwen35);
  // Its mixture of experts: routed experts and a shared expert with a sigmoid gate.
  Architecture qwen35moe = qwen35;
  qwen35moe.name = "qwen35moe";
  t.push_back(qwen35moe);

  Architecture bert;  // sentence-transformers' encoders (all-MiniLM, bge); embeddings only
  bert.name = "bert";
  bert.hf_model_types = {"bert"};
  bert.encoder = true;
  bert.hf_layer_prefix = "encoder.layer.";
  bert.hf_top_names = {{"embeddings.word_embeddings.weight", "token_embd.weight"},
                       {"embeddings.token_type_embeddings.weight", "token_types.weight"},
                       {"embeddings.position_embeddings.weight", "position_embd.weight"},
                       {"embeddings.LayerNorm.weight", "token_embd_norm.weight"},
                       {"embeddings.LayerNorm.bias", "token_embd_norm.bias"}};
  bert.hf_layer_names = {{"attention.self.query", "attn_q"},
                         {"attention.self.key", "attn_k"},
                         {"attention.self.value", "attn_v"},
                         {"attention.output.dense", "attn_output"},
                         {"attention.output.LayerNorm", "attn_output_norm"},
                         {"intermediate.dense", "ffn_up"},
                         {"output.dense", "ffn_down"},
                         {"output.LayerNorm", "layer_output_norm"}};
  bert.hf_text_prefixes = {{"bert.", ""}};  // BertForMaskedLM and the like
  // The pooler and the masked-LM head are not the embedding; position_ids is an index buffer.
  bert.hf_ignored_prefixes = {"pooler.", "cls.", "embeddings.position_ids", "bert.pooler.",
                              "bert.embeddings.position_ids"};
  bert.load = load_bert;
  t.push_back(bert);
  return t;
}

bool contains(const std::vector<std::string_view>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

const std::vector<Architecture>& architectures() {
  static const std::vector<Architecture> table = make_table();
  return table;
}

const Architecture* find_architecture(std::string_view gguf_name) {
  for (const Architecture& a : architectures()) {
    if (a.name == gguf_name || contains(a.gguf_aliases, gguf_name)) return &a;
  }
  return nullptr;
}

const Architecture* find_hf_architecture(std::string_view model_type) {
  for (const Architecture& a : architectures()) {
    if (contains(a.hf_model_types, model_type)) return &a;
  }
  return nullptr;
}

const Architecture& architecture_of(const ModelConfig& config, const std::string& source) {
  const Architecture* a = find_architecture(config.architecture);
  if (a == nullptr) {
    fail(source, ": architecture '", config.architecture, "' is not supported (supported: ",
         supported_architectures(), ")");
  }
  return *a;
}

std::string supported_architectures() {
  std::string out;
  for (const Architecture& a : architectures()) {
    out += (out.empty() ? "" : ", ") + std::string(a.name);
    for (std::string_view alias : a.gguf_aliases) out += ", " + std::string(alias);
  }
  return out;
}

}  // namespace pagoda
