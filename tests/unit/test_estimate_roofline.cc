// The speed model's arithmetic against hand-computed cases: weight bytes of the GPU formats,
// flops per token of a dense decoder, attention flops, the roofline of a step at small and
// large batch, tensor parallelism, per-device memory, the step simulator's scheduling and the
// cost of a token.
#include <gtest/gtest.h>

#include <cmath>

#include "planner/deployment.h"
#include "planner/estimate.h"
#include "planner/roofline.h"
#include "planner/serving_sim.h"
#include "core/error.h"

namespace pagoda {
namespace {

// 2 layers, hidden 64, FFN 128, 4 heads and 2 KV heads of 16, vocabulary 100. Per layer the
// matrices hold q 64x64 + k 32x64 + v 32x64 + o 64x64 + gate, up, down 128x64 = 36864
// parameters; the token table and the output matrix 6400 each; the norms 2 x 2 x 64 + 64.
ModelConfig tiny() {
  ModelConfig c;
  c.architecture = "llama";
  c.num_layers = 2;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.vocab_size = 100;
  c.context_length = 1024;
  return c;
}

ModelCost tiny_cost() {
  ModelCost cost;
  cost.config = tiny();
  cost.weights = estimate_weights(cost.config, "f32");
  cost.kv_bytes_per_token = kv_bytes_per_token(cost.config, "f32");  // 2 x 2 x 32 x 4 = 512
  return cost;
}

DeviceRates rates(double bandwidth, double matmul, double attention, double overhead_s = 0) {
  DeviceRates r;
  r.bandwidth = bandwidth;
  r.matmul_flops = matmul;
  r.attention_flops = attention;
  r.step_overhead_s = overhead_s;
  return r;
}

TEST(EstimateRoofline, WeightSplitOfADenseDecoder) {
  const WeightEstimate w = estimate_weights(tiny(), "f32");
  EXPECT_EQ(w.layer_parameters, 2u * 36864);
  EXPECT_EQ(w.embedding_parameters, 6400u);
  EXPECT_EQ(w.output_parameters, 6400u);
  EXPECT_EQ(w.tail_parameters, 4096u + 3 * 8192);  // the last layer's o, gate, up, down
  EXPECT_EQ(w.num_parameters, 73728u + 12800 + 320);
  EXPECT_EQ(w.num_bytes, 4u * (73728 + 12800 + 320));
  EXPECT_FALSE(w.tied);
  EXPECT_EQ(w.bytes_per_step(), 4u * (73728 + 6400 + 320));  // all but the token table
  EXPECT_EQ(w.compute_type, "F32");
  ModelConfig tied = tiny();
  tied.tie_embeddings = true;
  const WeightEstimate t = estimate_weights(tied, "f32");
  EXPECT_TRUE(t.tied);
  EXPECT_EQ(t.output_parameters, 6400u);  // the output product reads the token table
  EXPECT_EQ(t.bytes_per_step(), t.num_bytes);
}

TEST(EstimateRoofline, GpuFormatBytes) {
  // hidden 256, FFN 512, 4 heads / 2 KV heads of 64: q and o 256x256, k and v 128x256, gate
  // and up 512x256, down 256x512, in 2 layers; token table and output 1000 x 256 in F16.
  ModelConfig c = tiny();
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.head_dim = 64;
  c.vocab_size = 1000;
  const uint64_t f16_tables = 2 * 1000 * 256 * 2, norms = 5 * 256 * 4;
  // AWQ: each row's groups of 128 inputs take 66.5 bytes: q 256 rows x 2 groups = 34048,
  // k and v 17024 each, o 34048, gate and up 512 x 2 groups = 68096 each, down 256 x 4.
  const WeightEstimate awq = estimate_weights(c, "awq-4bit");
  EXPECT_EQ(awq.layer_bytes, 2u * (34048 + 17024 + 17024 + 34048 + 3 * 68096));
  EXPECT_EQ(awq.num_bytes, 2u * 306432 + f16_tables + norms);
  EXPECT_EQ(awq.compute_type, "AWQ-4bit");
  EXPECT_EQ(awq.num_parameters, 2u * 589824 + 2 * 256000 + 1280);
  // FP8 / INT8: a byte per weight and 4 bytes of scale per row.
  const uint64_t fp8_layer = 256 * 260 + 128 * 260 * 2 + 256 * 260 + 2 * 512 * 260 + 256 * 516;
  EXPECT_EQ(estimate_weights(c, "fp8").num_bytes, 2 * fp8_layer + f16_tables + norms);
  EXPECT_EQ(estimate_weights(c, "int8").num_bytes, 2 * fp8_layer + f16_tables + norms);
  EXPECT_EQ(estimate_weights(c, "fp8").compute_type, "FP8");
  // An FP8 K/V cache is a byte per element: 2 x 2 layers x 2 KV heads x 64.
  EXPECT_EQ(kv_bytes_per_token(c, "fp8"), 512u);
  EXPECT_EQ(kv_bytes_per_token(c, "f16"), 1024u);
  EXPECT_EQ(kv_type_label("fp8"), "FP8");
}

TEST(EstimateRoofline, FlopsPerTokenOfADenseDecoder) {
  const ModelCost cost = tiny_cost();
  // Decode: 2 flops per parameter of every layer matrix and of the output matrix.
  EXPECT_DOUBLE_EQ(matmul_flops(cost, 1, 1), 2.0 * (73728 + 6400));
  // A 10-token prompt chunk that samples once: the last layer's o and FFN run one row.
  EXPECT_DOUBLE_EQ(matmul_flops(cost, 10, 1), 2.0 * (73728 * 10 - 28672 * 9 + 6400));
  // A chunk in the middle of a prompt samples nothing.
  EXPECT_DOUBLE_EQ(matmul_flops(cost, 10, 0), 2.0 * (73728 * 10 - 28672 * 10));
  // Attention: 4 x head_dim 16 x 4 heads x 2 layers per (query, key) pair.
  EXPECT_DOUBLE_EQ(attention_flops(tiny(), 1, 100), 512.0 * 100);
  // A 10-token prompt from scratch: 1 + 2 + ... + 10 = 55 pairs.
  EXPECT_DOUBLE_EQ(attention_flops(tiny(), 10, 10), 512.0 * 55);
  // The last 10 tokens of 30: 21 + ... + 30 = 255 pairs.
  EXPECT_DOUBLE_EQ(attention_flops(tiny(), 10, 30), 512.0 * 255);
}

TEST(EstimateRoofline, DecodeAtBatchOneIsBoundByBytes) {
  const ModelCost cost = tiny_cost();
  StepLoad load;
  load.add_request(cost, 1, 100, true);
  const StepTime t = step_time(cost, rates(1e9, 1e11, 1e10, 2e-6), load);
  // Weights: 321792 bytes at 1 GB/s; K/V: 100 tokens x 512 bytes.
  EXPECT_NEAR(t.matmul_s, 321792e-9, 1e-15);
  EXPECT_NEAR(t.attention_s, 51200e-9, 1e-15);
  EXPECT_FALSE(t.matmul_compute_bound);
  EXPECT_FALSE(t.attention_compute_bound);
  EXPECT_NEAR(t.total_s, 2e-6 + 321792e-9 + 51200e-9, 1e-15);
}

TEST(EstimateRoofline, DecodeAtLargeBatchIsBoundByFlops) {
  const ModelCost cost = tiny_cost();
  StepLoad load;
  for (int i = 0; i < 10000; ++i) load.add_request(cost, 1, 100, true);
  const StepTime t = step_time(cost, rates(1e9, 1e11, 1e12), load);
  // 10000 x 160256 flops at 1e11 against 321792 bytes at 1e9.
  EXPECT_NEAR(t.matmul_s, 10000 * 160256.0 / 1e11, 1e-12);
  EXPECT_TRUE(t.matmul_compute_bound);
  // K/V bytes still win over attention flops at 1e12: 10000 x 51200 bytes.
  EXPECT_NEAR(t.attention_s, 10000 * 51200.0 / 1e9, 1e-12);
  EXPECT_FALSE(t.attention_compute_bound);
}

TEST(EstimateRoofline, WithoutOverlapMemoryAndComputeAdd) {
  // A CPU's cores both load and multiply: at batch 10000 the products take 321792 bytes at
  // 1 GB/s plus 10000 x 160256 flops at 1e11, attention its bytes plus its flops.
  const ModelCost cost = tiny_cost();
  StepLoad load;
  for (int i = 0; i < 10000; ++i) load.add_request(cost, 1, 100, true);
  DeviceRates r = rates(1e9, 1e11, 1e12);
  r.overlap = 0;
  StepTime t = step_time(cost, r, load);
  EXPECT_NEAR(t.matmul_s, 321792e-9 + 10000 * 160256.0 / 1e11, 1e-12);
  EXPECT_NEAR(t.attention_s, 10000 * 51200.0 / 1e9 + 10000 * 51200.0 / 1e12, 1e-12);
  // Half the shorter hidden.
  r.overlap = 0.5;
  t = step_time(cost, r, load);
  EXPECT_NEAR(t.matmul_s, 0.5 * 321792e-9 + 10000 * 160256.0 / 1e11, 1e-12);
}

TEST(EstimateRoofline, TensorParallelSplitsBytesFlopsAndAddsAllReduces) {
  const ModelCost cost = tiny_cost();
  StepLoad load;
  load.add_request(cost, 1, 100, true);
  DeviceRates r = rates(1e9, 1e11, 1e10);
  r.num_devices = 2;
  r.link_bandwidth = 1e9;
  r.link_latency_s = 1e-6;
  const StepTime t = step_time(cost, r, load);
  EXPECT_NEAR(t.matmul_s, 321792e-9 / 2, 1e-15);
  EXPECT_NEAR(t.attention_s, 51200e-9 / 2, 1e-15);  // one of the two K/V heads each
  // 2 layers x 2 all-reduces of 1 token x 64 x 2 bytes: 2 (N-1)/N x 128 B at 1 GB/s + 2 hops.
  EXPECT_NEAR(t.comm_s, 4 * (128e-9 + 2e-6), 1e-15);
  // Four devices and two K/V heads: each holds one head, copies, so half the K/V each.
  r.num_devices = 4;
  EXPECT_EQ(kv_heads_per_device(tiny(), 4), 1u);
  EXPECT_NEAR(step_time(cost, r, load).attention_s, 51200e-9 / 2, 1e-15);
}

TEST(EstimateRoofline, PerDeviceMemory) {
  ModelCost cost = tiny_cost();
  HardwareProfile p = find_hardware_preset("a10");
  p.set("memory_gib", 1, "test");
  p.set("memory_utilization", 0.5, "test");
  // 2^29 usable - 347392 weights - 1000 overhead = 536522520 bytes: 1047895 tokens of 512.
  DeviceMemory m = device_memory(cost, p, 1, 1000, 1000);
  EXPECT_EQ(m.usable_bytes, 1u << 29);
  EXPECT_EQ(m.weight_bytes, 347392u);
  EXPECT_EQ(m.kv_capacity_tokens, ((1u << 29) - 347392u - 1000u) / 512);
  EXPECT_EQ(m.max_batch, m.kv_capacity_tokens / 1000);
  EXPECT_TRUE(m.fits);
  // Two devices: half the weights and half the K/V per token each.
  m = device_memory(cost, p, 2, 1000, 1000);
  EXPECT_EQ(m.weight_bytes, 347392u / 2);
  EXPECT_EQ(m.kv_bytes_per_token, 256u);
  p.set("memory_gib", 0.0001, "test");  // 53687 bytes usable: not even the weights
  EXPECT_FALSE(device_memory(cost, p, 1, 1000, 1000).fits);
  // A model without recurrent layers holds no state, whatever the sequence limit.
  p.set("memory_gib", 1, "test");
  m = device_memory(cost, p, 1, 1000, 1000, 8);
  EXPECT_EQ(m.state_bytes_per_sequence, 0u);
  EXPECT_EQ(m.state_slots, 0u);
  EXPECT_EQ(m.kv_capacity_tokens, ((1u << 29) - 347392u - 1000u) / 512);
  EXPECT_EQ(m.max_batch, m.kv_capacity_tokens / 1000);
}

// qwen3.5-tiny: two Gated DeltaNet layers and one attention layer, F32.
ModelCost hybrid_cost() {
  ModelCost cost;
  cost.config = find_estimate_preset("qwen3.5-tiny").config;
  cost.weights = estimate_weights(cost.config, "f32");
  cost.kv_bytes_per_token = kv_bytes_per_token(cost.config, "f32");
  return cost;
}

// qwen3.5-tiny (two Gated DeltaNet layers, one attention layer): each sequence holds a state
// slot (the engine keeps one per sequence a step runs) beside its K/V, so fewer sequences fit
// than the K/V alone allows, and the slots the plan runs come out of the K/V's room.
TEST(EstimateRoofline, PerDeviceMemoryHoldsTheRecurrentState) {
  const ModelCost cost = hybrid_cost();
  const uint64_t state = state_bytes_per_sequence(cost.config);
  ASSERT_GT(state, 0u);
  HardwareProfile p = find_hardware_preset("a10");
  p.set("memory_gib", 1, "test");
  p.set("memory_utilization", 0.5, "test");
  const uint64_t room = (1u << 29) - cost.weights.num_bytes - 1000;
  const uint64_t per_sequence = cost.kv_bytes_per_token * 1000 + state;
  DeviceMemory m = device_memory(cost, p, 1, 1000, 1000);  // no sequence limit: all that fit
  EXPECT_EQ(m.state_bytes_per_sequence, state);
  EXPECT_EQ(m.max_batch, room / per_sequence);
  EXPECT_LT(m.max_batch, room / (cost.kv_bytes_per_token * 1000));  // the K/V alone
  EXPECT_EQ(m.state_slots, m.max_batch);
  EXPECT_EQ(m.state_bytes, m.max_batch * state);
  EXPECT_EQ(m.kv_capacity_tokens, (room - m.state_bytes) / cost.kv_bytes_per_token);
  // --max-seqs 8: eight slots, the K/V has the rest.
  m = device_memory(cost, p, 1, 1000, 1000, 8);
  EXPECT_EQ(m.max_batch, room / per_sequence);
  EXPECT_EQ(m.state_slots, 8u);
  EXPECT_EQ(m.state_bytes, 8 * state);
  EXPECT_EQ(m.kv_capacity_tokens, (room - 8 * state) / cost.kv_bytes_per_token);
  // Room for the weights and two sequences' K/V, but not for two states as well.
  p.set("memory_utilization", 1, "test");
  p.set("memory_gib",
        static_cast<double>(cost.weights.num_bytes + 1000 + 2 * cost.kv_bytes_per_token * 1000 +
                            state) / 1073741824.0,
        "test");
  m = device_memory(cost, p, 1, 1000, 1000, 8);
  EXPECT_EQ(m.max_batch, 1u);
  EXPECT_EQ(m.state_slots, 1u);
  EXPECT_TRUE(m.fits);
}

// The deployment of a hybrid model runs no more sequences at once than it holds states for.
TEST(EstimateRoofline, HybridDeploymentRunsAsManySequencesAsItHasStateSlots) {
  const ModelCost cost = hybrid_cost();
  const uint64_t state = state_bytes_per_sequence(cost.config);
  HardwareProfile p = find_hardware_preset("a10");
  p.set("memory_utilization", 1, "test");
  DeploymentOptions o;
  o.lengths = {{100, 20}};
  o.overhead_bytes = 1000;
  o.capacity = false;
  // Memory for the weights and five sequences of 120 tokens with their states, and a bit.
  p.set("memory_gib",
        static_cast<double>(cost.weights.num_bytes + 1000 +
                            5 * (cost.kv_bytes_per_token * 120 + state) + 100) / 1073741824.0,
        "test");
  Deployment d = estimate_deployment(cost, p, o);
  EXPECT_EQ(d.memory.max_batch, 5u);
  EXPECT_EQ(d.memory.state_slots, 5u);
  EXPECT_EQ(d.max_num_seqs, 5);
  EXPECT_EQ(d.batches.back().batch, 5);
  o.max_num_seqs = 3;
  d = estimate_deployment(cost, p, o);
  EXPECT_EQ(d.memory.state_slots, 3u);
  EXPECT_EQ(d.max_num_seqs, 3);
  EXPECT_EQ(d.memory.kv_capacity_tokens,
            (d.memory.usable_bytes - d.memory.weight_bytes - 1000 - 3 * state) /
                cost.kv_bytes_per_token);
}

// Steps of exactly 1 ms (no bytes or flops to speak of), to follow the scheduler by hand.
DeviceRates one_ms_steps() { return rates(1e30, 1e30, 1e30, 1e-3); }

TEST(EstimateRoofline, SimulatorChunksPromptsThroughTheTokenBudget) {
  SimEngine e;
  e.max_num_seqs = 8;
  e.max_num_batched_tokens = 2048;
  // Step 1: r0 takes the whole budget. Step 2: r0's last 952 tokens and r1's 10 (admitted with
  // budget left); both sample. Steps 3 and 4 decode both. r2 arrives at 10 ms to an idle
  // engine and is done in one step.
  const SimResult r =
      simulate({{0, 3000, 3}, {0, 10, 3}, {0.010, 5, 1}}, e, tiny_cost(), one_ms_steps());
  EXPECT_EQ(r.num_steps, 5);
  EXPECT_NEAR(r.requests[0].ttft_s(), 0.002, 1e-12);
  EXPECT_NEAR(r.requests[1].ttft_s(), 0.002, 1e-12);
  EXPECT_NEAR(r.requests[0].tpot_s(), 0.001, 1e-12);  // tokens at 2, 3 and 4 ms
  EXPECT_NEAR(r.requests[2].ttft_s(), 0.001, 1e-12);
  EXPECT_TRUE(std::isnan(r.requests[2].tpot_s()));
  EXPECT_NEAR(r.end_s, 0.011, 1e-12);
  EXPECT_NEAR(r.busy_s, 0.005, 1e-12);
  EXPECT_EQ(r.num_prompt_tokens, 3015);
  EXPECT_EQ(r.num_output_tokens, 7);
}

TEST(EstimateRoofline, SimulatorWaitsForKvSlotsAndSequenceSlots) {
  SimEngine e;
  e.max_num_batched_tokens = 2048;
  e.kv_capacity_tokens = 3010;  // r0 reserves 3003 slots: r1's 13 wait for it to finish
  SimResult r = simulate({{0, 3000, 3}, {0, 10, 3}}, e, tiny_cost(), one_ms_steps());
  EXPECT_NEAR(r.requests[0].ttft_s(), 0.002, 1e-12);
  EXPECT_NEAR(r.requests[1].ttft_s(), 0.005, 1e-12);  // admitted after r0's last token at 4 ms
  EXPECT_NEAR(r.end_s, 0.007, 1e-12);
  e.kv_capacity_tokens = 1u << 30;
  e.max_num_seqs = 1;  // the same order for want of a sequence slot
  r = simulate({{0, 3000, 3}, {0, 10, 3}}, e, tiny_cost(), one_ms_steps());
  EXPECT_NEAR(r.requests[1].ttft_s(), 0.005, 1e-12);
  e.kv_capacity_tokens = 100;
  EXPECT_THROW(simulate({{0, 3000, 3}}, e, tiny_cost(), one_ms_steps()), Error);
}

TEST(EstimateRoofline, BatchPointByHand) {
  const ModelCost cost = tiny_cost();
  const BatchPoint p = batch_point(cost, rates(1e9, 1e11, 1e10), 4, 90, 20, 2048);
  // Decode: 4 sequences at context 90 + 20/2: weights 321792 B and K/V 4 x 100 x 512 B.
  const double decode = (321792 + 204800) / 1e9;
  EXPECT_NEAR(p.decode_step_s, decode, 1e-15);
  EXPECT_NEAR(p.decode_tokens_per_s, 4 / decode, 1e-6);
  // Prefill: 360 tokens in one step. Products: 2 x (73728 x 360 - 28672 x 356 + 6400 x 4) flops
  // at 1e11 (over the 321792 bytes at 1e9). Attention: 4 x 512 x (90 x 90 - 90 x 89 / 2) flops
  // at 1e10 (over 4 x 90 x 512 bytes at 1e9).
  const double prefill =
      2.0 * (73728 * 360 - 28672 * 356 + 6400 * 4) / 1e11 + 4 * 512.0 * (8100 - 4005) / 1e10;
  EXPECT_NEAR(p.ttft_mean_s, prefill, 1e-15);
  EXPECT_NEAR(p.ttft_last_s, prefill, 1e-15);
  EXPECT_NEAR(p.prefill_tokens_per_s, 360 / prefill, 1e-6);
  EXPECT_EQ(batch_sizes(20), (std::vector<int64_t>{1, 2, 4, 8, 16, 20}));
  EXPECT_EQ(batch_sizes(16), (std::vector<int64_t>{1, 2, 4, 8, 16}));
}

TEST(EstimateRoofline, CostPerToken) {
  // $3.60 an hour is $0.001 a second; 2 requests/s of 100 + 50 tokens; half the busy time on
  // prompts.
  const CostFigures f = cost_per_token(3.6, 2, 100, 50, 0.5);
  EXPECT_NEAR(f.usd_per_million_tokens, 0.001 / 300 * 1e6, 1e-12);
  EXPECT_NEAR(f.usd_per_million_input, 0.0005 / 200 * 1e6, 1e-12);
  EXPECT_NEAR(f.usd_per_million_output, 0.0005 / 100 * 1e6, 1e-12);
  EXPECT_EQ(cost_per_token(3.6, 0, 100, 50, 0.5).usd_per_million_tokens, 0);
}

TEST(EstimateRoofline, CapacityOfOneMillisecondSteps) {
  SimEngine e;
  e.max_num_batched_tokens = 1 << 20;
  e.max_num_seqs = 1 << 20;
  const std::vector<std::pair<int64_t, int64_t>> lengths(200, {8, 1});
  ServiceLevel slo;
  slo.ttft_s = 0.0005;  // below a step: no rate meets it
  CapacityResult c = find_capacity(lengths, e, tiny_cost(), one_ms_steps(), slo);
  EXPECT_EQ(c.max_qps, 0);
  EXPECT_NEAR(c.alone_ttft_s, 0.001, 1e-12);
  // Everything at once is one step of 200 requests: 200 / 1 ms.
  EXPECT_NEAR(c.saturated_qps, 200000, 1e-3);
  // A first token within 2.5 ms: a request waits at most for the step in flight and its own.
  slo.ttft_s = 0.0025;
  c = find_capacity(lengths, e, tiny_cost(), one_ms_steps(), slo);
  EXPECT_GT(c.max_qps, 0);
  EXPECT_LE(c.ttft_at_max_s, 0.0025);
  EXPECT_NEAR(c.input_tokens_per_s, c.max_qps * 8, 1e-9);
  EXPECT_NEAR(c.output_tokens_per_s, c.max_qps * 1, 1e-9);
}

TEST(EstimateRoofline, PercentileIsNumpysLinear) {
  EXPECT_DOUBLE_EQ(percentile_of({1, 2, 3, 4}, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile_of({10, 20, 30, 40, 50}, 90), 46);
  EXPECT_DOUBLE_EQ(percentile_of({3, NAN, 1}, 100), 3);
  EXPECT_TRUE(std::isnan(percentile_of({NAN}, 50)));
}

}  // namespace
}  // namespace pagoda
