// The engine's side of beam search (the top of engine.h): a beam's row gives its candidates and
// a placeholder token, choose_beams() runs each group's round over them, and after the commit
// finish_beam_round() frees the dropped beams, forks the new ones and answers finished searches.
#include <utility>

#include "core/error.h"
#include "engine/engine.h"

namespace pagoda {

void Engine::hold_beam_place(const ScheduledSequence& s, std::span<const float> logits,
                             RequestId id, const BeamGroup& group, StepOutput& out) {
  std::vector<std::pair<TokenId, double>> top = top_logprobs(logits, 2 * group.search.width());
  out.beam_index[s.seq_id] = out.new_tokens.size();
  out.new_tokens.push_back({top.empty() ? 0 : top[0].first});
  out.beam_present[id].push_back({s.seq_id, std::move(top)});
}

void Engine::choose_beams(StepOutput& out) {
  for (const auto& [id, candidates] : out.beam_present) {
    BeamGroup& group = beam_groups_.at(id);
    const BeamSearch::Round round = group.search.step(
        candidates, [&](int64_t beam) -> const std::vector<TokenId>& {
          return scheduler_.find(beam)->output;
        });
    for (const auto& [beam, token] : round.continues) {
      if (token) {
        out.new_tokens[out.beam_index.at(beam)] = {*token};
      } else {
        out.beam_drop.push_back(beam);  // its placeholder is committed, then it is freed
      }
    }
    out.beam_forks.emplace_back(id, round.forks);
  }
}

void Engine::finish_beam_round(StepOutput& out) {
  for (SequenceId beam : out.beam_drop) {
    auto it = sequences_.find(beam);
    PAGODA_CHECK(it != sequences_.end());
    --beam_groups_.at(it->second.request_id).num_beams;
    scheduler_.abort(beam);  // frees its blocks (nothing when commit finished it)
    sequences_.erase(it);
  }
  for (const auto& [id, list] : out.beam_forks) {
    BeamGroup& group = beam_groups_.at(id);
    for (const auto& [parent, token] : list) {
      const SequenceId child = next_sequence_id_++;
      scheduler_.fork(parent, child, token);
      sequences_.emplace(child, SequenceState{id, 0, Sampler(group.sampling, {}, vocab_size_)});
      ++group.num_beams;
      group.search.add_beam(parent, child, token);
    }
    if (group.search.done()) close_beam_group(id, out.events, /*aborted=*/false);
  }
}

void Engine::close_beam_group(RequestId id, std::vector<OutputEvent>& events, bool aborted) {
  const BeamGroup& group = beam_groups_.at(id);
  std::vector<BeamHypothesis> best;
  if (!aborted) {
    best = group.search.best(group.num_samples, [&](int64_t beam) -> const std::vector<TokenId>& {
      return scheduler_.find(beam)->output;
    });
  }
  for (int32_t i = 0; i < group.num_samples; ++i) {
    OutputEvent e;
    e.request_id = id;
    e.index = i;
    if (aborted) {
      e.finish_reason = FinishReason::kAbort;
    } else if (static_cast<size_t>(i) < best.size()) {
      const BeamHypothesis& h = best[static_cast<size_t>(i)];
      e.token_ids = h.output;
      e.finish_reason = h.stopped ? FinishReason::kStop : FinishReason::kLength;
      e.stop_token = h.stop_token;
      e.cumulative_logprob = h.logprob;
      num_generated_tokens_ += static_cast<int64_t>(e.token_ids.size());
    } else {
      e.finish_reason = FinishReason::kLength;
    }
    e.request_finished = i + 1 == group.num_samples;
    events.push_back(std::move(e));
  }
  std::vector<SequenceId> beams;
  for (const auto& [seq_id, seq] : sequences_) {
    if (seq.request_id == id) beams.push_back(seq_id);
  }
  for (SequenceId beam : beams) {
    scheduler_.abort(beam);
    sequences_.erase(beam);
  }
  beam_groups_.erase(id);
  ++num_finished_requests_;
}

}  // namespace pagoda
