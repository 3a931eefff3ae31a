// What the in-process bench subcommands (latency, throughput, memory) share on the command
// line and in their reports: the model and thread options, the engine options, the output
// paths (--json, --csv, --svg; "-" = standard output), the one-line summary table every
// benchmark prints, and the JSON fields every report starts with (docs/BENCHMARKS.md).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_model.h"
#include "bench/metrics.h"
#include "bench/report.h"

namespace pagoda::bench {

using Json = nlohmann::ordered_json;
inline constexpr double kNoValue = std::numeric_limits<double>::quiet_NaN();

struct CommonOptions {
  std::string model;
  int threads = 0;
  std::string backend = "cpu";
  std::string json_path, csv_path, svg_path;
  bool no_progress = false;
};
// -m/--model, -t/--threads, --backend (--device), --json, --csv, --svg (when `with_svg`), --no-progress.
void add_common_options(CLI::App& cmd, CommonOptions& options, bool with_svg);
// --kv-cache-gb, --kv-tokens, --max-seqs, --max-batched-tokens, --block-size,
// --no-prefix-caching.
void add_engine_options(CLI::App& cmd, EngineOptions& options);

// One row of the summary table; NaN / nullopt cells print "-".
struct SummaryRow {
  std::string run;  // "latency", "batched", "sequential", "memory"
  double ttft_ms = kNoValue;
  double decode_ms_per_token = kNoValue;
  double tokens_per_s = kNoValue;  // output tokens per second
  double requests_per_s = kNoValue;
  std::optional<uint64_t> memory_bytes;  // peak resident memory
  std::optional<uint64_t> kv_bytes;      // the K/V memory
};
// engine, model, precision, run, TTFT ms, decode ms/tok, tok/s, req/s, memory, KV.
Table summary_table(const BenchModel& model, const std::vector<SummaryRow>& rows);

// The fields every report starts with: benchmark, engine, model, model_path, precision,
// weight_types, weight_bytes, threads, interrupted.
Json report_header(const std::string& benchmark, const BenchModel& model, bool interrupted);
// {"n", "mean", "median", "p90", "p99", "min", "max", "std"}, each value times `scale`;
// null values when there was no sample.
Json summary_json(const Summary& summary, double scale);
// A finite number, or null.
Json number_or_null(double value);

struct Outputs {
  std::string text;  // the terminal report
  Json json;
  Table csv;
  std::string svg;  // empty: this benchmark draws no chart
};
// Prints the text (to standard error when any output goes to standard output, so it stays
// parseable) and writes each output asked for.
void emit_outputs(const CommonOptions& options, const Outputs& outputs);

}  // namespace pagoda::bench
