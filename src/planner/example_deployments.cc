#include "planner/example_deployments.h"

#include <cmath>

#include "planner/estimate_report.h"

namespace pagoda {
namespace {

constexpr double kGiB = 1073741824.0;

ModelCost preset_cost(const std::string& preset, const std::string& weights_type,
                      const std::string& kv_type) {
  ModelCost cost;
  cost.config = find_estimate_preset(preset).config;
  cost.weights = estimate_weights(cost.config, weights_type);
  cost.kv_bytes_per_token = kv_bytes_per_token(cost.config, kv_type);
  return cost;
}

std::string dollars(double usd) { return strf("$%.0f", usd); }

// The notes: wherever the seed's figure, or the deployment as the seed states it, is not what
// the arithmetic gives.
std::vector<std::string> notes_for(const ExampleDeploymentResult& r, const ExampleDeploymentOptions& options) {
  std::vector<std::string> notes;
  const Deployment& d = r.deployment;
  const DeviceMemory& m = d.memory;
  const double price = d.profile.get("price_per_hour");
  if (r.row.claimed_usd_per_month > 0 && price > 0) {
    const double ratio = d.usd_per_month / r.row.claimed_usd_per_month;
    if (ratio > 1.25 || ratio < 0.8) {
      notes.push_back(
          strf("the seed's %s/month is $%.2f/h; %s lists at $%.2f/h (%s), %s/month "
               "for %d: %.1fx the seed's",
               dollars(r.row.claimed_usd_per_month).c_str(), r.row.claimed_usd_per_month / kHoursPerMonth,
               d.profile.name.c_str(), price, d.profile.source("price_per_hour").c_str(),
               dollars(d.usd_per_month).c_str(), d.num_devices, ratio));
    }
  }
  if (!m.fits) {
    notes.push_back(
        strf("does not fit: weights %.1f GiB + activations %.1f GiB per device "
             "leave no room for a %llu-token sequence in %.1f GiB usable",
             m.weight_bytes / kGiB, m.overhead_bytes / kGiB,
             static_cast<unsigned long long>(d.seq_len), m.usable_bytes / kGiB));
    // What would make it fit: all of the memory, and an FP8 cache.
    HardwareProfile all = d.profile;
    all.set("memory_utilization", 0.97, "what-if");
    ModelCost fp8_kv = r.cost;
    fp8_kv.kv_bytes_per_token = kv_bytes_per_token(r.cost.config, "fp8");
    const DeviceMemory tight =
        device_memory(r.cost, all, d.num_devices, m.overhead_bytes, d.seq_len);
    const DeviceMemory tight_fp8 =
        device_memory(fp8_kv, all, d.num_devices, m.overhead_bytes, d.seq_len);
    notes.push_back(
        strf("at 97%% of the memory (%.1f GiB) it holds %llu sequences of %llu "
             "tokens, %llu with an FP8 K/V cache",
             tight.usable_bytes / kGiB, static_cast<unsigned long long>(tight.max_batch),
             static_cast<unsigned long long>(d.seq_len),
             static_cast<unsigned long long>(tight_fp8.max_batch)));
    return notes;
  }
  if (d.num_devices > 1) {
    const DeviceMemory one = device_memory(r.cost, d.profile, 1, m.overhead_bytes, d.seq_len);
    if (one.fits) {
      notes.push_back(
          strf("one %s already holds it (weights %.1f GiB, %llu sequences of %llu tokens); the "
               "second device buys K/V room (%llu sequences) and bandwidth, not the fit",
               d.profile.name.c_str(), one.weight_bytes / kGiB,
               static_cast<unsigned long long>(one.max_batch),
               static_cast<unsigned long long>(d.seq_len),
               static_cast<unsigned long long>(m.max_batch)));
    }
  }
  if (d.capacity && r.row.claimed_qps_high > 0) {
    const CapacityResult& c = *d.capacity;
    const double qps = c.max_qps;
    if (qps <= 0) {
      notes.push_back(
          strf("no request rate meets the service level: a lone request already "
               "takes %.2f s to its first token and %.0f ms per token",
               c.alone_ttft_s, c.alone_tpot_s * 1e3));
    } else if (qps < r.row.claimed_qps_low * 0.8 || qps > r.row.claimed_qps_high * 1.25) {
      const double lo = std::ceil(r.row.claimed_qps_low / qps - 1e-9);
      const double hi = std::ceil(r.row.claimed_qps_high / qps - 1e-9);
      std::string cost;
      if (price > 0) {
        cost = strf(": %s-%s/month", dollars(lo * d.usd_per_month).c_str(),
                    dollars(hi * d.usd_per_month).c_str());
      }
      notes.push_back(
          strf("%.2g requests/s meet the service level here (%.2g at any latency), "
               "not %g-%g; %g-%g QPS takes %.0f-%.0f replicas%s",
               qps, c.saturated_qps, r.row.claimed_qps_low, r.row.claimed_qps_high, r.row.claimed_qps_low,
               r.row.claimed_qps_high, lo, hi, cost.c_str()));
    }
    // The seed names no lengths: what short requests would give.
    DeploymentOptions shorter = options.deployment;
    shorter.num_devices = d.num_devices;
    shorter.lengths.assign(options.deployment.lengths.size(), {128, 128});
    shorter.target_qps.reset();
    const Deployment s = estimate_deployment(r.cost, d.profile, shorter);
    if (s.capacity) {
      notes.push_back(strf("with 128-token prompts and replies: %.2g requests/s within the "
                           "service level, %.2g at any latency",
                           s.capacity->max_qps, s.capacity->saturated_qps));
    }
  }
  if (d.profile.kind == DeviceKind::kCpu && options.this_machine) {
    const HardwareProfile& here = *options.this_machine;
    const DeviceRates rates = device_rates(here, r.cost.weights.compute_type, 1);
    StepLoad one;
    one.add_request(r.cost, 1, std::llround(d.mean_prompt_len + d.mean_output_len / 2), true);
    const double tok_s = 1 / step_time(r.cost, rates, one).total_s;
    const double scale = d.rates.bandwidth / rates.bandwidth;
    notes.push_back(
        strf("%s (%.1f GB/s effective) would decode it at %.1f tokens/s "
             "alone; scaled by bandwidth to the box's %.1f GB/s: %.1f tokens/s",
             here.description.c_str(), rates.bandwidth / 1e9, tok_s, d.rates.bandwidth / 1e9,
             tok_s * scale));
  }
  return notes;
}

}  // namespace

const std::vector<ExampleDeployment>& example_deployment_rows() {
  // The 7B and 13B rows take Llama 2's shapes (Llama 3 has no 13B), the 70B rows Llama 3's.
  static const std::vector<ExampleDeployment> rows = {
      {"7B AWQ-4bit on one A10 24 GB", "llama-2-7b", "awq-4bit", "f16", "a10", 1,
       "10-20 QPS, about $200/month", 10, 20, 200},
      {"13B on an A100 40 GB", "llama-2-13b", "f16", "f16", "a100-40gb", 1, "", 0, 0, 0},
      {"70B AWQ-4bit on 2 x A100 80 GB", "llama-3-70b", "awq-4bit", "f16", "a100-80gb", 2, "", 0, 0,
       0},
      {"70B FP8 on one H100", "llama-3-70b", "fp8", "f16", "h100", 1, "", 0, 0, 0},
      {"7B GGUF Q4 on a 32 GB CPU box", "llama-2-7b", "q4_0", "f16", "cpu-32gb", 1,
       "1-5 QPS, about $50/month", 1, 5, 50},
  };
  return rows;
}

std::vector<ExampleDeploymentResult> estimate_example_deployments(const ExampleDeploymentOptions& options) {
  std::vector<ExampleDeploymentResult> out;
  for (const ExampleDeployment& row : example_deployment_rows()) {
    ExampleDeploymentResult r;
    r.row = row;
    r.cost = preset_cost(row.preset, row.weights_type, row.kv_type);
    DeploymentOptions o = options.deployment;
    o.num_devices = row.num_devices;
    r.deployment = estimate_deployment(r.cost, find_hardware_preset(row.hardware), o);
    r.notes = notes_for(r, options);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace pagoda
