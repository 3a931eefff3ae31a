// pagoda bench latency -m FILE: time to first token, decode time per token and end-to-end time
// of one request at a time through the Engine (as `pagoda run` drives it), over repeated runs,
// with warm-up runs left out. Prompt: random vocabulary ids (--prompt-len, --seed) or -p TEXT;
// greedy, end-of-generation tokens ignored, so every run produces --output-len tokens.
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_cli.h"
#include "bench/interrupt.h"
#include "bench/offline_run.h"
#include "bench/process_memory.h"
#include "bench/progress.h"
#include "planner/workload.h"
#include "cli/bench_commands.h"
#include "cli/speculative_options.h"
#include "core/error.h"
#include "model/kv_storage.h"

namespace pagoda::cli {
namespace {

using bench::Json;
using bench::kNoValue;

struct LatencyOptions {
  bench::CommonOptions common;
  std::string prompt_text;
  int32_t prompt_len = 128;
  int32_t output_len = 32;
  int32_t runs = 5;
  int32_t warmup = 1;
  int32_t max_batched_tokens = 2048;
  std::string kv_type = "f16";
  uint64_t seed = 0;
  SpeculativeOptions speculative;
};

struct LatencyResult {
  std::vector<bench::RequestResult> runs;  // measured runs that completed
  int32_t num_prompt_tokens = 0;
  uint64_t kv_bytes = 0;
  bool interrupted = false;
  SpeculativeStats speculative;  // of the measured runs
};

struct LatencySummaries {
  Summary ttft, decode, e2e;  // seconds
};

std::vector<TokenId> latency_prompt(const LatencyOptions& o, const bench::BenchModel& m) {
  if (!o.prompt_text.empty()) {
    auto ids =
        m.need_tokenizer().encode(o.prompt_text, {.add_special = true, .parse_special = true});
    if (ids.empty()) fail("-p: the prompt encodes to no tokens");
    return ids;
  }
  std::mt19937_64 rng(o.seed);
  const auto pool =
      bench::prompt_token_pool(m.vocab(), static_cast<int32_t>(m.model->config().vocab_size));
  return bench::random_prompt(pool, o.prompt_len, rng);
}

// One engine, one sequence at a time, no prefix caching (a repeated prompt would hit the cache).
EngineConfig latency_engine_config(const LatencyOptions& o, int32_t num_prompt_tokens) {
  EngineConfig c;
  c.num_kv_cache_tokens = num_prompt_tokens + o.output_len;
  c.max_num_seqs = 1;
  c.max_num_batched_tokens = o.max_batched_tokens;
  c.enable_prefix_caching = false;
  c.kv_type = parse_kv_type(o.kv_type);
  return c;
}

LatencyResult measure(const LatencyOptions& o, bench::BenchModel& m) {
  const bench::BenchRequest request{latency_prompt(o, m), o.output_len};
  EngineConfig config = latency_engine_config(o, static_cast<int32_t>(request.prompt.size()));
  DraftModel draft;
  config.speculative = speculative_config(o.speculative, *m.file, draft);
  Engine engine(*m.model, *m.backend, config);
  LatencyResult result;
  result.num_prompt_tokens = static_cast<int32_t>(request.prompt.size());
  result.kv_bytes = engine.kv().bytes();
  bench::SigintFlag sigint;
  const int32_t total_runs = o.warmup + o.runs;
  bench::Progress progress("latency", int64_t{total_runs} * o.output_len, "tokens",
                           !o.common.no_progress);
  int64_t tokens_before = 0;
  bench::RunHooks hooks{&sigint.flag(),
                        [&](int64_t tokens) { progress.update(tokens_before + tokens); }};
  SpeculativeStats before_measured;
  for (int32_t i = 0; i < total_runs && !sigint.raised(); ++i) {
    if (i == o.warmup) before_measured = engine.stats().speculative;
    const bench::OfflineResult run = bench::run_sequential(engine, {request}, hooks);
    tokens_before += run.num_output_tokens();
    if (run.interrupted || !run.requests[0].finished) break;
    if (i >= o.warmup) result.runs.push_back(run.requests[0]);
  }
  progress.finish();
  result.interrupted = sigint.raised();
  result.speculative = speculative_delta(engine.stats().speculative, before_measured);
  return result;
}

LatencySummaries summarize_runs(const LatencyResult& r) {
  std::vector<double> ttft, decode, e2e;
  for (const bench::RequestResult& run : r.runs) {
    ttft.push_back(run.ttft_s());
    e2e.push_back(run.e2e_s());
    if (run.num_output_tokens >= 2) decode.push_back(run.decode_s_per_token());
  }
  return {summarize(ttft), summarize(decode), summarize(e2e)};
}

double mean_or_none(const Summary& s, double scale) {
  return s.num_samples ? s.mean * scale : kNoValue;
}

bench::Table stats_table(const bench::BenchModel& m, const LatencySummaries& s, int digits) {
  bench::Table t{
      {"engine", "model", "precision", "metric", "mean", "median", "p90", "p99", "min", "max"}, {}};
  auto row = [&](const char* name, const Summary& x) {
    auto v = [&](double value) { return x.num_samples ? bench::cell(value * 1e3, digits) : "-"; };
    t.rows.push_back({"pagoda", m.name, m.precision, name, v(x.mean), v(x.median), v(x.p90),
                      v(x.p99), v(x.min), v(x.max)});
  };
  row("TTFT ms", s.ttft);
  row("decode ms/token", s.decode);
  row("end-to-end ms", s.e2e);
  return t;
}

std::string latency_chart(const LatencySummaries& s, const std::string& title) {
  const std::vector<std::string> categories = {"mean", "median", "p90", "p99", "max"};
  auto series = [&](const std::string& name, const Summary& x) {
    bench::Series out{name, {}};
    for (double v : {x.mean, x.median, x.p90, x.p99, x.max}) {
      out.points.emplace_back(0, x.num_samples ? v * 1e3 : kNoValue);
    }
    return out;
  };
  return bench::svg_bar_chart(title, "milliseconds", categories,
                              {series("time to first token", s.ttft),
                               series("decode per token", s.decode), series("end to end", s.e2e)});
}

Json latency_json(const LatencyOptions& o, const bench::BenchModel& m, const LatencyResult& r,
                  const LatencySummaries& s, uint64_t peak_rss) {
  Json j = bench::report_header("latency", m, r.interrupted);
  j["prompt_tokens"] = r.num_prompt_tokens;
  j["output_tokens"] = o.output_len;
  j["num_runs"] = r.runs.size();
  j["num_warmup"] = o.warmup;
  j["kv_cache_bytes"] = r.kv_bytes;
  j["peak_rss_bytes"] = peak_rss;
  j["ttft_ms"] = bench::summary_json(s.ttft, 1e3);
  j["decode_ms_per_token"] = bench::summary_json(s.decode, 1e3);
  j["e2e_ms"] = bench::summary_json(s.e2e, 1e3);
  j["prefill_tokens_per_s"] = bench::number_or_null(r.num_prompt_tokens / s.ttft.mean);
  j["decode_tokens_per_s"] = bench::number_or_null(1.0 / s.decode.mean);
  j["speculative"] = speculative_json(r.speculative);
  Json runs = Json::array();
  for (const bench::RequestResult& run : r.runs) {
    runs.push_back({{"ttft_ms", run.ttft_s() * 1e3},
                    {"decode_ms_per_token", bench::number_or_null(run.decode_s_per_token() * 1e3)},
                    {"e2e_ms", run.e2e_s() * 1e3},
                    {"output_tokens", run.num_output_tokens}});
  }
  j["runs"] = std::move(runs);
  return j;
}

int report(const LatencyOptions& o, const bench::BenchModel& m, const LatencyResult& r) {
  const LatencySummaries s = summarize_runs(r);
  const auto memory = bench::read_process_memory();
  const uint64_t peak_rss = memory ? memory->peak_rss_bytes : 0;
  bench::SummaryRow row{"latency",
                        mean_or_none(s.ttft, 1e3),
                        mean_or_none(s.decode, 1e3),
                        o.output_len / mean_or_none(s.e2e, 1),
                        1 / mean_or_none(s.e2e, 1),
                        memory ? std::optional(peak_rss) : std::nullopt,
                        r.kv_bytes};
  char heading[256];
  std::snprintf(heading, sizeof heading, "%s: prompt %d tokens, %d output tokens, %zu runs%s\n\n",
                m.name.c_str(), r.num_prompt_tokens, o.output_len, r.runs.size(),
                r.interrupted ? " (interrupted)" : "");
  bench::Outputs out;
  out.text =
      heading + bench::summary_table(m, {row}).to_text() + "\n" + stats_table(m, s, 2).to_text();
  if (const std::string spec = speculative_summary(r.speculative); !spec.empty()) {
    out.text += "\nspeculative decoding: " + spec + "\n";
  }
  out.json = latency_json(o, m, r, s, peak_rss);
  out.csv = stats_table(m, s, 4);
  out.svg = latency_chart(s, "pagoda latency: " + m.name + ", prompt " +
                                 std::to_string(r.num_prompt_tokens) + ", output " +
                                 std::to_string(o.output_len));
  bench::emit_outputs(o.common, out);
  return r.interrupted ? bench::kInterruptedExitCode : 0;
}

}  // namespace

Action add_bench_latency(CLI::App& bench) {
  auto o = std::make_shared<LatencyOptions>();
  auto* cmd = bench.add_subcommand(
      "latency", "Time to first token, decode time per token and end-to-end time of one request");
  bench::add_common_options(*cmd, o->common, true);
  auto* len = cmd->add_option("--prompt-len", o->prompt_len, "Prompt tokens (random ids)")
                  ->capture_default_str()
                  ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("-p,--prompt", o->prompt_text, "Prompt text instead of random ids")
      ->excludes(len);
  cmd->add_option("--output-len", o->output_len, "Output tokens per run")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--runs", o->runs, "Measured runs")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--warmup", o->warmup, "Warm-up runs, not measured")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  cmd->add_option("--max-batched-tokens", o->max_batched_tokens, "Prompt tokens per step at most")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--kv-type", o->kv_type, kv_type_help())
      ->capture_default_str()
      ->check(CLI::IsMember(kv_type_name_list()));
  cmd->add_option("--seed", o->seed, "Seed of the random prompt")->capture_default_str();
  add_speculative_options(cmd, o->speculative);
  return [o] {
    bench::BenchModel m = bench::load_bench_model(o->common.model, o->common.threads, o->common.backend);
    return report(*o, m, measure(*o, m));
  };
}

}  // namespace pagoda::cli
