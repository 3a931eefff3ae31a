// One prompt at a time: prefill the prompt as a batch (in chunks), then decode token by token
// into a contiguous KV cache (block table 0, 1, 2, ...). Every command, `pagoda run` included,
// goes through the paged, batched Engine; only the tests use this. It stays as their second,
// independent path: the model conformance tests compare its greedy ids and prompt logits with
// llama.cpp's, and the engine tests check that the Engine gives the same ids.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "backend/backend.h"
#include "engine/sampler.h"
#include "model/kv_storage.h"
#include "model/model.h"

namespace pagoda {

struct GenerateOptions {
  int32_t max_new_tokens = 128;
  int32_t prefill_chunk = 512;  // prompt tokens per forward step
  bool stop_at_eog = true;      // stop at an end-of-generation token (not emitted)
  SamplingParams sampling;
};

struct GenerateStats {
  int32_t num_prompt_tokens = 0;
  double prefill_seconds = 0;
  int32_t num_generated = 0;
  int32_t num_decode_steps = 0;  // forward passes of one token each
  double decode_seconds = 0;     // from the first sampled token to the last
};

class Generator {
 public:
  // max_context: tokens the KV cache holds (prompt + output).
  Generator(Model& model, Backend& backend, int32_t max_context);

  // Feeds the prompt, then samples up to max_new_tokens, calling on_token for each; generation
  // stops early when on_token returns false, at an end-of-generation token in `eog`, or when the
  // context is full. Throws Error when the prompt does not fit the context.
  GenerateStats generate(const std::vector<TokenId>& prompt, const GenerateOptions& options,
                         const std::vector<TokenId>& eog,
                         const std::function<bool(TokenId)>& on_token);

  // Logits of every prompt position (for perplexity and tests): [prompt.size(), vocab].
  std::vector<float> prompt_logits(const std::vector<TokenId>& prompt);

  int32_t max_context() const { return max_context_; }
  const KvStorage& kv() const { return kv_; }

 private:
  // Runs tokens at positions [start, start + ids.size()) of the one sequence; logits for the
  // rows in `logit_rows` (relative to this chunk).
  void step(const TokenId* ids, int32_t count, int32_t start, std::vector<int32_t> logit_rows,
            std::vector<float>& logits);

  Model& model_;
  Backend& backend_;
  int32_t max_context_;
  KvStorage kv_;
  std::vector<int32_t> block_table_;  // [num_blocks]: 0, 1, 2, ... (contiguous)
};

}  // namespace pagoda
