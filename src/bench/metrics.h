// Serving-benchmark arithmetic: per-request latencies from client-side timelines, their
// summaries, and the run's throughputs and goodput. Definitions follow vLLM's `bench serve`, so
// numbers from both tools can be put side by side:
//   TTFT  first output arrival - request sent
//   TPOT  (E2EL - TTFT) / (output tokens - 1); undefined for requests of <= 1 output token
//   ITL   gaps between consecutive output arrivals (a streamed chunk may carry several tokens)
//   E2EL  response complete - request sent
// Times are seconds; report writers convert.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pagoda {

// The p-th percentile (0 <= p <= 100) of `values`, by linear interpolation between the closest
// ranks: rank = p / 100 * (n - 1) over the sorted values, so percentile(x, 50) is the median
// and 0 / 100 are min / max. This is numpy.percentile's default (method="linear"). Throws Error
// for an empty list or p outside [0, 100].
double percentile(std::vector<double> values, double p);

struct Summary {
  uint64_t num_samples = 0;  // 0: nothing was measured, and every value below is 0 (as vLLM prints)
  double mean = 0;
  double std_dev = 0;  // population (numpy.std, ddof = 0), as vLLM reports it
  double median = 0;
  double p90 = 0;
  double p99 = 0;
  double min = 0;
  double max = 0;
};
Summary summarize(std::vector<double> values);

// One request as the client saw it. Times are seconds from any fixed origin (a steady clock).
struct RequestTimeline {
  bool success = false;
  std::string error;              // why it failed; empty on success
  double start_s = 0;             // request sent
  std::vector<double> arrival_s;  // each streamed chunk of output, in order
  double end_s = 0;               // response complete
  uint64_t num_prompt_tokens = 0;
  uint64_t num_output_tokens = 0;  // as the server counted them (chunks may bundle tokens)
};

struct RequestMetrics {
  std::optional<double> ttft_s;  // nullopt when nothing streamed (no arrival to time)
  std::optional<double> tpot_s;  // nullopt when num_output_tokens <= 1 or TTFT is unknown
  std::vector<double> itl_s;     // arrival_s.size() - 1 gaps
  double e2el_s = 0;
};
// Throws Error when the timeline is out of order (arrivals before the start, after the end, or
// going backwards): a clock bug in the client, which would otherwise give negative latencies.
RequestMetrics request_metrics(const RequestTimeline& timeline);

// Service-level objectives for goodput; a request is good when it meets every limit given.
struct SloLimits {
  std::optional<double> ttft_s;
  std::optional<double> tpot_s;
  std::optional<double> e2el_s;
  bool any() const { return ttft_s || tpot_s || e2el_s; }
};
// vLLM's rule: a limit is met when value <= limit; a request of <= 1 output token has TPOT 0
// for this purpose (it meets any TPOT limit). Unknown TTFT (nothing streamed) never meets a TTFT
// limit, and unknown TPOT because of it never meets a TPOT limit: a claim we cannot check is
// not counted as good.
bool meets_slo(const RequestMetrics& metrics, uint64_t num_output_tokens, const SloLimits& limits);

struct BenchMetrics {
  uint64_t num_requests = 0;  // num_completed + num_failed: a failed request is never dropped
  uint64_t num_completed = 0;
  uint64_t num_failed = 0;
  std::vector<std::string> errors;  // one per failed request, in request order
  double duration_s = 0;
  uint64_t total_prompt_tokens = 0;  // completed requests only, as vLLM counts
  uint64_t total_output_tokens = 0;
  double request_throughput = 0;          // completed requests / s
  double output_throughput = 0;           // output tokens / s
  double total_token_throughput = 0;      // (prompt + output tokens) / s
  std::optional<double> request_goodput;  // good requests / s; set when any SLO limit was given
  uint64_t num_good = 0;
  Summary ttft_s;  // completed requests that streamed at least one chunk
  Summary tpot_s;  // completed requests with > 1 output token
  Summary itl_s;   // every gap of every completed request
  Summary e2el_s;  // completed requests
};

// `duration_s` is the wall time of the whole run (first send to last completion), > 0.
BenchMetrics aggregate_metrics(const std::vector<RequestTimeline>& requests, double duration_s,
                               const SloLimits& limits = {});

}  // namespace pagoda
