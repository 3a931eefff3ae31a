#include "bench/metrics.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace pagoda {
namespace {

double percentile_of_sorted(const std::vector<double>& sorted, double p) {
  const double rank = p / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t lower = static_cast<size_t>(std::floor(rank));
  const size_t upper = std::min(lower + 1, sorted.size() - 1);
  const double fraction = rank - static_cast<double>(lower);
  return sorted[lower] + fraction * (sorted[upper] - sorted[lower]);
}

}  // namespace

double percentile(std::vector<double> values, double p) {
  if (values.empty()) fail("percentile of an empty list");
  if (!(p >= 0 && p <= 100)) fail("percentile ", p, " is outside [0, 100]");
  std::sort(values.begin(), values.end());
  return percentile_of_sorted(values, p);
}

Summary summarize(std::vector<double> values) {
  Summary s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  const double n = static_cast<double>(values.size());
  double sum = 0;
  for (double v : values) sum += v;
  s.num_samples = values.size();
  s.mean = sum / n;
  double squares = 0;
  for (double v : values) squares += (v - s.mean) * (v - s.mean);
  s.std_dev = std::sqrt(squares / n);
  s.median = percentile_of_sorted(values, 50);
  s.p90 = percentile_of_sorted(values, 90);
  s.p99 = percentile_of_sorted(values, 99);
  s.min = values.front();
  s.max = values.back();
  return s;
}

RequestMetrics request_metrics(const RequestTimeline& t) {
  if (t.end_s < t.start_s) {
    fail("request timeline: ends (", t.end_s, ") before it starts (", t.start_s, ")");
  }
  RequestMetrics m;
  m.e2el_s = t.end_s - t.start_s;
  for (size_t i = 0; i < t.arrival_s.size(); ++i) {
    const double previous = i == 0 ? t.start_s : t.arrival_s[i - 1];
    if (t.arrival_s[i] < previous || t.arrival_s[i] > t.end_s) {
      fail("request timeline: output arrival at ", t.arrival_s[i], " is out of order (start ",
           t.start_s, ", end ", t.end_s, ")");
    }
    if (i > 0) m.itl_s.push_back(t.arrival_s[i] - previous);
  }
  if (t.arrival_s.empty()) return m;
  m.ttft_s = t.arrival_s.front() - t.start_s;
  if (t.num_output_tokens > 1) {
    m.tpot_s = (m.e2el_s - *m.ttft_s) / static_cast<double>(t.num_output_tokens - 1);
  }
  return m;
}

bool meets_slo(const RequestMetrics& m, uint64_t num_output_tokens, const SloLimits& limits) {
  if (limits.ttft_s && !(m.ttft_s && *m.ttft_s <= *limits.ttft_s)) return false;
  if (limits.tpot_s) {
    if (num_output_tokens > 1 && !(m.tpot_s && *m.tpot_s <= *limits.tpot_s)) return false;
  }
  if (limits.e2el_s && !(m.e2el_s <= *limits.e2el_s)) return false;
  return true;
}

BenchMetrics aggregate_metrics(const std::vector<RequestTimeline>& requests, double duration_s,
                               const SloLimits& limits) {
  if (!(duration_s > 0)) fail("benchmark duration must be > 0 seconds, got ", duration_s);
  BenchMetrics b;
  b.duration_s = duration_s;
  b.num_requests = requests.size();
  std::vector<double> ttfts, tpots, itls, e2els;
  for (const auto& r : requests) {
    if (!r.success) {
      ++b.num_failed;
      b.errors.push_back(r.error.empty() ? "(no error message)" : r.error);
      continue;
    }
    ++b.num_completed;
    const RequestMetrics m = request_metrics(r);
    b.total_prompt_tokens += r.num_prompt_tokens;
    b.total_output_tokens += r.num_output_tokens;
    if (m.ttft_s) ttfts.push_back(*m.ttft_s);
    if (m.tpot_s) tpots.push_back(*m.tpot_s);
    itls.insert(itls.end(), m.itl_s.begin(), m.itl_s.end());
    e2els.push_back(m.e2el_s);
    if (limits.any() && meets_slo(m, r.num_output_tokens, limits)) ++b.num_good;
  }
  b.request_throughput = static_cast<double>(b.num_completed) / duration_s;
  b.output_throughput = static_cast<double>(b.total_output_tokens) / duration_s;
  b.total_token_throughput =
      static_cast<double>(b.total_prompt_tokens + b.total_output_tokens) / duration_s;
  if (limits.any()) b.request_goodput = static_cast<double>(b.num_good) / duration_s;
  b.ttft_s = summarize(std::move(ttfts));
  b.tpot_s = summarize(std::move(tpots));
  b.itl_s = summarize(std::move(itls));
  b.e2el_s = summarize(std::move(e2els));
  return b;
}

}  // namespace pagoda
