// A PEFT LoRA folder (adapter_config.json + adapter_model.safetensors, what Hugging Face's peft
// saves) written as llama.cpp's GGUF adapter form (model/lora.h) for one base model: tensor
// names mapped to GGUF's ("base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight" ->
// "blk.3.attn_q.weight.lora_a"), values as F32, adapter.lora.alpha = lora_alpha, and for a
// family whose GGUF files pair RoPE dimensions adjacently (Llama) the q/k lora_B rows reordered
// as the base's Q/K rows were (A is not: it reads the input, which is not permuted).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "model/lora.h"
#include "model/model_file.h"

namespace pagoda {

struct PeftSummary {
  int64_t num_pairs = 0;
  int64_t rank = 0;
  float alpha = 0;
  int64_t num_permuted = 0;  // q/k lora_B tensors reordered
};

// True when `path` is a folder holding adapter_config.json.
bool is_peft_folder(const std::string& path);

// Writes `folder`'s adapter for `base` (a GGUF file) to `out_path`. Throws Error naming the
// folder and the first thing it cannot carry over: rsLoRA, DoRA, fan_in_fan_out, per-module
// ranks or alphas, modules_to_save, an adapter on the embeddings, a tensor the base lacks.
PeftSummary convert_peft_lora(const std::string& folder, const ModelFile& base,
                              const std::string& out_path);

// `path` as an adapter of `base`: a GGUF adapter file, or a PEFT folder converted first (into a
// temporary file, removed once mapped).
std::unique_ptr<LoraAdapter> open_lora_adapter(const std::string& path, const ModelFile& base,
                                               float user_scale);

}  // namespace pagoda
