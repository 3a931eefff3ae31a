#include "engine/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace pagoda {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kMaxFloat = std::numeric_limits<float>::max();

// NaN would break every comparison below (and the strict weak ordering std::sort needs), so it
// becomes -inf: never chosen. +inf would turn the softmax's (logit - max) into NaN; the largest
// float keeps it the certain winner without that.
float sanitize_logit(float x) {
  if (std::isnan(x)) return -kInf;
  if (x == kInf) return kMaxFloat;
  return x;
}

// The total order candidates are ranked by: higher score first, the lower id on ties, so the
// outcome never depends on how a sort happens to permute equal elements.
bool better(const ScoredToken& a, const ScoredToken& b) {
  return a.score > b.score || (a.score == b.score && a.id < b.id);
}

// out = the k best finite logits, best first. A heap of size k with the worst on top: most of a
// large vocabulary is rejected by one comparison, and nothing is sorted but the k winners.
void select_top(std::span<const float> logits, size_t k, std::vector<ScoredToken>& out) {
  out.clear();
  if (k == 0) return;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float logit = logits[i];
    if (logit == -kInf) continue;
    const ScoredToken token{logit, static_cast<TokenId>(i)};
    if (out.size() < k) {
      out.push_back(token);
      std::push_heap(out.begin(), out.end(), better);
    } else if (logit > out.front().score) {  // ids ascend, so an equal logit never wins the tie
      std::pop_heap(out.begin(), out.end(), better);
      out.back() = token;
      std::push_heap(out.begin(), out.end(), better);
    }
  }
  std::sort_heap(out.begin(), out.end(), better);
}

// The worst token of the smallest best-first set of `c` whose scores sum to >= target (c's last
// when rounding keeps the sum short). c is in id order, every score > 0. Small sets are sorted.
// Large ones get a radix select on probability mass: positive floats order like their bit
// patterns, so three histogram passes over 11, 11 and 10 bits find the boundary score without
// sorting (a flat 256k distribution whose nucleus is half the vocabulary takes milliseconds to
// sort). Every sum runs in an order fixed by ids, so the cut is the same on every standard
// library.
ScoredToken nucleus_boundary(std::span<const ScoredToken> c, double target,
                             std::vector<ScoredToken>& work, std::vector<double>& histogram) {
  constexpr size_t kMaxSorted = 1024;
  double need = target;  // mass still to be found among the tokens left
  if (c.size() <= kMaxSorted) {
    work.assign(c.begin(), c.end());
    std::sort(work.begin(), work.end(), better);
    for (const ScoredToken& t : work) {
      need -= t.score;
      if (need <= 0.0) return t;
    }
    return work.back();
  }

  // Four interleaved histograms: a flat distribution puts every token in one bucket, and a
  // single running sum through memory would serialize the whole pass on it.
  constexpr size_t kWays = 4;
  constexpr int kBucketBits[] = {11, 11, 10};
  std::span<const ScoredToken> range = c;  // the tokens whose score bits match so far
  int shift = 32;
  for (int bits : kBucketBits) {
    shift -= bits;
    const uint32_t num_buckets = 1u << bits;
    auto bucket_of = [&](const ScoredToken& t) {
      return (std::bit_cast<uint32_t>(t.score) >> shift) & (num_buckets - 1);
    };
    histogram.assign(kWays * num_buckets, 0.0);
    double* way[kWays];
    for (size_t w = 0; w < kWays; ++w) way[w] = histogram.data() + w * num_buckets;
    size_t i = 0;
    for (; i + kWays <= range.size(); i += kWays) {
      for (size_t w = 0; w < kWays; ++w) way[w][bucket_of(range[i + w])] += range[i + w].score;
    }
    for (; i < range.size(); ++i) way[0][bucket_of(range[i])] += range[i].score;

    // Walk down from the best bucket to the one where the running mass reaches need.
    uint32_t chosen = 0;
    for (uint32_t b = num_buckets; b-- > 0;) {
      double mass = 0.0;
      for (size_t w = 0; w < kWays; ++w) mass += way[w][b];
      if (mass == 0.0) continue;
      chosen = b;  // when rounding leaves need unmet, this ends as the lowest bucket: keep all
      if (mass >= need) break;
      need -= mass;
    }
    size_t n = 0;
    work.resize(range.size());  // range may be work itself: writes never pass reads
    for (const ScoredToken& t : range) {
      if (bucket_of(t) == chosen) work[n++] = t;
    }
    work.resize(n);
    range = work;
  }
  // Every score left is the same; ties go to the lower id, and range is in id order.
  for (const ScoredToken& t : range) {
    need -= t.score;
    if (need <= 0.0) return t;
  }
  return range.back();
}

[[noreturn]] void fail_all_banned() {
  fail("sampler: every token is banned (all logits are -inf or NaN after logit_bias)");
}

// The first of the largest values: ties go to the lowest id. Throws when every token is banned.
TokenId argmax(std::span<const float> adjusted) {
  size_t best = 0;
  for (size_t i = 1; i < adjusted.size(); ++i) {
    if (adjusted[i] > adjusted[best]) best = i;  // strictly greater keeps the first maximum
  }
  if (adjusted[best] == -kInf) fail_all_banned();
  return static_cast<TokenId>(best);
}

}  // namespace

void TokenHistory::set_prompt(std::span<const TokenId> prompt) {
  prompt_.assign(prompt.begin(), prompt.end());
  std::sort(prompt_.begin(), prompt_.end());
  prompt_.erase(std::unique(prompt_.begin(), prompt_.end()), prompt_.end());
  if (!prompt_.empty() && prompt_.front() < 0) {
    fail("sampler: prompt holds a negative token id ", prompt_.front());
  }
}

void TokenHistory::add_output(TokenId token) {
  if (token < 0) fail("sampler: cannot accept negative token id ", token);
  // A sorted vector: sequences see a few thousand distinct ids at most, so the insert's move is
  // cheap, and the penalties walk it in id order.
  auto it = std::lower_bound(output_.begin(), output_.end(), token,
                             [](const auto& entry, TokenId id) { return entry.first < id; });
  if (it != output_.end() && it->first == token) {
    ++it->second;
  } else {
    output_.insert(it, {token, 1});
  }
  ++num_output_tokens_;
}

bool TokenHistory::in_prompt(TokenId token) const {
  return std::binary_search(prompt_.begin(), prompt_.end(), token);
}

int32_t TokenHistory::output_count(TokenId token) const {
  auto it = std::lower_bound(output_.begin(), output_.end(), token,
                             [](const auto& entry, TokenId id) { return entry.first < id; });
  return it != output_.end() && it->first == token ? it->second : 0;
}

void TokenHistory::check_invariants() const {
  for (size_t i = 0; i < prompt_.size(); ++i) {
    PAGODA_CHECK(prompt_[i] >= 0);
    PAGODA_CHECK(i == 0 || prompt_[i - 1] < prompt_[i]);
  }
  int64_t sum = 0;
  for (size_t i = 0; i < output_.size(); ++i) {
    PAGODA_CHECK(output_[i].first >= 0);
    PAGODA_CHECK(output_[i].second > 0);
    PAGODA_CHECK(i == 0 || output_[i - 1].first < output_[i].first);
    sum += output_[i].second;
  }
  PAGODA_CHECK(sum == num_output_tokens_);
}

void apply_bias_and_penalties(std::span<float> logits, const SamplingParams& params,
                              const TokenHistory& history) {
  const size_t vocab_size = logits.size();
  auto at = [&](TokenId id) -> float& {
    if (id < 0 || static_cast<size_t>(id) >= vocab_size) {
      fail("sampler: token id ", id, " is outside the vocabulary [0, ", vocab_size, ")");
    }
    return logits[static_cast<size_t>(id)];
  };

  for (const auto& [id, bias] : params.logit_bias) {
    float& logit = at(id);
    logit = sanitize_logit(logit + bias);
  }

  const float r = params.repetition_penalty;
  if (r != 1.0f) {
    auto penalize = [&](TokenId id) {
      float& logit = at(id);
      logit = sanitize_logit(logit > 0.0f ? logit / r : logit * r);
    };
    // Merge the two sorted id lists so an id in both is penalized once.
    std::span<const TokenId> prompt = history.prompt_tokens();
    std::span<const std::pair<TokenId, int32_t>> output = history.output_counts();
    size_t i = 0, j = 0;
    while (i < prompt.size() || j < output.size()) {
      if (j == output.size() || (i < prompt.size() && prompt[i] < output[j].first)) {
        penalize(prompt[i++]);
      } else if (i == prompt.size() || output[j].first < prompt[i]) {
        penalize(output[j++].first);
      } else {
        penalize(prompt[i]);
        ++i, ++j;
      }
    }
  }

  const float presence = params.presence_penalty;
  const float frequency = params.frequency_penalty;
  if (presence != 0.0f || frequency != 0.0f) {
    for (const auto& [id, count] : history.output_counts()) {
      float& logit = at(id);
      logit = sanitize_logit(logit - (presence + frequency * static_cast<float>(count)));
    }
  }
}

Sampler::Sampler(SamplingParams params, std::span<const TokenId> prompt, int vocab_size)
    : params_(std::move(params)), vocab_size_(vocab_size) {
  if (vocab_size_ <= 0) fail("sampler: vocab_size must be > 0 (got ", vocab_size_, ")");
  validate(params_, vocab_size_);
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= vocab_size_) {
      fail("sampler: prompt token ", prompt[i], " at position ", i,
           " is outside the vocabulary [0, ", vocab_size_, ")");
    }
  }
  history_.set_prompt(prompt);
  if (params_.has_seed) {
    seed_ = params_.seed;
  } else {
    std::random_device device;
    seed_ = (static_cast<uint64_t>(device()) << 32) ^ static_cast<uint64_t>(device());
  }
  rng_.seed(seed_);
}

SampleResult Sampler::sample(std::span<const float> logits) {
  if (!own_scratch_) own_scratch_ = std::make_unique<SamplerScratch>();
  return sample(logits, *own_scratch_);
}

SampleResult Sampler::sample(std::span<const float> logits, SamplerScratch& scratch) {
  const std::span<const float> adjusted = adjust(logits, scratch);
  const TokenId token = params_.temperature == 0.0f
                            ? argmax(adjusted)
                            : draw(sampling_candidates(adjusted, params_, scratch));
  return result_for(token, adjusted, scratch);
}

namespace {

// Top-k (step 7) into c. Returns true when k cuts the vocabulary: c holds the k best, best first;
// otherwise c holds every token not banned, in id order.
bool collect_candidates(std::span<const float> logits, int top_k, std::vector<ScoredToken>& c) {
  const auto k = static_cast<size_t>(top_k);
  const bool sorted = k > 0 && k < logits.size();
  if (sorted) {
    select_top(logits, k, c);
  } else {
    c.clear();
    for (size_t i = 0; i < logits.size(); ++i) {
      if (logits[i] != -kInf) c.push_back({logits[i], static_cast<TokenId>(i)});
    }
  }
  if (c.empty()) fail_all_banned();
  return sorted;
}

// Temperature and softmax (steps 6 and 8), unnormalized: scores become exp((l - max) / T), so
// the best token scores exactly 1 (min-p reads that) and nothing overflows however small T is.
// Tokens whose probability underflows to 0 can never be drawn and are dropped here; the
// compaction keeps the order. Returns how many are left; `total` gets their sum.
size_t exponentiate(std::vector<ScoredToken>& c, float temperature, double& total) {
  float max_logit = c[0].score;
  for (const ScoredToken& t : c) max_logit = std::max(max_logit, t.score);
  size_t n = 0;
  total = 0.0;
  for (const ScoredToken& t : c) {
    const float p = std::exp((t.score - max_logit) / temperature);
    if (p > 0.0f) {
      c[n++] = {p, t.id};
      total += p;
    }
  }
  return n;
}

// Top-p (step 9) over c[0, n): returns how many are kept, at the front in the same order.
size_t keep_nucleus(std::vector<ScoredToken>& c, size_t n, float top_p, bool sorted,
                    double& total, std::vector<ScoredToken>& work, std::vector<double>& histogram) {
  const double target = static_cast<double>(top_p) * total;
  double sum = 0.0;
  size_t keep = 0;
  if (sorted) {
    while (keep < n) {
      sum += c[keep++].score;
      if (sum >= target) break;
    }
  } else {
    const ScoredToken boundary =
        nucleus_boundary(std::span<const ScoredToken>(c.data(), n), target, work, histogram);
    for (size_t i = 0; i < n; ++i) {
      if (!better(boundary, c[i])) {
        c[keep++] = c[i];
        sum += c[i].score;
      }
    }
  }
  total = sum;
  return keep;
}

// Min-p (step 10) over c[0, n); p / p_max is the score itself.
size_t keep_above_min_p(std::vector<ScoredToken>& c, size_t n, float min_p, double& total) {
  size_t keep = 0;
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    if (c[i].score >= min_p) {
      c[keep++] = c[i];
      sum += c[i].score;
    }
  }
  total = sum;
  return keep;
}

}  // namespace

CandidateSet sampling_candidates(std::span<const float> logits, const SamplingParams& params,
                                 SamplerScratch& scratch) {
  PAGODA_CHECK(params.temperature > 0.0f);  // greedy is an argmax, not a distribution
  std::vector<ScoredToken>& c = scratch.candidates_;
  const bool sorted = collect_candidates(logits, params.top_k, c);
  double total = 0.0;
  size_t n = exponentiate(c, params.temperature, total);
  if (params.top_p < 1.0f) {
    n = keep_nucleus(c, n, params.top_p, sorted, total, scratch.work_, scratch.histogram_);
  }
  if (params.min_p > 0.0f) n = keep_above_min_p(c, n, params.min_p, total);
  return {std::span<const ScoredToken>(c.data(), n), total};
}

double Sampler::uniform() {
  // A uniform double in [0, 1) from the top 53 bits: the same on every standard library.
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

TokenId Sampler::draw(const CandidateSet& candidates) {
  const double target = uniform() * candidates.total_score;
  double sum = 0.0;
  for (const ScoredToken& t : candidates.tokens) {
    sum += t.score;
    if (target < sum) return t.id;
  }
  // Only reachable by rounding; never empty, since the best token is always kept.
  return candidates.tokens.back().id;
}

void Sampler::fill_logprobs(std::span<const float> logits, std::vector<ScoredToken>& top,
                            SampleResult& result) const {
  // log_softmax: logit - (max + log(sum exp(logit - max))), summed in double for a 256k vocab.
  float max_logit = -kInf;
  for (float logit : logits) max_logit = std::max(max_logit, logit);
  double sum = 0.0;
  for (float logit : logits) sum += std::exp(logit - max_logit);
  const double log_normalizer = static_cast<double>(max_logit) + std::log(sum);

  result.logprob = static_cast<float>(logits[static_cast<size_t>(result.token)] - log_normalizer);
  result.top_logprobs.clear();
  if (params_.num_logprobs == 0) return;
  select_top(logits, static_cast<size_t>(params_.num_logprobs), top);
  result.top_logprobs.reserve(top.size());
  for (const ScoredToken& t : top) {
    result.top_logprobs.emplace_back(t.id, static_cast<float>(t.score - log_normalizer));
  }
}

float ProposalDistribution::prob(TokenId id) const {
  auto it = std::lower_bound(probs.begin(), probs.end(), id,
                             [](const std::pair<TokenId, float>& e, TokenId t) { return e.first < t; });
  return it != probs.end() && it->first == id ? it->second : 0.0f;
}

std::span<const float> Sampler::adjust(std::span<const float> logits,
                                       SamplerScratch& scratch) const {
  if (logits.size() != static_cast<size_t>(vocab_size_)) {
    fail("sampler: got ", logits.size(), " logits for a vocabulary of ", vocab_size_);
  }
  std::vector<float>& adjusted = scratch.logits_;
  adjusted.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) adjusted[i] = sanitize_logit(logits[i]);
  apply_bias_and_penalties(adjusted, params_, history_);
  return adjusted;
}

SampleResult Sampler::score(std::span<const float> logits, TokenId token,
                            SamplerScratch& scratch) const {
  if (token < 0 || token >= vocab_size_) fail("sampler: token ", token, " is outside the vocabulary");
  return result_for(token, adjust(logits, scratch), scratch);
}

SampleResult Sampler::result_for(TokenId token, std::span<const float> adjusted,
                                 SamplerScratch& scratch) const {
  SampleResult result;
  result.token = token;
  if (params_.logprobs || params_.num_logprobs > 0) {
    fill_logprobs(adjusted, scratch.top_logprobs_, result);
  }
  return result;
}

Sampler::Verdict Sampler::judge(const CandidateSet& c, TokenId x, const ProposalDistribution* q) {
  double p_x = 0.0;
  for (const ScoredToken& t : c.tokens) {
    if (t.id == x) p_x = t.score / c.total_score;
  }
  const double q_x = q == nullptr ? 1.0 : q->prob(x);
  // Accept with probability min(1, p(x) / q(x)).
  if (uniform() * q_x < p_x) return {x, true};
  // Rejected: draw from max(0, p - q), renormalized, in the candidates' order.
  std::vector<ScoredToken> residual;
  double total = 0.0;
  for (const ScoredToken& t : c.tokens) {
    const double p = t.score / c.total_score;
    const double rest = p - (q == nullptr ? (t.id == x ? 1.0 : 0.0) : q->prob(t.id));
    if (rest > 0.0) {
      residual.push_back({static_cast<float>(rest), t.id});
      total += static_cast<float>(rest);
    }
  }
  return {residual.empty() ? draw(c) : draw({residual, total}), false};
}

std::vector<SampleResult> Sampler::verify(std::span<const float> logits,
                                          std::span<const TokenId> proposed,
                                          std::span<const ProposalDistribution> q,
                                          SamplerScratch& scratch) {
  const size_t k = proposed.size();
  const auto vocab = static_cast<size_t>(vocab_size_);
  if (logits.size() != (k + 1) * vocab) {
    fail("sampler: verifying ", k, " proposals needs ", k + 1, " rows of logits, got ",
         logits.size(), " values");
  }
  if (!q.empty() && q.size() != k) fail("sampler: ", q.size(), " proposal distributions for ", k);
  std::vector<SampleResult> out;
  for (size_t i = 0; i <= k; ++i) {
    const std::span<const float> adjusted = adjust(logits.subspan(i * vocab, vocab), scratch);
    Verdict v;
    if (params_.temperature == 0.0f) {
      v.token = argmax(adjusted);
      v.accepted = i < k && v.token == proposed[i];
    } else {
      const CandidateSet c = sampling_candidates(adjusted, params_, scratch);
      v = i == k ? Verdict{draw(c), false} : judge(c, proposed[i], q.empty() ? nullptr : &q[i]);
    }
    out.push_back(result_for(v.token, adjusted, scratch));
    history_.add_output(v.token);
    if (!v.accepted) break;
  }
  return out;
}

void Sampler::accept(TokenId token) {
  if (token < 0 || token >= vocab_size_) {
    fail("sampler: accepted token ", token, " is outside the vocabulary [0, ", vocab_size_, ")");
  }
  history_.add_output(token);
}

void Sampler::check_invariants() const {
  PAGODA_CHECK(vocab_size_ > 0);
  validate(params_, vocab_size_);
  history_.check_invariants();
  for (TokenId id : history_.prompt_tokens()) PAGODA_CHECK(id < vocab_size_);
  for (const auto& [id, count] : history_.output_counts()) PAGODA_CHECK(id < vocab_size_);
}

}  // namespace pagoda
