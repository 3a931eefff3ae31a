#include "planner/deployment.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace pagoda {

Deployment estimate_deployment(const ModelCost& cost, const HardwareProfile& profile,
                               const DeploymentOptions& o) {
  if (o.lengths.empty()) fail("estimate: the workload has no requests");
  Deployment d;
  d.profile = profile;
  d.num_devices = o.num_devices;
  d.rates = device_rates(profile, cost.weights.compute_type, o.num_devices);
  int64_t longest = 0;
  for (const auto& [prompt, output] : o.lengths) {
    longest = std::max(longest, prompt + output);
    d.mean_prompt_len += static_cast<double>(prompt);
    d.mean_output_len += static_cast<double>(output);
  }
  d.mean_prompt_len /= static_cast<double>(o.lengths.size());
  d.mean_output_len /= static_cast<double>(o.lengths.size());
  d.seq_len = o.seq_len ? o.seq_len : static_cast<uint64_t>(longest);
  d.memory = device_memory(
      cost, profile, o.num_devices,
      o.overhead_bytes ? *o.overhead_bytes : default_overhead_bytes(cost.config), d.seq_len,
      o.max_num_seqs);
  d.max_num_seqs = d.memory.state_bytes_per_sequence
                       ? static_cast<int64_t>(d.memory.state_slots)
                       : o.max_num_seqs;
  d.usd_per_month = profile.get("price_per_hour") * o.num_devices * kHoursPerMonth;
  if (!d.memory.fits) return d;

  const int64_t prompt = std::max<int64_t>(1, std::llround(d.mean_prompt_len));
  const int64_t output = std::max<int64_t>(1, std::llround(d.mean_output_len));
  const int64_t fits = static_cast<int64_t>(d.memory.max_batch);
  d.batches_end = fits <= o.max_num_seqs ? "memory" : "max_num_seqs";
  for (int64_t b : batch_sizes(std::min(fits, o.max_num_seqs))) {
    d.batches.push_back(batch_point(cost, d.rates, b, prompt, output, o.max_num_batched_tokens));
    const size_t n = d.batches.size();
    if (n >= 2 && d.batches[n - 1].decode_tokens_per_s <
                      d.batches[n - 2].decode_tokens_per_s * (1 + kBatchGain)) {
      d.batches_end = "throughput";
      break;
    }
  }
  if (!o.capacity) return d;
  SimEngine engine;
  engine.max_num_seqs = d.max_num_seqs;
  engine.max_num_batched_tokens = o.max_num_batched_tokens;
  engine.kv_capacity_tokens = d.memory.kv_capacity_tokens;
  if (static_cast<uint64_t>(longest) > engine.kv_capacity_tokens) {
    fail("estimate: the workload's longest request (", longest, " tokens) does not fit the ",
         engine.kv_capacity_tokens, " K/V slots left on a device");
  }
  d.capacity = find_capacity(o.lengths, engine, cost, d.rates, o.slo);
  d.cost = cost_per_token(profile.get("price_per_hour") * o.num_devices, d.capacity->max_qps,
                          d.mean_prompt_len, d.mean_output_len, d.capacity->prefill_share);
  d.saturated_cost =
      cost_per_token(profile.get("price_per_hour") * o.num_devices, d.capacity->saturated_qps,
                     d.mean_prompt_len, d.mean_output_len, d.capacity->saturated_prefill_share);
  if (o.target_qps && d.capacity->max_qps > 0) {
    d.target_replicas = static_cast<int64_t>(std::ceil(*o.target_qps / d.capacity->max_qps - 1e-9));
    d.target_usd_per_month = static_cast<double>(d.target_replicas) * d.usd_per_month;
  }
  return d;
}

}  // namespace pagoda
