// Hardware profiles (presets, JSON files, overrides) and the fit of a profile to `pagoda bench`
// reports, against measurements worked out by hand from known rates.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "planner/calibrate.h"
#include "planner/estimate.h"
#include "planner/hardware.h"
#include "core/error.h"

namespace pagoda {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(EstimateHardware, PresetsCarryTheirSpecFigures) {
  const HardwareProfile h100 = find_hardware_preset("h100");
  EXPECT_EQ(h100.get("bandwidth_gbs"), 3350);
  EXPECT_EQ(h100.get("f16_tflops"), 989);
  EXPECT_EQ(h100.get("fp8_tflops"), 1979);
  EXPECT_EQ(h100.source("bandwidth_gbs"), "spec sheet");
  EXPECT_EQ(find_hardware_preset("a10").get("memory_gib"), 24);
  EXPECT_EQ(find_hardware_preset("a100-80gb").get("bandwidth_gbs"), 2039);
  // A CPU box: 16 cores x 2.5 GHz x 32 flops = 1.28 TFLOP/s, 4 channels x 38.4 GB/s.
  const HardwareProfile box = find_hardware_preset("cpu-16c-4ch-64gb");
  EXPECT_EQ(box.kind, DeviceKind::kCpu);
  EXPECT_DOUBLE_EQ(box.get("f32_tflops"), 1.28);
  EXPECT_DOUBLE_EQ(box.get("int8_tops"), 5.12);
  EXPECT_DOUBLE_EQ(box.get("bandwidth_gbs"), 153.6);
  EXPECT_EQ(box.get("memory_gib"), 64);
  EXPECT_EQ(find_hardware_preset("cpu-8c-2ch").get("memory_gib"), 32);  // 4 GiB a core
  EXPECT_NE(error_of([] { find_hardware_preset("tpu-v5"); }).find("unknown hardware 'tpu-v5'"),
            std::string::npos);
}

TEST(EstimateHardware, ComputeFigureOfEachWeightType) {
  const HardwareProfile a100 = find_hardware_preset("a100-80gb");
  const HardwareProfile h100 = find_hardware_preset("h100");
  const HardwareProfile cpu = find_hardware_preset("cpu-8c-2ch");
  EXPECT_EQ(compute_key("AWQ-4bit", a100), "f16_tflops");  // 4-bit weights multiply in F16
  EXPECT_EQ(compute_key("FP8", a100), "f16_tflops");       // no FP8 units on an A100
  EXPECT_EQ(compute_key("FP8", h100), "fp8_tflops");
  EXPECT_EQ(compute_key("INT8", a100), "int8_tops");
  EXPECT_EQ(compute_key("Q4_K", cpu), "int8_tops");  // pagoda's products: 8-bit integer dots
  EXPECT_EQ(compute_key("Q4_K", a100), "f16_tflops");
  EXPECT_EQ(compute_key("F16", cpu), "f16_tflops");
  EXPECT_EQ(attention_compute_key(cpu), "f32_tflops");
  EXPECT_EQ(attention_compute_key(h100), "f16_tflops");
}

TEST(EstimateHardware, JsonFilesAndOverrides) {
  HardwareProfile p = hardware_from_json(
      R"({"base": "a100-80gb", "name": "my-a100", "bandwidth_gbs": 1800, "price_per_hour": 1.1})",
      "hw.json");
  EXPECT_EQ(p.name, "my-a100");
  EXPECT_EQ(p.get("bandwidth_gbs"), 1800);
  EXPECT_EQ(p.source("bandwidth_gbs"), "file hw.json");
  EXPECT_EQ(p.get("f16_tflops"), 312);  // from the base
  apply_hardware_override(p, "price_per_hour=2.5");
  EXPECT_EQ(p.get("price_per_hour"), 2.5);
  EXPECT_EQ(p.source("price_per_hour"), "--hw");

  EXPECT_NE(error_of([] {
              hardware_from_json(R"({"base": "h100", "bandwidth": 1})", "x.json");
            }).find("x.json: unknown hardware figure 'bandwidth'"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              hardware_from_json(R"({"kind": "gpu"})", "y.json");
            }).find("y.json: memory_gib: missing"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              hardware_from_json(R"({"base": "h100", "bandwidth_gbs": "fast"})", "z.json");
            }).find("z.json: bandwidth_gbs: not a number"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              apply_hardware_override(p, "bandwidth_gbs=-3");
            }).find("bandwidth_gbs = -3 is out of range"),
            std::string::npos);
  EXPECT_NE(error_of([&] { apply_hardware_override(p, "bandwidth_gbs"); }).find("KEY=VALUE"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              apply_hardware_override(p, "price_per_hour=cheap");
            }).find("'cheap' is not a number"),
            std::string::npos);
}

// Profile of the fits below: 1 GB/s, 0.01 TFLOP/s for F32 weights and attention (a CPU), no
// efficiency discount, memory and compute overlapping as in a roofline.
HardwareProfile test_profile(double step_overhead_ms, double layer_overhead_us) {
  return hardware_from_json(
      R"({"kind": "cpu", "memory_gib": 1, "memory_utilization": 0.9, "bandwidth_gbs": 1,
          "bandwidth_efficiency": 1, "f32_tflops": 0.01, "f16_tflops": 0.01, "int8_tops": 0,
          "fp8_tflops": 0, "compute_efficiency": 1, "link_gbs": 0, "link_latency_us": 0,
          "price_per_hour": 0, "overlap": 1, "step_overhead_ms": )" +
          std::to_string(step_overhead_ms) + R"(, "layer_overhead_us": )" +
          std::to_string(layer_overhead_us) + "}",
      "test");
}

// The model of test_estimate_roofline.cc in F32: 321792 bytes a step, 2 x 80128 flops a
// decoded token, 512 bytes of K/V a token and 512 attention flops per (query, key) pair.
ModelCost tiny_cost(uint32_t hidden = 64, uint32_t ffn = 128, uint32_t head_dim = 16) {
  ModelCost cost;
  ModelConfig& c = cost.config;
  c.architecture = "llama";
  c.num_layers = 2;
  c.hidden_size = hidden;
  c.intermediate_size = ffn;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = head_dim;
  c.vocab_size = 100;
  c.context_length = 1024;
  cost.weights = estimate_weights(c, "f32");
  return cost;
}

std::string latency_report(double ttft_ms, double decode_ms, uint64_t kv_cache_bytes) {
  auto mean = [](double ms) {
    return std::isnan(ms) ? std::string("{\"mean\": null}")
                          : "{\"mean\": " + std::to_string(ms) + "}";
  };
  return R"({"benchmark": "latency", "model_path": "tiny.gguf", "threads": 2,
             "interrupted": false, "prompt_tokens": 100, "output_tokens": 21,
             "kv_cache_bytes": )" +
         std::to_string(kv_cache_bytes) + R"(, "ttft_ms": )" + mean(ttft_ms) +
         R"(, "decode_ms_per_token": )" + mean(decode_ms) + "}";
}

TEST(EstimateCalibrate, FitsBandwidthAndComputeFromOneLatencyRun) {
  // Measured on a machine of 0.8 GB/s and half the profile's compute, with its 0.1 ms a step:
  // the 100-token prompt is bound by flops (2 x (73728 x 100 - 28672 x 99 + 6400) in products,
  // 512 x 5050 in attention, at 5e9 flop/s); each of the 20 decode steps by bytes (321792 of
  // weights and 512 a token of K/V at contexts 101..120, 110.5 on average, at 0.8e9 B/s).
  const double ttft = 1e-4 + 2.0 * (73728 * 100 - 28672 * 99 + 6400) / 5e9 + 512.0 * 5050 / 5e9;
  const double decode = 1e-4 + (321792 + 512 * 110.5) / 0.8e9;
  // The run's K/V cache: 121 tokens in 8 blocks of 16, 512 bytes a slot.
  const CalibrationRun run = calibration_run_from_json(
      latency_report(ttft * 1e3, decode * 1e3, 128 * 512), "lat.json", tiny_cost(), nullptr, 100);
  EXPECT_EQ(run.cost.kv_bytes_per_token, 512u);
  EXPECT_EQ(run.requests.size(), 1u);
  const Calibration c = calibrate({run}, test_profile(0.1, 0));
  EXPECT_TRUE(c.bandwidth_measured);
  EXPECT_TRUE(c.compute_measured);
  EXPECT_FALSE(c.overhead_measured);  // two figures, two directions: the overhead is not seen
  EXPECT_NEAR(c.scale.bandwidth, 0.8, 1e-3);
  EXPECT_NEAR(c.scale.compute, 0.5, 1e-3);
  EXPECT_EQ(c.scale.overhead, 1);
  ASSERT_EQ(c.figures.size(), 2u);
  EXPECT_NEAR(c.figures[0].after_s / ttft, 1, 1e-3);
  EXPECT_NEAR(c.figures[1].after_s / decode, 1, 1e-3);
  // Before the fit the profile (1 GB/s, 1e10 flop/s) predicted both too fast.
  EXPECT_LT(c.figures[0].before_s, ttft * 0.6);
  EXPECT_LT(c.figures[1].before_s, decode * 0.9);
  const HardwareProfile p = apply_calibration(test_profile(0.1, 0), c);
  EXPECT_NEAR(p.get("bandwidth_efficiency"), 0.8, 1e-3);
  EXPECT_NEAR(p.get("compute_efficiency"), 0.5, 1e-3);
  EXPECT_EQ(p.source("bandwidth_efficiency"), "calibrated");
  EXPECT_EQ(p.get("step_overhead_ms"), 0.1);
}

TEST(EstimateCalibrate, TwoModelsSeparateOverheadFromBandwidth) {
  // Per-layer overhead of 100 us (twice the profile's 50) and 0.8 GB/s; decode only. The small
  // model moves 321792 + 512 x 110.5 bytes a step, the wide one (hidden 256, FFN 512, heads of
  // 64) 4 x (1179648 + 25600 + 1280) + 2048 x 110.5: the overhead is a larger share of the
  // first, so the two runs tell it from the bandwidth. Nothing measures compute.
  const double small = 2 * 100e-6 + (321792 + 512 * 110.5) / 0.8e9;
  const double wide = 2 * 100e-6 + (4.0 * (1179648 + 25600 + 1280) + 2048 * 110.5) / 0.8e9;
  const CalibrationRun a = calibration_run_from_json(latency_report(NAN, small * 1e3, 128 * 512),
                                                     "a.json", tiny_cost(), nullptr, 100);
  const CalibrationRun b = calibration_run_from_json(
      latency_report(NAN, wide * 1e3, 128 * 2048), "b.json", tiny_cost(256, 512, 64), nullptr, 100);
  const Calibration c = calibrate({a, b}, test_profile(0, 50));
  EXPECT_TRUE(c.bandwidth_measured);
  EXPECT_TRUE(c.overhead_measured);
  EXPECT_FALSE(c.compute_measured);
  EXPECT_NEAR(c.scale.bandwidth, 0.8, 1e-3);
  EXPECT_NEAR(c.scale.overhead, 2.0, 2e-3);
  EXPECT_EQ(c.scale.compute, 1);
  const HardwareProfile p = apply_calibration(test_profile(0, 50), c);
  EXPECT_NEAR(p.get("layer_overhead_us"), 100, 0.2);
  EXPECT_EQ(p.source("compute_efficiency"), "file test");
}

TEST(EstimateCalibrate, ReportsThatCannotBeReplayedAreErrors) {
  const ModelCost cost = tiny_cost();
  auto error = [&](const std::string& json) {
    return error_of([&] { calibration_run_from_json(json, "r.json", cost, nullptr, 100); });
  };
  EXPECT_NE(error(R"({"benchmark": "quality"})").find("r.json: benchmark:"), std::string::npos);
  EXPECT_NE(error(R"({"benchmark": "latency", "interrupted": true})").find("interrupted"),
            std::string::npos);
  EXPECT_NE(error(R"({"benchmark": "latency", "output_tokens": 3})").find("prompt_tokens: missing"),
            std::string::npos);
  EXPECT_NE(error(R"({"benchmark": "throughput", "workload": {"source": "dataset"}})")
                .find("workload.source: only synthetic"),
            std::string::npos);
  EXPECT_NE(error("[1,").find("r.json: not JSON"), std::string::npos);
}

TEST(EstimateCalibrate, ThroughputReportsReplayTheirWorkload) {
  // 6 requests of 32 + 4 tokens, K/V 10 blocks of 16 slots holding 512 bytes each.
  const std::string json = R"({"benchmark": "throughput", "model_path": "tiny.gguf",
      "workload": {"source": "synthetic", "num_requests": 6, "prompt_len": "32",
                   "output_len": "4", "seed": 0},
      "kv_cache_bytes": 81920, "num_kv_blocks": 10, "block_size": 16, "max_num_seqs": 4,
      "max_num_batched_tokens": 64,
      "runs": [{"mode": "batched", "interrupted": false, "wall_s": 0.5,
                "ttft_ms": {"mean": 100}, "decode_ms_per_token": {"mean": 20}}]})";
  const CalibrationRun run = calibration_run_from_json(json, "t.json", tiny_cost(), nullptr, 100);
  EXPECT_EQ(run.requests.size(), 6u);
  EXPECT_EQ(run.requests[5].prompt_len, 32);
  EXPECT_EQ(run.requests[5].output_len, 4);
  EXPECT_EQ(run.engine.max_num_seqs, 4);
  EXPECT_EQ(run.engine.max_num_batched_tokens, 64);
  EXPECT_EQ(run.engine.kv_capacity_tokens, 160u);
  EXPECT_EQ(run.cost.kv_bytes_per_token, 512u);
  EXPECT_DOUBLE_EQ(run.wall_s, 0.5);
  EXPECT_DOUBLE_EQ(run.ttft_s, 0.1);
  EXPECT_DOUBLE_EQ(run.decode_s, 0.02);
  // Random lengths are drawn again with the run's seed: 6 prompts in 8..16.
  std::string ranged = json;
  ranged.replace(ranged.find(R"("prompt_len": "32")"), 18, R"("prompt_len": "8:16")");
  const CalibrationRun r2 = calibration_run_from_json(ranged, "t.json", tiny_cost(), nullptr, 100);
  ASSERT_EQ(r2.requests.size(), 6u);
  for (const SimRequest& q : r2.requests) {
    EXPECT_GE(q.prompt_len, 8);
    EXPECT_LE(q.prompt_len, 16);
  }
}

}  // namespace
}  // namespace pagoda
