// The model families pagoda runs, one table entry each: what a family is called in GGUF files
// and in Hugging Face config.json, its defaults, which optional tensors its layers carry, its
// RoPE layout in GGUF, the chat template to fall back on, and the loader that builds its forward
// pass. Everything that differs by family outside the family's own file reads it from here.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/config.h"

namespace pagoda {

class Model;
class ModelFile;
class Communicator;

struct Architecture {
  std::string_view name;                         // general.architecture, and ModelConfig's
  std::vector<std::string_view> gguf_aliases;    // other general.architecture values it runs
  std::vector<std::string_view> hf_model_types;  // config.json model_type values
  // A multimodal wrapper's key holding the text model's config (Gemma 3: text_config), and the
  // values a config.json may leave out because they equal the family's defaults.
  const char* hf_text_config = nullptr;
  void (*hf_defaults)(ModelConfig&) = nullptr;
  // Optional tensors of every layer: Q/K/V biases (attn_{q,k,v}.bias), per-head Q/K RMSNorm
  // (attn_{q,k}_norm), and norms after attention and after the feed-forward block
  // (post_attention_norm, post_ffw_norm).
  bool qkv_bias = false;
  bool qk_norm = false;
  bool post_norms = false;
  // Fused tensors as the family's GGUF files store them: attn_qkv (Q, K, V rows in one matrix)
  // and ffn_up holding the gate's rows before the up projection's (no ffn_gate). The loader
  // takes separate Q/K/V too where a file has them.
  bool fused_qkv = false;
  bool fused_gate_up = false;
  // Whether attention.sliding_window is honoured; llama.cpp ignores Phi-3's (its files state a
  // window that the converters do not place on the right layers), and pagoda computes as it does.
  bool uses_sliding_window = true;
  // GGUF converters permute this family's Q/K rows so that rotated pairs are adjacent; other
  // families, and every Hugging Face checkpoint, rotate the two halves of each head.
  bool gguf_rope_adjacent_pairs = false;
  // Its forward applies LongRoPE's per-pair factors (from GGUF tensors or a config.json).
  bool longrope = false;
  // Interleaved attention: every Nth layer (N-1, 2N-1, ...) attends globally with the model's
  // RoPE base, the others within attention.sliding_window with `local_rope_base`. 0: every
  // layer alike. Fixed by the family (llama.cpp reads neither from GGUF), so a config.json that
  // says otherwise is refused.
  uint32_t global_attention_every = 0;
  float local_rope_base = 0;
  // gpt-oss's tensors: attn_sinks (a logit per head), biases on the attention output, the
  // router and every expert, and the feed-forward block's norm named post_attention_norm.
  bool attention_sinks = false;
  bool output_and_expert_biases = false;
  std::string_view ffn_norm_name = "ffn_norm";
  // Hugging Face tensor names as this family spells them: layer-name pairs (HF suffix, GGUF
  // suffix) looked up before the common ones, the prefixes a multimodal wrapper puts before the
  // text model's names (each with what it stands for), and the prefixes of tensors the text
  // model does not use (a vision tower).
  std::vector<std::pair<std::string_view, std::string_view>> hf_layer_names;
  std::vector<std::pair<std::string_view, std::string_view>> hf_text_prefixes;
  std::vector<std::string_view> hf_ignored_prefixes;
  // Norm weights a Hugging Face checkpoint stores as w where the model scales by offset + w
  // (Gemma: 1); GGUF files store offset + w, so the loader and convert add it to every
  // "*norm.weight" tensor of a checkpoint.
  float hf_norm_offset = 0;
  // An encoder (BERT): bidirectional attention, embeddings only, no generation.
  bool encoder = false;
  // The prefix of a Hugging Face layer's tensors ("model.layers.3.") and whole-name spellings
  // of the tensors outside the layers, looked up before the common ones.
  std::string_view hf_layer_prefix = "model.layers.";
  std::vector<std::pair<std::string_view, std::string_view>> hf_top_names;
  std::string_view fallback_chat_template;  // a builtin template's name; empty: none
  std::unique_ptr<Model> (*load)(const ModelFile&, Communicator*) = nullptr;
};

// Every family, in the order `supported_architectures` lists them.
const std::vector<Architecture>& architectures();

// The family of a GGUF general.architecture value (or a ModelConfig's), or nullptr.
const Architecture* find_architecture(std::string_view gguf_name);
// The family of a config.json model_type, or nullptr.
const Architecture* find_hf_architecture(std::string_view model_type);
// The family of `config`; throws Error naming `source` and the supported families.
const Architecture& architecture_of(const ModelConfig& config, const std::string& source);

// "llama, mistral, qwen2, qwen3, qwen3moe, phi3, gemma3, gemma4, gpt-oss, qwen35, qwen35moe,
// bert": every GGUF name
// the table runs.
std::string supported_architectures();

}  // namespace pagoda
