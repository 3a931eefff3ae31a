// Embedding requests through the engine's scheduler on a real model: the vector equals the
// Embedder's (one input per forward pass in a cache of its own) whether the prompt runs in one
// step or in chunks, alone or beside generation, preempted or not; greedy generation gives the
// same ids with embedding requests interleaved; aborts free everything. Invariants are checked
// after every step.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "conformance/engine_harness.h"
#include "core/error.h"
#include "engine/embedder.h"
#include "engine/engine.h"
#include "test_util.h"

namespace pagoda {
namespace {

const char* const kTexts[] = {"Once upon a time", "Tom had a small blue boat.",
                              ("She loved to play outside in the sunshine. One day, she saw a big "
                               "red ball in the park. She ran to get it, but a dog got there first.")};

PromptOnly rows_of(const std::string& pooling) {
  return pooling == "mean" ? PromptOnly::kAllRows
                           : pooling == "cls" ? PromptOnly::kFirstRow : PromptOnly::kLastRow;
}

GenerationRequest embedding_request(std::vector<TokenId> prompt, const std::string& pooling) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.embedding = rows_of(pooling);
  return r;
}

EngineConfig f16(EngineConfig c) {
  c.kv_type = KvType::kF16;  // the Embedder's own cache is F16
  return c;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

struct Mixed {
  std::map<size_t, std::vector<float>> vectors;  // by embedding input
  std::vector<std::vector<TokenId>> ids;          // by generation request
  int64_t num_preemptions = 0;
};

// Generation requests and embedding requests through one engine: the embeddings arrive one
// step apart while the generations run; every step's invariants checked.
Mixed run_mixed(Model& model, Backend& backend, const EngineConfig& config,
                const std::vector<GenerationRequest>& generations,
                const std::vector<std::vector<TokenId>>& inputs, const std::string& pooling) {
  Engine engine(model, backend, config);
  Mixed out;
  out.ids.resize(generations.size());
  std::map<RequestId, size_t> generation_of, embedding_of;
  for (size_t i = 0; i < generations.size(); ++i) generation_of[engine.add_request(generations[i])] = i;
  size_t next = 0;
  while (engine.has_work() || next < inputs.size()) {
    if (next < inputs.size()) {
      embedding_of[engine.add_request(embedding_request(inputs[next], pooling))] = next;
      ++next;
    }
    for (OutputEvent& e : engine.step()) {
      if (auto g = generation_of.find(e.request_id); g != generation_of.end()) {
        EXPECT_TRUE(e.embedding.empty());
        out.ids[g->second].insert(out.ids[g->second].end(), e.token_ids.begin(), e.token_ids.end());
        continue;
      }
      const size_t i = embedding_of.at(e.request_id);
      EXPECT_TRUE(e.request_finished && e.token_ids.empty());
      EXPECT_EQ(e.finish_reason, FinishReason::kStop);
      EXPECT_FALSE(out.vectors.count(i));
      pool_embedding(e.embedding.data(), 1, static_cast<int64_t>(e.embedding.size()), "mean", true,
                     out.vectors[i]);
    }
    engine.check_invariants();
  }
  EXPECT_EQ(out.vectors.size(), inputs.size());
  EXPECT_EQ(engine.stats().scheduler.kv.num_used_blocks, 0);
  out.num_preemptions = engine.stats().scheduler.num_preemptions;
  return out;
}

TEST(EngineEmbeddings, EqualTheEmbedderAndLeaveGenerationUnchanged) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  LoadedModel m = load(stories260k(shared));
  auto backend = make_cpu_backend(2);
  std::vector<std::vector<TokenId>> inputs;
  for (const char* t : kTexts) inputs.push_back(encode(m, t));
  const std::vector<GenerationRequest> generations = make_requests(m, 4, 40, 24);
  const auto alone = ids_of(run(*m.model, *backend, config_with(4096, false), generations,
                                Arrival::kAlone));
  for (const std::string pooling : {"mean", "last", "cls"}) {
    Embedder embedder(*m.model, *backend, *m.tokenizer, {.pooling = pooling});
    const EmbeddingResult want = embedder.embed(inputs);
    struct Variant {
      const char* name;
      EngineConfig config;
      bool with_generation;
    };
    const Variant variants[] = {
        {"alone, one step each", f16(config_with(4096, true)), false},
        {"chunks of 5", f16(config_with(4096, true, 5)), false},
        {"beside generation", f16(config_with(4096, true)), true},
        {"beside generation, budget 16", f16(config_with(4096, true, 16)), true},
        {"tiny KV, preempted, budget 16", f16(config_with(96, true, 16)), true},
    };
    for (const Variant& v : variants) {
      SCOPED_TRACE(pooling + ", " + v.name);
      const Mixed got = run_mixed(*m.model, *backend, v.config,
                                  v.with_generation ? generations : std::vector<GenerationRequest>{},
                                  inputs, pooling);
      for (size_t i = 0; i < inputs.size(); ++i) {
        ASSERT_TRUE(got.vectors.count(i)) << "input " << i;
        EXPECT_LE(max_abs_diff(got.vectors.at(i), want.vectors[i]), 1e-5f) << "input " << i;
      }
      if (!v.with_generation) continue;
      // Greedy generation beside the embeddings is generation alone (KV F16 here, F32 alone:
      // compared with the same type alone).
      const auto alone_f16 = ids_of(run(*m.model, *backend, f16(config_with(4096, false)),
                                        generations, Arrival::kAlone));
      for (size_t i = 0; i < generations.size(); ++i) {
        EXPECT_EQ(got.ids[i], alone_f16[i]) << "request " << i;
      }
      if (v.config.num_kv_cache_tokens == 96) {
        EXPECT_GT(got.num_preemptions, 0);
      }
    }
  }
  // And with the engine's default F32 K/V, generation beside embeddings equals generation alone.
  const Mixed f32 = run_mixed(*m.model, *backend, config_with(4096, true, 16), generations, inputs,
                              "mean");
  for (size_t i = 0; i < generations.size(); ++i) EXPECT_EQ(f32.ids[i], alone[i]) << i;
}

// A generation that grows until the cache is short preempts the embedding admitted after it
// (the newest) in the middle of its prompt: it is pooled again from its start.
TEST(EngineEmbeddings, AnEmbeddingPreemptedMidPromptIsPooledFromItsStart) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  LoadedModel m = load(stories260k(shared));
  auto backend = make_cpu_backend(2);
  const std::vector<TokenId> story = encode(m, kStoryA);
  ASSERT_GE(story.size(), 100u);
  const std::vector<TokenId> input(story.begin() + 30, story.begin() + 94);  // 64 tokens
  Embedder embedder(*m.model, *backend, *m.tokenizer, {.pooling = "mean"});
  const EmbeddingResult want = embedder.embed({input});
  // 10 blocks of 16: the generation alone ends at 149 tokens (10 blocks); the embedding takes 4.
  const std::vector<GenerationRequest> generation = {
      greedy_request({story.begin(), story.begin() + 100}, 50)};
  const Mixed got = run_mixed(*m.model, *backend, f16(config_with(160, true, 16)), generation,
                              {input}, "mean");
  EXPECT_GT(got.num_preemptions, 0);  // only the embedding can be the newest running request
  ASSERT_TRUE(got.vectors.count(0));
  EXPECT_LE(max_abs_diff(got.vectors.at(0), want.vectors[0]), 1e-5f);
}

TEST(EngineEmbeddings, AbortFreesTheSequenceAndBadRequestsAreRefused) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  LoadedModel m = load(stories260k(shared));
  auto backend = make_cpu_backend(2);
  Engine engine(*m.model, *backend, config_with(256, true, 4));
  const RequestId id = engine.add_request(embedding_request(encode(m, kTexts[2]), "mean"));
  EXPECT_TRUE(engine.step().empty());  // a first chunk of 4 tokens
  engine.check_invariants();
  EXPECT_GT(engine.stats().scheduler.kv.num_used_blocks, 0);
  const std::vector<OutputEvent> aborted = engine.abort(id);
  ASSERT_EQ(aborted.size(), 1u);
  EXPECT_EQ(aborted[0].finish_reason, FinishReason::kAbort);
  EXPECT_TRUE(aborted[0].request_finished && aborted[0].embedding.empty());
  EXPECT_FALSE(engine.has_work());
  EXPECT_EQ(engine.num_requests(), 0);
  EXPECT_EQ(engine.stats().scheduler.kv.num_used_blocks, 0);
  engine.check_invariants();

  GenerationRequest r = embedding_request(encode(m, kTexts[0]), "last");
  r.n = 2;
  EXPECT_THROW(engine.check_request(r), Error);
  r.n = 1;
  r.prompt_logprobs = true;
  EXPECT_THROW(engine.check_request(r), Error);
  r.prompt_logprobs = false;
  r.prompt.assign(257, 1);  // more than the 256 tokens the cache holds
  EXPECT_THROW(engine.check_request(r), Error);
}

}  // namespace
}  // namespace pagoda
