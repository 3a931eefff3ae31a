// pagoda bench throughput -m FILE: offline throughput. N requests (fixed or uniform lengths with
// random-id prompts, or a ShareGPT-style dataset) are all submitted to the Engine at once and
// run to completion; with --sequential the same requests then run one after another, each
// alone, and the ratio is printed. Greedy, end-of-generation tokens ignored.
#include <algorithm>
#include <cstdio>
#include <memory>
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

namespace pagoda::cli {
namespace {

using bench::Json;
using bench::kNoValue;

struct ThroughputOptions {
  bench::CommonOptions common;
  bench::EngineOptions engine;
  int32_t num_requests = 64;
  std::string prompt_len = "256";
  std::string output_len = "128";
  std::string dataset;
  uint64_t seed = 0;
  bool sequential = false;
  std::string save_requests;  // write the workload's token ids here (other engines replay it)
  SpeculativeOptions speculative;
};

struct Workload {
  std::vector<bench::BenchRequest> requests;
  Json description;
};

struct ThroughputRun {
  std::string mode;  // "batched" or "sequential"
  bench::OfflineResult result;
  SpeculativeStats speculative = {};  // of the timed run
};

struct Measured {
  std::vector<ThroughputRun> runs;
  uint64_t kv_bytes = 0;
  int32_t num_kv_blocks = 0;
  bool interrupted = false;
};

Workload dataset_workload(const ThroughputOptions& o, const CLI::App& cmd,
                          const bench::BenchModel& m) {
  const bool fixed_output = cmd.get_option("--output-len")->count() > 0;
  const int32_t output_len =
      fixed_output ? bench::parse_length_range(o.output_len, "--output-len").min : 0;
  bench::DatasetRequests d =
      bench::sharegpt_requests(o.dataset, m.need_tokenizer(), o.num_requests, {}, output_len);
  if (d.requests.empty()) fail(o.dataset, ": no usable conversation (", d.num_skipped, " skipped)");
  Json desc{{"source", "dataset"},
            {"dataset", o.dataset},
            {"num_requests", d.requests.size()},
            {"num_read", d.num_read},
            {"num_skipped", d.num_skipped},
            {"output_len", fixed_output ? Json(output_len) : Json(nullptr)}};
  return {std::move(d.requests), std::move(desc)};
}

Workload make_workload(const ThroughputOptions& o, const CLI::App& cmd,
                       const bench::BenchModel& m) {
  if (!o.dataset.empty()) return dataset_workload(o, cmd, m);
  const auto prompt = bench::parse_length_range(o.prompt_len, "--prompt-len");
  const auto output = bench::parse_length_range(o.output_len, "--output-len");
  const auto pool =
      bench::prompt_token_pool(m.vocab(), static_cast<int32_t>(m.model->config().vocab_size));
  Json desc{{"source", "synthetic"},
            {"num_requests", o.num_requests},
            {"prompt_len", prompt.to_string()},
            {"output_len", output.to_string()},
            {"seed", o.seed}};
  return {bench::synthetic_requests(o.num_requests, prompt, output, pool, o.seed), std::move(desc)};
}

// Enough KV for max_num_seqs of the longest requests at once: no preemption unless asked for.
int64_t default_kv_tokens(const std::vector<bench::BenchRequest>& requests,
                          const bench::EngineOptions& e) {
  std::vector<int64_t> sizes;
  for (const auto& r : requests) {
    const int64_t len = static_cast<int64_t>(r.prompt.size()) + r.output_len;
    sizes.push_back((len + e.block_size - 1) / e.block_size * e.block_size);
  }
  std::sort(sizes.rbegin(), sizes.rend());
  int64_t total = 0;
  for (size_t i = 0; i < sizes.size() && i < static_cast<size_t>(e.max_num_seqs); ++i)
    total += sizes[i];
  return std::max<int64_t>(total, e.block_size);
}

// A short request first, so thread start-up and first touches of the weights are not timed.
void warm_up(Engine& engine, const bench::BenchModel& m) {
  const auto pool =
      bench::prompt_token_pool(m.vocab(), static_cast<int32_t>(m.model->config().vocab_size));
  std::mt19937_64 rng(1);
  bench::run_sequential(engine, {{bench::random_prompt(pool, 8, rng), 2}});
}

ThroughputRun timed_run(const std::string& mode, Engine& engine, const Workload& w,
                        const bench::SigintFlag& sigint, bool progress_on) {
  int64_t total = 0;
  for (const auto& r : w.requests) total += r.output_len;
  bench::Progress progress(mode, total, "tokens", progress_on);
  const bench::RunHooks hooks{&sigint.flag(), [&](int64_t done) { progress.update(done); }};
  ThroughputRun run{mode, mode == "batched" ? bench::run_batched(engine, w.requests, hooks)
                                            : bench::run_sequential(engine, w.requests, hooks)};
  progress.finish();
  return run;
}

// Each mode gets a fresh engine: the batched run's prefix cache would otherwise serve the
// sequential run's prompts.
Measured measure(const ThroughputOptions& o, const bench::BenchModel& m, const Workload& w) {
  EngineConfig config = bench::engine_config(o.engine, default_kv_tokens(w.requests, o.engine));
  DraftModel draft;
  config.speculative = speculative_config(o.speculative, *m.file, draft);
  Measured out;
  bench::SigintFlag sigint;
  std::vector<std::string> modes = {"batched"};
  if (o.sequential) modes.push_back("sequential");
  for (const std::string& mode : modes) {
    if (sigint.raised()) break;
    Engine engine(*m.model, *m.backend, config);
    out.kv_bytes = engine.kv().bytes();
    out.num_kv_blocks = engine.stats().scheduler.kv.num_blocks;
    warm_up(engine, m);
    const SpeculativeStats before = engine.stats().speculative;
    out.runs.push_back(timed_run(mode, engine, w, sigint, !o.common.no_progress));
    out.runs.back().speculative = speculative_delta(engine.stats().speculative, before);
  }
  out.interrupted = sigint.raised();
  return out;
}

double per_second(double count, double seconds) { return seconds > 0 ? count / seconds : kNoValue; }
double total_tokens_per_s(const bench::OfflineResult& r) {
  return per_second(static_cast<double>(r.num_prompt_tokens() + r.num_output_tokens()), r.wall_s);
}

struct RunSummaries {
  Summary ttft, decode, e2e;  // seconds, finished requests
};

RunSummaries summaries(const bench::OfflineResult& r) {
  std::vector<double> ttft, decode, e2e;
  for (const auto& q : r.requests) {
    if (!q.finished) continue;
    ttft.push_back(q.ttft_s());
    e2e.push_back(q.e2e_s());
    if (q.num_output_tokens >= 2) decode.push_back(q.decode_s_per_token());
  }
  return {summarize(ttft), summarize(decode), summarize(e2e)};
}

double mean_ms(const Summary& s) { return s.num_samples ? s.mean * 1e3 : kNoValue; }

Json run_json(const ThroughputRun& run) {
  const bench::OfflineResult& r = run.result;
  const RunSummaries s = summaries(r);
  return Json{
      {"mode", run.mode},
      {"interrupted", r.interrupted},
      {"num_requests", r.requests.size()},
      {"num_finished", r.num_finished()},
      {"prompt_tokens", r.num_prompt_tokens()},
      {"output_tokens", r.num_output_tokens()},
      {"wall_s", r.wall_s},
      {"requests_per_s", bench::number_or_null(per_second(double(r.num_finished()), r.wall_s))},
      {"output_tokens_per_s",
       bench::number_or_null(per_second(double(r.num_output_tokens()), r.wall_s))},
      {"total_tokens_per_s", bench::number_or_null(total_tokens_per_s(r))},
      {"speculative", speculative_json(run.speculative)},
      {"num_steps", r.steps.num_steps},
      {"mean_tokens_per_step", bench::number_or_null(r.steps.mean_tokens_per_step())},
      {"mean_seqs_per_step", bench::number_or_null(r.steps.mean_seqs_per_step())},
      {"peak_running", r.steps.peak_running},
      {"kv_utilization_mean", bench::number_or_null(r.steps.mean_kv_utilization())},
      {"kv_utilization_peak", r.steps.peak_kv_utilization},
      {"num_preemptions", r.num_preemptions},
      {"ttft_ms", bench::summary_json(s.ttft, 1e3)},
      {"decode_ms_per_token", bench::summary_json(s.decode, 1e3)},
      {"e2e_ms", bench::summary_json(s.e2e, 1e3)}};
}

// Batched total tokens/s over sequential; NaN without a sequential run.
double speedup(const Measured& m) {
  if (m.runs.size() < 2) return kNoValue;
  return total_tokens_per_s(m.runs[0].result) / total_tokens_per_s(m.runs[1].result);
}

bench::Table detail_table(const bench::BenchModel& model, const Measured& m) {
  bench::Table t{{"engine", "model", "precision", "run", "requests", "finished", "prompt tokens",
                  "output tokens", "wall s", "req/s", "output tok/s", "total tok/s", "tokens/step",
                  "seqs/step", "KV util mean %", "KV util peak %", "preemptions"},
                 {}};
  for (const ThroughputRun& run : m.runs) {
    const bench::OfflineResult& r = run.result;
    t.rows.push_back(
        {"pagoda", model.name, model.precision, run.mode, std::to_string(r.requests.size()),
         std::to_string(r.num_finished()), std::to_string(r.num_prompt_tokens()),
         std::to_string(r.num_output_tokens()), bench::cell(r.wall_s, 2),
         bench::cell(per_second(double(r.num_finished()), r.wall_s), 3),
         bench::cell(per_second(double(r.num_output_tokens()), r.wall_s), 1),
         bench::cell(total_tokens_per_s(r), 1), bench::cell(r.steps.mean_tokens_per_step(), 1),
         bench::cell(r.steps.mean_seqs_per_step(), 2),
         bench::cell(100 * r.steps.mean_kv_utilization(), 1),
         bench::cell(100 * r.steps.peak_kv_utilization, 1), std::to_string(r.num_preemptions)});
  }
  return t;
}

std::vector<bench::SummaryRow> summary_rows(const Measured& m, std::optional<uint64_t> peak_rss) {
  std::vector<bench::SummaryRow> rows;
  for (const ThroughputRun& run : m.runs) {
    const bench::OfflineResult& r = run.result;
    const RunSummaries s = summaries(r);
    rows.push_back({run.mode, mean_ms(s.ttft), mean_ms(s.decode),
                    per_second(double(r.num_output_tokens()), r.wall_s),
                    per_second(double(r.num_finished()), r.wall_s), peak_rss, m.kv_bytes});
  }
  return rows;
}

std::string throughput_chart(const bench::BenchModel& model, const Measured& m) {
  std::vector<bench::Series> series;
  for (const ThroughputRun& run : m.runs) {
    const bench::OfflineResult& r = run.result;
    series.push_back(
        {run.mode,
         {{0, per_second(double(r.num_output_tokens()), r.wall_s)}, {0, total_tokens_per_s(r)}}});
  }
  return bench::svg_bar_chart("pagoda offline throughput: " + model.name, "tokens per second",
                              {"output tokens/s", "total tokens/s"}, series);
}

std::string heading(const bench::BenchModel& model, const Workload& w, const Measured& m) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s: %zu requests, KV %d blocks, threads %d%s\n\n",
                model.name.c_str(), w.requests.size(), m.num_kv_blocks, model.num_threads,
                m.interrupted ? " (interrupted)" : "");
  return buf;
}

int report(const ThroughputOptions& o, const bench::BenchModel& model, const Workload& w,
           const Measured& m) {
  const auto memory = bench::read_process_memory();
  const std::optional<uint64_t> peak_rss =
      memory ? std::optional(memory->peak_rss_bytes) : std::nullopt;
  bench::Outputs out;
  out.text = heading(model, w, m) +
             bench::summary_table(model, summary_rows(m, peak_rss)).to_text() + "\n" +
             detail_table(model, m).to_text();
  if (m.runs.size() > 1) {
    out.text += "\nbatched / sequential total tokens/s: " + bench::cell(speedup(m), 2) + "x\n";
  }
  for (const ThroughputRun& run : m.runs) {
    if (const std::string spec = speculative_summary(run.speculative); !spec.empty()) {
      out.text += "speculative decoding, " + run.mode + ": " + spec + "\n";
    }
  }
  out.json = bench::report_header("throughput", model, m.interrupted);
  out.json["workload"] = w.description;
  out.json["kv_cache_bytes"] = m.kv_bytes;
  out.json["num_kv_blocks"] = m.num_kv_blocks;
  out.json["block_size"] = o.engine.block_size;
  out.json["max_num_seqs"] = o.engine.max_num_seqs;
  out.json["max_num_batched_tokens"] = o.engine.max_num_batched_tokens;
  out.json["prefix_caching"] = !o.engine.no_prefix_caching;
  out.json["peak_rss_bytes"] = peak_rss ? Json(*peak_rss) : Json(nullptr);
  Json runs = Json::array();
  for (const ThroughputRun& run : m.runs) runs.push_back(run_json(run));
  out.json["runs"] = std::move(runs);
  out.json["speedup_vs_sequential"] = bench::number_or_null(speedup(m));
  out.csv = detail_table(model, m);
  out.svg = throughput_chart(model, m);
  bench::emit_outputs(o.common, out);
  return m.interrupted ? bench::kInterruptedExitCode : 0;
}

// {"requests": [{"prompt": [ids], "output_len": n}, ...]}
void save_requests(const std::string& path, const Workload& w) {
  Json requests = Json::array();
  for (const bench::BenchRequest& r : w.requests) {
    requests.push_back({{"prompt", r.prompt}, {"output_len", r.output_len}});
  }
  bench::write_output(path, Json{{"requests", std::move(requests)}}.dump() + "\n");
}

}  // namespace

Action add_bench_throughput(CLI::App& bench) {
  auto o = std::make_shared<ThroughputOptions>();
  auto* cmd = bench.add_subcommand("throughput", "Offline throughput of many requests at once");
  bench::add_common_options(*cmd, o->common, true);
  bench::add_engine_options(*cmd, o->engine);
  cmd->add_option("-n,--num-requests", o->num_requests, "Requests")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  auto* len =
      cmd->add_option("--prompt-len", o->prompt_len, "Prompt tokens: N or MIN:MAX (uniform)")
          ->capture_default_str();
  cmd->add_option("--output-len", o->output_len,
                  "Output tokens: N or MIN:MAX (with --dataset: N replaces the replies' lengths)")
      ->capture_default_str();
  cmd->add_option("--dataset", o->dataset, "ShareGPT-style JSON file of conversations")
      ->excludes(len);
  add_speculative_options(cmd, o->speculative);
  cmd->add_option("--seed", o->seed, "Seed of the random lengths and prompts")
      ->capture_default_str();
  cmd->add_flag("--sequential", o->sequential,
                "Also run the same requests one after another, each alone, and compare");
  cmd->add_option("--save-requests", o->save_requests,
                  "Write the requests' token ids and output lengths as JSON to PATH (to replay "
                  "them in another engine)");
  return [o, cmd] {
    bench::BenchModel m = bench::load_bench_model(o->common.model, o->common.threads, o->common.backend);
    const Workload w = make_workload(*o, *cmd, m);
    if (!o->save_requests.empty()) save_requests(o->save_requests, w);
    return report(*o, m, w, measure(*o, m, w));
  };
}

}  // namespace pagoda::cli
