// The engine on real models: many requests through one paged KV cache give exactly the ids each
// gives alone (greedy), whether they run alone, all together, in small chunks, with or without
// prefix caching, or preempted and recomputed; on the reference backend and the CPU backend.
// Also: prefix caching skips the shared prefix, the engine equals Generator, parallel sampling
// shares the prompt's blocks, stop conditions, abort, errors, and the engine thread.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <thread>
#include <unordered_map>

#include "backend/backend.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/engine_thread.h"
#include "engine/generator.h"
#include "model/model.h"
#include "model/model_file.h"
#include "conformance/engine_harness.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

TEST(EngineBatchInvariance, Stories260KReference) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  auto backend = make_reference_backend();
  check_batch_invariance(stories260k(shared), *backend, 16, 100, 24);
}

TEST(EngineBatchInvariance, Stories260KCpu) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  auto backend = make_cpu_backend(2);
  check_batch_invariance(stories260k(shared), *backend, 16, 100, 24);
}

// An F16 KV cache rounds K/V the same way whatever the batch, so invariance must hold too.
TEST(EngineBatchInvariance, Stories260KCpuF16Cache) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  auto backend = make_cpu_backend(2);
  check_batch_invariance(stories260k(shared), *backend, 16, 100, 24, true, KvType::kF16);
}

// Q8_0 / FP8 caches quantize each token's vector on its own, so the batch cannot change them.
TEST(EngineBatchInvariance, Stories260KCpuQuantizedCaches) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  auto backend = make_cpu_backend(2);
  for (KvType type : {KvType::kQ8_0, KvType::kFp8}) {
    SCOPED_TRACE(kv_type_info(type).name);
    check_batch_invariance(stories260k(shared), *backend, 16, 100, 24, false, type);
  }
}

TEST(EngineBatchInvariance, TinyStories656KReference) {
  PAGODA_SHARED_OR_SKIP(path, "models/tinystories-656k");
  auto backend = make_reference_backend();
  check_batch_invariance(path, *backend, 16, 90, 24);
}

TEST(EngineBatchInvariance, TinyStories656KCpu) {
  PAGODA_SHARED_OR_SKIP(path, "models/tinystories-656k");
  auto backend = make_cpu_backend(2);
  check_batch_invariance(path, *backend, 16, 90, 24);
}

TEST(EngineBatchInvariance, SmolLM2Cpu) {
  const std::string path = installed_model("smollm2-135m-instruct-q4_1.gguf");
  if (path.empty())
    GTEST_SKIP() << "*** models/smollm2-135m-instruct-q4_1.gguf is absent: run scripts/setup ***";
  auto backend = make_cpu_backend(2);
  check_batch_invariance(path, *backend, 16, 24, 6);
}

TEST(EngineBatchInvariance, Gemma3Cpu) {
  const std::string path = installed_model("gemma-3-270m-q4_k_m.gguf");
  if (path.empty())
    GTEST_SKIP() << "*** models/gemma-3-270m-q4_k_m.gguf is absent: run scripts/setup ***";
  auto backend = make_cpu_backend(2);
  // A 262k vocabulary makes every sampled row costly: fewer requests and runs.
  check_batch_invariance(path, *backend, 8, 40, 10, /*all_variants=*/false);
}

// gpt-oss in its published type (MXFP4 experts): sliding-window layers (16) shorter than the
// prompts, sinks, routed experts and YaRN, through batching, chunked prefill, prefix caching
// and preemption.
TEST(EngineBatchInvariance, GptOssTinyCpu) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  const std::string path = synthetic_model(shared, "gpt-oss-tiny", "mxfp4_moe",
                                           test::temp_dir() + "/gpt-oss-tiny-engine.gguf");
  auto backend = make_cpu_backend(2);
  check_batch_invariance(path, *backend, 16, 100, 24);
}

// Gemma 4's dense layer: layers of K/V rows of different widths in one paged cache (64 and
// 256 floats), three layers reading earlier ones' K/V, per-layer inputs and a window (16)
// shorter than the prompts, through batching, chunked prefill, prefix caching and preemption.
TEST(EngineBatchInvariance, Gemma4TinyCpu) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  const std::string path = synthetic_model(shared, "gemma4-tiny", "f32",
                                           test::temp_dir() + "/gemma4-tiny-engine.gguf");
  auto backend = make_cpu_backend(2);
  check_batch_invariance(path, *backend, 16, 100, 24);
}

// Gemma 4's experts (gemma4-moe-tiny: a dense block beside 8 experts, 2 used) the same way.
TEST(EngineBatchInvariance, Gemma4MoeTinyCpu) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  const std::string path = synthetic_model(shared, "gemma4-moe-tiny", "f32",
                                           test::temp_dir() + "/gemma4-moe-tiny-engine.gguf");
  auto backend = make_cpu_backend(2);
  check_batch_invariance(path, *backend, 16, 100, 24);
}

// A request whose prompt shares 64 tokens (4 blocks) with an earlier one computes only its own
// tokens, and gives the ids it gives on a cold cache.
TEST(EnginePrefixCache, SecondRequestComputesOnlyNewTokens) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  LoadedModel m = load(stories260k(shared));
  auto backend = make_cpu_backend(2);
  const std::vector<TokenId> a = encode(m, kStoryA), b = encode(m, kStoryB);
  ASSERT_GE(a.size(), 70u);
  const std::vector<TokenId> first(a.begin(), a.begin() + 70);
  std::vector<TokenId> second(a.begin(), a.begin() + 64);
  second.insert(second.end(), b.begin() + 1, b.begin() + 11);  // 74 tokens, 64 shared
  const int32_t max_tokens = 12;

  Engine engine(*m.model, *backend, config_with(4096, true));
  engine.add_request(greedy_request(first, max_tokens));
  while (engine.has_work()) engine.step();
  const EngineStats before = engine.stats();
  EXPECT_EQ(before.scheduler.kv.num_hit_tokens, 0);
  EXPECT_EQ(before.num_computed_tokens, 70 + max_tokens - 1);

  engine.add_request(greedy_request(second, max_tokens));
  std::vector<TokenId> warm;
  while (engine.has_work()) {
    for (const OutputEvent& e : engine.step())
      warm.insert(warm.end(), e.token_ids.begin(), e.token_ids.end());
    engine.check_invariants();
  }
  const EngineStats after = engine.stats();
  EXPECT_EQ(after.scheduler.kv.num_hit_tokens - before.scheduler.kv.num_hit_tokens, 64);
  EXPECT_EQ(after.num_computed_tokens - before.num_computed_tokens, (74 - 64) + (max_tokens - 1));
  EXPECT_GT(after.scheduler.kv.prefix_hit_rate(), 0.4);

  const RunResult cold = run(*m.model, *backend, config_with(4096, false),
                             {greedy_request(second, max_tokens)}, Arrival::kAlone);
  EXPECT_EQ(warm, cold.samples[0][0].ids);
  EXPECT_EQ(cold.stats.num_computed_tokens, 74 + max_tokens - 1);
}

// The engine (paged, batched) and Generator (contiguous, one prompt) agree, stopping at EOG.
TEST(EngineVsGenerator, GreedyIdsAreEqual) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  for (const std::string& path : {stories260k(shared), shared + "/models/tinystories-656k"}) {
    LoadedModel m = load(path);
    auto ref = make_reference_backend();
    auto cpu = make_cpu_backend(2);
    std::vector<GenerationRequest> requests = make_requests(m, 4, 60, 24);
    // tinystories-656k ends these stories within a few tokens.
    for (const char* text : {"Lily and Ben were friends.", "Tom was happy. He went home."}) {
      requests.push_back(greedy_request(encode(m, text), 24));
    }
    for (GenerationRequest& r : requests) {
      r.max_tokens = 24;
      r.stop_ids = m.tokenizer->vocab().eog;
    }
    for (Backend* be : {ref.get(), cpu.get()}) {
      SCOPED_TRACE(path + " on " + be->name());
      const RunResult together =
          run(*m.model, *be, config_with(4096, true), requests, Arrival::kTogether);
      int num_stopped = 0;
      for (size_t i = 0; i < requests.size(); ++i) {
        Generator gen(*m.model, *be, static_cast<int32_t>(requests[i].prompt.size()) + 25);
        GenerateOptions options;
        options.max_new_tokens = 24;
        options.sampling.temperature = 0;
        std::vector<TokenId> expected;
        gen.generate(requests[i].prompt, options, m.tokenizer->vocab().eog, [&](TokenId id) {
          expected.push_back(id);
          return true;
        });
        const Sample& got = together.samples[i][0];
        EXPECT_EQ(got.ids, expected) << "request " << i;
        if (got.finish == FinishReason::kStop) {
          ++num_stopped;
          EXPECT_NE(
              std::find(requests[i].stop_ids.begin(), requests[i].stop_ids.end(), got.stop_token),
              requests[i].stop_ids.end());
        } else {
          EXPECT_EQ(got.finish, FinishReason::kLength);
          EXPECT_EQ(got.ids.size(), 24u);
        }
      }
      if (path.find("tinystories-656k") != std::string::npos) {
        EXPECT_GE(num_stopped, 2);
      }
    }
  }
}

TEST(EngineStop, StopIdsAndMaxTokens) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  LoadedModel m = load(stories260k(shared));
  auto backend = make_cpu_backend(2);
  const std::vector<TokenId> prompt = encode(m, "Once upon a time");
  const RunResult free_run = run(*m.model, *backend, config_with(1024, true),
                                 {greedy_request(prompt, 20)}, Arrival::kAlone);
  const std::vector<TokenId>& ids = free_run.samples[0][0].ids;
  ASSERT_EQ(ids.size(), 20u);
  EXPECT_EQ(free_run.samples[0][0].finish, FinishReason::kLength);
  const TokenId stop = ids[6];
  const auto first = std::find(ids.begin(), ids.end(), stop);
  GenerationRequest r = greedy_request(prompt, 20);
  r.stop_ids = {9999, stop};
  const RunResult stopped = run(*m.model, *backend, config_with(1024, true), {r}, Arrival::kAlone);
  EXPECT_EQ(stopped.samples[0][0].ids, std::vector<TokenId>(ids.begin(), first));
  EXPECT_EQ(stopped.samples[0][0].finish, FinishReason::kStop);
  EXPECT_EQ(stopped.samples[0][0].stop_token, stop);
  EXPECT_EQ(stopped.stats.num_generated_tokens, (first - ids.begin()) + 1);  // the stop id too
}

// n = 2: the children fork from the prompt's blocks; greedy children are equal to each other and
// to the n = 1 request, and use fewer blocks than two separate requests.
TEST(EngineParallelSampling, GreedyChildrenShareThePrompt) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  LoadedModel m = load(stories260k(shared));
  auto ref = make_reference_backend();
  auto cpu = make_cpu_backend(2);
  const std::vector<TokenId> a = encode(m, kStoryA);
  for (const auto& [backend, caching] :
       {std::pair{ref.get(), true}, std::pair{cpu.get(), true}, std::pair{cpu.get(), false}}) {
    SCOPED_TRACE(backend->name() + (caching ? ", prefix caching" : ""));
    const EngineConfig config = config_with(1024, caching);
    for (int32_t len : {70, 65, 64, 2, 1}) {  // a tail to copy, none, a full last block, tiny
      SCOPED_TRACE("prompt of " + std::to_string(len));
      GenerationRequest single = greedy_request({a.begin(), a.begin() + len}, 10);
      const RunResult one = run(*m.model, *backend, config, {single}, Arrival::kAlone);
      GenerationRequest forked = single;
      forked.n = 2;
      const RunResult two = run(*m.model, *backend, config, {forked}, Arrival::kAlone);
      const RunResult separate =
          run(*m.model, *backend, config, {single, single}, Arrival::kTogether);
      ASSERT_EQ(two.samples[0].size(), 2u);
      EXPECT_EQ(two.samples[0][0].ids, one.samples[0][0].ids);
      EXPECT_EQ(two.samples[0][1].ids, one.samples[0][0].ids);
      EXPECT_EQ(separate.samples[1][0].ids, one.samples[0][0].ids);
      if (len >= 16) {
        EXPECT_LT(two.peak_used_blocks, separate.peak_used_blocks);
        // Tokens computed: the prompt once (both first tokens come from its last row), then
        // each sample's own decodes.
        EXPECT_EQ(two.stats.num_computed_tokens, len + 2 * (10 - 1));
      }
      // The child forks after the whole prompt: a tail to copy unless it ends a block.
      EXPECT_EQ(two.stats.num_block_copies, len % 16 != 0 ? 1 : 0);
    }
  }
}

TEST(EngineParallelSampling, SeededChildrenDifferAndReplay) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  LoadedModel m = load(stories260k(shared));
  auto backend = make_cpu_backend(2);
  const std::vector<TokenId> a = encode(m, kStoryA);
  GenerationRequest r;
  r.prompt.assign(a.begin(), a.begin() + 40);
  r.max_tokens = 24;
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 42;
  r.sampling.has_seed = true;
  r.sampling.logprobs = true;
  r.n = 3;
  const EngineConfig config = config_with(1024, true);
  const RunResult first = run(*m.model, *backend, config, {r}, Arrival::kAlone);
  const RunResult again = run(*m.model, *backend, config, {r}, Arrival::kAlone);
  ASSERT_EQ(first.samples[0].size(), 3u);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(first.samples[0][k].ids.size(), 24u);
    EXPECT_EQ(first.samples[0][k].ids, again.samples[0][k].ids) << "child " << k;
  }
  EXPECT_NE(first.samples[0][0].ids, first.samples[0][1].ids);
  EXPECT_NE(first.samples[0][1].ids, first.samples[0][2].ids);
  // Child k is the request with seed + k, alone.
  for (int k = 0; k < 3; ++k) {
    GenerationRequest single = r;
    single.n = 1;
    single.sampling.seed = 42 + k;
    const RunResult one = run(*m.model, *backend, config, {single}, Arrival::kAlone);
    EXPECT_EQ(one.samples[0][0].ids, first.samples[0][k].ids) << "child " << k;
  }
}

TEST(EngineAbort, FreesBlocksAtOnce) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  LoadedModel m = load(stories260k(shared));
  auto backend = make_cpu_backend(2);
  const std::vector<TokenId> a = encode(m, kStoryA);
  Engine engine(*m.model, *backend, config_with(1024, true, 32));
  const RequestId running = engine.add_request(greedy_request({a.begin(), a.begin() + 50}, 40));
  GenerationRequest forked = greedy_request({a.begin(), a.begin() + 60}, 40);
  forked.n = 3;
  const RequestId group = engine.add_request(forked);
  for (int i = 0; i < 3; ++i) engine.step();  // 96 tokens: the second prompt is half done
  engine.check_invariants();
  EXPECT_GT(engine.stats().scheduler.kv.num_used_blocks, 4);

  // The forked request is still computing its prompt: its children have not been forked yet.
  std::vector<OutputEvent> events = engine.abort(group);
  engine.check_invariants();
  ASSERT_EQ(events.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(events[k].request_id, group);
    EXPECT_EQ(events[k].index, k);
    EXPECT_EQ(events[k].finish_reason, FinishReason::kAbort);
    EXPECT_EQ(events[k].request_finished, k == 2);
  }
  EXPECT_EQ(engine.stats().scheduler.kv.num_used_blocks, 4);  // 50 prompt + 1 output computed
  EXPECT_EQ(engine.num_requests(), 1);

  events = engine.abort(running);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(events[0].request_finished);
  EXPECT_EQ(engine.stats().scheduler.kv.num_used_blocks, 0);
  EXPECT_FALSE(engine.has_work());
  EXPECT_TRUE(engine.abort(running).empty());
  EXPECT_TRUE(engine.abort(12345).empty());
  engine.check_invariants();
}

TEST(EngineErrors, BadRequestsAndABannedVocabulary) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  LoadedModel m = load(stories260k(shared));
  auto backend = make_cpu_backend(2);
  EngineConfig config = config_with(256, true);
  config.max_model_len = 200;
  Engine engine(*m.model, *backend, config);
  const int32_t vocab = static_cast<int32_t>(m.model->config().vocab_size);
  const std::vector<TokenId> prompt = encode(m, "Once upon a time");
  EXPECT_THROW(engine.add_request(greedy_request({}, 4)), Error);
  EXPECT_THROW(engine.add_request(greedy_request({1, vocab}, 4)), Error);
  EXPECT_THROW(engine.add_request(greedy_request({1, -2}, 4)), Error);
  EXPECT_THROW(engine.add_request(greedy_request(prompt, 0)), Error);
  EXPECT_THROW(engine.add_request(greedy_request(prompt, 199)), Error);  // max_model_len
  GenerationRequest bad = greedy_request(prompt, 4);
  bad.n = kMaxNumSamples + 1;
  EXPECT_THROW(engine.add_request(bad), Error);
  bad.n = 1;
  bad.sampling.logit_bias = {{vocab, 1.0f}};
  EXPECT_THROW(engine.add_request(bad), Error);
  EXPECT_THROW(Engine(*m.model, *backend, EngineConfig{}), Error);  // no KV budget
  EXPECT_FALSE(engine.has_work());

  // A request that bans every token fails alone; the one beside it goes on.
  GenerationRequest banned = greedy_request(prompt, 4);
  for (TokenId id = 0; id < vocab; ++id) {
    banned.sampling.logit_bias.emplace_back(id, -std::numeric_limits<float>::infinity());
  }
  const RunResult alone =
      run(*m.model, *backend, config, {greedy_request(prompt, 8)}, Arrival::kAlone);
  const RunResult both =
      run(*m.model, *backend, config, {banned, greedy_request(prompt, 8)}, Arrival::kTogether);
  EXPECT_EQ(both.samples[0][0].finish, FinishReason::kError);
  EXPECT_NE(both.samples[0][0].error.find("banned"), std::string::npos) << both.samples[0][0].error;
  EXPECT_TRUE(both.samples[0][0].ids.empty());
  EXPECT_EQ(both.samples[1][0].ids, alone.samples[0][0].ids);
}

// Four threads submit at once; every request completes with the ids it gives alone.
TEST(EngineThread, ConcurrentSubmissionsMatchSingleRuns) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  LoadedModel m = load(stories260k(shared));
  auto backend = make_cpu_backend(2);
  const std::vector<GenerationRequest> requests = make_requests(m, 16, 80, 20);
  const auto expected =
      ids_of(run(*m.model, *backend, config_with(4096, false), requests, Arrival::kAlone));

  EngineThread thread(std::make_unique<Engine>(*m.model, *backend, config_with(512, true, 64)));
  std::vector<std::vector<TokenId>> got(requests.size());
  std::vector<std::optional<FinishReason>> finish(requests.size());
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      std::vector<std::pair<size_t, std::shared_ptr<OutputStream>>> streams;
      for (size_t i = c; i < requests.size(); i += 4)
        streams.emplace_back(i, thread.submit(requests[i]));
      for (auto& [i, stream] : streams) {
        while (std::optional<OutputEvent> e = stream->next()) {
          got[i].insert(got[i].end(), e->token_ids.begin(), e->token_ids.end());
          if (e->finish_reason) finish[i] = e->finish_reason;
        }
        EXPECT_TRUE(stream->done());
      }
    });
  }
  for (std::thread& t : clients) t.join();
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(got[i], expected[i]) << "request " << i;
    EXPECT_EQ(finish[i], FinishReason::kLength);
  }
  const EngineStats stats = thread.stats();
  EXPECT_EQ(stats.num_finished_requests, 16);
  EXPECT_EQ(stats.num_requests, 0);
  EXPECT_GT(stats.scheduler.num_steps, 0);
  EXPECT_THROW(thread.submit(greedy_request({}, 4)), Error);  // checked on the caller's thread
}

TEST(EngineThread, AbortAndShutdownEndTheStreams) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  LoadedModel m = load(stories260k(shared));
  auto backend = make_cpu_backend(2);
  const std::vector<TokenId> prompt = encode(m, kStoryA);
  std::shared_ptr<OutputStream> aborted, left;
  {
    EngineThread thread(std::make_unique<Engine>(*m.model, *backend, config_with(4096, true, 4)));
    // Budget 4 and 1900 tokens: ~2000 steps each, so the abort and the shutdown land while
    // they run.
    aborted = thread.submit(greedy_request(prompt, 1900));
    left = thread.submit(greedy_request(prompt, 1900));
    thread.abort(aborted->id());
    std::optional<OutputEvent> e;
    std::optional<FinishReason> last;
    while ((e = aborted->next())) last = e->finish_reason;
    EXPECT_EQ(last, FinishReason::kAbort);
    ASSERT_TRUE(left->next().has_value());  // running: it has produced a token
  }                                         // the destructor ends what is left
  std::optional<FinishReason> last;
  while (std::optional<OutputEvent> e = left->next()) last = e->finish_reason;
  EXPECT_EQ(last, FinishReason::kAbort);
  EXPECT_TRUE(left->done());
}

}  // namespace
}  // namespace pagoda
