// The step model run forward in time: requests arrive, pagoda's scheduler policy (one token
// budget per step; running requests first, oldest first, a prompt chunked by what is left of
// the budget; then waiting requests admitted first come, first served while the budget,
// max_num_seqs and K/V memory last) decides each step, and the roofline prices it. From it:
// the per-batch-size speed table, the offline runs `pagoda bench` measures (for --calibrate),
// the largest request rate that meets a latency service level, and what a token costs.
#pragma once

#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "planner/roofline.h"

namespace pagoda {

struct SimRequest {
  double arrival_s = 0;
  int64_t prompt_len = 0;
  int64_t output_len = 0;  // tokens sampled, the first by the step that ends the prompt
};

struct SimEngine {
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 2048;
  // K/V slots of a device. A request is admitted only when prompt + output more slots are
  // free (reserving its whole length, so nothing is ever preempted).
  uint64_t kv_capacity_tokens = std::numeric_limits<uint64_t>::max();
};

struct SimRequestResult {
  double arrival_s = 0;
  double first_token_s = 0;
  double last_token_s = 0;
  int64_t num_output_tokens = 0;
  double ttft_s() const { return first_token_s - arrival_s; }
  // (last - first) / (tokens - 1), as `pagoda bench` reports it; NaN below two tokens.
  double tpot_s() const;
};

struct SimResult {
  std::vector<SimRequestResult> requests;  // in the order given
  double end_s = 0;                        // when the last step ended
  int64_t num_steps = 0;
  double busy_s = 0;
  // The busy time split between prompt and output tokens: each step's time in proportion to
  // the time its prompt tokens alone and its decoding sequences alone would take.
  double prefill_s = 0;
  double decode_s = 0;
  int64_t num_prompt_tokens = 0;
  int64_t num_output_tokens = 0;
  double mean_ttft_s() const;
  double mean_tpot_s() const;  // over requests with two tokens or more; NaN without
};

// Throws Error when a request alone needs more K/V slots than the engine has, or has an empty
// prompt or output.
SimResult simulate(std::vector<SimRequest> requests, const SimEngine& engine, const ModelCost& cost,
                   const DeviceRates& rates);

// Speed at one batch size: `batch` sequences decoding together at the mean context of the
// output (prompt + output / 2), and `batch` prompts arriving at once and prefilled through the
// token budget.
struct BatchPoint {
  int64_t batch = 0;
  double decode_step_s = 0;  // = time per output token of each sequence
  bool decode_compute_bound = false;
  double decode_tokens_per_s = 0;   // batch / decode_step_s
  double prefill_tokens_per_s = 0;  // batch x prompt / time to the last first token
  double ttft_mean_s = 0;           // mean time to first token of the batch's prompts
  double ttft_last_s = 0;
};
BatchPoint batch_point(const ModelCost& cost, const DeviceRates& rates, int64_t batch,
                       int64_t prompt_len, int64_t output_len, int64_t max_num_batched_tokens);
// 1, 2, 4, ... below max_batch, then max_batch.
std::vector<int64_t> batch_sizes(int64_t max_batch);

struct ServiceLevel {
  double ttft_s = 2.0;
  double tpot_s = 0.1;
  double percentile = 90;  // of requests' TTFT and of their TPOT
};

struct CapacityResult {
  double max_qps = 0;        // 0: no rate meets the service level
  double ttft_at_max_s = 0;  // the percentiles at max_qps
  double tpot_at_max_s = 0;
  double mean_concurrency_at_max = 0;  // requests in the system on average (Little's law)
  double input_tokens_per_s = 0;
  double output_tokens_per_s = 0;
  double prefill_share = 0;  // of the busy time, at max_qps
  double saturated_qps = 0;  // every request at once: the most it serves at any latency
  double saturated_prefill_share = 0;
  double alone_ttft_s = 0;  // one request on an idle server
  double alone_tpot_s = 0;
  // What stops a higher rate: "TTFT", "TPOT", "throughput" (the saturated rate meets the
  // service level) or "nothing meets".
  const char* limit = "";
};
// `lengths`: (prompt, output) per request; arrivals are Poisson (a fixed seed), scaled to
// each rate tried; the rate is found by bisection to within 1 %.
CapacityResult find_capacity(const std::vector<std::pair<int64_t, int64_t>>& lengths,
                             const SimEngine& engine, const ModelCost& cost,
                             const DeviceRates& rates, const ServiceLevel& slo);

struct CostFigures {
  double usd_per_hour = 0;  // every device of a replica
  double usd_per_million_input = 0;
  double usd_per_million_output = 0;
  double usd_per_million_tokens = 0;  // input and output together
};
// At a request rate served by one replica: the price of an hour over the tokens of an hour,
// split between input and output by the busy-time shares.
CostFigures cost_per_token(double usd_per_hour, double qps, double mean_prompt_len,
                           double mean_output_len, double prefill_share);

// p-th percentile (numpy's linear method) of the finite values; NaN when none.
double percentile_of(std::vector<double> values, double p);

}  // namespace pagoda
