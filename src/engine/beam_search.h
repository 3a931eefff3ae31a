// Beam search, the selection half: given each live beam's candidate next tokens, which beams
// go on with which token, which fork, which end as finished hypotheses, and when the search is
// done (vLLM's and Hugging Face's rules: length_penalty, early_stopping). Integers and scores
// only; the engine runs the beams as sequences over shared KV blocks (a beam that continues
// with two tokens forks, sharing every full block and copying only its tail).
//
// Invariants (check_invariants()): live beams are distinct; at most `width` finished
// hypotheses are kept, sorted best first.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "tokenizer/vocab.h"

namespace pagoda {

enum class EarlyStopping {
  kHeuristic,  // done when no live beam, at its current length, beats the worst kept hypothesis
  kTrue,       // done as soon as `width` hypotheses are finished
  kNever,      // done when no live beam could beat them even at the longest it may grow
};

struct BeamParams {
  int32_t width = 0;  // beams kept; 0: no beam search
  float length_penalty = 1.0f;
  EarlyStopping early_stopping = EarlyStopping::kHeuristic;
};

struct BeamHypothesis {
  std::vector<TokenId> output;    // the output tokens (a final stop id not among them)
  double logprob = 0.0;           // cumulative log-probability of the output
  double score = 0.0;             // logprob / length^length_penalty
  bool stopped = false;           // ended on a stop id (else on max_tokens)
  TokenId stop_token = kNoToken;  // the stop id it ended on
};

// The top candidates of one live beam for its next token: the beam's id, and (token, log p).
struct BeamCandidates {
  int64_t beam = 0;
  std::vector<std::pair<TokenId, double>> tokens;  // log-probabilities of this step
};

class BeamSearch {
 public:
  // The first live beam is `first` (the request's prompt, no output yet).
  BeamSearch(BeamParams params, int32_t num_prompt_tokens, int32_t max_tokens,
             std::vector<TokenId> stop_ids, int64_t first);

  // What one round decided.
  struct Round {
    // Each present beam: the token it goes on with, or nullopt when it is dropped.
    std::vector<std::pair<int64_t, std::optional<TokenId>>> continues;
    // New beams: (parent, token): the parent's sequence with `token` instead of the one the
    // parent went on with.
    std::vector<std::pair<int64_t, TokenId>> forks;
  };

  // One round over the beams whose logits this step computed (`present`; normally all live
  // beams). Candidates per beam: its best 2 * width tokens (more are never needed). `output_of`
  // gives a beam's output so far. Beams that take a stop id or reach max_tokens become
  // hypotheses; the best `width` continuations stay live. Fork ids come from new_beam_id.
  Round step(std::span<const BeamCandidates> present,
             const std::function<const std::vector<TokenId>&(int64_t)>& output_of);
  // A forked beam's id, given by the engine after step() (the fork's sequence id).
  void add_beam(int64_t parent, int64_t id, TokenId token);

  bool done() const;
  // The best `n` hypotheses, best first: finished ones, then (if too few) the live beams.
  std::vector<BeamHypothesis> best(
      int32_t n, const std::function<const std::vector<TokenId>&(int64_t)>& output_of) const;
  std::vector<int64_t> live_beams() const;
  double live_logprob(int64_t beam) const { return live_.at(beam).logprob; }
  int32_t width() const { return params_.width; }

  void check_invariants() const;

 private:
  double score(double logprob, int64_t num_output) const;
  void add_hypothesis(BeamHypothesis h);

  BeamParams params_;
  int32_t num_prompt_tokens_;
  int32_t max_tokens_;
  std::vector<TokenId> stop_ids_;
  struct Live {
    double logprob = 0.0;
    int64_t num_output = 0;
  };
  std::unordered_map<int64_t, Live> live_;
  // Forked this round, waiting for their ids: parent, token, log-probability.
  std::vector<std::tuple<int64_t, TokenId, double>> pending_;
  std::vector<BeamHypothesis> finished_;  // best first, at most width
};

// The `k` most likely tokens of `logits` ([vocab]) with their log-probabilities, best first
// (ties to the lower id).
std::vector<std::pair<TokenId, double>> top_logprobs(std::span<const float> logits, int32_t k);

}  // namespace pagoda
