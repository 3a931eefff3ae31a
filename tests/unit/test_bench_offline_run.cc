// The in-process benchmark driver on a real tiny model: batched and sequential runs produce
// every requested token, timings are ordered, the step totals add up, a stop flag ends a run
// early; plus the /proc status parser and the progress line.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>

#include "bench/offline_run.h"
#include "bench/process_memory.h"
#include "bench/progress.h"
#include "model/model_file.h"
#include "test_util.h"

namespace pagoda::bench {
namespace {

struct Tiny {
  std::unique_ptr<ModelFile> file;
  std::unique_ptr<Model> model;
  std::unique_ptr<Backend> backend;
};

Tiny load_tiny(const std::string& path) {
  Tiny t;
  t.file = ModelFile::open(path);
  t.model = Model::load(*t.file);
  t.backend = make_cpu_backend(1);
  return t;
}

std::vector<BenchRequest> requests() {
  const auto pool = prompt_token_pool(nullptr, 500);
  return synthetic_requests(6, {3, 40}, {1, 9}, pool, 3);
}

EngineConfig config() {
  EngineConfig c;
  c.num_kv_cache_tokens = 1024;
  c.max_num_batched_tokens = 64;  // chunked prefill, several steps
  return c;
}

void expect_complete(const OfflineResult& r, const std::vector<BenchRequest>& reqs) {
  ASSERT_EQ(r.requests.size(), reqs.size());
  int64_t prompt = 0, output = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const RequestResult& q = r.requests[i];
    EXPECT_TRUE(q.finished);
    EXPECT_EQ(q.num_output_tokens, reqs[i].output_len);
    EXPECT_EQ(q.num_prompt_tokens, static_cast<int32_t>(reqs[i].prompt.size()));
    EXPECT_LE(q.start_s, q.first_token_s);
    EXPECT_LE(q.first_token_s, q.end_s);
    EXPECT_LE(q.end_s, r.wall_s);
    EXPECT_EQ(std::isnan(q.decode_s_per_token()), reqs[i].output_len < 2);
    prompt += q.num_prompt_tokens;
    output += reqs[i].output_len;
  }
  EXPECT_EQ(r.num_prompt_tokens(), prompt);
  EXPECT_EQ(r.num_output_tokens(), output);
  EXPECT_EQ(r.num_finished(), static_cast<int64_t>(reqs.size()));
  EXPECT_FALSE(r.interrupted);
  // Every prompt token is computed once and every output token but the last is fed back.
  EXPECT_EQ(r.steps.num_tokens, prompt + output - static_cast<int64_t>(reqs.size()));
  EXPECT_GT(r.steps.num_steps, 0);
}

TEST(BenchOfflineRun, BatchedAndSequentialProduceEveryToken) {
  PAGODA_SHARED_OR_SKIP(path, "models/stories260K.gguf");
  Tiny t = load_tiny(path);
  Engine engine(*t.model, *t.backend, config());
  const auto reqs = requests();
  int64_t last_seen = 0;
  const OfflineResult batched =
      run_batched(engine, reqs, {nullptr, [&](int64_t n) { last_seen = n; }});
  expect_complete(batched, reqs);
  EXPECT_EQ(last_seen, batched.num_output_tokens());
  EXPECT_EQ(batched.steps.peak_running, static_cast<int32_t>(reqs.size()));
  EXPECT_GT(batched.steps.mean_seqs_per_step(), 1.0);
  EXPECT_GT(batched.steps.peak_kv_utilization, 0.0);
  // A fresh engine: the first one's prefix cache holds these prompts now.
  Engine fresh(*t.model, *t.backend, config());
  const OfflineResult sequential = run_sequential(fresh, reqs);
  expect_complete(sequential, reqs);
  EXPECT_EQ(sequential.steps.peak_running, 1);
  EXPECT_DOUBLE_EQ(sequential.steps.mean_seqs_per_step(), 1.0);
  // One request after another: each starts after the previous one ended.
  for (size_t i = 1; i < reqs.size(); ++i) {
    EXPECT_GE(sequential.requests[i].start_s, sequential.requests[i - 1].end_s);
  }
  EXPECT_FALSE(fresh.has_work());
}

TEST(BenchOfflineRun, StopFlagEndsTheRunAndFreesEverything) {
  PAGODA_SHARED_OR_SKIP(path, "models/stories260K.gguf");
  Tiny t = load_tiny(path);
  Engine engine(*t.model, *t.backend, config());
  const auto reqs = requests();
  std::atomic<bool> stop{false};
  int steps = 0;
  const OfflineResult r = run_batched(engine, reqs, {&stop, [&](int64_t) { stop = ++steps == 2; }});
  EXPECT_TRUE(r.interrupted);
  EXPECT_EQ(r.steps.num_steps, 2);
  EXPECT_LT(r.num_finished(), static_cast<int64_t>(reqs.size()));
  EXPECT_FALSE(engine.has_work());
  stop = true;
  const OfflineResult none = run_sequential(engine, reqs, {&stop, nullptr});
  EXPECT_TRUE(none.interrupted);
  EXPECT_EQ(none.num_output_tokens(), 0);
}

TEST(BenchProcessMemory, ParsesStatusFields) {
  const auto m = parse_proc_status("Name:\tpagoda\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->rss_bytes, 1024u * 1024);
  EXPECT_EQ(m->peak_rss_bytes, 2048u * 1024);
  EXPECT_FALSE(parse_proc_status("VmRSS: 1 kB\n").has_value());
  const auto self = read_process_memory();
  if (self) {
    EXPECT_GE(self->peak_rss_bytes, self->rss_bytes);
  }
}

TEST(BenchProgress, LineShowsBarPercentAndCounts) {
  EXPECT_EQ(Progress::line("batched", 5, 10, "tokens", 1.25, 10),
            "batched [#####.....]  50%  5/10 tokens  1.2 s");
  EXPECT_EQ(Progress::line("runs", 3, 0, "runs", 0, 0), "runs   0%  3/0 runs  0.0 s");
  EXPECT_EQ(Progress::line("x", 20, 10, "t", 2, 4), "x [####] 100%  20/10 t  2.0 s");
}

}  // namespace
}  // namespace pagoda::bench
