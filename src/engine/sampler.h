// Picking the next token of one sequence from the model's logits: logit bias, repetition /
// presence / frequency penalties, then greedy or temperature + top-k + top-p + min-p, drawn with
// the sequence's own seeded RNG, plus the log-probabilities the OpenAI API can ask for.
//
// Order of operations in Sampler::sample (vLLM semantics; OpenAI semantics for the penalties):
//   1. copy the logits; NaN becomes -inf (never chosen), +inf becomes the largest float
//   2. logit_bias is added
//   3. repetition penalty, for ids seen in the prompt or the output: positive logits are divided
//      by it, the others multiplied (Hugging Face / vLLM)
//   4. presence and frequency penalties, over OUTPUT tokens only (as vLLM does):
//      logit -= presence * (count > 0) + frequency * count
//   5. temperature == 0: argmax, ties to the lowest id; steps 6-10 are skipped
//   6. divide by temperature
//   7. top-k: keep the k largest (ties to the lower id)
//   8. softmax over what is left
//   9. top-p: keep the smallest most-likely set whose probability sum is >= top_p (at least one)
//  10. min-p: drop tokens with p < min_p * p_max; renormalize; draw one token
// Log-probabilities (when asked for) are log_softmax of the logits after step 4: the model's
// distribution as the penalties shaped it, before temperature and truncation. vLLM by default
// reports the raw model distribution; we include bias and penalties because those are what the
// request asked the model to be, while temperature / top-k / top-p only shape the draw.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "engine/sampling_params.h"
#include "tokenizer/vocab.h"

namespace pagoda {

// The tokens the penalties look at: the distinct prompt ids (read by the repetition penalty only)
// and how many times each id was generated. Sparse, because a dense count per vocabulary entry
// would cost ~1 MiB per sequence for a 256k vocabulary.
// Invariants: prompt_ is sorted and distinct; output_ is sorted by id and distinct, each count
// > 0; num_output_tokens_ is the sum of the counts; every id is >= 0.
class TokenHistory {
 public:
  void set_prompt(std::span<const TokenId> prompt);
  void add_output(TokenId token);

  bool in_prompt(TokenId token) const;
  int32_t output_count(TokenId token) const;
  std::span<const TokenId> prompt_tokens() const { return prompt_; }
  std::span<const std::pair<TokenId, int32_t>> output_counts() const { return output_; }
  int64_t num_output_tokens() const { return num_output_tokens_; }

  void check_invariants() const;

 private:
  std::vector<TokenId> prompt_;
  std::vector<std::pair<TokenId, int32_t>> output_;
  int64_t num_output_tokens_ = 0;
};

// Steps 2-4 above, in place. Every id in params.logit_bias and history must be < logits.size()
// (throws Error otherwise). Entries it changes never end up NaN or +inf (see step 1).
void apply_bias_and_penalties(std::span<float> logits, const SamplingParams& params,
                              const TokenHistory& history);

struct SampleResult {
  TokenId token = kNoToken;
  float logprob = 0.0f;  // log p(token) (see the top of this file); 0 unless logprobs was asked
  std::vector<std::pair<TokenId, float>> top_logprobs;  // the num_logprobs most likely, descending
};

// A token and its score (a logit, then an unnormalized probability) while candidates narrow.
struct ScoredToken {
  float score;
  TokenId id;
};

// The tokens a draw chooses from after steps 6-10, with unnormalized probabilities (the best
// scores exactly 1), in the order the draw walks them: best first after top-k, else id order.
struct CandidateSet {
  std::span<const ScoredToken> tokens;  // never empty
  double total_score = 0.0;             // the sum of tokens' scores, in that order
};

class SamplerScratch;

// Steps 6-10 on logits already through steps 1-4, for a non-greedy params: the distribution a
// draw would use. Throws Error when every token is banned. tokens views scratch, valid until its
// next use. Public so tests can check the kept set exactly on a large vocabulary.
CandidateSet sampling_candidates(std::span<const float> logits, const SamplingParams& params,
                                 SamplerScratch& scratch);

// Working buffers for Sampler::sample, up to ~20 bytes per vocabulary entry: one is meant to be
// shared by every sequence an engine thread samples rather than kept per sequence. Reused, so a
// call allocates nothing once the buffers have grown.
class SamplerScratch {
 private:
  friend class Sampler;
  friend CandidateSet sampling_candidates(std::span<const float>, const SamplingParams&,
                                          SamplerScratch&);
  std::vector<float> logits_;              // [vocab_size] after bias and penalties
  std::vector<ScoredToken> candidates_;    // [<= vocab_size] tokens still in the running
  std::vector<ScoredToken> work_;          // [<= vocab_size] top-p's selection
  std::vector<double> histogram_;          // [4 * 2048] top-p's radix select
  std::vector<ScoredToken> top_logprobs_;  // [num_logprobs]
};

// The distribution a proposed token was drawn from (speculative decoding), as probabilities
// that sum to 1 over the listed ids. Empty: the proposal was deterministic (an n-gram match, a
// greedy draft), a point mass on the proposed token.
struct ProposalDistribution {
  std::vector<std::pair<TokenId, float>> probs;  // sorted by id
  float prob(TokenId id) const;
};

// The sampling state of one sequence: its params, its RNG and its token history.
// sample() does not record the token it returns: the caller calls accept() with each token that
// becomes part of the output, so a speculative draft the verifier rejects, or a token cut by a
// stop string, never counts toward the penalties.
// Same seed + same params + same prompt + same logits and accepts -> the same tokens: candidates
// are ranked by a total order (score, then id) and drawn from in id or rank order, never in an
// order a container or sort happens to leave, and probabilities are summed in that order too.
// The draw uses only the 64-bit output of std::mt19937_64, whose sequence the standard fixes, not
// std::uniform_real_distribution, whose algorithm it does not; so this holds across standard
// libraries as well (given the same libm exp()).
// Invariants: vocab_size_ > 0; params_ pass validate() for vocab_size_; every id in history_ is
// < vocab_size_; history_'s own invariants.
class Sampler {
 public:
  // Throws Error when vocab_size <= 0, params fail validate() (SamplingParamError), or a prompt
  // id is outside [0, vocab_size).
  Sampler(SamplingParams params, std::span<const TokenId> prompt, int vocab_size);

  // logits: [vocab_size] for one position; not modified. Throws Error when the size is wrong or
  // every token is banned (all logits -inf / NaN after the bias).
  SampleResult sample(std::span<const float> logits, SamplerScratch& scratch);
  // The same, with buffers this sampler keeps for itself (allocated on first use).
  SampleResult sample(std::span<const float> logits);

  // Adds a token to the output counts the penalties read. Throws Error when out of range.
  void accept(TokenId token);

  // `token` as if drawn from `logits` (a token the engine forces, or a prompt token scored):
  // its log-probabilities when asked for, nothing drawn, nothing accepted.
  SampleResult score(std::span<const float> logits, TokenId token, SamplerScratch& scratch) const;

  // Speculative decoding: verifies `proposed` (k tokens) against `logits` ([k + 1, vocab]: row
  // i is the distribution for the token after proposal i - 1) and returns the tokens the
  // sequence gets, accepted proposals then one more, each with its log-probabilities; each is
  // accept()ed here, since row i's penalties depend on the tokens before it. Greedy: a proposal
  // is accepted when it is the argmax, and the next token is the argmax of the first row that
  // disagrees (or of the last row), so the output is exactly greedy decoding's. Otherwise,
  // modified rejection sampling: proposal x drawn from q is accepted with probability
  // min(1, p(x) / q(x)), where p is this sampler's distribution (steps 1-10); on rejection the
  // token is drawn from max(0, p - q) renormalized; after k acceptances, from the last row. The
  // output is then distributed exactly as sampling token by token. `q`: one per proposal, or
  // empty when every proposal was deterministic.
  std::vector<SampleResult> verify(std::span<const float> logits,
                                   std::span<const TokenId> proposed,
                                   std::span<const ProposalDistribution> q,
                                   SamplerScratch& scratch);

  const SamplingParams& params() const { return params_; }
  const TokenHistory& history() const { return history_; }
  int vocab_size() const { return vocab_size_; }
  uint64_t seed() const { return seed_; }  // the one in use, drawn or given, to replay a run

  void check_invariants() const;

 private:
  TokenId draw(const CandidateSet& candidates);
  // verify() on proposal x where the sampler's distribution is `c`: x when accepted, else the
  // token drawn in its place. q: x's proposal distribution; nullptr: x was deterministic.
  struct Verdict {
    TokenId token = kNoToken;
    bool accepted = false;
  };
  Verdict judge(const CandidateSet& c, TokenId x, const ProposalDistribution* q);
  double uniform();
  // Steps 1-4 of one row into scratch.logits_.
  std::span<const float> adjust(std::span<const float> logits, SamplerScratch& scratch) const;
  SampleResult result_for(TokenId token, std::span<const float> adjusted,
                          SamplerScratch& scratch) const;
  void fill_logprobs(std::span<const float> logits, std::vector<ScoredToken>& top,
                     SampleResult& result) const;

  SamplingParams params_;
  int vocab_size_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  TokenHistory history_;
  std::unique_ptr<SamplerScratch> own_scratch_;
};

}  // namespace pagoda
