// One sequence as the scheduler sees it: token ids and counters, no text, no tensors. The
// scheduler calls it a request; the engine makes one per sample or beam of a GenerationRequest,
// so its id is a SequenceId (the block tables' key), not the engine's RequestId.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "kv/block_hash.h"
#include "kv/kv_cache_manager.h"
#include "core/token.h"

namespace pagoda {

enum class SequenceStatus {
  kWaiting,          // queued, never run (or added by a fork of a request that was not running)
  kRunning,          // holds blocks; scheduled every step while the budget lasts
  kPreempted,        // queued again after its blocks were taken; output kept, KV recomputed
  kFinishedStopped,  // sampled one of its stop ids (the stop token is the last output token)
  kFinishedLength,   // reached max_tokens
  kFinishedAborted,  // abort()
  kFinishedPrompt,   // a prompt-only sequence (an embedding) whose prompt is computed
};

std::string_view to_string(SequenceStatus status);
inline bool is_finished(SequenceStatus s) { return s >= SequenceStatus::kFinishedStopped; }

// A prompt-only sequence (an embedding request) wants the final hidden states of its prompt, not
// a sample: of every position (mean pooling), the first or the last. It is scheduled under the
// same token budget as prompt chunks, samples nothing, finishes when its prompt is computed, and
// is never looked up in or entered into the prefix cache (see docs/SCHEDULER.md).
enum class PromptOnly : uint8_t { kNo, kAllRows, kFirstRow, kLastRow };

struct Sequence {
  SequenceId id = 0;
  std::vector<TokenId> prompt;
  std::vector<TokenId> output;    // sampled so far; kept across preemption
  int32_t max_tokens = 16;        // output tokens at most
  std::vector<TokenId> stop_ids;  // EOS etc.; text stop strings are the caller's business
  uint64_t cache_key = 0;  // mixed into block hashes: only equal keys share blocks (a LoRA id)
  int32_t adapter = 0;     // the LoRA adapter its tokens run with (0: none; model/lora.h)
  // The logits of every prompt position are wanted (prompt log-probabilities), not only the
  // last one's: the forward pass gives a row for each (prompt_logit_rows in forward_batch.h).
  bool prompt_logits = false;
  PromptOnly prompt_only = PromptOnly::kNo;

  // Set by the scheduler.
  int32_t num_computed_tokens = 0;  // tokens whose K/V are in the cache
  SequenceStatus status = SequenceStatus::kWaiting;
  int64_t arrival_order = -1;        // order of add_request / fork, for FCFS
  std::optional<SequenceId> parent;  // the sequence this one was forked from
  int32_t num_cached_tokens = 0;     // prefix-cache hit at its first admission
  int32_t num_preemptions = 0;
  int32_t num_lost_tokens = 0;  // computed tokens its last preemption dropped (until re-admitted)
  int32_t state_slot = -1;  // a hybrid model's recurrent state slot while running; -1: none

  // Set by the engine between steps (speculative decoding): how many proposed tokens to verify
  // after the request's next token, when that step decodes. The scheduler schedules as many as
  // the budget and max_tokens leave room for. 0: plain decoding.
  int32_t num_lookahead_tokens = 0;

  int32_t num_prompt_tokens() const { return static_cast<int32_t>(prompt.size()); }
  int32_t num_output_tokens() const { return static_cast<int32_t>(output.size()); }
  int32_t num_tokens() const { return num_prompt_tokens() + num_output_tokens(); }
  TokenSequence tokens() const { return {prompt, output}; }
  bool finished() const { return is_finished(status); }
  bool is_prompt_only() const { return prompt_only != PromptOnly::kNo; }
};

}  // namespace pagoda
