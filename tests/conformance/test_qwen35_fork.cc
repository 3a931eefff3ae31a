// Qwen3.5's hybrid models (qwen3.5-tiny and qwen3.5-moe-tiny) through the engine with the
// features that fork or roll back the recurrent state:
//   - n > 1: each seeded sample gives the ids of its seed alone, with the prompt computed once
//     (children fork with a copy of the parent's state), or, with fewer sequences than samples,
//     children that wait for a slot and start afresh;
//   - beam search: the engine's beams (forked each round, state copied from the parent) give the
//     hypotheses of the same search run on candidates scored from scratch, with no fork;
//   - speculative decoding (n-gram, a draft model: the file itself and a perturbed copy, both): the
//     greedy ids of plain decoding, with proposals both accepted and rejected, so that the state
//     is rolled back to the accepted ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "conformance/engine_harness.h"
#include "conformance/hybrid_shapes.h"
#include "engine/beam_search.h"
#include "core/error.h"
#include "engine/generator.h"
#include "format/gguf.h"
#include "test_util.h"
#include "tools/synth.h"

namespace pagoda {
namespace {

class Qwen35Fork : public ::testing::TestWithParam<HybridShape> {
 protected:
  void SetUp() override { dir_ = test::temp_dir(); }  // emptied by each call: taken once

  // The synthetic file of this shape in `type`, written once per test binary run.
  std::string tiny_model(const std::string& shared, const char* type = "f32") const {
    const HybridShape& s = GetParam();
    const std::string path = dir_ + "/" + s.preset + "-fork-" + type + ".gguf";
    if (!std::filesystem::exists(path)) {
      SynthOptions o;
      o.preset = s.preset;
      o.type = type;
      o.seed = s.seed;
      o.vocab_path = stories260k(shared);
      o.output_path = path;
      write_synthetic_model(o, {});
    }
    return path;
  }

  std::string dir_;
};

// A copy of the F32 file `path` with tensor `name` scaled by `scale`: a draft that agrees with
// the model often, not always.
std::string perturbed(const std::string& path, const char* name, float scale) {
  const std::string out = path + ".perturbed.gguf";
  std::filesystem::copy_file(path, out, std::filesystem::copy_options::overwrite_existing);
  auto file = GgufFile::open(path);
  const GgufTensorInfo* t = file->find_tensor(name);
  if (t == nullptr || t->type != DType::kF32) fail("no F32 ", name, " in ", path);
  std::vector<float> values(t->num_elements);
  std::memcpy(values.data(), t->data, t->num_bytes);
  for (float& v : values) v *= scale;
  std::fstream f(out, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(file->data_offset() + t->offset));
  f.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(t->num_bytes));
  return out;
}

GenerationRequest seeded_request(std::vector<TokenId> prompt, int32_t max_tokens, uint64_t seed,
                                 int32_t n) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 1.0f;
  r.sampling.seed = seed;
  r.sampling.has_seed = true;
  r.n = n;
  return r;
}

TEST_P(Qwen35Fork, SeededSamplesAreTheirSeedsAlone) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  LoadedModel m = load(tiny_model(shared));
  auto backend = make_cpu_backend(2);
  const std::vector<TokenId> story = encode(m, kStoryA);
  for (const auto& [len, n] : {std::pair{40, 3}, std::pair{16, 2}, std::pair{1, 3}}) {
    SCOPED_TRACE("prompt of " + std::to_string(len) + ", n = " + std::to_string(n));
    const std::vector<TokenId> prompt(story.begin(), story.begin() + len);
    const int32_t max_tokens = 16;
    std::vector<std::vector<TokenId>> alone;
    for (int32_t k = 0; k < n; ++k) {
      const RunResult one = run(*m.model, *backend, config_with(4096, false),
                                {seeded_request(prompt, max_tokens, 42 + k, 1)}, Arrival::kAlone);
      alone.push_back(one.samples[0][0].ids);
    }
    EXPECT_NE(alone[0], alone[1]);
    // Every sample running at once (the prompt computed once, each child's state copied from
    // the parent's), and with fewer sequences than samples (children wait for a slot and are
    // computed from their first token), beside other requests.
    for (const auto& [max_seqs, caching] : {std::pair{64, false}, std::pair{2, false},
                                            std::pair{2, true}}) {
      SCOPED_TRACE("max_seqs " + std::to_string(max_seqs) + (caching ? ", prefix caching" : ""));
      const std::vector<GenerationRequest> requests = {
          seeded_request(prompt, max_tokens, 42, n),
          seeded_request({story.begin() + 50, story.begin() + 70}, 9, 7, 1)};
      const RunResult r = run(*m.model, *backend, config_with(4096, caching, 2048, max_seqs),
                              requests, Arrival::kTogether);
      ASSERT_EQ(r.samples[0].size(), static_cast<size_t>(n));
      for (int32_t k = 0; k < n; ++k) {
        EXPECT_EQ(r.samples[0][static_cast<size_t>(k)].ids, alone[static_cast<size_t>(k)])
            << "sample " << k;
      }
      if (max_seqs == 64) {
        // The prompt once, then each sample's own decodes, and the other request's.
        EXPECT_EQ(r.stats.num_computed_tokens, len + n * (max_tokens - 1) + 20 + 8);
      }
    }
  }
}

// Beam search run on candidates scored from scratch: each round, every live beam's prompt and
// output computed in one pass (no fork, no copied state), through the same BeamSearch rules.
std::vector<BeamHypothesis> beam_search_from_scratch(Model& model, Backend& backend,
                                                     const std::vector<TokenId>& prompt,
                                                     int32_t max_tokens, BeamParams params,
                                                     int32_t n) {
  const auto vocab = static_cast<size_t>(model.config().vocab_size);
  Generator gen(model, backend, static_cast<int32_t>(prompt.size()) + max_tokens + 1);
  BeamSearch search(params, static_cast<int32_t>(prompt.size()), max_tokens, {}, 0);
  std::map<int64_t, std::vector<TokenId>> outputs = {{0, {}}};
  int64_t next_id = 1;
  auto output_of = [&](int64_t beam) -> const std::vector<TokenId>& { return outputs.at(beam); };
  while (!search.done()) {
    std::vector<BeamCandidates> present;
    for (int64_t beam : search.live_beams()) {
      std::vector<TokenId> all = prompt;
      all.insert(all.end(), outputs.at(beam).begin(), outputs.at(beam).end());
      const std::vector<float> logits = gen.prompt_logits(all);
      const std::span<const float> last(logits.data() + (all.size() - 1) * vocab, vocab);
      present.push_back({beam, top_logprobs(last, 2 * params.width)});
    }
    std::sort(present.begin(), present.end(),
              [](const BeamCandidates& a, const BeamCandidates& b) { return a.beam < b.beam; });
    const BeamSearch::Round round = search.step(present, output_of);
    std::map<int64_t, std::vector<TokenId>> before = outputs;
    for (const auto& [beam, token] : round.continues) {
      if (token) {
        outputs.at(beam).push_back(*token);
      } else {
        outputs.at(beam).push_back(0);  // the engine commits a placeholder, then frees it
      }
    }
    for (const auto& [parent, token] : round.forks) {
      std::vector<TokenId> out = before.at(parent);
      out.push_back(token);
      outputs[next_id] = std::move(out);
      search.add_beam(parent, next_id++, token);
    }
  }
  return search.best(n, output_of);
}

TEST_P(Qwen35Fork, BeamSearchIsTheSearchOnCandidatesScoredFromScratch) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  LoadedModel m = load(tiny_model(shared));
  auto backend = make_cpu_backend(2);
  const std::vector<TokenId> story = encode(m, kStoryB);
  for (const auto& [len, width, n] : {std::tuple{12, 4, 2}, std::tuple{30, 3, 3},
                                      std::tuple{5, 6, 1}}) {
    SCOPED_TRACE("prompt of " + std::to_string(len) + ", width " + std::to_string(width));
    const std::vector<TokenId> prompt(story.begin(), story.begin() + len);
    const int32_t max_tokens = 8;
    GenerationRequest r = greedy_request(prompt, max_tokens);
    r.beam.width = width;
    r.n = n;
    const RunResult got = run(*m.model, *backend, config_with(4096, false), {r}, Arrival::kAlone);
    const std::vector<BeamHypothesis> want =
        beam_search_from_scratch(*m.model, *backend, prompt, max_tokens, r.beam, n);
    ASSERT_EQ(got.samples[0].size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) {
      EXPECT_EQ(got.samples[0][k].ids, want[k].output) << "hypothesis " << k;
    }
    // The beams differ from greedy decoding somewhere, or the test shows little.
    if (len == 12) {
      const RunResult greedy = run(*m.model, *backend, config_with(4096, false),
                                   {greedy_request(prompt, max_tokens)}, Arrival::kAlone);
      EXPECT_NE(got.samples[0][1].ids, greedy.samples[0][0].ids);
    }
  }
}

// Greedy ids with `spec` are those of plain decoding alone: alone, together, chunked by a small
// budget with few sequences, and preempted. Returns the proposals made and accepted in all.
// Each prompt is a story's prefix said twice, so that prompt lookup proposes the story's words,
// which the model, random, mostly rejects (and its own repeated words, which it accepts).
std::pair<int64_t, int64_t> check_speculation(LoadedModel& m, Backend& backend,
                                              const SpeculativeConfig& spec) {
  std::vector<GenerationRequest> requests = make_requests(m, 12, 60, 24);
  for (GenerationRequest& r : requests) {
    const std::vector<TokenId> once = r.prompt;
    r.prompt.insert(r.prompt.end(), once.begin(), once.end());
  }
  const auto expected =
      ids_of(run(*m.model, backend, config_with(4096, false), requests, Arrival::kAlone));
  const int64_t tiny_kv = kv_tokens_for_longest(requests);
  int64_t proposed = 0, accepted = 0;
  for (const auto& [name, plain, arrival] :
       {std::tuple{"alone", config_with(4096, false), Arrival::kAlone},
        std::tuple{"together", config_with(4096, false), Arrival::kTogether},
        std::tuple{"budget 7, 3 sequences", config_with(4096, false, 7, 3), Arrival::kStaggered},
        std::tuple{"tiny KV, preempted", config_with(tiny_kv, false), Arrival::kTogether},
        // With prefix caching (state checkpoints): the prompts' halves share blocks, and a
        // checkpoint is never saved on a step that verifies proposals.
        std::tuple{"prefix caching, together", config_with(4096, true), Arrival::kTogether},
        std::tuple{"prefix caching, budget 7", config_with(4096, true, 7, 3), Arrival::kStaggered}}) {
    SCOPED_TRACE(name);
    EngineConfig config = plain;
    config.speculative = spec;
    const RunResult r = run(*m.model, backend, config, requests, arrival);
    const auto got = ids_of(r);
    for (size_t i = 0; i < requests.size(); ++i) {
      EXPECT_EQ(got[i], expected[i]) << "request " << i << " (" << requests[i].prompt.size()
                                     << " prompt tokens)";
    }
    if (plain.num_kv_cache_tokens == tiny_kv) {
      EXPECT_GT(r.stats.scheduler.num_preemptions, 0);
    }
    proposed += r.stats.speculative.num_proposed;
    accepted += r.stats.speculative.num_accepted;
  }
  return {proposed, accepted};
}

TEST_P(Qwen35Fork, NgramSpeculationIsLosslessWithRejections) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  LoadedModel m = load(tiny_model(shared));
  auto backend = make_cpu_backend(2);
  const auto [proposed, accepted] =
      check_speculation(m, *backend, spec_config(SpecMethod::kNgram, 4));
  std::cout << GetParam().preset << ", n-gram: " << accepted << " of " << proposed
            << " proposals accepted\n";
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, proposed);  // some rejected: the state was rolled back
}

TEST_P(Qwen35Fork, DraftSpeculationIsLosslessWithRejections) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  LoadedModel m = load(tiny_model(shared));
  auto backend = make_cpu_backend(2);
  // The file itself: every proposal accepted (the draft's state runs ahead of the target's).
  LoadedModel same = load(tiny_model(shared));
  const auto [proposed, accepted] =
      check_speculation(m, *backend, spec_config(SpecMethod::kDraft, 3, same.model.get()));
  EXPECT_GT(proposed, 0);
  EXPECT_EQ(accepted, proposed);
  // One feed-forward matrix of the last layer negated: close to the target, not the same;
  // alone and after n-grams.
  LoadedModel near = load(perturbed(tiny_model(shared), GetParam().draft_tensor, -1.0f));
  for (const SpecMethod method : {SpecMethod::kDraft, SpecMethod::kBoth}) {
    const auto [p, a] = check_speculation(m, *backend, spec_config(method, 4, near.model.get()));
    std::cout << GetParam().preset << ", perturbed draft"
              << (method == SpecMethod::kBoth ? " and n-grams" : "") << ": " << a << " of " << p
              << " proposals accepted\n";
    EXPECT_GT(a, 0);
    if (GetParam().draft_rejected) {
      EXPECT_LT(a, p);
    }
  }
}

// A hybrid draft's state is rolled back exactly: with k fixed, every step's greedy proposals
// are the draft's greedy continuation of the known tokens computed from scratch, so the counts
// of proposals made and accepted are those of replaying the run that way.
TEST_P(Qwen35Fork, AHybridDraftsStateFollowsTheAcceptedTokens) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  if (!GetParam().draft_rejected) GTEST_SKIP() << "its perturbed draft is never rejected";
  LoadedModel m = load(tiny_model(shared));
  LoadedModel near = load(perturbed(tiny_model(shared), GetParam().draft_tensor, -1.0f));
  auto backend = make_cpu_backend(2);
  const int32_t max_tokens = 40, k = 4;
  EngineConfig config = config_with(4096, false);
  config.speculative = spec_config(SpecMethod::kDraft, k, near.model.get());
  config.speculative.adaptive = false;
  const auto vocab = static_cast<size_t>(near.model->config().vocab_size);
  int64_t all_proposed = 0, all_accepted = 0;
  for (const char* text : {kStoryA, kStoryB}) {
    const std::vector<TokenId> story = encode(m, text);
    for (const size_t len : {6, 17, 30, 43, 58}) {
      SCOPED_TRACE("prompt of " + std::to_string(len));
      const std::vector<TokenId> prompt(story.begin(), story.begin() + static_cast<int64_t>(len));
      const RunResult r =
          run(*m.model, *backend, config, {greedy_request(prompt, max_tokens)}, Arrival::kAlone);
      const std::vector<TokenId>& out = r.samples[0][0].ids;
      ASSERT_EQ(static_cast<int32_t>(out.size()), max_tokens);
      Generator draft(*near.model, *backend, static_cast<int32_t>(len) + max_tokens + k);
      int64_t proposed = 0, accepted = 0;
      for (int32_t have = 1; have < max_tokens;) {  // the first token comes with the prompt
        const int32_t num = std::min(k, max_tokens - have - 1);
        std::vector<TokenId> seq = prompt;
        seq.insert(seq.end(), out.begin(), out.begin() + have);
        int32_t num_accepted = 0;
        bool matching = true;
        for (int32_t j = 0; j < num; ++j) {
          const std::vector<float> logits = draft.prompt_logits(seq);
          const float* row = logits.data() + (seq.size() - 1) * vocab;
          const auto t = static_cast<TokenId>(std::max_element(row, row + vocab) - row);
          matching = matching && t == out[static_cast<size_t>(have + j)];
          num_accepted += matching ? 1 : 0;
          seq.push_back(t);
        }
        proposed += num;
        accepted += num_accepted;
        have += num_accepted + 1;
      }
      EXPECT_EQ(r.stats.speculative.num_proposed, proposed);
      EXPECT_EQ(r.stats.speculative.num_accepted, accepted);
      all_proposed += proposed;
      all_accepted += accepted;
    }
  }
  std::cout << GetParam().preset << ": " << all_accepted << " of " << all_proposed
            << " proposals accepted\n";
  EXPECT_LT(all_accepted, all_proposed);
}

// A step verifies no more proposals than the state snapshots budgeted (each proposal keeps one):
// with 3 snapshots and k = 4, the requests together still give the greedy ids of plain decoding,
// fewer proposals are made than without the bound, and none of the steps asks the storage for
// more snapshots than 3 (it throws past its bound). The same for a hybrid draft's own snapshots.
TEST_P(Qwen35Fork, ProposalsStayWithinTheStateSnapshots) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  LoadedModel m = load(tiny_model(shared));
  LoadedModel near = load(perturbed(tiny_model(shared), GetParam().draft_tensor, -1.0f));
  auto backend = make_cpu_backend(2);
  std::vector<GenerationRequest> requests = make_requests(m, 6, 40, 16);
  for (GenerationRequest& r : requests) {
    const std::vector<TokenId> once = r.prompt;
    r.prompt.insert(r.prompt.end(), once.begin(), once.end());
  }
  const auto expected =
      ids_of(run(*m.model, *backend, config_with(4096, false), requests, Arrival::kAlone));
  for (const SpecMethod method : {SpecMethod::kNgram, SpecMethod::kDraft}) {
    SCOPED_TRACE(method == SpecMethod::kNgram ? "n-gram" : "hybrid draft");
    EngineConfig config = config_with(4096, false);
    config.speculative = spec_config(method, 4, near.model.get());
    config.speculative.adaptive = false;
    const RunResult unbounded = run(*m.model, *backend, config, requests, Arrival::kTogether);
    config.num_state_snapshots = 3;
    const RunResult bounded = run(*m.model, *backend, config, requests, Arrival::kTogether);
    EXPECT_EQ(ids_of(bounded), expected);
    EXPECT_EQ(ids_of(unbounded), expected);
    EXPECT_GT(bounded.stats.speculative.num_proposed, 0);
    EXPECT_LT(bounded.stats.speculative.num_proposed, unbounded.stats.speculative.num_proposed);
    EXPECT_GT(bounded.stats.speculative.num_trimmed, 0);
    EXPECT_EQ(unbounded.stats.speculative.num_trimmed, 0);
    config.num_state_snapshots = 0;  // none: no proposals at all
    const RunResult none = run(*m.model, *backend, config, requests, Arrival::kTogether);
    EXPECT_EQ(ids_of(none), expected);
    EXPECT_EQ(none.stats.speculative.num_proposed, 0);
  }
}

// n = 2 greedy with n-gram speculation: both samples are the greedy ids alone (children fork
// from a parent whose state was rolled back, and roll back their own).
TEST_P(Qwen35Fork, ForkedSamplesSpeculate) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  LoadedModel m = load(tiny_model(shared));
  auto backend = make_cpu_backend(2);
  const std::vector<TokenId> story = encode(m, kStoryA);
  const std::vector<TokenId> prompt(story.begin(), story.begin() + 60);
  GenerationRequest r = greedy_request(prompt, 20);
  const RunResult one = run(*m.model, *backend, config_with(4096, false), {r}, Arrival::kAlone);
  r.n = 2;
  EngineConfig config = config_with(4096, false);
  config.speculative = spec_config(SpecMethod::kNgram, 4);
  const RunResult two = run(*m.model, *backend, config, {r}, Arrival::kAlone);
  EXPECT_EQ(two.samples[0][0].ids, one.samples[0][0].ids);
  EXPECT_EQ(two.samples[0][1].ids, one.samples[0][0].ids);
  EXPECT_GT(two.stats.speculative.num_proposed, 0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Qwen35Fork, ::testing::ValuesIn(kHybridShapes),
                         hybrid_shape_name);

}  // namespace
}  // namespace pagoda
