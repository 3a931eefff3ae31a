// Options and report pieces shared by the in-process bench subcommands (see bench_cli.h).
#include "bench/bench_cli.h"

#include <cmath>
#include <cstdio>

#include "backend/backend_choice.h"
#include "backend/kv_format.h"
#include "core/error.h"

namespace pagoda::bench {
namespace {

std::string bytes_cell(const std::optional<uint64_t>& bytes) {
  if (!bytes) return "-";
  const double kib = static_cast<double>(*bytes) / 1024.0;
  if (kib < 1024) return cell(kib, 1) + " KiB";
  return kib < 10 * 1048576.0 ? cell(kib / 1024.0, 1) + " MiB" : cell(kib / 1048576.0, 1) + " GiB";
}

}  // namespace

void add_common_options(CLI::App& cmd, CommonOptions& o, bool with_svg) {
  cmd.add_option("-m,--model", o.model, "GGUF file or Hugging Face model folder")->required();
  cmd.add_option("-t,--threads", o.threads, "Threads (default: all cores)")
      ->check(CLI::Range(0, 1024));
  cmd.add_option("--backend,--device", o.backend, backend_help())
      ->check(CLI::IsMember(backend_names()))
      ->capture_default_str();
  cmd.add_option("--json", o.json_path, "Write the results as JSON to PATH (- = stdout)");
  cmd.add_option("--csv", o.csv_path, "Write the results table as CSV to PATH (- = stdout)");
  if (with_svg) cmd.add_option("--svg", o.svg_path, "Write a chart as SVG to PATH (- = stdout)");
  cmd.add_flag("--no-progress", o.no_progress, "No progress line on stderr");
}

void add_engine_options(CLI::App& cmd, EngineOptions& o) {
  cmd.add_option("--kv-cache-gb", o.kv_cache_gb, "KV cache memory in GiB");
  cmd.add_option("--kv-tokens", o.kv_tokens, "KV cache size in tokens (instead of --kv-cache-gb)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 31));
  cmd.add_option("--max-seqs", o.max_num_seqs, "Sequences running at once at most")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  cmd.add_option("--max-batched-tokens", o.max_num_batched_tokens, "Token budget of one step")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd.add_option("--block-size", o.block_size, "Token slots per KV block")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd.add_flag("--no-prefix-caching", o.no_prefix_caching, "Do not share cached prompt blocks");
  cmd.add_option("--kv-type", o.kv_type, kv_type_help())
      ->capture_default_str()
      ->check(CLI::IsMember(kv_type_name_list()));
}

Table summary_table(const BenchModel& model, const std::vector<SummaryRow>& rows) {
  Table t{{"engine", "model", "precision", "run", "TTFT ms", "decode ms/tok", "tok/s", "req/s",
           "memory", "KV"},
          {}};
  for (const SummaryRow& r : rows) {
    t.rows.push_back({"pagoda", model.name, model.precision, r.run, cell(r.ttft_ms, 1),
                      cell(r.decode_ms_per_token, 2), cell(r.tokens_per_s, 1),
                      cell(r.requests_per_s, 3), bytes_cell(r.memory_bytes),
                      bytes_cell(r.kv_bytes)});
  }
  return t;
}

Json number_or_null(double value) { return std::isfinite(value) ? Json(value) : Json(nullptr); }

Json report_header(const std::string& benchmark, const BenchModel& model, bool interrupted) {
  Json j;
  j["benchmark"] = benchmark;
  j["engine"] = "pagoda";
  j["model"] = model.name;
  j["model_path"] = model.path;
  j["precision"] = model.precision;
  j["weight_types"] = model.weight_types;
  j["weight_bytes"] = model.weight_bytes;
  j["step_weight_bytes"] = model.step_weight_bytes;
  j["step_parameters"] = model.step_parameters;
  j["threads"] = model.num_threads;
  j["interrupted"] = interrupted;
  return j;
}

Json summary_json(const Summary& s, double scale) {
  const bool any = s.num_samples > 0;
  auto value = [&](double v) { return any ? number_or_null(v * scale) : Json(nullptr); };
  return Json{{"n", s.num_samples},  {"mean", value(s.mean)},  {"median", value(s.median)},
              {"p90", value(s.p90)}, {"p99", value(s.p99)},    {"min", value(s.min)},
              {"max", value(s.max)}, {"std", value(s.std_dev)}};
}

void emit_outputs(const CommonOptions& o, const Outputs& out) {
  const bool stdout_taken = o.json_path == "-" || o.csv_path == "-" || o.svg_path == "-";
  std::fputs(out.text.c_str(), stdout_taken ? stderr : stdout);
  std::fflush(stdout_taken ? stderr : stdout);
  if (!o.json_path.empty()) write_output(o.json_path, out.json.dump(2) + "\n");
  if (!o.csv_path.empty()) write_output(o.csv_path, out.csv.to_csv());
  if (!o.svg_path.empty()) {
    if (out.svg.empty()) fail("--svg: this benchmark draws no chart");
    write_output(o.svg_path, out.svg);
  }
}

}  // namespace pagoda::bench
