// The options of `pagoda estimate` (cli/estimate.cc runs them).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace pagoda::cli {

struct EstimateArgs {
  std::string model_path;
  std::string preset;
  std::string weights_type;
  std::string kv_type = "f16";
  uint64_t context = 0;
  uint64_t batch = 1;
  double memory_gib = 0;
  double overhead_gib = -1;
  std::string json_path;
  // The deployment.
  std::string hardware;
  std::vector<std::string> hw;
  int gpus = 1;
  int tp = 1;  // ranks splitting the model (mpirun -np N pagoda serve)
  std::string prompt_len = "512";
  std::string output_len = "256";
  std::string dataset;
  std::string tokenizer;
  int num_requests = 1000;
  uint64_t seed = 0;
  double slo_ttft_ms = 2000;
  double slo_tpot_ms = 100;
  double slo_percentile = 90;
  double qps = 0;
  int64_t max_seqs = 256;
  int64_t max_batched_tokens = 2048;
  std::vector<std::string> calibrate;
  std::vector<std::string> check;
  bool table = false;
};

// Adds estimate's options to `cmd`, each bound to a field of `a`.
void add_estimate_options(CLI::App* cmd, EstimateArgs& a);
// Throws Error for a value out of its range.
void check_estimate_args(const EstimateArgs& a);

}  // namespace pagoda::cli
