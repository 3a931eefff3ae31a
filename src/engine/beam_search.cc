#include "engine/beam_search.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace pagoda {

BeamSearch::BeamSearch(BeamParams params, int32_t num_prompt_tokens, int32_t max_tokens,
                       std::vector<TokenId> stop_ids, int64_t first)
    : params_(params),
      num_prompt_tokens_(num_prompt_tokens),
      max_tokens_(max_tokens),
      stop_ids_(std::move(stop_ids)) {
  PAGODA_CHECK(params_.width >= 1 && max_tokens_ >= 1);
  live_[first] = {};
}

// vLLM's score: the log-probability over the sequence length (prompt + output) to the power
// length_penalty; a larger penalty favours longer outputs.
double BeamSearch::score(double logprob, int64_t num_output) const {
  return logprob / std::pow(static_cast<double>(num_prompt_tokens_ + num_output),
                            static_cast<double>(params_.length_penalty));
}

void BeamSearch::add_hypothesis(BeamHypothesis h) {
  auto at = std::upper_bound(finished_.begin(), finished_.end(), h.score,
                             [](double s, const BeamHypothesis& x) { return s > x.score; });
  finished_.insert(at, std::move(h));
  if (static_cast<int32_t>(finished_.size()) > params_.width) finished_.pop_back();
}

BeamSearch::Round BeamSearch::step(
    std::span<const BeamCandidates> present,
    const std::function<const std::vector<TokenId>&(int64_t)>& output_of) {
  PAGODA_CHECK(pending_.empty());
  struct Scored {
    int64_t beam;
    TokenId token;
    double logprob;
  };
  std::vector<Scored> all;
  for (const BeamCandidates& c : present) {
    const Live& l = live_.at(c.beam);
    for (const auto& [token, lp] : c.tokens) all.push_back({c.beam, token, l.logprob + lp});
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const Scored& a, const Scored& b) { return a.logprob > b.logprob; });
  Round round;
  std::unordered_map<int64_t, std::optional<TokenId>> goes_on;
  std::unordered_map<int64_t, Live> next;
  int32_t num_live = 0;
  for (size_t rank = 0; rank < all.size() && num_live < params_.width; ++rank) {
    const Scored& c = all[rank];
    const std::vector<TokenId>& output = output_of(c.beam);
    const int64_t length = static_cast<int64_t>(output.size()) + 1;
    const bool stops = std::find(stop_ids_.begin(), stop_ids_.end(), c.token) != stop_ids_.end();
    if (stops) {
      // As Hugging Face: an ended beam counts only when it ranks among the best `width`.
      if (static_cast<int32_t>(rank) < params_.width) {
        add_hypothesis({output, c.logprob, score(c.logprob, length - 1), true, c.token});
      }
      continue;
    }
    if (length >= max_tokens_) {
      std::vector<TokenId> full = output;
      full.push_back(c.token);
      add_hypothesis({std::move(full), c.logprob, score(c.logprob, length), false, kNoToken});
      continue;
    }
    ++num_live;
    if (!goes_on.count(c.beam)) {
      goes_on[c.beam] = c.token;
      next[c.beam] = {c.logprob, length};
    } else {
      round.forks.emplace_back(c.beam, c.token);
      pending_.emplace_back(c.beam, c.token, c.logprob);
    }
  }
  for (const BeamCandidates& c : present) {
    auto it = goes_on.find(c.beam);
    round.continues.emplace_back(c.beam, it == goes_on.end() ? std::nullopt : it->second);
    live_.erase(c.beam);
  }
  for (auto& [beam, l] : next) live_[beam] = l;
  return round;
}

void BeamSearch::add_beam(int64_t parent, int64_t id, TokenId token) {
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if (std::get<0>(*it) == parent && std::get<1>(*it) == token) {
      const int64_t length = live_.count(parent) ? live_.at(parent).num_output : 0;
      live_[id] = {std::get<2>(*it), length};
      pending_.erase(it);
      return;
    }
  }
  fail("beam search: no fork of beam ", parent, " with token ", token, " is pending");
}

bool BeamSearch::done() const {
  if (live_.empty() && pending_.empty()) return true;
  if (static_cast<int32_t>(finished_.size()) < params_.width) return false;
  if (params_.early_stopping == EarlyStopping::kTrue) return true;
  const double worst = finished_.back().score;
  double best = -std::numeric_limits<double>::infinity();
  for (const auto& [beam, l] : live_) {
    // A log-probability only falls as a beam grows; with a positive penalty, a longer beam is
    // divided by more, so the best it can reach is at the longest it may grow.
    const int64_t length =
        params_.early_stopping == EarlyStopping::kNever && params_.length_penalty > 0.0f
            ? max_tokens_
            : l.num_output;
    best = std::max(best, score(l.logprob, length));
  }
  return best <= worst;
}

std::vector<BeamHypothesis> BeamSearch::best(
    int32_t n, const std::function<const std::vector<TokenId>&(int64_t)>& output_of) const {
  std::vector<BeamHypothesis> out = finished_;
  if (static_cast<int32_t>(out.size()) < n) {
    std::vector<BeamHypothesis> live;
    for (const auto& [beam, l] : live_) {
      live.push_back({output_of(beam), l.logprob, score(l.logprob, l.num_output), false, kNoToken});
    }
    std::stable_sort(
        live.begin(), live.end(),
        [](const BeamHypothesis& a, const BeamHypothesis& b) { return a.score > b.score; });
    for (BeamHypothesis& h : live) {
      if (static_cast<int32_t>(out.size()) >= n) break;
      out.push_back(std::move(h));
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const BeamHypothesis& a, const BeamHypothesis& b) {
    return a.score > b.score;
  });
  if (static_cast<int32_t>(out.size()) > n) out.resize(static_cast<size_t>(n));
  return out;
}

std::vector<int64_t> BeamSearch::live_beams() const {
  std::vector<int64_t> out;
  for (const auto& [beam, l] : live_) out.push_back(beam);
  std::sort(out.begin(), out.end());
  return out;
}

void BeamSearch::check_invariants() const {
  PAGODA_CHECK(static_cast<int32_t>(finished_.size()) <= params_.width);
  for (size_t i = 1; i < finished_.size(); ++i) {
    PAGODA_CHECK(finished_[i - 1].score >= finished_[i].score);
  }
  PAGODA_CHECK(static_cast<int32_t>(live_.size()) <= params_.width);
}

std::vector<std::pair<TokenId, double>> top_logprobs(std::span<const float> logits, int32_t k) {
  float max = -std::numeric_limits<float>::infinity();
  for (float x : logits) {
    if (!std::isnan(x)) max = std::max(max, x);
  }
  double sum = 0.0;
  for (float x : logits) {
    if (!std::isnan(x)) sum += std::exp(static_cast<double>(x - max));
  }
  const double log_z = static_cast<double>(max) + std::log(sum);
  std::vector<TokenId> ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<TokenId>(i);
  const size_t n = std::min<size_t>(static_cast<size_t>(std::max(k, 0)), ids.size());
  auto better = [&](TokenId a, TokenId b) {
    const float x = logits[static_cast<size_t>(a)], y = logits[static_cast<size_t>(b)];
    const float xa = std::isnan(x) ? -std::numeric_limits<float>::infinity() : x;
    const float yb = std::isnan(y) ? -std::numeric_limits<float>::infinity() : y;
    return xa > yb || (xa == yb && a < b);
  };
  std::partial_sort(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(n), ids.end(), better);
  std::vector<std::pair<TokenId, double>> out;
  for (size_t i = 0; i < n; ++i) {
    const float x = logits[static_cast<size_t>(ids[i])];
    if (std::isnan(x) || x == -std::numeric_limits<float>::infinity()) break;
    out.emplace_back(ids[i], static_cast<double>(x) - log_z);
  }
  return out;
}

}  // namespace pagoda
