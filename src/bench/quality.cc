// Perplexity, KL divergence and top-1 agreement over windows of a text (see quality.h).
#include "bench/quality.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "bench/metrics.h"
#include "core/error.h"

namespace pagoda::bench {
namespace {

constexpr int32_t kBlockSize = 16;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

float max_of(const float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

}  // namespace

std::vector<Window> make_windows(const std::vector<TokenId>& text, const WindowOptions& o) {
  const bool bos = o.bos != kNoToken;
  const int32_t text_per_window = o.ctx - (bos ? 1 : 0);
  const int32_t first_scored = o.second_half ? o.ctx / 2 : 0;
  if (o.ctx < 2 || text_per_window < 1 || first_scored > o.ctx - 2) {
    fail("--ctx ", o.ctx, ": a window needs at least 2 tokens to score a prediction");
  }
  int64_t count = static_cast<int64_t>(text.size()) / text_per_window;
  if (o.max_windows > 0) count = std::min(count, o.max_windows);
  std::vector<Window> windows(static_cast<size_t>(count));
  for (int64_t w = 0; w < count; ++w) {
    Window& window = windows[static_cast<size_t>(w)];
    window.tokens.reserve(static_cast<size_t>(o.ctx));
    if (bos) window.tokens.push_back(o.bos);
    const auto begin = text.begin() + w * text_per_window;
    window.tokens.insert(window.tokens.end(), begin, begin + text_per_window);
    window.first_scored = first_scored;
  }
  return windows;
}

double log_sum_exp(const float* logits, int64_t n) {
  const float m = max_of(logits, n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i]) - m);
  return m + std::log(sum);
}

int64_t argmax(const float* logits, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

double token_nll(const float* logits, int64_t n, int64_t target) {
  return log_sum_exp(logits, n) - logits[target];
}

double kl_divergence(const float* ref_logits, const float* logits, int64_t n) {
  // With e_i = exp(r_i - max r): KL = sum_i e_i (r_i - m_i) / sum_i e_i - lse(r) + lse(m).
  const float ref_max = max_of(ref_logits, n), max = max_of(logits, n);
  double ref_sum = 0, sum = 0, weighted = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double r = ref_logits[i], m = logits[i];
    const double e = std::exp(r - ref_max);
    ref_sum += e;
    sum += std::exp(m - max);
    weighted += e * (r - m);
  }
  const double ref_lse = ref_max + std::log(ref_sum), lse = max + std::log(sum);
  return weighted / ref_sum - ref_lse + lse;
}

void PerplexityAccumulator::add(double nll) {
  ++count_;
  sum_ += nll;
  sum_squares_ += nll * nll;
}

double PerplexityAccumulator::mean_nll() const {
  return count_ == 0 ? kNaN : sum_ / static_cast<double>(count_);
}

double PerplexityAccumulator::perplexity() const { return std::exp(mean_nll()); }

double PerplexityAccumulator::perplexity_stderr() const {
  if (count_ < 2) return kNaN;
  const double n = static_cast<double>(count_), mean = sum_ / n;
  const double variance = std::max(0.0, sum_squares_ / n - mean * mean) * n / (n - 1);
  return perplexity() * std::sqrt(variance / n);
}

double QualityStats::kl_mean() const {
  if (kl.empty()) return kNaN;
  double sum = 0;
  for (double v : kl) sum += v;
  return sum / static_cast<double>(kl.size());
}

double QualityStats::kl_stderr() const {
  if (kl.size() < 2) return kNaN;
  const double n = static_cast<double>(kl.size()), mean = kl_mean();
  double sq = 0;
  for (double v : kl) sq += (v - mean) * (v - mean);
  return std::sqrt(sq / (n - 1) / n);
}

double QualityStats::kl_percentile(double p) const {
  return kl.empty() ? kNaN : percentile(kl, p);
}

double QualityStats::top1_agreement() const {
  return kl.empty() ? kNaN : static_cast<double>(top1_same) / static_cast<double>(kl.size());
}

double QualityStats::perplexity_ratio() const {
  return has_ref() ? nll.perplexity() / ref_nll.perplexity() : kNaN;
}

namespace {

// What one position needs from a row, in two passes over it (max, then exp sums): the model's
// log-sum-exp and argmax, and against the reference row the reference's as well and the KL sum.
struct RowScore {
  double nll = 0, ref_nll = 0, kl = 0;
  bool same_top1 = false;
};

RowScore score_row(const float* row, const float* ref_row, int64_t n, int64_t target) {
  RowScore s;
  const int64_t best = argmax(row, n);
  const double max = row[best];
  if (!ref_row) {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(row[i] - max);
    s.nll = max + std::log(sum) - row[target];
    return s;
  }
  const int64_t ref_best = argmax(ref_row, n);
  const double ref_max = ref_row[ref_best];
  double sum = 0, ref_sum = 0, weighted = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double m = row[i], r = ref_row[i];
    const double e = std::exp(r - ref_max);
    sum += std::exp(m - max);
    ref_sum += e;
    weighted += e * (r - m);
  }
  const double lse = max + std::log(sum), ref_lse = ref_max + std::log(ref_sum);
  s.nll = lse - row[target];
  s.ref_nll = ref_lse - ref_row[target];
  s.kl = weighted / ref_sum - ref_lse + lse;  // as in kl_divergence()
  s.same_top1 = best == ref_best;
  return s;
}

}  // namespace

void score_window(const Window& window, const float* logits, const float* ref_logits,
                  int64_t vocab, int num_threads, QualityStats& stats) {
  const int64_t n = window.num_scored();
  std::vector<RowScore> scores(static_cast<size_t>(n));
  const int threads = num_threads > 0 ? num_threads : omp_get_max_threads();
#pragma omp parallel for schedule(dynamic, 4) num_threads(threads)
  for (int64_t j = 0; j < n; ++j) {
    const TokenId target = window.tokens[static_cast<size_t>(window.first_scored + j + 1)];
    scores[static_cast<size_t>(j)] = score_row(logits + j * vocab,
                                               ref_logits ? ref_logits + j * vocab : nullptr,
                                               vocab, target);
  }
  // Summed in position order so the totals do not depend on the thread count.
  PerplexityAccumulator window_nll;
  for (const RowScore& s : scores) {
    stats.nll.add(s.nll);
    window_nll.add(s.nll);
    if (ref_logits) {
      stats.ref_nll.add(s.ref_nll);
      stats.kl.push_back(s.kl);
      stats.top1_same += s.same_top1;
    }
  }
  stats.window_perplexity.push_back(window_nll.perplexity());
}

WindowRunner::WindowRunner(Model& model, Backend& backend, int32_t ctx,
                           int32_t max_windows_per_step, KvType kv_type)
    : model_(model),
      backend_(backend),
      blocks_per_seq_((ctx + kBlockSize - 1) / kBlockSize),
      max_seqs_(std::max(1, max_windows_per_step)),
      kv_(model.config(), blocks_per_seq_ * max_seqs_, kBlockSize, kv_type) {}

const std::vector<float>& WindowRunner::run(const std::vector<const Window*>& windows) {
  if (windows.empty() || static_cast<int32_t>(windows.size()) > max_seqs_) {
    fail("WindowRunner: ", windows.size(), " windows in one step (at most ", max_seqs_, ")");
  }
  ForwardBatch b;
  b.block_size = kBlockSize;
  b.max_blocks_per_seq = blocks_per_seq_;
  b.query_start.push_back(0);
  for (size_t s = 0; s < windows.size(); ++s) {
    const Window& w = *windows[s];
    const auto fed = static_cast<int32_t>(w.tokens.size()) - 1;  // the last token is a target
    if (fed > blocks_per_seq_ * kBlockSize) {
      fail("WindowRunner: a window of ", w.tokens.size(), " tokens exceeds the context");
    }
    const int32_t row0 = b.query_start.back();
    const int64_t first_slot = static_cast<int64_t>(s) * blocks_per_seq_ * kBlockSize;
    for (int32_t p = 0; p < fed; ++p) {
      b.token_ids.push_back(w.tokens[static_cast<size_t>(p)]);
      b.positions.push_back(p);
      b.slot_mapping.push_back(first_slot + p);
      if (p >= w.first_scored) b.logit_rows.push_back(row0 + p);
    }
    b.query_start.push_back(row0 + fed);
    for (int32_t k = 0; k < blocks_per_seq_; ++k) {
      b.block_table.push_back(static_cast<int32_t>(s) * blocks_per_seq_ + k);
    }
  }
  model_.forward(backend_, b, kv_, logits_);
  return logits_;
}

}  // namespace pagoda::bench
