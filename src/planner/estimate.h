// Memory arithmetic for serving a model: weight bytes, KV-cache bytes per token (with and
// without grouped-query attention), and how many sequences of a given context fit in a given
// memory. Pure arithmetic over a ModelConfig; `pagoda estimate` prints it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/config.h"
#include "model/shapes.h"

namespace pagoda {

class ModelFile;

// One of model_shapes() (model/shapes.h); throws Error listing the known names when `name` is
// not one.
const ModelShape& find_estimate_preset(const std::string& name);

// Weight types a preset can be estimated at: the types `pagoda synth` writes, plus the GPU
// formats awq-4bit (4-bit, groups of 128 with an F16 scale and a 4-bit zero), fp8 and int8
// (one byte, an F32 scale per row); those three keep the token table and the output matrix in
// F16, as the published checkpoints do.
const std::vector<std::string>& estimate_weight_types();
// KV-cache element types: llama.cpp's cache types, and fp8 (one byte: vLLM's fp8 cache).
const std::vector<std::string>& estimate_kv_types();

struct WeightEstimate {
  uint64_t num_parameters = 0;
  uint64_t num_bytes = 0;
  std::string type;  // "q4_k_m", or the file's types ("F16", "Q4_K + Q6_K + F32")
  // The split the speed model needs: a step looks up a few rows of the token table but reads
  // every layer matrix and the output matrix whole, and multiplies each row by them.
  uint64_t embedding_parameters = 0;  // the token table
  uint64_t embedding_bytes = 0;
  uint64_t output_parameters = 0;  // the output matrix: the token table itself when tied
  uint64_t output_bytes = 0;
  uint64_t layer_parameters = 0;  // the matrices of every layer
  uint64_t layer_bytes = 0;
  // The last layer's attention output and feed-forward matrices: pagoda runs only the rows
  // whose logits are wanted through them (OutputRows).
  uint64_t tail_parameters = 0;
  bool tied = false;
  std::string compute_type;  // the type holding most layer-matrix bytes: "Q4_K", "AWQ-4bit"
  // Bytes a step reads: everything but an untied token table.
  uint64_t bytes_per_step() const { return num_bytes - (tied ? 0 : embedding_bytes); }
};
// The tensors a GGUF file of this shape holds (pagoda synth's list: llama / qwen2 biases /
// qwen3 and gemma3 norms), typed the way llama.cpp's quantizer types them: 1-D tensors F32;
// q4_0 / q4_1 / q5_0 / q5_1 / q4_k_m / q5_k_m put output.weight at Q6_K; q4_k_m / q5_k_m
// also put attn_v and ffn_down at Q6_K in the first and last eighth of the layers and every
// third layer between; rows that are no whole number of blocks fall back (Q6_K/Q5_K -> Q8_0,
// else Q5_0 when divisible by 32, else F16). Real llama.cpp files of a K mix can differ by a
// few percent (its rules have more special cases); the plain types are exact.
// Throws Error for a config whose matrices are no whole number of the type's blocks.
WeightEstimate estimate_weights(const ModelConfig& config, const std::string& weights_type);
// Exact: the sum of the file's tensor bytes.
WeightEstimate file_weights(const ModelFile& file);

DType parse_estimate_kv_type(const std::string& name);  // throws Error listing the known types (not fp8)
std::string kv_type_label(const std::string& name);  // "f16" -> "F16", "fp8" -> "FP8"
// 2 (K and V) x layers x KV heads x head_dim elements, at the type's block size; a hybrid
// model's recurrent layers hold none.
uint64_t kv_bytes_per_token(const ModelConfig& config, DType kv_type);
// The same with hidden_size in place of KV heads x head_dim: what the cache would cost without
// grouped-query attention (the formula many calculators use), over the attention layers.
uint64_t kv_bytes_per_token_without_gqa(const ModelConfig& config, DType kv_type);
// The same at a type name of estimate_kv_types() (fp8 included); throws for another name.
uint64_t kv_bytes_per_token(const ModelConfig& config, const std::string& kv_type);
uint64_t kv_bytes_per_token_without_gqa(const ModelConfig& config, const std::string& kv_type);

// What is neither weights nor KV: F32 activations of one engine step of kStepTokens tokens
// (residual, normed input, Q, K, V, attention output, FFN gate and up: the widest set live in
// a layer) plus F32 logits for kLogitRows sequences. Runtime code and allocator slack are not
// counted; pass a measured overhead where it matters.
inline constexpr uint64_t kStepTokens = 2048;  // the engine's default max_num_batched_tokens
inline constexpr uint64_t kLogitRows = 256;  // sequences sampled in one step (vLLM's max_num_seqs)
uint64_t default_overhead_bytes(const ModelConfig& config);

// A hybrid model's recurrent state per sequence, in the F32 the engine keeps it in: for each
// Gated DeltaNet layer its conv window (conv channels x (conv_kernel - 1)) and its delta-rule
// state (value heads x value dim x key dim). 0 for other models.
uint64_t state_bytes_per_sequence(const ModelConfig& config);

// floor((memory - weights - overhead) / (kv_per_token x context + state)); 0 when nothing fits.
uint64_t max_batch_that_fits(uint64_t memory_bytes, uint64_t weight_bytes, uint64_t overhead_bytes,
                             uint64_t kv_bytes_per_token, uint64_t context,
                             uint64_t state_bytes_per_sequence = 0);

struct EstimateOptions {
  std::string kv_type = "f16";
  uint64_t context = 0;  // 0: the model's trained context
  uint64_t batch = 1;
  std::optional<uint64_t> memory_bytes;
  std::optional<uint64_t> overhead_bytes;  // nullopt: default_overhead_bytes
};

struct Estimate {
  ModelConfig config;
  WeightEstimate weights;
  std::string kv_type;  // "F16"
  uint64_t context = 0;
  uint64_t batch = 0;
  uint64_t kv_bytes_per_token = 0;
  uint64_t kv_bytes_per_token_without_gqa = 0;
  uint64_t kv_bytes_per_sequence = 0;  // kv_bytes_per_token x context
  uint64_t kv_bytes_total = 0;         // x batch
  uint64_t state_bytes_per_sequence = 0;  // a hybrid model's recurrent state
  uint64_t state_bytes_total = 0;         // x batch
  uint64_t overhead_bytes = 0;
  uint64_t total_bytes = 0;  // weights + KV total + state total + overhead
  std::optional<uint64_t> memory_bytes;
  std::optional<bool> fits;           // set when memory_bytes is
  std::optional<uint64_t> max_batch;  // set when memory_bytes is
};
// Throws Error for a config without layers, a zero batch or context, or sizes that overflow.
Estimate estimate_memory(const ModelConfig& config, const WeightEstimate& weights,
                         const EstimateOptions& options);

}  // namespace pagoda
