// pagoda bench memory -m FILE: weight bytes, KV bytes per token, the KV budget in blocks, peak
// resident memory (VmHWM) measured around a short batched workload, and how many sequences of
// --seq-len tokens the budget holds with paged blocks against a contiguous allocation of
// --max-model-len slots per sequence.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_cli.h"
#include "planner/estimate.h"
#include "bench/interrupt.h"
#include "bench/kv_fit.h"
#include "bench/offline_run.h"
#include "bench/process_memory.h"
#include "planner/workload.h"
#include "cli/bench_commands.h"
#include "core/error.h"

namespace pagoda::cli {
namespace {

using bench::Json;
using bench::kNoValue;

struct MemoryOptions {
  bench::CommonOptions common;
  bench::EngineOptions engine;
  int32_t seq_len = 512;
  int32_t max_model_len = 0;  // 0: the model's trained context, at most 4096 (as pagoda run)
  int32_t num_requests = 4;
  int32_t output_len = 8;
  uint64_t seed = 0;
  int32_t beam_width = 0;  // > 0: also beam search's blocks against that many copies
};

// Beam search's sharing, measured: the most blocks one beam-search request of `width` beams
// holds at once, against `width` independent copies of the same request (no prefix caching,
// so they share nothing).
struct BeamMemory {
  int32_t width = 0;
  int32_t beam_peak_blocks = 0;
  int32_t copies_peak_blocks = 0;
  uint64_t block_bytes = 0;
};

struct MemoryResult {
  uint64_t rss_baseline = 0, rss_loaded = 0, rss_engine = 0, peak_rss = 0;
  bool have_rss = false;
  uint64_t kv_bytes = 0;
  uint64_t kv_bytes_per_token = 0;
  int32_t num_kv_blocks = 0;
  int32_t block_size = 0;
  int32_t max_model_len = 0;
  uint64_t estimated_bytes = 0;  // estimate.h: weights + KV budget + default overhead
  std::vector<bench::KvFit> fits;
  bench::KvFit fit;  // at --seq-len
  bench::OfflineResult workload;
  bool interrupted = false;
  BeamMemory beam;
};

int32_t peak_blocks(Engine& engine) {
  int32_t peak = 0;
  while (engine.has_work()) {
    engine.step();
    peak = std::max(peak, engine.stats().scheduler.kv.num_used_blocks);
  }
  return peak;
}

BeamMemory beam_memory(const MemoryOptions& o, const bench::BenchModel& m,
                       const bench::BenchRequest& request) {
  BeamMemory b;
  b.width = o.beam_width;
  EngineConfig config = bench::engine_config(o.engine, 16384);
  config.max_num_seqs = std::max(config.max_num_seqs, o.beam_width);
  GenerationRequest g;
  g.prompt = request.prompt;
  g.max_tokens = request.output_len;
  g.sampling.temperature = 0;
  {
    Engine engine(*m.model, *m.backend, config);
    GenerationRequest beam = g;
    beam.beam.width = o.beam_width;
    engine.add_request(beam);
    b.beam_peak_blocks = peak_blocks(engine);
    b.block_bytes = engine.kv().bytes() / static_cast<uint64_t>(engine.kv().num_blocks());
  }
  config.enable_prefix_caching = false;
  Engine engine(*m.model, *m.backend, config);
  for (int32_t i = 0; i < o.beam_width; ++i) engine.add_request(g);
  b.copies_peak_blocks = peak_blocks(engine);
  return b;
}

uint64_t current_rss() {
  const auto m = bench::read_process_memory();
  return m ? m->rss_bytes : 0;
}

int32_t model_len(const MemoryOptions& o, const ModelConfig& c) {
  if (o.max_model_len > 0) return o.max_model_len;
  const uint32_t trained = c.context_length;
  return static_cast<int32_t>(trained == 0 || trained > 4096 ? 4096 : trained);
}

// The arithmetic: KV per token from the engine's own allocation, the fit table, the estimate.
void fill_arithmetic(const MemoryOptions& o, const bench::BenchModel& m, const Engine& engine,
                     MemoryResult& r) {
  r.kv_bytes = engine.kv().bytes();
  r.num_kv_blocks = engine.kv().num_blocks();
  r.block_size = engine.config().block_size;
  r.kv_bytes_per_token =
      r.kv_bytes / (static_cast<uint64_t>(r.num_kv_blocks) * static_cast<uint64_t>(r.block_size));
  r.max_model_len = model_len(o, m.model->config());
  if (o.seq_len > r.max_model_len) {
    fail("--seq-len ", o.seq_len, " is longer than the max model length ", r.max_model_len);
  }
  for (int64_t len : bench::kv_fit_lengths(r.max_model_len, o.seq_len)) {
    r.fits.push_back(
        bench::kv_fit(r.num_kv_blocks, r.block_size, r.kv_bytes_per_token, r.max_model_len, len));
  }
  r.fit = bench::kv_fit(r.num_kv_blocks, r.block_size, r.kv_bytes_per_token, r.max_model_len,
                        o.seq_len);
  r.estimated_bytes = m.weight_bytes + r.kv_bytes + default_overhead_bytes(m.model->config());
}

// --num-requests sequences of --seq-len tokens (prompt + output), all at once.
std::vector<bench::BenchRequest> workload(const MemoryOptions& o, const bench::BenchModel& m) {
  const int32_t output_len = std::min(o.output_len, o.seq_len - 1);
  if (output_len < 1) fail("--seq-len ", o.seq_len, " leaves no room for a prompt and an output");
  const bench::LengthRange prompt{o.seq_len - output_len, o.seq_len - output_len};
  const auto pool =
      bench::prompt_token_pool(m.vocab(), static_cast<int32_t>(m.model->config().vocab_size));
  return bench::synthetic_requests(o.num_requests, prompt, {output_len, output_len}, pool, o.seed);
}

MemoryResult measure(const MemoryOptions& o, const std::string& path, int threads,
                     std::unique_ptr<bench::BenchModel>& model) {
  MemoryResult r;
  r.have_rss = bench::read_process_memory().has_value();
  r.rss_baseline = current_rss();
  model = std::make_unique<bench::BenchModel>(
      bench::load_bench_model(path, threads, o.common.backend));
  r.rss_loaded = current_rss();
  Engine engine(*model->model, *model->backend, bench::engine_config(o.engine, 16384));
  r.rss_engine = current_rss();
  fill_arithmetic(o, *model, engine, r);
  bench::SigintFlag sigint;
  const std::vector<bench::BenchRequest> requests = workload(o, *model);
  r.workload = bench::run_batched(engine, requests, {&sigint.flag(), nullptr});
  if (o.beam_width > 0 && !sigint.raised()) r.beam = beam_memory(o, *model, requests.at(0));
  const auto after = bench::read_process_memory();
  r.peak_rss = after ? after->peak_rss_bytes : 0;
  r.interrupted = sigint.raised();
  return r;
}

bench::Table fit_table(const bench::BenchModel& m, const MemoryResult& r) {
  bench::Table t{
      {"engine", "model", "precision", "sequence length", "contiguous fit", "paged fit", "gain"},
      {}};
  for (const bench::KvFit& f : r.fits) {
    t.rows.push_back({"pagoda", m.name, m.precision, std::to_string(f.seq_len),
                      std::to_string(f.contiguous), std::to_string(f.paged),
                      f.contiguous ? bench::cell(f.gain(), 1) + "x" : "-"});
  }
  return t;
}

std::string mib(uint64_t bytes) {
  return bench::cell(static_cast<double>(bytes) / 1048576.0, 1) + " MiB";
}

std::string memory_lines(const bench::BenchModel& m, const MemoryResult& r) {
  char buf[1024];
  std::snprintf(
      buf, sizeof buf,
      "weights           %s (%s)\n"
      "KV per token      %llu bytes (F32 cache)\n"
      "KV budget         %s: %d blocks of %d tokens = %lld tokens\n"
      "estimated total   %s (weights + KV budget + activations, pagoda estimate's overhead)\n"
      "resident memory   %s at start, %s after loading, %s with the engine, peak %s\n"
      "fit               %lld sequences of %d tokens paged, %lld contiguous (%d slots each)\n"
      "workload          %zu requests of %d + %d tokens at once: peak %d running, KV peak %s%%, "
      "%lld preemptions\n\n",
      mib(m.weight_bytes).c_str(), m.weight_types.c_str(),
      static_cast<unsigned long long>(r.kv_bytes_per_token), mib(r.kv_bytes).c_str(),
      r.num_kv_blocks, r.block_size, static_cast<long long>(r.num_kv_blocks) * r.block_size,
      mib(r.estimated_bytes).c_str(), r.have_rss ? mib(r.rss_baseline).c_str() : "-",
      r.have_rss ? mib(r.rss_loaded).c_str() : "-", r.have_rss ? mib(r.rss_engine).c_str() : "-",
      r.have_rss ? mib(r.peak_rss).c_str() : "-", static_cast<long long>(r.fit.paged),
      static_cast<int>(r.fit.seq_len), static_cast<long long>(r.fit.contiguous), r.max_model_len,
      r.workload.requests.size(),
      r.workload.requests.empty() ? 0 : r.workload.requests[0].num_prompt_tokens,
      r.workload.requests.empty() ? 0 : r.workload.requests[0].num_output_tokens,
      r.workload.steps.peak_running,
      bench::cell(100 * r.workload.steps.peak_kv_utilization, 1).c_str(),
      static_cast<long long>(r.workload.num_preemptions));
  return buf;
}

Json fit_json(const bench::KvFit& f) {
  return Json{{"seq_len", f.seq_len},
              {"contiguous", f.contiguous},
              {"paged", f.paged},
              {"gain", f.contiguous ? Json(f.gain()) : Json(nullptr)}};
}

Json memory_json(const MemoryOptions& o, const bench::BenchModel& m, const MemoryResult& r) {
  Json j = bench::report_header("memory", m, r.interrupted);
  j["kv_bytes_per_token"] = r.kv_bytes_per_token;
  j["kv_cache_bytes"] = r.kv_bytes;
  j["num_kv_blocks"] = r.num_kv_blocks;
  j["block_size"] = r.block_size;
  j["kv_tokens"] = static_cast<int64_t>(r.num_kv_blocks) * r.block_size;
  j["max_model_len"] = r.max_model_len;
  j["seq_len"] = o.seq_len;
  j["estimated_bytes"] = r.estimated_bytes;
  auto rss = [&](uint64_t v) { return r.have_rss ? Json(v) : Json(nullptr); };
  j["rss_bytes"] = {
      {"start", rss(r.rss_baseline)}, {"loaded", rss(r.rss_loaded)}, {"engine", rss(r.rss_engine)}};
  j["peak_rss_bytes"] = rss(r.peak_rss);
  j["fit"] = fit_json(r.fit);
  Json fits = Json::array();
  for (const bench::KvFit& f : r.fits) fits.push_back(fit_json(f));
  j["fit_table"] = std::move(fits);
  if (r.beam.width > 0) {
    j["beam"] = {{"width", r.beam.width},
                 {"beam_peak_blocks", r.beam.beam_peak_blocks},
                 {"copies_peak_blocks", r.beam.copies_peak_blocks},
                 {"block_bytes", r.beam.block_bytes},
                 {"ratio", static_cast<double>(r.beam.beam_peak_blocks) /
                               std::max(1, r.beam.copies_peak_blocks)}};
  }
  j["workload"] = {{"num_requests", r.workload.requests.size()},
                   {"num_finished", r.workload.num_finished()},
                   {"output_tokens", r.workload.num_output_tokens()},
                   {"wall_s", r.workload.wall_s},
                   {"peak_running", r.workload.steps.peak_running},
                   {"kv_utilization_peak", r.workload.steps.peak_kv_utilization},
                   {"num_preemptions", r.workload.num_preemptions}};
  return j;
}

std::string fit_chart(const bench::BenchModel& m, const MemoryResult& r) {
  std::vector<std::string> categories;
  bench::Series contiguous{"contiguous (" + std::to_string(r.max_model_len) + " slots each)", {}};
  bench::Series paged{"paged (" + std::to_string(r.block_size) + "-token blocks)", {}};
  for (const bench::KvFit& f : r.fits) {
    categories.push_back(std::to_string(f.seq_len));
    contiguous.points.emplace_back(0, static_cast<double>(f.contiguous));
    paged.points.emplace_back(0, static_cast<double>(f.paged));
  }
  return bench::svg_bar_chart("Sequences that fit in " + mib(r.kv_bytes) + " of KV: " + m.name,
                              "sequences (by sequence length in tokens)", categories,
                              {contiguous, paged});
}

int report(const MemoryOptions& o, const bench::BenchModel& m, const MemoryResult& r) {
  bench::SummaryRow row{"memory",  kNoValue, kNoValue,
                        kNoValue,  kNoValue, r.have_rss ? std::optional(r.peak_rss) : std::nullopt,
                        r.kv_bytes};
  bench::Outputs out;
  out.text = m.name + (r.interrupted ? " (interrupted)\n\n" : "\n\n") +
             bench::summary_table(m, {row}).to_text() + "\n" + memory_lines(m, r) +
             fit_table(m, r).to_text();
  if (r.beam.width > 0) {
    out.text += "\nbeam search, width " + std::to_string(r.beam.width) + ": peak " +
                std::to_string(r.beam.beam_peak_blocks) + " blocks (" +
                mib(static_cast<uint64_t>(r.beam.beam_peak_blocks) * r.beam.block_bytes) +
                ") against " + std::to_string(r.beam.copies_peak_blocks) + " blocks (" +
                mib(static_cast<uint64_t>(r.beam.copies_peak_blocks) * r.beam.block_bytes) +
                ") for " + std::to_string(r.beam.width) + " independent copies: " +
                bench::cell(static_cast<double>(r.beam.beam_peak_blocks) /
                                std::max(1, r.beam.copies_peak_blocks), 2) + "x\n";
  }
  out.json = memory_json(o, m, r);
  out.csv = fit_table(m, r);
  out.svg = fit_chart(m, r);
  bench::emit_outputs(o.common, out);
  return r.interrupted ? bench::kInterruptedExitCode : 0;
}

}  // namespace

Action add_bench_memory(CLI::App& bench) {
  auto o = std::make_shared<MemoryOptions>();
  auto* cmd = bench.add_subcommand("memory", "Weights, KV cache, peak resident memory, KV fit");
  bench::add_common_options(*cmd, o->common, true);
  bench::add_engine_options(*cmd, o->engine);
  cmd->add_option("--seq-len", o->seq_len,
                  "Sequence length (prompt + output) for the fit and the workload")
      ->capture_default_str()
      ->check(CLI::Range(2, 1 << 22));
  cmd->add_option("--max-model-len", o->max_model_len,
                  "Slots a contiguous cache reserves per sequence (default: the model's context, "
                  "at most 4096)")
      ->check(CLI::Range(1, 1 << 22));
  cmd->add_option("-n,--num-requests", o->num_requests, "Requests in the measured workload")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--output-len", o->output_len, "Output tokens per workload request")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--seed", o->seed, "Seed of the workload's random prompts")
      ->capture_default_str();
  cmd->add_option("--beam-width", o->beam_width,
                  "Also measure the KV blocks of one beam search of this width against as many "
                  "independent copies of the request")
      ->check(CLI::Range(1, kMaxBeamWidth));
  return [o] {
    std::unique_ptr<bench::BenchModel> m;
    const MemoryResult r = measure(*o, o->common.model, o->common.threads, m);
    return report(*o, *m, r);
  };
}

}  // namespace pagoda::cli
