// pagoda estimate -m FILE | --preset NAME: weight and KV-cache memory, and the largest batch
// that fits a device.
#include "bench/estimate.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/format_util.h"
#include "core/error.h"
#include "model/model_file.h"

namespace pagoda::cli {
namespace {

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
};

uint64_t gib_to_bytes(double gib, const char* option) {
  if (!std::isfinite(gib) || gib < 0 || gib > 1e9) fail(option, " ", gib, " is not a size in GiB");
  return static_cast<uint64_t>(std::llround(gib * 1073741824.0));
}

std::string element_size_text(const std::string& type_name) {
  const auto& t = dtype_traits(*dtype_from_name(type_name));
  if (t.block_size == 1) return std::to_string(t.type_size) + " bytes";
  return std::to_string(t.type_size) + "/" + std::to_string(t.block_size) + " bytes";
}

void print_table(const Estimate& e, const std::string& model_name, bool is_preset) {
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
  row("KV per token:", human_bytes(e.kv_bytes_per_token),
      e.kv_type + ": 2 x " + std::to_string(c.num_layers) + " layers x " +
          std::to_string(c.num_kv_heads) + " KV heads x " + std::to_string(c.head_dim) + " x " +
          size + " = " + std::to_string(e.kv_bytes_per_token) + " bytes");
  std::snprintf(note, sizeof note, "2 x %u layers x %u hidden x %s = %llu bytes (%.1fx)",
                c.num_layers, c.hidden_size, size.c_str(),
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
  row("overhead:", human_bytes(e.overhead_bytes),
      "F32 activations of a " + std::to_string(kStepTokens) + "-token step + logits of " +
          std::to_string(kLogitRows) + " sequences");
  row("total:", human_bytes(e.total_bytes),
      "weights + KV total + overhead = " + std::to_string(e.total_bytes) + " bytes");
  if (e.memory_bytes) {
    row("memory:", human_bytes(*e.memory_bytes),
        std::string(*e.fits ? "fits" : "does NOT fit") + "; largest batch of " +
            std::to_string(e.context) + "-token sequences: " + std::to_string(*e.max_batch));
  }
}

nlohmann::json to_json(const Estimate& e, const std::string& model_name, bool is_preset) {
  const ModelConfig& c = e.config;
  auto optional = [](const auto& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
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
      {"kv_type", e.kv_type},
      {"context", e.context},
      {"batch", e.batch},
      {"kv_bytes_per_token", e.kv_bytes_per_token},
      {"kv_bytes_per_token_without_gqa", e.kv_bytes_per_token_without_gqa},
      {"kv_bytes_per_sequence", e.kv_bytes_per_sequence},
      {"kv_bytes_total", e.kv_bytes_total},
      {"overhead_bytes", e.overhead_bytes},
      {"total_bytes", e.total_bytes},
      {"memory_bytes", optional(e.memory_bytes)},
      {"fits", optional(e.fits)},
      {"max_batch", optional(e.max_batch)},
  };
}

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : " ") + n;
  return s;
}

}  // namespace

Action add_estimate(CLI::App& app) {
  auto a = std::make_shared<EstimateArgs>();
  auto* cmd = app.add_subcommand(
      "estimate", "Weight and KV-cache memory of a model, and the largest batch that fits");
  std::vector<std::string> presets;
  for (const auto& p : estimate_presets()) presets.push_back(p.name);
  auto* model = cmd->add_option("-m,--model", a->model_path,
                                "GGUF file, .safetensors file or Hugging Face model folder "
                                "(weights: the exact tensor bytes)");
  auto* preset = cmd->add_option("--preset", a->preset, "Model shape: " + joined(presets));
  model->excludes(preset);
  cmd->add_option("--weights-type", a->weights_type,
                  "Weight type of a preset (default f16): " + joined(estimate_weight_types()) +
                      ". K mixes (q4_k_m, q5_k_m) follow llama.cpp's per-tensor rule as pagoda "
                      "synth writes it: within a few percent of llama.cpp's files");
  cmd->add_option(
         "--kv-type", a->kv_type,
         "KV cache element type (pagoda's CPU cache is F32 today): " + joined(estimate_kv_types()))
      ->default_val("f16");
  cmd->add_option("--context", a->context, "Tokens per sequence (default: the model's context)");
  cmd->add_option("--batch", a->batch, "Sequences held at once")->default_val(1);
  cmd->add_option("--memory-gb", a->memory_gib,
                  "Device memory in GiB (2^30 bytes): says whether it fits and the largest batch");
  cmd->add_option("--overhead-gb", a->overhead_gib,
                  "Memory that is neither weights nor KV, in GiB (default: F32 activations of a " +
                      std::to_string(kStepTokens) + "-token step + logits of " +
                      std::to_string(kLogitRows) + " sequences)");
  cmd->add_option("--json", a->json_path,
                  "Also write the numbers as JSON to PATH ('-': stdout only)");
  return [a, cmd] {
    if (a->model_path.empty() && a->preset.empty()) fail("estimate: give -m FILE or --preset NAME");
    ModelConfig config;
    WeightEstimate weights;
    std::string name;
    const bool is_preset = !a->preset.empty();
    if (is_preset) {
      const EstimatePreset& p = find_estimate_preset(a->preset);
      config = p.config;
      weights = estimate_weights(config, a->weights_type.empty() ? "f16" : a->weights_type);
      name = p.name;
    } else {
      if (!a->weights_type.empty()) {
        fail("estimate: --weights-type is for presets; a file's weights are counted as stored");
      }
      auto file = ModelFile::open(a->model_path);
      config = file->config();
      weights = file_weights(*file);
      name = a->model_path;
    }
    EstimateOptions o;
    o.kv_type = a->kv_type;
    o.context = a->context;
    o.batch = a->batch;
    if (cmd->count("--memory-gb")) {
      o.memory_bytes = gib_to_bytes(a->memory_gib, "--memory-gb");
      if (*o.memory_bytes == 0) fail("--memory-gb must be more than 0");
    }
    if (cmd->count("--overhead-gb"))
      o.overhead_bytes = gib_to_bytes(a->overhead_gib, "--overhead-gb");
    const Estimate e = estimate_memory(config, weights, o);
    const nlohmann::json json = to_json(e, name, is_preset);
    if (a->json_path == "-") {
      std::cout << json.dump(2) << "\n";
      return 0;
    }
    print_table(e, name, is_preset);
    if (!a->json_path.empty()) {
      std::ofstream out(a->json_path);
      out << json.dump(2) << "\n";
      if (!out) fail(a->json_path, ": cannot write");
    }
    return 0;
  };
}

}  // namespace pagoda::cli
