#include "engine/speculator.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/memory.h"
#include "model/kv_copy.h"

namespace pagoda {
namespace {

// One sequence's rows of a draft batch.
struct DraftSeq {
  std::span<const BlockId> table;
  std::vector<TokenId> tokens;
  int32_t start = 0;  // position of tokens[0]
  int32_t state_slot = -1;  // a hybrid draft's
};

ForwardBatch draft_batch(const std::vector<DraftSeq>& seqs, int32_t block_size, bool want_logits) {
  ForwardBatch b;
  b.block_size = block_size;
  int32_t max_blocks = 0;
  for (const DraftSeq& s : seqs)
    max_blocks = std::max(max_blocks, static_cast<int32_t>(s.table.size()));
  b.max_blocks_per_seq = max_blocks;
  b.block_table.assign(seqs.size() * static_cast<size_t>(max_blocks), kNoBlock);
  b.query_start.push_back(0);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const DraftSeq& s = seqs[i];
    std::copy(s.table.begin(), s.table.end(), b.block_table.begin() + int64_t(i) * max_blocks);
    for (size_t t = 0; t < s.tokens.size(); ++t) {
      const int32_t pos = s.start + static_cast<int32_t>(t);
      b.token_ids.push_back(s.tokens[t]);
      b.positions.push_back(pos);
      b.slot_mapping.push_back(
          int64_t{s.table[static_cast<size_t>(pos / block_size)]} * block_size + pos % block_size);
    }
    b.query_start.push_back(b.num_tokens());
    if (want_logits) b.logit_rows.push_back(b.num_tokens() - 1);
    if (s.state_slot >= 0) b.state_slots.push_back(s.state_slot);
  }
  return b;
}

}  // namespace

Speculator::Speculator(const SpeculativeConfig& config, Backend& backend, int32_t num_blocks,
                       int32_t block_size, KvType kv_type)
    : config_(config), backend_(backend), block_size_(block_size) {
  if (config_.num_tokens < 0 || config_.num_tokens > kMaxSpeculativeTokens) {
    fail("speculative decoding: the number of proposed tokens must be in [0, ",
         kMaxSpeculativeTokens, "], got ", config_.num_tokens);
  }
  if (uses_draft()) {
    if (config_.draft_model == nullptr)
      fail("speculative decoding: the method needs a draft model");
    config_.draft_model->prepare(backend_);
    const ModelConfig& draft = config_.draft_model->config();
    draft_kv_ = std::make_unique<KvStorage>(draft, num_blocks, block_size, kv_type, &backend_);
    if (draft.hybrid()) {
      // A slot for each sequence that may draft at once (more are never uncrowded together),
      // and snapshots for a step's proposals (allocated on first use, counted here; they bound
      // the step's proposals as the target's do).
      const int32_t num_slots = std::max(1, config_.max_num_running);
      const int32_t num_snapshots = StateStorage::slots_within(
          uint64_t{512} << 20, uint64_t(num_slots) * kMaxSpeculativeTokens, draft);
      check_memory_available(
          StateStorage::slot_bytes(draft) * uint64_t(num_slots + num_snapshots),
          str_cat("the draft model's recurrent state (", num_slots, " slots, ", num_snapshots,
                  " snapshots)"),
          "let fewer sequences speculate at once (--spec-max-running)");
      auto state = std::make_unique<StateStorage>(draft, num_slots, &backend_);
      state->set_max_snapshots(num_snapshots);
      draft_kv_->set_state(std::move(state));
      config_.bound_proposals_per_step(num_snapshots);
      for (int32_t slot = num_slots - 1; slot >= 0; --slot) free_draft_slots_.push_back(slot);
    }
  }
  catch_up_budget_ = std::max(catch_up_budget_, block_size);
}

void Speculator::add(SequenceId seq, int32_t num_tokens, const SamplingParams& params) {
  const int32_t k = num_tokens < 0 ? config_.num_tokens : num_tokens;
  if (k > kMaxSpeculativeTokens) {
    fail("speculative decoding: at most ", kMaxSpeculativeTokens, " proposed tokens, got ", k);
  }
  State st;
  st.max_k = k;
  st.k = k;
  st.params = params;
  st.rng.seed(params.seed ^ 0x9e3779b97f4a7c15ULL);
  states_.emplace(seq, std::move(st));
}

void Speculator::remove(SequenceId seq) {
  auto it = states_.find(seq);
  if (it == states_.end()) return;
  release_draft_slot(it->second);
  states_.erase(it);
}

void Speculator::preempted(SequenceId seq) {
  auto it = states_.find(seq);
  if (it == states_.end()) return;
  it->second.draft_num_computed = 0;
  release_draft_slot(it->second);
}

bool Speculator::take_draft_slot(State& st) {
  if (draft_state() == nullptr || st.draft_slot >= 0) return true;
  if (free_draft_slots_.empty()) return false;
  st.draft_slot = free_draft_slots_.back();
  free_draft_slots_.pop_back();
  st.draft_num_computed = 0;  // the slot holds another's state: start over
  return true;
}

void Speculator::release_draft_slot(State& st) {
  if (st.draft_slot < 0) return;
  free_draft_slots_.push_back(st.draft_slot);
  std::sort(free_draft_slots_.begin(), free_draft_slots_.end(), std::greater<>());
  st.draft_slot = -1;
}

const std::vector<ProposalDistribution>& Speculator::distributions(SequenceId seq) const {
  static const std::vector<ProposalDistribution> none;
  auto it = states_.find(seq);
  return it == states_.end() ? none : it->second.q;
}

void Speculator::plan_lookahead(Scheduler& scheduler) {
  const bool crowded = scheduler.num_running() > config_.max_num_running;
  // What is left of the step's proposal bound (a hybrid model's state snapshots).
  int32_t room = config_.max_proposals_per_step < 0 ? std::numeric_limits<int32_t>::max()
                                                     : config_.max_proposals_per_step;
  auto grant = [&](SequenceId id, int32_t lookahead) {
    stats_.num_trimmed += std::max(0, lookahead - room);
    lookahead = std::min(lookahead, room);
    room -= lookahead;
    scheduler.set_num_lookahead_tokens(id, lookahead);
  };
  std::vector<SequenceId> want_draft;
  for (auto& [id, st] : states_) {
    st.ngram.clear();
    st.q.clear();
    const Sequence* r = scheduler.find(id);
    int32_t lookahead = 0;
    // Only a sequence whose next step decodes proposes: its prompt is all computed.
    const bool decoding = r != nullptr && r->status == SequenceStatus::kRunning &&
                          r->num_computed_tokens == r->num_tokens() - 1;
    if (st.max_k > 0 && decoding && !crowded) {
      if (room == 0) {
        stats_.num_trimmed += st.k;  // the bound is spent: not even looked for
      } else {
        if (config_.method != SpecMethod::kDraft) {
          st.ngram = propose_ngram(r->tokens(), st.k, config_.ngram);
          lookahead = static_cast<int32_t>(st.ngram.size());
        }
        if (lookahead == 0 && uses_draft() && take_draft_slot(st)) want_draft.push_back(id);
      }
    }
    grant(id, lookahead);
  }
  if (want_draft.empty()) return;
  // A draft a few tokens behind catches up in its first proposal forward; one further behind
  // (a new prompt, an n-gram stretch, a preemption) first runs over what it missed.
  std::vector<SequenceId> far_behind;
  for (SequenceId id : want_draft) {
    const int32_t lag = scheduler.find(id)->num_computed_tokens - states_.at(id).draft_num_computed;
    if (lag <= kInlineCatchUp) {
      grant(id, states_.at(id).k);
    } else {
      far_behind.push_back(id);
    }
  }
  for (SequenceId id : catch_up(scheduler, far_behind)) grant(id, states_.at(id).k);
}

std::vector<SequenceId> Speculator::catch_up(const Scheduler& scheduler,
                                             const std::vector<SequenceId>& ids) {
  std::vector<SequenceId> ready;
  std::vector<DraftSeq> seqs;
  std::vector<std::pair<SequenceId, int32_t>> advanced;
  int32_t budget = catch_up_budget_;
  for (SequenceId id : ids) {
    State& st = states_.at(id);
    const Sequence* r = scheduler.find(id);
    const int32_t behind = r->num_computed_tokens - st.draft_num_computed;
    if (behind <= 0) {
      ready.push_back(id);
      continue;
    }
    const int32_t n = std::min(behind, budget);
    if (n <= 0) continue;
    budget -= n;
    DraftSeq s;
    s.table = scheduler.kv().block_table(id);
    s.start = st.draft_num_computed;
    s.state_slot = st.draft_slot;
    const TokenSequence tokens = r->tokens();
    for (int32_t p = s.start; p < s.start + n; ++p) s.tokens.push_back(tokens[p]);
    seqs.push_back(std::move(s));
    advanced.emplace_back(id, n);
    if (n == behind) ready.push_back(id);
  }
  if (!seqs.empty()) {
    const ForwardBatch batch = draft_batch(seqs, block_size_, /*want_logits=*/false);
    config_.draft_model->forward(backend_, batch, *draft_kv_, draft_logits_);
    stats_.num_draft_tokens += batch.num_tokens();
    for (const auto& [id, n] : advanced) states_.at(id).draft_num_computed += n;
  }
  return ready;
}

TokenId Speculator::draft_token(State& st, std::span<const float> logits, bool keep_q) {
  if (st.params.temperature == 0.0f) {
    size_t best = 0;
    for (size_t i = 1; i < logits.size(); ++i) {
      if (logits[i] > logits[best]) best = i;
    }
    return static_cast<TokenId>(best);
  }
  std::vector<float> clean(logits.begin(), logits.end());
  for (float& x : clean) {
    if (std::isnan(x)) x = -std::numeric_limits<float>::infinity();
  }
  const CandidateSet c = sampling_candidates(clean, st.params, scratch_);
  const double target = static_cast<double>(st.rng() >> 11) * 0x1.0p-53 * c.total_score;
  double sum = 0.0;
  TokenId token = c.tokens.back().id;
  for (const ScoredToken& t : c.tokens) {
    sum += t.score;
    if (target < sum) {
      token = t.id;
      break;
    }
  }
  if (keep_q) {
    ProposalDistribution q;
    q.probs.reserve(c.tokens.size());
    for (const ScoredToken& t : c.tokens) {
      q.probs.emplace_back(t.id, static_cast<float>(t.score / c.total_score));
    }
    std::sort(q.probs.begin(), q.probs.end());
    st.q.push_back(std::move(q));
  }
  return token;
}

void Speculator::propose(StepPlan& plan, const Scheduler& scheduler) {
  std::vector<size_t> drafted;  // plan indices the draft proposes for
  int32_t max_proposed = 0;
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    ScheduledSequence& s = plan.sequences[i];
    if (s.num_proposed == 0) continue;
    State& st = states_.at(s.seq_id);
    if (!st.ngram.empty()) {
      s.proposed.assign(st.ngram.begin(), st.ngram.begin() + s.num_proposed);
    } else {
      PAGODA_CHECK(uses_draft() && st.draft_num_computed <= s.start_position);
      drafted.push_back(i);
      max_proposed = std::max(max_proposed, s.num_proposed);
    }
  }
  // A hybrid draft keeps its state after every proposal forward but a sequence's last, in
  // snapshots: observe() rolls back to the one at the accepted proposals.
  StateStorage* draft_state = this->draft_state();
  if (draft_state != nullptr) {
    int32_t num_snapshots = 0;
    for (size_t i : drafted) {
      states_.at(plan.sequences[i].seq_id).snapshot_base = num_snapshots;
      num_snapshots += plan.sequences[i].num_proposed - 1;
    }
    draft_state->reserve_snapshots(num_snapshots);
  }
  // One draft forward per proposal position, over every sequence still proposing: the first
  // takes the last known token, each next one the token the draft just proposed.
  for (int32_t j = 0; j < max_proposed; ++j) {
    std::vector<DraftSeq> seqs;
    std::vector<size_t> rows;
    for (size_t i : drafted) {
      const ScheduledSequence& s = plan.sequences[i];
      if (s.num_proposed <= j) continue;
      DraftSeq d;
      d.table = s.block_table;
      d.state_slot = states_.at(s.seq_id).draft_slot;
      if (j == 0) {
        // What the draft has not seen yet, up to the last known token.
        d.start = states_.at(s.seq_id).draft_num_computed;
        const TokenSequence tokens = scheduler.find(s.seq_id)->tokens();
        for (int32_t p = d.start; p <= s.start_position; ++p) d.tokens.push_back(tokens[p]);
      } else {
        d.start = s.start_position + j;
        d.tokens.push_back(s.proposed[static_cast<size_t>(j - 1)]);
      }
      seqs.push_back(std::move(d));
      rows.push_back(i);
    }
    const ForwardBatch batch = draft_batch(seqs, block_size_, /*want_logits=*/true);
    config_.draft_model->forward(backend_, batch, *draft_kv_, draft_logits_);
    stats_.num_draft_tokens += batch.num_tokens();
    const auto vocab = static_cast<size_t>(config_.draft_model->config().vocab_size);
    for (size_t r = 0; r < rows.size(); ++r) {
      ScheduledSequence& s = plan.sequences[rows[r]];
      State& st = states_.at(s.seq_id);
      const std::span<const float> logits(draft_logits_.data() + r * vocab, vocab);
      s.proposed.push_back(draft_token(st, logits, st.params.temperature > 0.0f));
      if (draft_state != nullptr && j + 1 < s.num_proposed) {
        draft_state->save_snapshot(st.draft_slot, st.snapshot_base + j);
      }
    }
  }
}

void Speculator::copy_blocks(std::span<const BlockCopy> copies) {
  if (draft_kv_ && !copies.empty()) {
    copy_kv_blocks(backend_, *draft_kv_, config_.draft_model->config(), copies);
  }
}

void Speculator::observe(const ScheduledSequence& s, int32_t num_accepted,
                         int32_t num_computed_tokens) {
  auto it = states_.find(s.seq_id);
  if (it == states_.end()) return;
  State& st = it->second;
  const bool drafted = s.num_proposed > 0 && st.ngram.empty();
  if (s.num_proposed > 0) {
    ++stats_.num_verify_steps;
    stats_.num_proposed += s.num_proposed;
    stats_.num_accepted += num_accepted;
    for (int32_t j = 0; j < s.num_proposed; ++j) ++stats_.proposed_at[static_cast<size_t>(j)];
    for (int32_t j = 0; j < num_accepted; ++j) ++stats_.accepted_at[static_cast<size_t>(j)];
    if (config_.adaptive) {
      if (num_accepted == s.num_proposed) {
        st.k = std::min(st.k + 1, st.max_k);
      } else if (2 * num_accepted < s.num_proposed) {
        st.k = std::max(1, st.k / 2);
      }
    }
  }
  if (drafted) {
    // The draft wrote positions [start, start + num_proposed): the last known token and all
    // but its last proposal. Those past the accepted ones are stale.
    st.draft_num_computed = s.start_position + s.num_proposed;
    // A hybrid draft's state went as far: back to the one after the accepted proposals.
    if (draft_state() != nullptr && num_computed_tokens >= 0 && num_accepted + 1 < s.num_proposed) {
      draft_state()->restore_snapshot(st.snapshot_base + num_accepted, st.draft_slot);
    }
  }
  if (num_computed_tokens >= 0) {
    st.draft_num_computed = std::min(st.draft_num_computed, num_computed_tokens);
  }
}

void Speculator::check_invariants(const Scheduler& scheduler) const {
  if (draft_state() != nullptr) {
    std::vector<int> held(static_cast<size_t>(draft_state()->num_slots()), 0);
    for (int32_t slot : free_draft_slots_) ++held.at(static_cast<size_t>(slot));
    for (const auto& [id, st] : states_) {
      if (st.draft_slot >= 0) ++held.at(static_cast<size_t>(st.draft_slot));
    }
    for (int h : held) PAGODA_CHECK(h == 1);
  }
  for (const auto& [id, st] : states_) {
    if (st.max_k > 0) PAGODA_CHECK(st.k >= 1 && st.k <= st.max_k);
    const Sequence* r = scheduler.find(id);
    if (r != nullptr) PAGODA_CHECK(st.draft_num_computed <= r->num_computed_tokens);
  }
}

}  // namespace pagoda
