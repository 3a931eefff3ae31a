// Embedding requests in the engine: each is one prompt-only sequence (sched/sequence.h) that the
// scheduler runs beside generation under the same token budget, chunked like any prompt. The
// forward pass gives its rows' final-norm hidden states after the logits (ForwardBatch::
// hidden_row); they are summed here as its chunks complete, and the commit that finishes its
// prompt frees its blocks and sends the pooled vector in one event.
#include <utility>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/forward_batch.h"

namespace pagoda {

void Engine::check_embedding_request(const GenerationRequest& r) const {
  if (r.n != 1) fail("an embedding request has one sample, got n = ", r.n);
  if (r.beam.width > 0) fail("an embedding request takes no beam search");
  if (r.grammar) fail("an embedding request takes no grammar");
  if (r.thinking.active()) fail("an embedding request takes no thinking budget");
  if (r.prompt_logprobs) fail("an embedding request gives no prompt log-probabilities");
  if (r.num_speculative_tokens > 0) fail("an embedding request takes no speculative decoding");
  const auto num_tokens = static_cast<int64_t>(r.prompt.size());
  if (config_.max_model_len > 0 && num_tokens > config_.max_model_len) {
    fail("the input has ", num_tokens, " tokens, more than the ", config_.max_model_len,
         " tokens of the context");
  }
  const int64_t capacity = int64_t{kv_->num_blocks()} * config_.block_size;
  if (num_tokens > capacity) {
    fail("the input has ", num_tokens, " tokens, more than the ", capacity,
         " tokens the KV cache holds");
  }
}

void Engine::add_embedding(RequestId id, GenerationRequest r) {
  const SequenceId seq_id = next_sequence_id_++;
  Sequence q;
  q.id = seq_id;
  q.prompt = std::move(r.prompt);
  q.max_tokens = 1;
  q.prompt_only = r.embedding;
  q.adapter = r.adapter;  // a LoRA adapter's hidden states (checked by check_request)
  scheduler_.add_sequence(std::move(q));
  EmbeddingState state;
  state.request_id = id;
  embeddings_.emplace(seq_id, std::move(state));
  embedding_requests_.emplace(id, seq_id);
}

bool Engine::abort_embedding(RequestId id, std::vector<OutputEvent>& events) {
  auto it = embedding_requests_.find(id);
  if (it == embedding_requests_.end()) return false;
  scheduler_.abort(it->second);
  embeddings_.erase(it->second);
  embedding_requests_.erase(it);
  OutputEvent e;
  e.request_id = id;
  e.finish_reason = FinishReason::kAbort;
  e.request_finished = true;
  events.push_back(std::move(e));
  return true;
}

size_t Engine::pool_hidden_rows(const StepPlan& plan, size_t offset) {
  const auto dim = static_cast<size_t>(model_.config().hidden_size);
  size_t taken = 0;
  for (const ScheduledSequence& s : plan.sequences) {
    const Sequence* r = scheduler_.find(s.seq_id);
    if (r == nullptr || !r->is_prompt_only()) continue;
    const PromptRows rows = hidden_state_rows(s, *r);
    if (rows.count == 0) continue;
    EmbeddingState& e = embeddings_.at(s.seq_id);
    // A prompt computed again from its start (after a preemption) is pooled again from zero.
    if (rows.first_position == 0 || r->prompt_only != PromptOnly::kAllRows) {
      e.sum.assign(dim, 0.0);
      e.num_rows = 0;
    }
    PAGODA_CHECK(offset + taken + rows.count * dim <= logits_.size());
    const float* row = logits_.data() + offset + taken;
    for (int32_t i = 0; i < rows.count; ++i, row += dim) {
      for (size_t d = 0; d < dim; ++d) e.sum[d] += row[d];
    }
    e.num_rows += rows.count;
    taken += static_cast<size_t>(rows.count) * dim;
  }
  return taken;
}

void Engine::finish_embedding(const Sequence& r, std::vector<OutputEvent>& events) {
  PAGODA_CHECK(r.status == SequenceStatus::kFinishedPrompt);
  auto it = embeddings_.find(r.id);
  PAGODA_CHECK(it != embeddings_.end() && it->second.num_rows > 0);
  const EmbeddingState& state = it->second;
  OutputEvent e;
  e.request_id = state.request_id;
  e.finish_reason = FinishReason::kStop;
  e.request_finished = true;
  e.embedding.resize(state.sum.size());
  const auto n = static_cast<double>(state.num_rows);
  for (size_t d = 0; d < state.sum.size(); ++d) e.embedding[d] = static_cast<float>(state.sum[d] / n);
  embedding_requests_.erase(state.request_id);
  embeddings_.erase(it);
  ++num_finished_requests_;
  events.push_back(std::move(e));
}

int64_t Engine::check_embedding_invariants() const {
  PAGODA_CHECK(embeddings_.size() == embedding_requests_.size());
  for (const auto& [id, seq_id] : embedding_requests_) {
    PAGODA_CHECK(!sample_groups_.count(id) && !beam_groups_.count(id));
    auto it = embeddings_.find(seq_id);
    PAGODA_CHECK(it != embeddings_.end() && it->second.request_id == id);
    PAGODA_CHECK(!sequences_.count(seq_id));
    const Sequence* r = scheduler_.find(seq_id);
    PAGODA_CHECK(r != nullptr && r->is_prompt_only());
  }
  return static_cast<int64_t>(embeddings_.size());
}

}  // namespace pagoda
