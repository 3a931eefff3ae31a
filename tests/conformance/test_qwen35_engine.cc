// Qwen3.5's hybrid model (qwen3.5-tiny: Gated DeltaNet, full attention, Gated DeltaNet) through
// the engine: every request's greedy ids are those it gives alone, whether batched, chunked by
// a small budget (the recurrent state carried from chunk to chunk), limited to fewer sequences
// than requests, or preempted and recomputed; prefix caching asked for is off (a hit would skip
// the recurrence); the features that do not carry the state yet are refused in one line.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "conformance/engine_harness.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "test_util.h"

namespace pagoda {
namespace {

std::string tiny_model(const std::string& shared) {
  static const std::string path = synthetic_model(shared, "qwen3.5-tiny", "f32",
                                                  test::temp_dir() + "/qwen3.5-tiny-engine.gguf");
  return path;
}

TEST(Qwen35Engine, BatchInvarianceThroughChunkingAndPreemption) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  LoadedModel m = load(tiny_model(shared));
  auto backend = make_cpu_backend(2);
  const std::vector<GenerationRequest> requests = make_requests(m, 12, 90, 20);
  const RunResult alone =
      run(*m.model, *backend, config_with(4096, false), requests, Arrival::kAlone);
  const auto expected = ids_of(alone);
  ASSERT_NE(std::count(expected.begin(), expected.end(), expected[1]), 12);
  int32_t longest = 0;
  for (const GenerationRequest& r : requests) {
    longest = std::max<int32_t>(longest, static_cast<int32_t>(r.prompt.size()) + r.max_tokens);
  }
  const int64_t tiny_kv = (longest + 15) / 16 * 16;
  struct Variant {
    const char* name;
    EngineConfig config;
    Arrival arrival;
  };
  const Variant variants[] = {
      {"together", config_with(4096, false), Arrival::kTogether},
      {"staggered, prefix caching asked for", config_with(4096, true), Arrival::kStaggered},
      {"budget 32", config_with(4096, false, 32), Arrival::kTogether},
      {"budget 7, 3 sequences", config_with(4096, true, 7, 3), Arrival::kStaggered},
      {"tiny KV, preempted", config_with(tiny_kv, false), Arrival::kTogether},
      {"tiny KV, preempted, budget 32", config_with(tiny_kv, false, 32), Arrival::kTogether},
  };
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.name);
    const RunResult r = run(*m.model, *backend, v.config, requests, v.arrival);
    const auto got = ids_of(r);
    for (size_t i = 0; i < requests.size(); ++i) {
      EXPECT_EQ(got[i], expected[i]) << "request " << i << " (" << requests[i].prompt.size()
                                     << " prompt tokens)";
    }
    EXPECT_EQ(r.stats.scheduler.kv.num_hit_tokens, 0);
    if (v.config.num_kv_cache_tokens == tiny_kv) {
      EXPECT_GT(r.stats.scheduler.num_preemptions, 0);
    }
  }
}

// Greedy decoding (a prompt in one step, then a token per step) gives llama.cpp's greedy ids
// (tests/data/logits/synth-qwen3.5-tiny-f32.json, scripts/make_logit_vectors.py).
TEST(Qwen35Engine, GreedyIdsAreLlamaCpps) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  LoadedModel m = load(tiny_model(shared));
  auto backend = make_cpu_backend(2);
  const auto doc = nlohmann::json::parse(
      read_file(std::string(PAGODA_SOURCE_DIR) + "/tests/data/logits/synth-qwen3.5-tiny-f32.json"));
  std::vector<GenerationRequest> requests;
  std::vector<std::vector<TokenId>> want;
  for (const auto& seq : doc.at("sequences")) {
    want.push_back(seq.at("greedy").at("ids").get<std::vector<TokenId>>());
    requests.push_back(greedy_request(seq.at("greedy").at("prompt").get<std::vector<TokenId>>(),
                                      static_cast<int32_t>(want.back().size())));
  }
  ASSERT_EQ(requests.size(), 2u);
  const auto got = ids_of(run(*m.model, *backend, config_with(4096, false), requests, Arrival::kTogether));
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << "sequence " << i;
}

// The state of one sequence does not leak into the next one that takes its slot: a request
// run after another (slot 0 both times) gives the ids it gives first.
TEST(Qwen35Engine, ASlotTakenAgainStartsAfresh) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  LoadedModel m = load(tiny_model(shared));
  auto backend = make_cpu_backend(2);
  const GenerationRequest a = greedy_request(encode(m, kStoryA), 12);
  const GenerationRequest b = greedy_request(encode(m, kStoryB), 12);
  const auto first = ids_of(run(*m.model, *backend, config_with(4096, false, 2048, 1), {b}, Arrival::kAlone));
  const auto after = ids_of(run(*m.model, *backend, config_with(4096, false, 2048, 1), {a, b}, Arrival::kAlone));
  EXPECT_EQ(after[1], first[0]);
}

void expect_refused(const std::function<void()>& f, const std::string& words) {
  try {
    f();
    ADD_FAILURE() << "not refused: " << words;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(Qwen35Engine, FeaturesWithoutStateHandlingAreRefused) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  LoadedModel m = load(tiny_model(shared));
  auto backend = make_cpu_backend(2);
  Engine engine(*m.model, *backend, config_with(4096, true));
  EXPECT_FALSE(engine.config().enable_prefix_caching);
  GenerationRequest r = greedy_request(encode(m, kStoryA), 4);
  r.n = 2;
  expect_refused([&] { engine.add_request(r); }, "n > 1 is not supported for the hybrid model");
  r.n = 1;
  r.beam.width = 2;
  expect_refused([&] { engine.add_request(r); }, "beam search is not supported");
  r.beam.width = 0;
  r.num_speculative_tokens = 3;
  expect_refused([&] { engine.add_request(r); }, "speculative decoding is not supported");
  EngineConfig spec = config_with(4096, false);
  spec.speculative.num_tokens = 2;
  expect_refused([&] { Engine e(*m.model, *backend, spec); }, "speculative decoding is not supported");
  EngineConfig disk = config_with(4096, true);
  disk.kv_disk.folder = test::temp_dir() + "/qwen35-kv-disk";
  expect_refused([&] { Engine e(*m.model, *backend, disk); }, "--kv-disk is not supported");
  r.num_speculative_tokens = 0;
  engine.add_request(r);  // a plain request still runs
  while (engine.has_work()) engine.step();
}

}  // namespace
}  // namespace pagoda
