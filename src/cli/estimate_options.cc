#include "cli/estimate_options.h"

#include <cmath>

#include "planner/estimate.h"
#include "planner/hardware.h"
#include "core/error.h"
#include "model/shapes.h"

namespace pagoda::cli {
namespace {

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : " ") + n;
  return s;
}

}  // namespace

void add_estimate_options(CLI::App* cmd, EstimateArgs& a) {
  std::vector<std::string> presets;
  for (const auto& p : model_shapes()) presets.push_back(p.name);
  auto* model = cmd->add_option("-m,--model", a.model_path,
                                "GGUF file, .safetensors file or Hugging Face model folder "
                                "(weights: the exact tensor bytes)");
  auto* preset = cmd->add_option("--preset", a.preset, "Model shape: " + joined(presets));
  model->excludes(preset);
  cmd->add_option("--weights-type", a.weights_type,
                  "Weight type of a preset (default f16): " + joined(estimate_weight_types()) +
                      ". K mixes (q4_k_m, q5_k_m) follow llama.cpp's per-tensor rule as pagoda "
                      "synth writes it: within a few percent of llama.cpp's files");
  cmd->add_option(
         "--kv-type", a.kv_type,
         "KV cache element type: " + joined(estimate_kv_types()) +
             ". q8_0 is 34 bytes a block of 32, as pagoda's q8_0 cache and llama.cpp's; fp8 counts "
             "1 byte a value (a scale per tensor, as GPU engines keep it; pagoda's CPU fp8 cache "
             "keeps one per 32 values, 1.06 bytes)")
      ->default_val("f16");
  cmd->add_option("--context", a.context,
                  "Tokens per sequence (default: the model's context; with --hardware the "
                  "workload's longest request)");
  cmd->add_option("--batch", a.batch, "Sequences held at once")->default_val(1);
  cmd->add_option("--memory-gb", a.memory_gib,
                  "Device memory in GiB (2^30 bytes): says whether it fits and the largest batch; "
                  "with --hardware it replaces the profile's memory");
  cmd->add_option("--overhead-gb", a.overhead_gib,
                  "Memory that is neither weights nor KV, in GiB (default: F32 activations of a " +
                      std::to_string(kStepTokens) + "-token step + logits of " +
                      std::to_string(kLogitRows) + " sequences)");
  cmd->add_option("--json", a.json_path,
                  "Also write the numbers as JSON to PATH ('-': stdout only)");
  cmd->add_option("--hardware", a.hardware,
                  "Hardware profile: " + joined(hardware_preset_names()) +
                      " (measured now: kernels, then with -m a short request through the engine "
                      "on the model), or a JSON file of figures (docs/BENCHMARKS.md)");
  cmd->add_option("--hw", a.hw,
                  "Override one figure of the profile, KEY=VALUE (repeatable): memory_gib, "
                  "bandwidth_gbs, bandwidth_efficiency, f16_tflops, int8_tops, fp8_tflops, "
                  "f32_tflops, compute_efficiency, link_gbs, link_latency_us, step_overhead_ms, "
                  "price_per_hour, memory_utilization");
  cmd->add_option("--gpus", a.gpus, "Devices splitting the model (tensor parallel)")
      ->default_val(1);
  cmd->add_option("--tp", a.tp,
                  "Ranks splitting the model (mpirun -np N pagoda serve): memory per rank, and "
                  "with --memory-gb the ranks needed")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--prompt-len", a.prompt_len, "Workload prompt tokens: N or MIN:MAX (uniform)")
      ->default_val("512");
  cmd->add_option("--output-len", a.output_len,
                  "Workload output tokens: N or MIN:MAX (with --dataset: N replaces the replies)")
      ->default_val("256");
  cmd->add_option("--dataset", a.dataset,
                  "ShareGPT-style JSON file for the workload (tokens counted with -m's tokenizer "
                  "or --tokenizer's)");
  cmd->add_option("--tokenizer", a.tokenizer, "Model file whose tokenizer counts --dataset");
  cmd->add_option("--num-requests", a.num_requests, "Requests in the simulated workload")
      ->default_val(1000);
  cmd->add_option("--seed", a.seed, "Seed of the random lengths")->default_val(0);
  cmd->add_option("--slo-ttft-ms", a.slo_ttft_ms, "Service level: time to first token, ms")
      ->default_val(2000);
  cmd->add_option("--slo-tpot-ms", a.slo_tpot_ms, "Service level: time per output token, ms")
      ->default_val(100);
  cmd->add_option("--slo-percentile", a.slo_percentile,
                  "Percentile of requests the service level holds for")
      ->default_val(90);
  cmd->add_option("--qps", a.qps, "Target requests/s: replicas and monthly cost to serve it");
  cmd->add_option("--max-seqs", a.max_seqs, "Sequences a step may hold")->default_val(256);
  cmd->add_option("--max-batched-tokens", a.max_batched_tokens, "Token budget of a step")
      ->default_val(2048);
  cmd->add_option("--calibrate", a.calibrate,
                  "`pagoda bench latency|throughput --json` report measured on the hardware "
                  "(repeatable): fit its bandwidth, compute and step overhead (default hardware: "
                  "this)");
  cmd->add_option("--check", a.check,
                  "`pagoda bench latency|throughput --json` report (repeatable): replay it on the "
                  "(calibrated) hardware and print predicted beside measured");
  cmd->add_flag("--table", a.table,
                "The seed's five deployments with pagoda's figures beside the seed's");
}

void check_estimate_args(const EstimateArgs& a) {
  if (a.gpus < 1 || a.gpus > 1024) fail("--gpus must be 1 to 1024");
  if (a.num_requests < 1 || a.num_requests > 100000) fail("--num-requests must be 1 to 100000");
  if (!(a.slo_ttft_ms > 0)) fail("--slo-ttft-ms must be more than 0");
  if (!(a.slo_tpot_ms > 0)) fail("--slo-tpot-ms must be more than 0");
  if (!(a.slo_percentile >= 0 && a.slo_percentile <= 100)) fail("--slo-percentile must be 0-100");
  if (!(a.qps >= 0) || !std::isfinite(a.qps)) fail("--qps must be a rate of 0 or more");
  if (a.max_seqs < 1) fail("--max-seqs must be at least 1");
  if (a.max_batched_tokens < 1) fail("--max-batched-tokens must be at least 1");
}

}  // namespace pagoda::cli
