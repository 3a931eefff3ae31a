// Quality of a model's predictions on a text (`pagoda bench quality`): perplexity over
// fixed-length windows, and against a reference model the KL divergence of the two token
// distributions, top-1 agreement and the perplexity ratio.
//
// Windows: the text is tokenized once without BOS and cut into consecutive, non-overlapping
// windows; each is [BOS] + (ctx - 1) text tokens (ctx text tokens when BOS is off); the last
// partial window is dropped. The logits at position p predict token p + 1, so a window of ctx
// tokens has ctx - 1 predictions; all of them are scored, or, as llama.cpp's perplexity tool
// does, only those from position ctx / 2 on (the second half, where every prediction has at
// least ctx / 2 tokens of context).
//
// The math here takes plain logit rows, so it is tested without a model; WindowRunner feeds
// windows through a Model.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "model/kv_storage.h"
#include "model/model.h"
#include "tokenizer/vocab.h"

namespace pagoda::bench {

struct WindowOptions {
  int32_t ctx = 256;           // tokens the model sees per window, BOS included
  TokenId bos = kNoToken;      // prepended to every window; kNoToken = none
  bool second_half = false;    // score only predictions from position ctx / 2 on
  int64_t max_windows = 0;     // 0 = every whole window of the text
};

struct Window {
  std::vector<TokenId> tokens;  // what the model sees: [BOS] + text tokens
  int32_t first_scored = 0;     // the first position whose prediction (of token p + 1) counts

  int32_t num_scored() const { return static_cast<int32_t>(tokens.size()) - 1 - first_scored; }
};

// Cuts `text` (token ids without BOS) into windows. Throws Error when ctx leaves no prediction
// to score.
std::vector<Window> make_windows(const std::vector<TokenId>& text, const WindowOptions& options);

// Natural log of the sum of exp(logits[i]) over n values, computed stably in double.
double log_sum_exp(const float* logits, int64_t n);

// The index of the largest logit (the first one on ties).
int64_t argmax(const float* logits, int64_t n);

// -log softmax(logits)[target]: the negative log-likelihood of `target`.
double token_nll(const float* logits, int64_t n, int64_t target);

// KL(P_ref || P) = sum_i p_ref[i] * (log p_ref[i] - log p[i]), with P_ref = softmax(ref_logits)
// and P = softmax(logits), both over n values. 0 for identical rows; may be a rounding error
// below 0 for nearly identical ones.
double kl_divergence(const float* ref_logits, const float* logits, int64_t n);

// Negative log-likelihoods summed up: perplexity = exp(mean NLL).
class PerplexityAccumulator {
 public:
  void add(double nll);
  int64_t count() const { return count_; }
  double mean_nll() const;  // NaN when empty
  double perplexity() const;
  // Standard error of the perplexity from the spread of the NLLs (delta method: ppl * stderr of
  // the mean NLL); NaN for fewer than two values.
  double perplexity_stderr() const;

 private:
  int64_t count_ = 0;
  double sum_ = 0;
  double sum_squares_ = 0;
};

// Everything measured for one model over the scored positions (KL fields only with a reference).
struct QualityStats {
  PerplexityAccumulator nll;
  std::vector<double> window_perplexity;  // one per finished window
  // Against the reference; empty without one.
  PerplexityAccumulator ref_nll;
  std::vector<double> kl;  // one per scored position
  int64_t top1_same = 0;

  bool has_ref() const { return ref_nll.count() > 0; }
  double kl_mean() const;
  double kl_stderr() const;
  double kl_percentile(double p) const;  // numpy-style linear interpolation
  double top1_agreement() const;         // fraction of positions where the argmaxes agree
  double perplexity_ratio() const;       // PPL(model) / PPL(ref)
};

// Scores one window's logit rows: `logits` holds window.num_scored() rows of `vocab` values,
// row j for position first_scored + j; `ref_logits` is the reference's rows, or null.
// Positions are scored in parallel over `num_threads` OpenMP threads (0 = the default).
void score_window(const Window& window, const float* logits, const float* ref_logits,
                  int64_t vocab, int num_threads, QualityStats& stats);

// Runs windows through a model: up to `max_windows_per_step` windows of at most `ctx` tokens
// go through one forward step as separate sequences, each with its own KV blocks.
class WindowRunner {
 public:
  WindowRunner(Model& model, Backend& backend, int32_t ctx, int32_t max_windows_per_step,
               KvType kv_type = KvType::kF32);

  // Logits of the scored positions of every window, window after window:
  // [sum of num_scored(), vocab]. The last token of a window is only a target, never fed.
  const std::vector<float>& run(const std::vector<const Window*>& windows);

 private:
  Model& model_;
  Backend& backend_;
  int32_t blocks_per_seq_;
  int32_t max_seqs_;
  KvStorage kv_;
  std::vector<float> logits_;
};

}  // namespace pagoda::bench
