// The engine test harness shared by the conformance tests: real models, requests over two
// stories, running them alone / together / staggered through one Engine with every event's
// shape checked, and the batch-invariance check (every way of running gives the ids of running
// each request alone).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "engine/engine.h"
#include "model/model.h"
#include "model/model_file.h"
#include "tokenizer/tokenizer.h"
#include "tools/synth.h"

namespace pagoda {

inline const char* kStoryA =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "sunshine. One day, she saw a big red ball in the park. She ran to get it, but a dog got "
    "there first. The dog was friendly and wanted to play with Lily too. They played together "
    "all day long and became best friends. When the sun went down, Lily said goodbye to the dog "
    "and went home happy. Her mom made her a warm dinner and she told her all about her day.";
inline const char* kStoryB =
    "Tom had a small blue boat. Every morning he took it to the pond near his house and watched "
    "it float on the water. One day the wind was very strong and the boat sailed far away. Tom "
    "was sad, but his friend Sue helped him find it behind a big rock. Tom said thank you and "
    "they shared an apple under the tree. From that day on they played with the boat together.";

struct LoadedModel {
  std::unique_ptr<ModelFile> file;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Model> model;
};

inline LoadedModel load(const std::string& path) {
  LoadedModel m;
  m.file = ModelFile::open(path);
  m.tokenizer = Tokenizer::create(m.file->vocab());
  m.model = Model::load(*m.file);
  return m;
}

inline std::vector<TokenId> encode(const LoadedModel& m, const char* text) {
  return m.tokenizer->encode(text, {.add_special = true, .parse_special = false});
}

inline GenerationRequest greedy_request(std::vector<TokenId> prompt, int32_t max_tokens) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0;
  r.max_tokens = max_tokens;
  return r;
}

// `count` greedy requests of different lengths, alternating between prefixes of two stories
// (so the prefixes of one story share blocks), each with its own max_tokens.
inline std::vector<GenerationRequest> make_requests(const LoadedModel& m, int count,
                                                    int32_t max_prompt, int32_t max_output) {
  const std::vector<TokenId> a = encode(m, kStoryA), b = encode(m, kStoryB);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < count; ++i) {
    const std::vector<TokenId>& story = i % 2 ? b : a;
    // 1 to max_prompt tokens, spread so that some land on and next to block boundaries.
    const int32_t len =
        std::min<int32_t>({1 + (i * (max_prompt - 1)) / std::max(1, count - 1) + (i % 3) - 1,
                           max_prompt, static_cast<int32_t>(story.size())});
    const int32_t max_tokens = 4 + (i * 7) % std::max(1, max_output - 3);
    requests.push_back(
        greedy_request({story.begin(), story.begin() + std::max(1, len)}, max_tokens));
  }
  return requests;
}

struct Sample {
  std::vector<TokenId> ids;
  std::vector<float> logprobs;  // each id's, when the request asked for them
  std::optional<FinishReason> finish;
  TokenId stop_token = kNoToken;
  std::string error;
};

struct RunResult {
  std::vector<std::vector<Sample>> samples;  // [request][sample index]
  EngineStats stats;
  int32_t peak_used_blocks = 0;
};

// Records an event in `samples`, checking the stream's shape: nothing after a sample's last
// event, request_finished exactly on the request's last event.
inline void record(const OutputEvent& e, std::vector<Sample>& samples, bool& request_done) {
  ASSERT_FALSE(request_done) << "event after the request finished";
  ASSERT_GE(e.index, 0);
  ASSERT_LT(e.index, static_cast<int32_t>(samples.size()));
  Sample& s = samples[e.index];
  ASSERT_FALSE(s.finish.has_value()) << "event after the sample finished";
  s.ids.insert(s.ids.end(), e.token_ids.begin(), e.token_ids.end());
  if (!e.logprobs.empty()) {
    ASSERT_EQ(e.logprobs.size(), e.token_ids.size());
    for (size_t i = 0; i < e.token_ids.size(); ++i) {
      EXPECT_EQ(e.logprobs[i].token, e.token_ids[i]);
      s.logprobs.push_back(e.logprobs[i].logprob);
    }
  }
  s.finish = e.finish_reason;
  s.stop_token = e.stop_token;
  s.error = e.error;
  if (e.request_finished) {
    for (const Sample& other : samples) ASSERT_TRUE(other.finish.has_value());
    request_done = true;
  }
}

enum class Arrival { kAlone, kTogether, kStaggered };

// Runs the requests to the end on one engine and returns every sample's ids.
inline RunResult run(Model& model, Backend& backend, const EngineConfig& config,
                     const std::vector<GenerationRequest>& requests, Arrival arrival) {
  Engine engine(model, backend, config);
  RunResult result;
  result.samples.resize(requests.size());
  std::vector<bool> done(requests.size(), false);
  std::unordered_map<RequestId, size_t> index_of;
  auto add = [&](size_t i) {
    result.samples[i].resize(static_cast<size_t>(requests[i].n));
    index_of[engine.add_request(requests[i])] = i;
  };
  auto drain = [&] {
    std::vector<OutputEvent> events = engine.step();
    engine.check_invariants();
    result.peak_used_blocks =
        std::max(result.peak_used_blocks, engine.stats().scheduler.kv.num_used_blocks);
    for (const OutputEvent& e : events) {
      const size_t i = index_of.at(e.request_id);
      bool d = done[i];
      record(e, result.samples[i], d);
      done[i] = d;
    }
  };
  for (size_t i = 0; i < requests.size(); ++i) {
    if (arrival != Arrival::kTogether) add(i);
    if (arrival == Arrival::kAlone) {
      while (engine.has_work()) drain();
    } else if (arrival == Arrival::kStaggered) {
      drain();  // one step between arrivals: new prompts meet running decodes
    }
  }
  if (arrival == Arrival::kTogether) {
    for (size_t i = 0; i < requests.size(); ++i) add(i);
  }
  while (engine.has_work()) drain();
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_TRUE(done[i]) << "request " << i;
  EXPECT_EQ(engine.stats().scheduler.kv.num_used_blocks, 0);
  result.stats = engine.stats();
  return result;
}

inline std::vector<std::vector<TokenId>> ids_of(const RunResult& r) {
  std::vector<std::vector<TokenId>> ids;
  for (const auto& samples : r.samples) ids.push_back(samples.at(0).ids);
  return ids;
}

// The KV cache (in whole 16-token blocks) that just holds the longest request alone: running
// them together with it preempts.
inline int64_t kv_tokens_for_longest(const std::vector<GenerationRequest>& requests) {
  int32_t longest = 0;
  for (const GenerationRequest& r : requests) {
    longest = std::max<int32_t>(longest, static_cast<int32_t>(r.prompt.size()) + r.max_tokens);
  }
  return (longest + 15) / 16 * 16;
}

// Speculative decoding with `method` and k proposals, in every variant (batched ones too).
inline SpeculativeConfig spec_config(SpecMethod method, int32_t k, Model* draft = nullptr) {
  SpeculativeConfig c;
  c.method = method;
  c.num_tokens = k;
  c.draft_model = draft;
  c.max_num_running = 64;
  return c;
}

inline EngineConfig config_with(int64_t kv_tokens, bool prefix_caching, int32_t budget = 2048,
                                int32_t max_seqs = 64) {
  EngineConfig c;
  c.num_kv_cache_tokens = kv_tokens;
  c.enable_prefix_caching = prefix_caching;
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = max_seqs;
  return c;
}

// The batch-invariance check: every way of running the requests gives the ids of running each
// alone. A difference means some op's result for a token depends on the other tokens of the
// batch (or the engine laid the batch out wrong).
// With `spec`, every variant (and one more: alone) runs with speculative decoding, whose greedy
// ids must be those of plain decoding alone; and speculation must have been tried.
inline void check_batch_invariance(const std::string& path, Backend& backend, int count,
                                   int32_t max_prompt, int32_t max_output, bool all_variants = true,
                                   KvType kv_type = KvType::kF32,
                                   const SpeculativeConfig* spec = nullptr) {
  LoadedModel m = load(path);
  const std::vector<GenerationRequest> requests = make_requests(m, count, max_prompt, max_output);
  Model& model = *m.model;
  const auto plain = [kv_type](EngineConfig c) {
    c.kv_type = kv_type;
    return c;
  };
  const auto with_type = [&](EngineConfig c) {
    c.kv_type = kv_type;
    if (spec != nullptr) c.speculative = *spec;
    return c;
  };
  const RunResult alone =
      run(model, backend, plain(config_with(4096, false)), requests, Arrival::kAlone);
  const auto expected = ids_of(alone);
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_EQ(static_cast<int32_t>(expected[i].size()), requests[i].max_tokens) << "request " << i;
  }
  // The outputs must be worth comparing: not all the same continuation.
  ASSERT_NE(std::count(expected.begin(), expected.end(), expected[1]), count);

  int32_t longest = 0;
  for (const GenerationRequest& r : requests) {
    longest = std::max<int32_t>(longest, static_cast<int32_t>(r.prompt.size()) + r.max_tokens);
  }
  const int64_t tiny_kv = (longest + 15) / 16 * 16;  // the longest request alone, just

  struct Variant {
    const char* name;
    EngineConfig config;
    Arrival arrival;
  };
  std::vector<Variant> variants = {
      {"together", config_with(4096, false), Arrival::kTogether},
      {"together, prefix caching", config_with(4096, true), Arrival::kTogether},
      {"staggered, prefix caching", config_with(4096, true), Arrival::kStaggered},
      {"budget 32", config_with(4096, false, 32), Arrival::kTogether},
      {"budget 32, prefix caching", config_with(4096, true, 32), Arrival::kTogether},
      {"budget 7, 3 sequences", config_with(4096, true, 7, 3), Arrival::kStaggered},
      {"tiny KV, preempted", config_with(tiny_kv, false), Arrival::kTogether},
      {"tiny KV, preempted, prefix caching, budget 32", config_with(tiny_kv, true, 32),
       Arrival::kTogether},
  };
  if (spec != nullptr) variants.push_back({"alone", config_with(4096, true), Arrival::kAlone});
  int64_t num_proposed = 0, num_accepted = 0;
  for (const Variant& v : variants) {
    // The quick set: one run with each of batching, chunking with arrivals, and preemption.
    if (!all_variants && &v != &variants[1] && &v != &variants[5] && &v != &variants[6] &&
        &v != &variants[8]) {
      continue;
    }
    SCOPED_TRACE(std::string(v.name) + " on " + backend.name());
    const RunResult r = run(model, backend, with_type(v.config), requests, v.arrival);
    const auto got = ids_of(r);
    for (size_t i = 0; i < requests.size(); ++i) {
      EXPECT_EQ(got[i], expected[i])
          << "request " << i << " (" << requests[i].prompt.size() << " prompt tokens)";
    }
    if (v.config.num_kv_cache_tokens == tiny_kv) {
      EXPECT_GT(r.stats.scheduler.num_preemptions, 0);
    }
    if (v.config.enable_prefix_caching && v.arrival == Arrival::kStaggered) {
      EXPECT_GT(r.stats.scheduler.kv.num_hit_tokens, 0);
    }
    num_proposed += r.stats.speculative.num_proposed;
    num_accepted += r.stats.speculative.num_accepted;
  }
  if (spec != nullptr) {
    EXPECT_GT(num_proposed, 0);
    EXPECT_GT(num_accepted, 0);
  }
}

inline std::string stories260k(const std::string& shared) {
  return shared + "/models/stories260K.gguf";
}

// `pagoda synth --like preset --type type` with stories260K's vocabulary, written to `out`.
inline std::string synthetic_model(const std::string& shared, const char* preset, const char* type,
                                   const std::string& out) {
  SynthOptions o;
  o.preset = preset;
  o.type = type;
  o.vocab_path = stories260k(shared);
  o.output_path = out;
  write_synthetic_model(o, {});
  return out;
}

inline std::string installed_model(const char* name) {
  const std::string path = std::string(PAGODA_SOURCE_DIR) + "/models/" + name;
  return std::filesystem::exists(path) ? path : "";
}

}  // namespace pagoda
