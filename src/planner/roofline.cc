#include "planner/roofline.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace pagoda {

DeviceRates device_rates(const HardwareProfile& p, const std::string& compute_type,
                         int num_devices) {
  if (num_devices < 1) fail("--gpus must be at least 1");
  DeviceRates r;
  r.bandwidth = p.get("bandwidth_gbs") * 1e9 * p.get("bandwidth_efficiency");
  const double efficiency = p.get("compute_efficiency");
  r.matmul_flops = p.get(compute_key(compute_type, p)) * 1e12 * efficiency;
  r.attention_flops = p.get(attention_compute_key(p)) * 1e12 * efficiency;
  r.step_overhead_s = p.get("step_overhead_ms") * 1e-3;
  r.layer_overhead_s = p.get("layer_overhead_us") * 1e-6;
  r.overlap = p.get("overlap");
  r.num_devices = num_devices;
  r.link_bandwidth = p.get("link_gbs") * 1e9;
  r.link_latency_s = p.get("link_latency_us") * 1e-6;
  if (num_devices > 1 && r.link_bandwidth <= 0) {
    fail("--gpus ", num_devices, ": hardware ", p.name,
         " has no link between devices (link_gbs is 0; set it with --hw link_gbs=...)");
  }
  return r;
}

double matmul_flops(const ModelCost& cost, int64_t num_tokens, int64_t num_logit_rows) {
  const WeightEstimate& w = cost.weights;
  const double rows = static_cast<double>(num_tokens);
  const double logit_rows = static_cast<double>(num_logit_rows);
  return 2.0 * (static_cast<double>(w.layer_parameters) * rows -
                static_cast<double>(w.tail_parameters) * (rows - logit_rows) +
                static_cast<double>(w.output_parameters) * logit_rows);
}

double attention_flops(const ModelConfig& c, int64_t num_new, int64_t context) {
  // Query i of n (0-based) sees context - n + i + 1 keys: n x context - n (n - 1) / 2 pairs.
  const double n = static_cast<double>(num_new), ctx = static_cast<double>(context);
  const double pairs = n * ctx - n * (n - 1) / 2;
  return 4.0 * c.head_dim * c.num_heads * c.num_layers * pairs;
}

void StepLoad::add_request(const ModelCost& cost, int64_t num_new, int64_t context, bool logits) {
  num_tokens += num_new;
  num_logit_rows += logits ? 1 : 0;
  attention_flops += pagoda::attention_flops(cost.config, num_new, context);
  kv_bytes += static_cast<double>(cost.kv_bytes_per_token) * static_cast<double>(context);
}

uint32_t kv_heads_per_device(const ModelConfig& c, int num_devices) {
  const uint32_t n = static_cast<uint32_t>(num_devices);
  return std::max(1u, (c.num_kv_heads + n - 1) / n);
}

namespace {
double phase_time(double memory_s, double compute_s, double overlap) {
  return memory_s + compute_s - overlap * std::min(memory_s, compute_s);
}
}  // namespace

StepTime step_time(const ModelCost& cost, const DeviceRates& r, const StepLoad& load) {
  const double devices = r.num_devices;
  const ModelConfig& c = cost.config;
  StepTime t;
  t.overhead_s = r.step_overhead_s + r.layer_overhead_s * c.num_layers;
  const double weight_bytes = static_cast<double>(cost.weights.bytes_per_step()) / devices;
  const double mm_flops = matmul_flops(cost, load.num_tokens, load.num_logit_rows) / devices;
  const double mm_memory_s = weight_bytes / r.bandwidth, mm_compute_s = mm_flops / r.matmul_flops;
  t.matmul_s = phase_time(mm_memory_s, mm_compute_s, r.overlap);
  t.matmul_compute_bound = mm_compute_s > mm_memory_s;
  const double kv_share =
      c.num_kv_heads ? static_cast<double>(kv_heads_per_device(c, r.num_devices)) / c.num_kv_heads
                     : 1.0;
  const double att_memory_s = load.kv_bytes * kv_share / r.bandwidth;
  const double att_compute_s = load.attention_flops / devices / r.attention_flops;
  t.attention_s = phase_time(att_memory_s, att_compute_s, r.overlap);
  t.attention_compute_bound = att_compute_s > att_memory_s;
  if (r.num_devices > 1) {
    // Two ring all-reduces per layer (after attention and after the feed-forward block) of the
    // step's F16 activations: each device sends and receives 2 (N - 1) / N of them, in
    // 2 (N - 1) hops.
    const double bytes = static_cast<double>(load.num_tokens) * c.hidden_size * 2.0;
    const double one = 2.0 * (devices - 1) / devices * bytes / r.link_bandwidth +
                       2.0 * (devices - 1) * r.link_latency_s;
    t.comm_s = 2.0 * c.num_layers * one;
  }
  t.total_s = t.overhead_s + t.matmul_s + t.attention_s + t.comm_s;
  return t;
}

DeviceMemory device_memory(const ModelCost& cost, const HardwareProfile& p, int num_devices,
                           uint64_t overhead_bytes, uint64_t seq_len, int64_t max_num_seqs) {
  DeviceMemory m;
  const double memory = p.get("memory_gib") * 1073741824.0 * p.get("memory_utilization");
  m.usable_bytes = static_cast<uint64_t>(memory);
  const uint64_t n = static_cast<uint64_t>(num_devices);
  m.weight_bytes = (cost.weights.num_bytes + n - 1) / n;
  m.overhead_bytes = overhead_bytes;
  const ModelConfig& c = cost.config;
  m.kv_bytes_per_token = c.num_kv_heads ? cost.kv_bytes_per_token *
                                              kv_heads_per_device(c, num_devices) / c.num_kv_heads
                                        : cost.kv_bytes_per_token;
  const uint64_t fixed = m.weight_bytes + m.overhead_bytes;
  m.state_bytes_per_sequence = state_bytes_per_sequence(c);
  if (m.state_bytes_per_sequence == 0) {
    if (m.usable_bytes > fixed && m.kv_bytes_per_token > 0) {
      m.kv_capacity_tokens = (m.usable_bytes - fixed) / m.kv_bytes_per_token;
    }
    m.max_batch = seq_len ? m.kv_capacity_tokens / seq_len : 0;
  } else if (m.usable_bytes > fixed && seq_len > 0) {
    // Each sequence of seq_len tokens takes its K/V and a state slot; the slots the plan runs
    // at once come first, the K/V has the rest.
    const uint64_t room = m.usable_bytes - fixed;
    m.max_batch = room / (m.kv_bytes_per_token * seq_len + m.state_bytes_per_sequence);
    m.state_slots = max_num_seqs > 0 ? std::min(m.max_batch, static_cast<uint64_t>(max_num_seqs))
                                     : m.max_batch;
    m.state_bytes = m.state_slots * m.state_bytes_per_sequence;
    if (m.kv_bytes_per_token > 0) {
      m.kv_capacity_tokens = (room - m.state_bytes) / m.kv_bytes_per_token;
    }
  }
  m.fits = m.max_batch > 0;
  return m;
}

}  // namespace pagoda
