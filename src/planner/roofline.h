// The roofline model of one engine step: every weight matrix is read once per step and
// multiplies every scheduled row; attention reads each sequence's K/V and multiplies its
// queries by them. Each of the two phases takes the longer of its bytes over the bandwidth and
// its flops over the compute rate, plus the part of the shorter that does not hide under it
// (the profile's overlap: 1 on GPUs, a roofline; 0 on CPUs, whose cores issue both the loads
// and the multiply-adds, so the times add). The phases run one after the other; fixed
// overheads per step and per layer and, across devices, two all-reduces per layer come on top.
// Decode is then bound by bytes (weights once per step plus each sequence's KV), prefill by flops.
#pragma once

#include <cstdint>
#include <string>

#include "planner/estimate.h"
#include "planner/hardware.h"
#include "model/config.h"

namespace pagoda {

// The model as the step model sees it, all devices together.
struct ModelCost {
  ModelConfig config;
  WeightEstimate weights;
  uint64_t kv_bytes_per_token = 0;  // every layer's K and V at the cache's type
};

// Rates a step reaches on one device, and how many devices split the model (tensor parallel:
// every matrix and the attention heads split evenly, K/V heads too unless there are fewer of
// them than devices, which then hold copies).
struct DeviceRates {
  double bandwidth = 0;        // bytes/s
  double matmul_flops = 0;     // flop/s of the weight products
  double attention_flops = 0;  // flop/s of attention
  double step_overhead_s = 0;
  double layer_overhead_s = 0;  // per layer per step
  double overlap = 1;           // of the shorter of memory and compute time, hidden
  int num_devices = 1;
  double link_bandwidth = 0;  // bytes/s, one direction
  double link_latency_s = 0;  // per hop of a ring all-reduce
};
// The profile's figures times its efficiencies, at the compute figure the weight type uses.
// Throws Error for several devices without a link.
DeviceRates device_rates(const HardwareProfile& profile, const std::string& compute_type,
                         int num_devices);

// What one step computes, for the whole model.
struct StepLoad {
  int64_t num_tokens = 0;      // rows through every layer
  int64_t num_logit_rows = 0;  // rows through the last layer's tail and the output matrix
  double attention_flops = 0;
  double kv_bytes = 0;  // K/V attention reads
  // A sequence that computes `num_new` tokens, reaching `context` tokens (its K/V included);
  // `logits` when the step samples it.
  void add_request(const ModelCost& cost, int64_t num_new, int64_t context, bool logits);
};

struct StepTime {
  double total_s = 0;
  double matmul_s = 0;
  double attention_s = 0;
  double comm_s = 0;
  double overhead_s = 0;
  bool matmul_compute_bound = false;
  bool attention_compute_bound = false;
};
StepTime step_time(const ModelCost& cost, const DeviceRates& rates, const StepLoad& load);

// Flops of the weight products of a step: 2 per parameter per row, the last layer's
// attention output and feed-forward matrices and the output matrix only for the logit rows.
double matmul_flops(const ModelCost& cost, int64_t num_tokens, int64_t num_logit_rows);
// Attention flops of `num_new` queries ending at `context` (causal): 4 x head_dim x heads x
// layers per (query, key) pair, for the two products Q.K and P.V.
double attention_flops(const ModelConfig& config, int64_t num_new, int64_t context);

// One device's share of memory under tensor parallelism.
struct DeviceMemory {
  uint64_t usable_bytes = 0;  // memory x memory_utilization
  uint64_t weight_bytes = 0;  // the weights / devices
  uint64_t overhead_bytes = 0;
  uint64_t kv_bytes_per_token = 0;
  uint64_t kv_capacity_tokens = 0;  // what is left over for K/V, in tokens
  uint64_t max_batch = 0;           // sequences of seq_len tokens that fit (with their state)
  bool fits = false;                // the weights and overhead fit, with room for a sequence
  // A hybrid model's recurrent state (estimate.h: state_bytes_per_sequence): the engine holds a
  // fixed slot per sequence a step may run (--max-seqs), whatever its length. The plan counts
  // one for each of the sequences it runs at once, the fewer of max_batch and max_num_seqs,
  // before the K/V takes what is left. 0 for other models.
  uint64_t state_bytes_per_sequence = 0;
  uint64_t state_slots = 0;
  uint64_t state_bytes = 0;  // state_slots x state_bytes_per_sequence
};
// max_num_seqs: the most sequences a step runs (0: no limit), which a hybrid model holds a
// state slot each for.
DeviceMemory device_memory(const ModelCost& cost, const HardwareProfile& profile, int num_devices,
                           uint64_t overhead_bytes, uint64_t seq_len, int64_t max_num_seqs = 0);

// K/V heads one of `num_devices` devices holds.
uint32_t kv_heads_per_device(const ModelConfig& config, int num_devices);

}  // namespace pagoda
