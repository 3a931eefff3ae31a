// Qwen3.5's hybrid models (qwen3.5-tiny: Gated DeltaNet, full attention, Gated DeltaNet; and
// qwen3.5-moe-tiny, the same layers with routed and shared experts) through the engine: every request's greedy ids are those it gives alone, whether batched, chunked by
// a small budget (the recurrent state carried from chunk to chunk), limited to fewer sequences
// than requests, or preempted and recomputed, with prefix caching or without (a hit restores the
// recurrent state from a checkpoint: test_qwen35_prefix.cc); forks and speculative decoding
// carry the state too (test_qwen35_fork.cc); the features that do not carry the state yet are
// refused in one line.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <set>
#include <string>
#include <tuple>

#include <nlohmann/json.hpp>

#include "conformance/engine_harness.h"
#include "conformance/hybrid_shapes.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "model/shapes.h"
#include "model/state_storage.h"
#include "test_util.h"
#include "tools/synth.h"

namespace pagoda {
namespace {

class Qwen35Engine : public ::testing::TestWithParam<HybridShape> {
 protected:
  // The F32 synthetic file of this shape, written once per test binary run.
  std::string tiny_model(const std::string& shared) const {
    const HybridShape& s = GetParam();
    const std::string path = test::temp_dir() + "/" + s.preset + "-engine.gguf";
    static std::set<std::string> written;
    if (written.insert(path).second) {
      SynthOptions o;
      o.preset = s.preset;
      o.type = "f32";
      o.seed = s.seed;
      o.vocab_path = stories260k(shared);
      o.output_path = path;
      write_synthetic_model(o, {});
    }
    return path;
  }
  std::string vectors() const {
    return std::string(PAGODA_SOURCE_DIR) + "/tests/data/logits/synth-" + GetParam().preset +
           "-f32.json";
  }
};

// A sequence's values do not depend on its batch. A budget below 64 (7 here) splits prompts
// where the delta rule's chunks do not start, and a preemption recomputes decoded tokens as a
// prompt: those round differently, about 1e-6 in the logits, and rest on no greedy choice being
// that close (PromptSplitsDoNotChangeABit checks the budgets that split at multiples of 64).
TEST_P(Qwen35Engine, BatchInvarianceThroughChunkingAndPreemption) {
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
      {"tiny KV, preempted, prefix caching", config_with(tiny_kv, true), Arrival::kTogether},
      {"budget 32, 4 sequences, prefix caching", config_with(4096, true, 32, 4),
       Arrival::kStaggered},
  };
  int64_t num_hit_tokens = 0;
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.name);
    const RunResult r = run(*m.model, *backend, v.config, requests, v.arrival);
    const auto got = ids_of(r);
    for (size_t i = 0; i < requests.size(); ++i) {
      EXPECT_EQ(got[i], expected[i]) << "request " << i << " (" << requests[i].prompt.size()
                                     << " prompt tokens)";
    }
    if (!v.config.enable_prefix_caching) {
      EXPECT_EQ(r.stats.scheduler.kv.num_hit_tokens, 0);
    }
    num_hit_tokens += r.stats.scheduler.kv.num_hit_tokens;
    if (v.config.num_kv_cache_tokens == tiny_kv) {
      EXPECT_GT(r.stats.scheduler.num_preemptions, 0);
    }
  }
  EXPECT_GT(num_hit_tokens, 0);  // the two stories' prompts share prefixes
}

// Splits of a prompt fall on multiples of the delta rule's chunk (SchedulerConfig::state_align,
// 64 here) whenever the step's budget has room for one: the prompt's windows of 64 then run the
// same way in every split, so the logprobs of every output token are bitwise those of the
// request alone, with the prompt in one step: together with the others, at budgets that are and
// are not multiples of 64, staggered beside decodes, and hitting prefix-cache checkpoints.
TEST_P(Qwen35Engine, PromptSplitsDoNotChangeABit) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  LoadedModel m = load(tiny_model(shared));
  auto backend = make_cpu_backend(2);
  std::vector<TokenId> long_story = encode(m, kStoryA);
  const std::vector<TokenId> b = encode(m, kStoryB);
  long_story.insert(long_story.end(), b.begin(), b.end());
  std::vector<GenerationRequest> requests;
  for (const size_t len : {300, 250, 200, 131, 64, 70}) {
    ASSERT_LE(len, long_story.size());
    GenerationRequest r = greedy_request({long_story.begin(), long_story.begin() +
                                                                 static_cast<int64_t>(len)},
                                         6);
    r.sampling.logprobs = true;
    requests.push_back(std::move(r));
  }
  const RunResult alone =
      run(*m.model, *backend, config_with(4096, false), requests, Arrival::kAlone);
  for (const auto& [name, config, arrival] :
       {std::tuple{"together", config_with(4096, false), Arrival::kTogether},
        std::tuple{"budget 128", config_with(4096, false, 128), Arrival::kTogether},
        std::tuple{"budget 100", config_with(4096, false, 100), Arrival::kStaggered},
        std::tuple{"budget 200, prefix caching", config_with(4096, true, 200),
                   Arrival::kStaggered}}) {
    SCOPED_TRACE(name);
    const RunResult r = run(*m.model, *backend, config, requests, arrival);
    for (size_t i = 0; i < requests.size(); ++i) {
      const Sample& want = alone.samples[i][0];
      const Sample& got = r.samples[i][0];
      EXPECT_EQ(got.ids, want.ids) << "request " << i;
      ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
      for (size_t t = 0; t < want.logprobs.size(); ++t) {
        EXPECT_EQ(std::bit_cast<uint32_t>(got.logprobs[t]),
                  std::bit_cast<uint32_t>(want.logprobs[t]))
            << "request " << i << ", output token " << t << ": " << got.logprobs[t] << " against "
            << want.logprobs[t];
      }
    }
    if (config.enable_prefix_caching) {
      EXPECT_GT(r.stats.scheduler.kv.num_hit_tokens, 0);
    }
  }
}

// Greedy decoding (a prompt in one step, then a token per step) gives llama.cpp's greedy ids
// (tests/data/logits/synth-<shape>-f32.json, scripts/make_logit_vectors.py).
TEST_P(Qwen35Engine, GreedyIdsAreLlamaCpps) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  LoadedModel m = load(tiny_model(shared));
  auto backend = make_cpu_backend(2);
  const auto doc = nlohmann::json::parse(read_file(vectors()));
  ASSERT_EQ(doc.at("synth").at("seed").get<uint64_t>(), GetParam().seed);
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

// Runs tokens [first, ids.size()) of one sequence in state slot `slot` (its K/V in blocks 0, 1,
// ... of `kv`) and returns every row's logits.
std::vector<float> forward_part(Model& model, Backend& be, KvStorage& kv,
                                const std::vector<TokenId>& ids, int32_t first, int32_t slot) {
  ForwardBatch b;
  b.block_size = kv.block_size();
  b.max_blocks_per_seq = kv.num_blocks();
  for (int32_t p = first; p < static_cast<int32_t>(ids.size()); ++p) {
    b.logit_rows.push_back(static_cast<int32_t>(b.token_ids.size()));
    b.token_ids.push_back(ids[static_cast<size_t>(p)]);
    b.positions.push_back(p);
    b.slot_mapping.push_back(p);
  }
  b.query_start = {0, b.num_tokens()};
  for (int32_t block = 0; block < kv.num_blocks(); ++block) b.block_table.push_back(block);
  b.state_slots = {slot};
  std::vector<float> logits;
  model.forward(be, b, kv, logits);
  return logits;
}

// At the model: a slot taken again at position 0 starts afresh (the logits of a short prompt
// after another sequence used the slot are those in a fresh slot), and a prompt run in pieces
// carries its conv window and delta state from piece to piece (the logits of the whole).
TEST_P(Qwen35Engine, StateSlotsStartAfreshAndCarryAcrossChunks) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  LoadedModel m = load(tiny_model(shared));
  auto be = make_cpu_backend(2);
  const std::vector<TokenId> a = encode(m, kStoryA);
  std::vector<TokenId> b = encode(m, kStoryB);
  b.resize(40);
  auto fresh_kv = [&] {
    auto kv = std::make_unique<KvStorage>(m.model->config(), 16, 16);
    kv->set_state(std::make_unique<StateStorage>(m.model->config(), 2, be.get()));
    return kv;
  };
  auto kv = fresh_kv();
  const std::vector<float> want = forward_part(*m.model, *be, *kv, b, 0, 1);
  auto used = fresh_kv();
  forward_part(*m.model, *be, *used, a, 0, 0);
  EXPECT_EQ(forward_part(*m.model, *be, *used, b, 0, 0), want);
  auto pieces = fresh_kv();
  const std::vector<TokenId> head(b.begin(), b.begin() + 13);
  std::vector<float> got = forward_part(*m.model, *be, *pieces, head, 0, 1);
  for (int32_t first : {13, 14, 31}) {  // pieces of 13, 1, 17 and 9 tokens
    const std::vector<TokenId> upto(b.begin(), b.begin() + (first == 31 ? 40 : first == 13 ? 14 : 31));
    const std::vector<float> part = forward_part(*m.model, *be, *pieces, upto, first, 1);
    got.insert(got.end(), part.begin(), part.end());
  }
  ASSERT_EQ(got.size(), want.size());
  float worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
  EXPECT_LT(worst, 1e-5f);
}

void expect_refused(const std::function<void()>& f, const std::string& words) {
  try {
    f();
    ADD_FAILURE() << "not refused: " << words;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST_P(Qwen35Engine, FeaturesWithoutStateHandlingAreRefused) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  LoadedModel m = load(tiny_model(shared));
  auto backend = make_cpu_backend(2);
  Engine engine(*m.model, *backend, config_with(4096, true));
  EXPECT_TRUE(engine.config().enable_prefix_caching);  // with state checkpoints
  GenerationRequest r = greedy_request(encode(m, kStoryA), 4);
  EngineConfig disk = config_with(4096, true);
  disk.kv_disk.folder = test::temp_dir() + "/qwen35-kv-disk";
  expect_refused([&] { Engine e(*m.model, *backend, disk); }, "--kv-disk is not supported");
  EngineConfig offload = config_with(4096, true);
  offload.kv_offload_bytes = 1 << 20;
  expect_refused([&] { Engine e(*m.model, *backend, offload); }, "--kv-offload-gb is not supported");
  engine.add_request(r);  // a plain request still runs
  while (engine.has_work()) engine.step();
}

// The state budgets' defaults: checkpoints twice --max-seqs, snapshots 8 for each sequence that
// may speculate at once, each at most what 512 MiB holds (about 20 MiB a slot for the 0.8B shape);
// given counts win; other models have neither.
TEST(HybridStateBudgets, DefaultsFollowTheSequencesAndStayWithin512MiB) {
  const ModelShape* big = find_model_shape("qwen3.5-0.8b");
  const ModelShape* tiny = find_model_shape("qwen3.5-tiny");
  const ModelShape* plain = find_model_shape("qwen3-tiny");
  ASSERT_TRUE(big != nullptr && tiny != nullptr && plain != nullptr);
  EngineConfig c;
  c.max_num_seqs = 4;
  c.speculative.max_num_running = 8;
  EXPECT_EQ(num_state_checkpoints(c, tiny->config), 8);
  EXPECT_EQ(num_state_snapshots(c, tiny->config), 4 * kMaxSpeculativeTokens);
  c.max_num_seqs = 64;
  EXPECT_EQ(num_state_snapshots(c, tiny->config), 8 * kMaxSpeculativeTokens);
  const auto in_512_mib =
      static_cast<int32_t>((uint64_t{512} << 20) / StateStorage::slot_bytes(big->config));
  EXPECT_GT(StateStorage::slot_bytes(big->config), uint64_t{16} << 20);
  EXPECT_EQ(num_state_checkpoints(c, big->config), in_512_mib);
  EXPECT_EQ(num_state_snapshots(c, big->config), in_512_mib);
  c.num_state_snapshots = 2;
  c.num_state_checkpoints = 0;
  EXPECT_EQ(num_state_snapshots(c, big->config), 2);
  EXPECT_EQ(num_state_checkpoints(c, big->config), 0);
  EXPECT_EQ(num_state_snapshots(c, plain->config), 0);
}


INSTANTIATE_TEST_SUITE_P(Shapes, Qwen35Engine, ::testing::ValuesIn(kHybridShapes),
                         hybrid_shape_name);

}  // namespace
}  // namespace pagoda
