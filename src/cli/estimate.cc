// pagoda estimate -m FILE | --preset NAME: weight and KV-cache memory and the largest batch
// that fits; with --hardware, the deployment: per-device fit, speed at each batch size (a
// roofline model of the step), the largest request rate meeting a latency service level, and
// cost. --calibrate fits the profile to `pagoda bench` reports; --table prints the seed's five
// deployments.
#include "planner/estimate.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include "bench/engine_probe.h"
#include "planner/calibrate.h"
#include "planner/deployment.h"
#include "planner/estimate_report.h"
#include "planner/example_deployments.h"
#include "planner/workload.h"
#include "cli/commands.h"
#include "cli/estimate_options.h"
#include "cli/format_util.h"
#include "core/error.h"
#include "model/model_file.h"
#include "model/shapes.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::cli {
namespace {

uint64_t gib_to_bytes(double gib, const char* option) {
  if (!std::isfinite(gib) || gib < 0 || gib > 1e9) fail(option, " ", gib, " is not a size in GiB");
  return static_cast<uint64_t>(std::llround(gib * 1073741824.0));
}

std::string element_size_text(const std::string& type_name) {
  if (type_name == "FP8") return "1 byte";
  const auto& t = dtype_traits(*dtype_from_name(type_name));
  if (t.block_size == 1) return std::to_string(t.type_size) + " bytes";
  return std::to_string(t.type_size) + "/" + std::to_string(t.block_size) + " bytes";
}

// A hybrid model's recurrent state: a fixed slot per sequence, whatever its length.
void print_state(const Estimate& e, const ModelConfig& c, uint32_t kv_layers) {
  const uint64_t channels = 2ull * c.ssm_group_count * c.ssm_state_size + c.ssm_inner_size;
  char note[256];
  std::snprintf(note, sizeof note,
                "F32: %u recurrent layers x (conv %llu channels x %u taps + delta %u heads x "
                "%u x %u) x 4 bytes",
                c.num_layers - kv_layers, static_cast<unsigned long long>(channels),
                c.ssm_conv_kernel - 1, c.ssm_time_step_rank, c.ssm_state_size,
                c.ssm_state_size);
  std::printf("%-17s %11s  %s\n", "state per seq:", human_bytes(e.state_bytes_per_sequence).c_str(),
              note);
  std::printf("%-17s %11s  %s\n", "state total:", human_bytes(e.state_bytes_total).c_str(),
              ("batch " + std::to_string(e.batch) + " x state per sequence").c_str());
}

void print_table(const Estimate& e, const std::string& model_name, bool is_preset,
                 bool per_device) {
  const ModelConfig& c = e.config;
  auto row = [](const char* label, const std::string& value, const std::string& note) {
    std::printf("%-17s %11s  %s\n", label, value.c_str(), note.c_str());
  };
  std::printf("%-17s %s (%s: %s, %u layers, hidden %u, %u heads, %u KV heads x %u)\n",
              "model:", model_name.c_str(), is_preset ? "preset" : "file", c.architecture.c_str(),
              c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim);
  char note[256];
  std::snprintf(
      note, sizeof note, "%s, %llu bytes, %llu parameters, %.2f bits each", e.weights.type.c_str(),
      static_cast<unsigned long long>(e.weights.num_bytes),
      static_cast<unsigned long long>(e.weights.num_parameters),
      e.weights.num_parameters ? 8.0 * e.weights.num_bytes / e.weights.num_parameters : 0);
  row("weights:", human_bytes(e.weights.num_bytes), note);
  const std::string size = element_size_text(e.kv_type);
  uint32_t kv_layers = 0;  // a hybrid model's recurrent layers hold no K/V
  for (uint32_t l = 0; l < c.num_layers; ++l) kv_layers += c.layer_recurrent(l) ? 0 : 1;
  const std::string attention = kv_layers == c.num_layers ? " layers x " : " attention layers x ";
  row("KV per token:", human_bytes(e.kv_bytes_per_token),
      e.kv_type + ": 2 x " + std::to_string(kv_layers) + attention +
          std::to_string(c.num_kv_heads) + " KV heads x " + std::to_string(c.head_dim) + " x " +
          size + " = " + std::to_string(e.kv_bytes_per_token) + " bytes");
  std::snprintf(note, sizeof note, "2 x %u%s%u hidden x %s = %llu bytes (%.1fx)", kv_layers,
                attention.c_str(), c.hidden_size, size.c_str(),
                static_cast<unsigned long long>(e.kv_bytes_per_token_without_gqa),
                static_cast<double>(e.kv_bytes_per_token_without_gqa) / e.kv_bytes_per_token);
  row("  without GQA:", human_bytes(e.kv_bytes_per_token_without_gqa), note);
  std::string window_note;
  if (c.sliding_window) {
    window_note = ", every layer at full context (sliding-window layers could keep " +
                  std::to_string(c.sliding_window) + ")";
  }
  row("KV per sequence:", human_bytes(e.kv_bytes_per_sequence),
      std::to_string(e.context) + " tokens" + window_note);
  row("KV total:", human_bytes(e.kv_bytes_total),
      "batch " + std::to_string(e.batch) + " x " + std::to_string(e.context) + " tokens");
  if (e.state_bytes_per_sequence != 0) print_state(e, c, kv_layers);
  row("overhead:", human_bytes(e.overhead_bytes),
      "F32 activations of a " + std::to_string(kStepTokens) + "-token step + logits of " +
          std::to_string(kLogitRows) + " sequences");
  row("total:", human_bytes(e.total_bytes),
      std::string("weights + KV total + ") + (e.state_bytes_total ? "state total + " : "") +
          "overhead = " + std::to_string(e.total_bytes) + " bytes");
  if (e.memory_bytes && !per_device) {
    row("memory:", human_bytes(*e.memory_bytes),
        std::string(*e.fits ? "fits" : "does NOT fit") + "; largest batch of " +
            std::to_string(e.context) + "-token sequences: " + std::to_string(*e.max_batch));
  }
}

// Tensor parallel over `ranks` processes (model/tensor_parallel.h): every weight matrix and the
// KV heads are split evenly; the activations, sized by the hidden width, are on every rank, so
// the overhead is counted whole on each.
struct RankShare {
  int ranks = 1;
  uint64_t weights = 0, kv = 0, overhead = 0, total = 0;
};

RankShare rank_share(const Estimate& e, int ranks) {
  RankShare r;
  r.ranks = ranks;
  const auto n = static_cast<uint64_t>(ranks);
  r.weights = (e.weights.num_bytes + n - 1) / n;
  r.kv = (e.kv_bytes_total + n - 1) / n;
  r.overhead = e.overhead_bytes + e.state_bytes_total;  // tensor parallelism refuses hybrids
  r.total = r.weights + r.kv + r.overhead;
  return r;
}

// The fewest ranks (dividing the KV heads) whose share fits `memory`; 0 when none does.
int ranks_needed(const Estimate& e, uint64_t memory) {
  for (uint32_t n = 1; n <= e.config.num_kv_heads; ++n) {
    if (e.config.num_kv_heads % n == 0 && rank_share(e, static_cast<int>(n)).total <= memory) {
      return static_cast<int>(n);
    }
  }
  return 0;
}

void print_tensor_parallel(const Estimate& e, int ranks) {
  const ModelConfig& c = e.config;
  const RankShare r = rank_share(e, ranks);
  auto row = [](const char* label, const std::string& value, const std::string& note) {
    std::printf("%-17s %11s  %s\n", label, value.c_str(), note.c_str());
  };
  std::printf("tensor parallel:  %d ranks, each %u of %u KV heads (%u query heads)\n", ranks,
              c.num_kv_heads / ranks, c.num_kv_heads, c.num_heads / ranks);
  row("  weights:", human_bytes(r.weights), "1/" + std::to_string(ranks) + " of every matrix");
  row("  KV total:", human_bytes(r.kv), "its KV heads of every block");
  row("  overhead:", human_bytes(r.overhead), "activations, whole on every rank");
  row("  total:", human_bytes(r.total), "per rank");
  if (e.memory_bytes) {
    const int need = ranks_needed(e, *e.memory_bytes);
    row("  memory:", human_bytes(*e.memory_bytes),
        std::string(r.total <= *e.memory_bytes ? "fits" : "does NOT fit") + " per rank; " +
            (need ? "ranks needed at this context and batch: " + std::to_string(need)
                  : "no split over whole KV heads fits"));
  }
}

EstimateJson tensor_parallel_json(const Estimate& e, int ranks) {
  const RankShare r = rank_share(e, ranks);
  EstimateJson j = {{"ranks", ranks},
                    {"weights_bytes_per_rank", r.weights},
                    {"kv_bytes_per_rank", r.kv},
                    {"overhead_bytes_per_rank", r.overhead},
                    {"total_bytes_per_rank", r.total}};
  if (e.memory_bytes) j["ranks_needed"] = ranks_needed(e, *e.memory_bytes);
  return j;
}

EstimateJson to_json(const Estimate& e, const std::string& model_name, bool is_preset) {
  const ModelConfig& c = e.config;
  auto optional = [](const auto& v) { return v ? EstimateJson(*v) : EstimateJson(nullptr); };
  return {
      {"model", model_name},
      {"source", is_preset ? "preset" : "file"},
      {"architecture", c.architecture},
      {"num_layers", c.num_layers},
      {"hidden_size", c.hidden_size},
      {"num_heads", c.num_heads},
      {"num_kv_heads", c.num_kv_heads},
      {"head_dim", c.head_dim},
      {"vocab_size", c.vocab_size},
      {"weights_type", e.weights.type},
      {"num_parameters", e.weights.num_parameters},
      {"weight_bytes", e.weights.num_bytes},
      {"compute_type", e.weights.compute_type},
      {"kv_type", e.kv_type},
      {"context", e.context},
      {"batch", e.batch},
      {"kv_bytes_per_token", e.kv_bytes_per_token},
      {"kv_bytes_per_token_without_gqa", e.kv_bytes_per_token_without_gqa},
      {"kv_bytes_per_sequence", e.kv_bytes_per_sequence},
      {"kv_bytes_total", e.kv_bytes_total},
      {"state_bytes_per_sequence", e.state_bytes_per_sequence},
      {"state_bytes_total", e.state_bytes_total},
      {"overhead_bytes", e.overhead_bytes},
      {"total_bytes", e.total_bytes},
      {"memory_bytes", optional(e.memory_bytes)},
      {"fits", optional(e.fits)},
      {"max_batch", optional(e.max_batch)},
  };
}

std::string read_text(const std::string& path, const char* option) {
  std::ifstream in(path);
  if (!in) fail(option, " ", path, ": cannot read");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The workload's (prompt, output) lengths and a line describing it.
std::pair<std::vector<std::pair<int64_t, int64_t>>, std::string> workload_lengths(
    const EstimateArgs& a, const CLI::App& cmd, const ModelFile* model_file) {
  std::vector<std::pair<int64_t, int64_t>> lengths;
  const bool fixed_output = cmd.get_option("--output-len")->count() > 0;
  if (!a.dataset.empty()) {
    std::unique_ptr<ModelFile> tokenizer_file;
    const ModelFile* source = model_file;
    if (!a.tokenizer.empty()) {
      tokenizer_file = ModelFile::open(a.tokenizer);
      source = tokenizer_file.get();
    }
    if (!source) fail("--dataset: give -m FILE or --tokenizer FILE to count its tokens");
    if (!source->has_vocab()) fail("--dataset: ", source->path(), " has no tokenizer");
    const auto tokenizer = Tokenizer::create(source->vocab());
    const int32_t output =
        fixed_output ? bench::parse_length_range(a.output_len, "--output-len").min : 0;
    const auto d = bench::sharegpt_requests(a.dataset, *tokenizer, a.num_requests, {}, output);
    if (d.requests.empty()) fail("--dataset ", a.dataset, ": no usable conversation");
    for (const auto& r : d.requests) {
      lengths.emplace_back(static_cast<int64_t>(r.prompt.size()), r.output_len);
    }
    return {lengths,
            "dataset " + a.dataset + " (" + std::to_string(lengths.size()) + " conversations)"};
  }
  const auto prompt = bench::parse_length_range(a.prompt_len, "--prompt-len");
  const auto output = bench::parse_length_range(a.output_len, "--output-len");
  std::mt19937_64 rng(a.seed);
  for (int i = 0; i < a.num_requests; ++i) {
    const int64_t p = std::uniform_int_distribution<int64_t>(prompt.min, prompt.max)(rng);
    const int64_t o = std::uniform_int_distribution<int64_t>(output.min, output.max)(rng);
    lengths.emplace_back(p, o);
  }
  return {lengths, "prompt " + prompt.to_string() + ", output " + output.to_string() + " tokens, " +
                       std::to_string(a.num_requests) + " requests"};
}

HardwareProfile resolve_hardware(const EstimateArgs& a, const std::string& probe_type,
                                 const ModelConfig& shape) {
  const std::string name = a.hardware.empty() ? "this" : a.hardware;
  if (name == "this") {
    ProbeOptions p;
    p.weight_type = probe_type;
    p.rows = shape.intermediate_size;
    p.cols = shape.hidden_size;
    std::fprintf(stderr, "probing this machine (bandwidth, F16 and %s products)...\n",
                 probe_type.c_str());
    return probe_this_machine(p);
  }
  if (name.size() > 5 && name.substr(name.size() - 5) == ".json") {
    return hardware_from_json(read_text(name, "--hardware"), name);
  }
  return find_hardware_preset(name);
}

// The weight type whose product the probe times: the model's, when pagoda multiplies it.
std::string probe_type_for(const std::string& compute_type) {
  const auto t = dtype_from_name(compute_type);
  if (t && *t != DType::kF32 && *t != DType::kF16 && *t != DType::kBF16) return compute_type;
  return compute_type == "INT8" || compute_type == "FP8" ? "Q8_0" : "Q4_0";
}

void write_json(const EstimateJson& json, const std::string& path) {
  if (path.empty() || path == "-") return;
  std::ofstream out(path);
  out << json.dump(2) << "\n";
  if (!out) fail(path, ": cannot write");
}

DeploymentOptions deployment_options(const EstimateArgs& a, const CLI::App& cmd,
                                     std::vector<std::pair<int64_t, int64_t>> lengths,
                                     std::optional<uint64_t> overhead) {
  DeploymentOptions d;
  d.num_devices = a.gpus;
  d.seq_len = a.context;
  d.lengths = std::move(lengths);
  d.max_num_seqs = a.max_seqs;
  d.max_num_batched_tokens = a.max_batched_tokens;
  d.overhead_bytes = overhead;
  d.slo.ttft_s = a.slo_ttft_ms * 1e-3;
  d.slo.tpot_s = a.slo_tpot_ms * 1e-3;
  d.slo.percentile = a.slo_percentile;
  if (cmd.get_option("--qps")->count()) d.target_qps = a.qps;
  return d;
}

// One row of --table: the seed's figure, pagoda's, and the notes.
std::string example_row_text(const ExampleDeploymentResult& r, int index) {
  const Deployment& d = r.deployment;
  std::string text = strf("%d. %s  (%s, %s, %s x %d, K/V %s)\n", index, r.row.deployment.c_str(),
                          r.row.preset.c_str(), r.row.weights_type.c_str(),
                          r.row.hardware.c_str(), r.row.num_devices, r.row.kv_type.c_str());
  const std::string& claimed = r.row.claimed_figure;
  text += "   seed:    " + (claimed.empty() ? std::string("(no figure quoted)") : claimed) + "\n";
  std::string ours;
  if (!d.memory.fits) {
    ours = strf("does NOT fit (weights %.1f GiB per device of %.1f GiB usable)",
                d.memory.weight_bytes / 1073741824.0, d.memory.usable_bytes / 1073741824.0);
  } else {
    const BatchPoint& b1 = d.batches.front();
    ours = strf(
        "fits: weights %.1f GiB per device, %llu sequences of %llu tokens; batch 1: "
        "%.0f tokens/s, TTFT %.0f ms",
        d.memory.weight_bytes / 1073741824.0, static_cast<unsigned long long>(d.memory.max_batch),
        static_cast<unsigned long long>(d.seq_len), b1.decode_tokens_per_s, b1.ttft_mean_s * 1e3);
    if (d.capacity) {
      ours += strf("\n            %.3g QPS within the SLO (%.3g at any latency)",
                   d.capacity->max_qps, d.capacity->saturated_qps);
      if (d.capacity->max_qps > 0 && d.profile.get("price_per_hour") > 0) {
        ours += strf(", $%.0f/month, $%.3g per million output tokens", d.usd_per_month,
                     d.cost.usd_per_million_output);
      }
    }
  }
  text += "   pagoda:  " + ours + "\n";
  for (const std::string& n : r.notes) text += "   note:    " + n + "\n";
  return text + "\n";
}

EstimateJson example_row_json(const ExampleDeploymentResult& r,
                              const DeploymentOptions& options) {
  const Deployment& d = r.deployment;
  EstimateJson row = deployment_json(d, options);
  row["deployment"] = r.row.deployment;
  row["preset"] = r.row.preset;
  row["weights_type"] = r.row.weights_type;
  row["kv_type"] = r.row.kv_type;
  row["hardware"] = hardware_json(d.profile, d.num_devices, d.rates);
  row["seed_figure"] =
      r.row.claimed_figure.empty() ? EstimateJson(nullptr) : EstimateJson(r.row.claimed_figure);
  row["weight_bytes"] = r.cost.weights.num_bytes;
  row["notes"] = r.notes;
  return row;
}

int run_table(const EstimateArgs& a, const CLI::App& cmd, const HardwareProfile* calibrated_this) {
  for (const char* option : {"--model", "--preset", "--hardware", "--hw", "--gpus",
                             "--weights-type", "--kv-type", "--memory-gb", "--batch"}) {
    if (cmd.get_option(option)->count()) {
      fail("--table: ", option, " does not apply (each row names its own model and hardware)");
    }
  }
  auto [lengths, workload] = workload_lengths(a, cmd, nullptr);
  ExampleDeploymentOptions o;
  o.deployment = deployment_options(a, cmd, std::move(lengths), std::nullopt);
  if (calibrated_this) {
    o.this_machine = *calibrated_this;
  } else {
    ProbeOptions p;
    std::fprintf(stderr, "probing this machine for the CPU row (bandwidth, F16 and Q4_0)...\n");
    o.this_machine = probe_this_machine(p);
  }
  const auto rows = estimate_example_deployments(o);
  EstimateJson json_rows = EstimateJson::array();
  std::string text = "The seed's deployments, each for " + workload + "; SLO " +
                     strf("p%g TTFT <= %g ms, p%g TPOT <= %g ms\n\n", a.slo_percentile,
                          a.slo_ttft_ms, a.slo_percentile, a.slo_tpot_ms);
  int index = 1;
  for (const ExampleDeploymentResult& r : rows) {
    text += example_row_text(r, index++);
    json_rows.push_back(example_row_json(r, o.deployment));
  }
  const EstimateJson json = {{"table", json_rows}};
  if (a.json_path == "-") {
    std::cout << json.dump(2) << "\n";
    return 0;
  }
  std::fputs(text.c_str(), stdout);
  write_json(json, a.json_path);
  return 0;
}

// --table with --calibrate: the CPU row on this machine fitted to the reports first.
int run_table_calibrated(const EstimateArgs& a, const CLI::App& cmd) {
  if (a.calibrate.empty()) return run_table(a, cmd, nullptr);
  std::vector<CalibrationRun> runs;
  for (const auto& path : a.calibrate) runs.push_back(read_calibration_run(path));
  ProbeOptions p;
  p.weight_type = probe_type_for(runs[0].cost.weights.compute_type);
  p.rows = runs[0].cost.config.intermediate_size;
  p.cols = runs[0].cost.config.hidden_size;
  const HardwareProfile here = probe_this_machine(p);
  const HardwareProfile calibrated = apply_calibration(here, calibrate(runs, here));
  return run_table(a, cmd, &calibrated);
}

// The model estimated: a preset's shape at --weights-type, or a file's tensors as stored.
struct EstimatedModel {
  ModelConfig config;
  WeightEstimate weights;
  std::string name;
  bool is_preset = false;
  std::unique_ptr<ModelFile> file;  // null for a preset
};

EstimatedModel estimated_model(const EstimateArgs& a) {
  if (a.model_path.empty() && a.preset.empty()) fail("estimate: give -m FILE or --preset NAME");
  EstimatedModel m;
  m.is_preset = !a.preset.empty();
  if (m.is_preset) {
    const ModelShape& p = find_estimate_preset(a.preset);
    m.config = p.config;
    m.weights = estimate_weights(m.config, a.weights_type.empty() ? "f16" : a.weights_type);
    m.name = p.name;
    return m;
  }
  if (!a.weights_type.empty()) {
    fail("estimate: --weights-type is for presets; a file's weights are counted as stored");
  }
  m.file = ModelFile::open(a.model_path);
  m.config = m.file->config();
  m.weights = file_weights(*m.file);
  m.name = a.model_path;
  return m;
}

// Whether the options ask for a deployment (speed and cost on hardware), not memory alone;
// refuses the deployment's options without one.
bool wants_deployment(const EstimateArgs& a, const CLI::App& cmd) {
  const bool deployment =
      !a.hardware.empty() || !a.calibrate.empty() || !a.hw.empty() || !a.check.empty();
  for (const char* option : {"--gpus", "--prompt-len", "--output-len", "--dataset", "--qps",
                             "--slo-ttft-ms", "--slo-tpot-ms", "--max-seqs"}) {
    if (!deployment && cmd.get_option(option)->count()) {
      fail(option, ": give --hardware NAME (or --calibrate FILE) to estimate speed and cost");
    }
  }
  return deployment;
}

EstimateOptions memory_options(const EstimateArgs& a, const CLI::App& cmd,
                               const ModelConfig& config, bool deployment) {
  EstimateOptions o;
  o.kv_type = a.kv_type;
  o.context = a.context;
  o.batch = a.batch;
  if (cmd.count("--overhead-gb")) {
    o.overhead_bytes = gib_to_bytes(a.overhead_gib, "--overhead-gb");
  }
  if (cmd.count("--memory-gb")) {
    if (!(a.memory_gib > 0)) fail("--memory-gb must be more than 0");
    if (!deployment) o.memory_bytes = gib_to_bytes(a.memory_gib, "--memory-gb");
  }
  if (a.tp > 1 && config.num_kv_heads % static_cast<uint32_t>(a.tp) != 0) {
    fail("--tp ", a.tp, " does not divide the model's ", config.num_kv_heads,
         " KV heads (each rank holds whole KV heads)");
  }
  if (deployment && cmd.count("--tp")) fail("--tp: give it without --hardware (memory only)");
  return o;
}

// Memory alone: the table (and --tp's split), or the JSON.
int run_memory(const EstimateArgs& a, const CLI::App& cmd, const EstimatedModel& m,
               const EstimateOptions& o) {
  const Estimate e = estimate_memory(m.config, m.weights, o);
  EstimateJson json = to_json(e, m.name, m.is_preset);
  if (cmd.count("--tp")) json["tensor_parallel"] = tensor_parallel_json(e, a.tp);
  if (a.json_path == "-") {
    std::cout << json.dump(2) << "\n";
    return 0;
  }
  print_table(e, m.name, m.is_preset, false);
  if (cmd.count("--tp")) print_tensor_parallel(e, a.tp);
  write_json(json, a.json_path);
  return 0;
}

// The hardware the deployment runs on: the profile, with --memory-gb and --hw applied, fitted
// to --calibrate's reports when there are any (`calibration` says how).
HardwareProfile deployment_hardware(const EstimateArgs& a, const CLI::App& cmd,
                                    const ModelCost& cost,
                                    std::optional<Calibration>& calibration) {
  std::vector<CalibrationRun> runs;
  for (const auto& path : a.calibrate) runs.push_back(read_calibration_run(path));
  const bool this_machine = a.hardware.empty() || a.hardware == "this";
  if (runs.empty() && this_machine && !a.model_path.empty()) {
    // The model itself, timed through the engine: what the kernel probe cannot see (the
    // model's mix of weight types, thread hand-offs, sampling) is then in the profile.
    const bench::EngineProbeOptions probe;
    std::fprintf(stderr,
                 "timing the engine on the model (a %d-token prompt, %d tokens, %d runs)...\n",
                 probe.prompt_len, probe.output_len, probe.runs);
    try {
      runs.push_back(bench::engine_probe_run(a.model_path, cost, probe));
    } catch (const Error& e) {
      // A file the engine cannot run still has a shape to estimate: the kernel probe alone.
      std::fprintf(stderr, "the engine cannot run the model (%s): the kernel probe alone\n",
                   e.what());
    }
  }
  // The probe times the products the fit will see: the calibration runs' model, else this one.
  const ModelCost& probed = runs.empty() ? cost : runs[0].cost;
  HardwareProfile profile =
      resolve_hardware(a, probe_type_for(probed.weights.compute_type), probed.config);
  if (cmd.count("--memory-gb")) profile.set("memory_gib", a.memory_gib, "--memory-gb");
  for (const auto& assignment : a.hw) apply_hardware_override(profile, assignment);
  if (!runs.empty()) {
    calibration = calibrate(runs, profile);
    profile = apply_calibration(profile, *calibration);
  }
  return profile;
}

// The deployment: workload, hardware (calibrated), per-device fit, speed, capacity, cost.
int run_deployment(const EstimateArgs& a, const CLI::App& cmd, const EstimatedModel& m,
                   EstimateOptions o) {
  auto [lengths, workload] = workload_lengths(a, cmd, m.file.get());
  int64_t longest = 0;
  for (const auto& [p, q] : lengths) longest = std::max(longest, p + q);
  if (!a.context) o.context = static_cast<uint64_t>(longest);
  Estimate e = estimate_memory(m.config, m.weights, o);
  ModelCost cost{m.config, m.weights, e.kv_bytes_per_token};

  std::optional<Calibration> calibration;
  const HardwareProfile profile = deployment_hardware(a, cmd, cost, calibration);
  std::vector<CalibrationRun> check_reports;
  for (const auto& path : a.check) check_reports.push_back(read_calibration_run(path));
  const std::vector<CalibrationFigure> checks = check_runs(check_reports, profile);
  DeploymentOptions d_opts = deployment_options(a, cmd, lengths, o.overhead_bytes);
  d_opts.seq_len = e.context;
  const Deployment d = estimate_deployment(cost, profile, d_opts);
  e.memory_bytes = d.memory.usable_bytes;
  e.max_batch = d.memory.max_batch;
  e.fits = d.memory.fits && e.batch <= d.memory.max_batch;

  EstimateJson json = to_json(e, m.name, m.is_preset);
  json["hardware"] = hardware_json(profile, d.num_devices, d.rates);
  json["workload"] = workload;
  const EstimateJson deployment_part = deployment_json(d, d_opts);
  for (const auto& [key, value] : deployment_part.items()) json[key] = value;
  json["calibration"] =
      calibration ? calibration_json(*calibration, profile) : EstimateJson(nullptr);
  json["checks"] = checks_json(checks);
  if (a.json_path == "-") {
    std::cout << json.dump(2) << "\n";
    return 0;
  }
  print_table(e, m.name, m.is_preset, true);
  std::fputs(hardware_text(profile, d.num_devices, m.weights.compute_type).c_str(), stdout);
  if (calibration) std::fputs(calibration_text(*calibration, profile).c_str(), stdout);
  if (!checks.empty()) std::fputs(checks_text(checks).c_str(), stdout);
  std::fputs(deployment_text(d, d_opts, workload).c_str(), stdout);
  write_json(json, a.json_path);
  return 0;
}

int run_estimate(const EstimateArgs& a, const CLI::App& cmd) {
  check_estimate_args(a);
  if (a.table) return run_table_calibrated(a, cmd);
  const EstimatedModel m = estimated_model(a);
  const bool deployment = wants_deployment(a, cmd);
  const EstimateOptions o = memory_options(a, cmd, m.config, deployment);
  return deployment ? run_deployment(a, cmd, m, o) : run_memory(a, cmd, m, o);
}

}  // namespace

Action add_estimate(CLI::App& app) {
  auto a = std::make_shared<EstimateArgs>();
  auto* cmd = app.add_subcommand(
      "estimate",
      "Memory of a model and, with --hardware, its speed, capacity and cost on that hardware");
  add_estimate_options(cmd, *a);
  return [a, cmd] { return run_estimate(*a, *cmd); };
}

}  // namespace pagoda::cli
