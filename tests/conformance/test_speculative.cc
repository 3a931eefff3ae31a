// Speculative decoding is lossless. Greedy: the ids with proposals (n-gram, a draft model, both)
// are exactly those without, alone and batched, chunked, with and without prefix caching, after
// preemption. Sampling: the distribution of the tokens is the target model's, by a chi-squared
// test of the tokens drawn with and without proposals over fixed seeds. Logprobs and stops are
// those of plain decoding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "conformance/engine_harness.h"
#include "core/error.h"
#include "format/gguf.h"
#include "tools/quantize.h"
#include "test_util.h"

namespace pagoda {
namespace {

// stories260K requantized: a draft that is close to the target but not the same. SmolLM2's
// file is already Q4_1, so requantizing has to be allowed.
LoadedModel requantized(const std::string& path, const char* type) {
  const std::string out = test::temp_dir() + "/draft-" + type + ".gguf";
  if (!std::filesystem::exists(out)) {
    quantize_model({path, out, type, 1, /*allow_requantize=*/true}, nullptr);
  }
  return load(out);
}

// stories260K with its final norm scaled by `scale`: the same model with flatter (scale < 1)
// distributions, a draft that disagrees with the target often, so a verifier that accepts or
// resamples wrongly shows in the output distribution.
LoadedModel flattened(const std::string& path, float scale) {
  const std::string out = test::temp_dir() + "/draft-flat.gguf";
  std::filesystem::copy_file(path, out, std::filesystem::copy_options::overwrite_existing);
  auto file = GgufFile::open(path);
  const GgufTensorInfo* norm = nullptr;
  for (const GgufTensorInfo& t : file->tensors()) {
    if (t.name == "output_norm.weight") norm = &t;
  }
  if (norm == nullptr || norm->type != DType::kF32) fail("no F32 output_norm.weight in ", path);
  std::vector<float> values(norm->num_elements);
  std::memcpy(values.data(), norm->data, norm->num_bytes);
  for (float& v : values) v *= scale;
  std::fstream f(out, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(file->data_offset() + norm->offset));
  f.write(reinterpret_cast<const char*>(values.data()),
          static_cast<std::streamsize>(norm->num_bytes));
  f.close();
  return load(out);
}

TEST(EngineSpeculative, NgramGreedyIsLossless) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  auto backend = make_cpu_backend(2);
  const SpeculativeConfig spec = spec_config(SpecMethod::kNgram, 4);
  check_batch_invariance(stories260k(shared), *backend, 16, 100, 24, true, KvType::kF32, &spec);
}

TEST(EngineSpeculative, NgramGreedyIsLosslessOnTheReferenceBackend) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  auto backend = make_reference_backend();
  const SpeculativeConfig spec = spec_config(SpecMethod::kNgram, 3);
  check_batch_invariance(stories260k(shared), *backend, 16, 100, 24, false, KvType::kF32, &spec);
}

// gpt-oss (sliding-window layers, sinks, experts): verifying several tokens at once must give
// the ids of plain decoding.
TEST(EngineSpeculative, NgramGreedyIsLosslessOnGptOss) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  const std::string path = synthetic_model(shared, "gpt-oss-tiny", "mxfp4_moe",
                                           test::temp_dir() + "/gpt-oss-tiny-spec.gguf");
  auto backend = make_cpu_backend(2);
  const SpeculativeConfig spec = spec_config(SpecMethod::kNgram, 4);
  check_batch_invariance(path, *backend, 16, 100, 24, false, KvType::kF32, &spec);
}

// Gemma 4 (layers of different K/V widths, shared K/V, per-layer inputs, soft-capped logits):
// the n-gram proposer, and a Q8_0 copy of the model as the draft.
TEST(EngineSpeculative, GreedyIsLosslessOnGemma4) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  const std::string dir = test::temp_dir();  // emptied by each call: taken once
  const std::string path = synthetic_model(shared, "gemma4-tiny", "f32", dir + "/gemma4-tiny.gguf");
  auto backend = make_cpu_backend(2);
  const SpeculativeConfig ngram = spec_config(SpecMethod::kNgram, 4);
  check_batch_invariance(path, *backend, 16, 100, 24, false, KvType::kF32, &ngram);
  quantize_model({path, dir + "/draft.gguf", "q8_0", 1, /*allow_requantize=*/true}, nullptr);
  LoadedModel draft = load(dir + "/draft.gguf");
  const SpeculativeConfig with_draft = spec_config(SpecMethod::kDraft, 3, draft.model.get());
  check_batch_invariance(path, *backend, 16, 100, 24, false, KvType::kF32, &with_draft);
}

TEST(EngineSpeculative, DraftGreedyIsLossless) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  auto backend = make_cpu_backend(2);
  LoadedModel draft = requantized(stories260k(shared), "q4_0");
  const SpeculativeConfig spec = spec_config(SpecMethod::kDraft, 3, draft.model.get());
  check_batch_invariance(stories260k(shared), *backend, 16, 100, 24, true, KvType::kF32, &spec);
}

TEST(EngineSpeculative, BothGreedyIsLosslessWithAnF16Cache) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  auto backend = make_cpu_backend(2);
  LoadedModel draft = requantized(stories260k(shared), "q8_0");
  const SpeculativeConfig spec = spec_config(SpecMethod::kBoth, 5, draft.model.get());
  check_batch_invariance(stories260k(shared), *backend, 16, 100, 24, false, KvType::kF16, &spec);
}

TEST(EngineSpeculative, SmolLM2DraftingForItselfRequantized) {
  const std::string path = installed_model("smollm2-135m-instruct-q4_1.gguf");
  if (path.empty())
    GTEST_SKIP() << "*** models/smollm2-135m-instruct-q4_1.gguf is absent: run scripts/setup ***";
  auto backend = make_cpu_backend(2);
  LoadedModel draft = requantized(path, "q4_0");
  const SpeculativeConfig spec = spec_config(SpecMethod::kBoth, 4, draft.model.get());
  check_batch_invariance(path, *backend, 16, 24, 8, false, KvType::kF32, &spec);
}

// The same model as its own draft: under greedy decoding every proposal is accepted, so each
// verifying step gives k + 1 tokens (but where max_tokens cuts it short).
TEST(EngineSpeculative, AnIdenticalDraftIsAlwaysAccepted) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  auto backend = make_cpu_backend(2);
  LoadedModel m = load(stories260k(shared));
  LoadedModel draft = load(stories260k(shared));
  EngineConfig config = config_with(4096, true);
  config.speculative = spec_config(SpecMethod::kDraft, 4, draft.model.get());
  const std::vector<GenerationRequest> requests = make_requests(m, 6, 60, 40);
  const RunResult r = run(*m.model, *backend, config, requests, Arrival::kTogether);
  const RunResult plain =
      run(*m.model, *backend, config_with(4096, true), requests, Arrival::kTogether);
  EXPECT_EQ(ids_of(r), ids_of(plain));
  const SpeculativeStats& s = r.stats.speculative;
  ASSERT_GT(s.num_proposed, 0);
  EXPECT_EQ(s.num_accepted, s.num_proposed);
  EXPECT_GT(s.mean_accepted_length(), 3.0);
  // Fewer target rows than tokens generated one at a time would need.
  EXPECT_LT(r.stats.scheduler.num_steps, plain.stats.scheduler.num_steps);
}

// Logprobs of every token, and where a stop id ends a sample, are those of plain decoding.
TEST(EngineSpeculative, LogprobsAndStopsAreThoseOfPlainDecoding) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  auto backend = make_cpu_backend(2);
  LoadedModel m = load(stories260k(shared));
  LoadedModel draft = requantized(stories260k(shared), "q4_0");
  std::vector<GenerationRequest> requests = make_requests(m, 8, 80, 30);
  for (GenerationRequest& r : requests) {
    r.sampling.logprobs = true;
    r.sampling.num_logprobs = 3;
  }
  // A stop id the greedy text reaches: the 5th token of the longest plain output.
  EngineConfig plain_config = config_with(4096, true);
  const RunResult first = run(*m.model, *backend, plain_config, requests, Arrival::kTogether);
  size_t longest = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (first.samples[i][0].ids.size() > first.samples[longest][0].ids.size()) longest = i;
  }
  const TokenId stop = first.samples[longest][0].ids.at(4);
  for (GenerationRequest& r : requests) r.stop_ids = {stop};
  const RunResult plain = run(*m.model, *backend, plain_config, requests, Arrival::kTogether);
  EngineConfig config = plain_config;
  config.speculative = spec_config(SpecMethod::kBoth, 4, draft.model.get());
  const RunResult spec = run(*m.model, *backend, config, requests, Arrival::kTogether);
  ASSERT_GT(spec.stats.speculative.num_accepted, 0);
  for (size_t i = 0; i < requests.size(); ++i) {
    const Sample& a = plain.samples[i][0];
    const Sample& b = spec.samples[i][0];
    EXPECT_EQ(a.ids, b.ids) << "request " << i;
    EXPECT_EQ(a.finish, b.finish) << "request " << i;
    EXPECT_EQ(a.stop_token, b.stop_token) << "request " << i;
  }
  EXPECT_EQ(plain.samples[longest][0].stop_token, stop);
}

TEST(EngineSpeculative, ACrowdedBatchDoesNotSpeculate) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  auto backend = make_cpu_backend(2);
  LoadedModel m = load(stories260k(shared));
  LoadedModel draft = requantized(stories260k(shared), "q4_0");
  EngineConfig config = config_with(4096, true);
  config.speculative = spec_config(SpecMethod::kDraft, 4, draft.model.get());
  config.speculative.max_num_running = 4;
  const std::vector<GenerationRequest> requests = make_requests(m, 12, 60, 20);
  const RunResult together = run(*m.model, *backend, config, requests, Arrival::kTogether);
  const RunResult alone = run(*m.model, *backend, config, {requests[3]}, Arrival::kAlone);
  EXPECT_EQ(ids_of(together)[3], ids_of(alone)[0]);
  EXPECT_GT(alone.stats.speculative.num_proposed, 0);
  // Together, proposals came only once few enough were left running.
  EXPECT_LT(together.stats.speculative.num_verify_steps, static_cast<int64_t>(requests.size()) * 5);
}

TEST(ChiSquared, KnownPValues) {
  // 1 degree of freedom at 3.841: p = 0.05; 10 at 18.307: p = 0.05; 4 at 13.277: p = 0.01.
  EXPECT_NEAR(test::chi_squared_p_value(3.841, 1), 0.05, 1e-3);
  EXPECT_NEAR(test::chi_squared_p_value(18.307, 10), 0.05, 1e-3);
  EXPECT_NEAR(test::chi_squared_p_value(13.277, 4), 0.01, 1e-4);
  EXPECT_NEAR(test::chi_squared_p_value(0.0, 3), 1.0, 1e-12);
  // Equal samples are indistinguishable; very different ones are not.
  EXPECT_NEAR(test::chi_squared_homogeneity_p({{1, 500}, {2, 500}}, {{1, 500}, {2, 500}}), 1.0,
              1e-9);
  EXPECT_LT(test::chi_squared_homogeneity_p({{1, 600}, {2, 400}}, {{1, 400}, {2, 600}}), 1e-6);
  EXPECT_GT(test::chi_squared_fit_p({{1, 500}, {2, 500}}, {{1, 0.5}, {2, 0.5}}), 0.99);
  EXPECT_LT(test::chi_squared_fit_p({{1, 600}, {2, 400}}, {{1, 0.5}, {2, 0.5}}), 1e-8);
  EXPECT_EQ(test::chi_squared_fit_p({{1, 5}, {3, 1}}, {{1, 0.5}, {2, 0.5}}), 0.0);
}

// Tokens 1..3 of each sample (token 0 is drawn at the prompt's end, before any proposal), over
// `count` requests seeded from `first_seed` on.
std::vector<std::map<TokenId, int64_t>> draw(Model& model, Backend& backend,
                                             const EngineConfig& config,
                                             const std::vector<TokenId>& prompt, int count,
                                             uint64_t first_seed, SpeculativeStats& stats) {
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < count; ++i) {
    GenerationRequest r;
    r.prompt = prompt;
    r.max_tokens = 4;
    r.sampling.temperature = 1.0f;
    r.sampling.seed = first_seed + static_cast<uint64_t>(i);
    r.sampling.has_seed = true;
    requests.push_back(std::move(r));
  }
  std::vector<std::map<TokenId, int64_t>> counts(3);
  for (size_t begin = 0; begin < requests.size(); begin += 64) {
    const std::vector<GenerationRequest> batch(
        requests.begin() + static_cast<int64_t>(begin),
        requests.begin() + static_cast<int64_t>(std::min(requests.size(), begin + 64)));
    const RunResult r = run(model, backend, config, batch, Arrival::kTogether);
    stats.num_proposed += r.stats.speculative.num_proposed;
    stats.num_accepted += r.stats.speculative.num_accepted;
    for (const auto& samples : r.samples) {
      const std::vector<TokenId>& ids = samples.at(0).ids;
      for (size_t p = 1; p < ids.size() && p <= 3; ++p) ++counts[p - 1][ids[p]];
    }
  }
  return counts;
}

// The output distribution with proposals is the target's. The seeds, the sample size and the
// p-value bound (1e-3 for each of the three positions) were fixed before the test was run.
void check_distribution(SpecMethod method, const char* prompt_text) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  auto backend = make_cpu_backend(2);
  LoadedModel m = load(stories260k(shared));
  LoadedModel draft = flattened(stories260k(shared), 0.5f);
  const std::vector<TokenId> prompt = m.tokenizer->encode(prompt_text, {.add_special = true});
  EngineConfig plain = config_with(8192, true, 2048, 64);
  EngineConfig spec = plain;
  spec.speculative = spec_config(method, 3, draft.model.get());
  spec.speculative.ngram.min_n = 1;  // propose at nearly every step
  const int kCount = 3000;
  SpeculativeStats none, stats;
  const auto without = draw(*m.model, *backend, plain, prompt, kCount, 1'000'000, none);
  const auto with = draw(*m.model, *backend, spec, prompt, kCount, 2'000'000, stats);
  EXPECT_EQ(none.num_proposed, 0);
  // Proposals were made (at a sixth of the 3 * kCount decoding steps at least), and both
  // accepted and rejected.
  EXPECT_GT(stats.num_proposed, kCount / 2);
  EXPECT_GT(stats.num_accepted, 0);
  EXPECT_LT(stats.num_accepted, stats.num_proposed);
  for (size_t p = 0; p < 3; ++p) {
    const double pv = test::chi_squared_homogeneity_p(without[p], with[p]);
    EXPECT_GT(pv, 1e-3) << "token " << p + 1 << ": the distributions differ";
  }
}

TEST(EngineSpeculative, SampledTokensFollowTheTargetWithADraft) {
  check_distribution(SpecMethod::kDraft, "Once upon a time, there was a little");
}

TEST(EngineSpeculative, SampledTokensFollowTheTargetWithNgrams) {
  // A prompt that repeats itself, so n-gram proposals are made at nearly every step.
  check_distribution(SpecMethod::kNgram,
                     "The cat sat on the mat. The cat sat on the mat. The cat sat on the mat. The "
                     "cat sat on the");
}

}  // namespace
}  // namespace pagoda
