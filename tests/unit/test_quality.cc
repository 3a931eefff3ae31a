// bench/quality: the arithmetic of `pagoda bench quality` on hand-made distributions (KL of
// identical rows is 0, known KL values, perplexity of a uniform prediction is the vocabulary
// size), window counts (the tinystories reference layout), and model/quantize on tiny files.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "bench/quality.h"
#include "core/error.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "tools/quantize.h"
#include "quant/reference.h"
#include "test_util.h"

namespace pagoda::bench {
namespace {

std::vector<float> log_probs(const std::vector<double>& p) {
  std::vector<float> out;
  for (double v : p) out.push_back(static_cast<float>(std::log(v)));
  return out;
}

std::vector<TokenId> iota_tokens(int n) {
  std::vector<TokenId> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = 10 + i;
  return t;
}

TEST(QualityMath, LogSumExpIsStable) {
  const std::vector<float> four(4, 0.0f);
  EXPECT_NEAR(log_sum_exp(four.data(), 4), std::log(4.0), 1e-12);
  const std::vector<float> big = {1000.0f, 1000.0f};
  EXPECT_NEAR(log_sum_exp(big.data(), 2), 1000.0 + std::log(2.0), 1e-9);
  const std::vector<float> small = {-1000.0f, -1000.0f, -1000.0f};
  EXPECT_NEAR(log_sum_exp(small.data(), 3), -1000.0 + std::log(3.0), 1e-9);
}

TEST(QualityMath, NllOfUniformIsLogVocab) {
  const std::vector<float> uniform(50, 3.5f);
  for (int target : {0, 17, 49}) {
    EXPECT_NEAR(token_nll(uniform.data(), 50, target), std::log(50.0), 1e-12);
  }
  // Probabilities 0.5 / 0.25 / 0.25, given as unnormalized logits.
  const std::vector<float> row = log_probs({2.0, 1.0, 1.0});
  EXPECT_NEAR(token_nll(row.data(), 3, 0), std::log(2.0), 1e-6);
  EXPECT_NEAR(token_nll(row.data(), 3, 2), std::log(4.0), 1e-6);
}

TEST(QualityMath, ArgmaxTakesTheFirstOnTies) {
  const std::vector<float> row = {1, 5, 2, 5, 0};
  EXPECT_EQ(argmax(row.data(), 5), 1);
}

TEST(QualityMath, KlOfIdenticalRowsIsZero) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<float> row(1000);
  for (float& v : row) v = normal(rng);
  EXPECT_EQ(kl_divergence(row.data(), row.data(), 1000), 0.0);
}

TEST(QualityMath, KlKnownValues) {
  // KL([0.5, 0.5] || [0.9, 0.1]) = 0.5 ln(0.5/0.9) + 0.5 ln(0.5/0.1).
  const std::vector<float> ref = log_probs({0.5, 0.5}), model = log_probs({0.9, 0.1});
  const double want = 0.5 * std::log(0.5 / 0.9) + 0.5 * std::log(0.5 / 0.1);
  EXPECT_NEAR(kl_divergence(ref.data(), model.data(), 2), want, 1e-6);
  // The other direction differs: KL is not symmetric.
  const double reverse = 0.9 * std::log(0.9 / 0.5) + 0.1 * std::log(0.1 / 0.5);
  EXPECT_NEAR(kl_divergence(model.data(), ref.data(), 2), reverse, 1e-6);
  // Adding a constant to every logit changes neither distribution.
  std::vector<float> shifted = model;
  for (float& v : shifted) v += 123.0f;
  EXPECT_NEAR(kl_divergence(ref.data(), shifted.data(), 2), want, 1e-5);
}

TEST(QualityMath, KlIsNonNegativeOnRandomRows) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> a(300), b(300);
    for (float& v : a) v = normal(rng);
    for (size_t i = 0; i < b.size(); ++i) b[i] = a[i] + 0.3f * normal(rng);
    EXPECT_GT(kl_divergence(a.data(), b.data(), 300), 0.0);
  }
}

TEST(QualityMath, PerplexityAccumulator) {
  PerplexityAccumulator acc;
  EXPECT_TRUE(std::isnan(acc.perplexity()));
  for (int i = 0; i < 10; ++i) acc.add(std::log(7.0));
  EXPECT_NEAR(acc.perplexity(), 7.0, 1e-12);
  EXPECT_NEAR(acc.perplexity_stderr(), 0.0, 1e-9);
  PerplexityAccumulator spread;
  spread.add(1.0);
  spread.add(3.0);  // mean 2, sample std sqrt(2), stderr of the mean 1
  EXPECT_NEAR(spread.perplexity(), std::exp(2.0), 1e-12);
  EXPECT_NEAR(spread.perplexity_stderr(), std::exp(2.0) * 1.0, 1e-9);
}

TEST(QualityWindows, ReferenceLayoutBosPlus255) {
  const std::vector<TokenId> text = iota_tokens(1000);
  const std::vector<Window> w = make_windows(text, {.ctx = 256, .bos = 1});
  ASSERT_EQ(w.size(), 3u);  // 3 x 255 = 765 tokens; the last 235 are dropped
  for (size_t i = 0; i < w.size(); ++i) {
    ASSERT_EQ(w[i].tokens.size(), 256u);
    EXPECT_EQ(w[i].tokens[0], 1);
    EXPECT_EQ(w[i].tokens[1], text[i * 255]);  // consecutive, not overlapping
    EXPECT_EQ(w[i].tokens[255], text[i * 255 + 254]);
    EXPECT_EQ(w[i].first_scored, 0);
    EXPECT_EQ(w[i].num_scored(), 255);  // the first text token is predicted from BOS alone
  }
}

TEST(QualityWindows, TinyStoriesCounts) {
  // REFERENCE.md: 193,346 tokens -> 758 windows, 193,290 tokens scored.
  const std::vector<TokenId> text(193346, 5);
  const std::vector<Window> w = make_windows(text, {.ctx = 256, .bos = 1});
  int64_t scored = 0;
  for (const Window& x : w) scored += x.num_scored();
  EXPECT_EQ(w.size(), 758u);
  EXPECT_EQ(scored, 193290);
}

TEST(QualityWindows, SecondHalfNoBosAndLimits) {
  const std::vector<TokenId> text = iota_tokens(1000);
  const std::vector<Window> half = make_windows(text, {.ctx = 256, .bos = 1, .second_half = true});
  ASSERT_EQ(half.size(), 3u);
  EXPECT_EQ(half[0].first_scored, 128);
  EXPECT_EQ(half[0].num_scored(), 127);  // positions 128..254 predict tokens 129..255
  const std::vector<Window> raw = make_windows(text, {.ctx = 256});
  ASSERT_EQ(raw.size(), 3u);  // 3 x 256 text tokens
  EXPECT_EQ(raw[1].tokens[0], text[256]);
  EXPECT_EQ(raw[1].num_scored(), 255);  // the first token has nothing to be predicted from
  EXPECT_EQ(make_windows(text, {.ctx = 256, .bos = 1, .max_windows = 2}).size(), 2u);
  EXPECT_TRUE(make_windows(iota_tokens(100), {.ctx = 256, .bos = 1}).empty());
  EXPECT_THROW(make_windows(text, {.ctx = 1, .bos = 1}), Error);
  EXPECT_THROW(make_windows(text, {.ctx = 2, .bos = 1, .second_half = true}), Error);
}

TEST(QualityScore, UniformModelHasPerplexityVocab) {
  const int64_t vocab = 8;
  Window w{.tokens = {1, 3, 5, 7, 2}};  // 4 predictions
  std::vector<float> logits(4 * vocab, 0.25f);
  QualityStats stats;
  score_window(w, logits.data(), nullptr, vocab, 2, stats);
  EXPECT_EQ(stats.nll.count(), 4);
  EXPECT_NEAR(stats.nll.perplexity(), 8.0, 1e-9);
  ASSERT_EQ(stats.window_perplexity.size(), 1u);
  EXPECT_FALSE(stats.has_ref());
  EXPECT_TRUE(std::isnan(stats.kl_mean()));
}

TEST(QualityScore, AgainstReference) {
  const int64_t vocab = 3;
  Window w{.tokens = {0, 1, 0}};  // predictions of token 1, then token 0
  // Reference: p = [0.5, 0.5, tiny]; model: row 0 agrees exactly, row 1 is [0.9, 0.1, tiny].
  const std::vector<float> ref = {0, 0, -30, 0, 0, -30};
  std::vector<float> model = ref;
  model[3] = std::log(0.9f);
  model[4] = std::log(0.1f);
  QualityStats stats;
  score_window(w, model.data(), ref.data(), vocab, 1, stats);
  ASSERT_EQ(stats.kl.size(), 2u);
  EXPECT_EQ(stats.kl[0], 0.0);
  EXPECT_NEAR(stats.kl[1], kl_divergence(ref.data() + 3, model.data() + 3, vocab), 1e-12);
  EXPECT_NEAR(stats.kl[1], 0.5 * std::log(0.5 / 0.9) + 0.5 * std::log(0.5 / 0.1), 1e-5);
  EXPECT_EQ(stats.top1_same, 2);  // ties in the reference go to the first index, as in the model
  EXPECT_DOUBLE_EQ(stats.top1_agreement(), 1.0);
  EXPECT_NEAR(stats.ref_nll.perplexity(), 2.0, 1e-6);
  // Model NLLs: ln 2 (token 1 at 0.5), then -ln 0.9 (token 0).
  EXPECT_NEAR(stats.nll.mean_nll(), (std::log(2.0) - std::log(0.9)) / 2, 1e-6);
  EXPECT_NEAR(stats.perplexity_ratio(), stats.nll.perplexity() / 2.0, 1e-6);
  EXPECT_NEAR(stats.kl_percentile(100), stats.kl[1], 1e-15);
  EXPECT_NEAR(stats.kl_percentile(50), stats.kl[1] / 2, 1e-15);
}

TEST(QualityScore, ThreadCountDoesNotChangeTotals) {
  const int64_t vocab = 64;
  Window w{.tokens = iota_tokens(40)};
  for (TokenId& t : w.tokens) t %= vocab;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> a(39 * vocab), b(39 * vocab);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = normal(rng);
    b[i] = a[i] + 0.2f * normal(rng);
  }
  QualityStats one, two;
  score_window(w, b.data(), a.data(), vocab, 1, one);
  score_window(w, b.data(), a.data(), vocab, 2, two);
  EXPECT_EQ(one.nll.perplexity(), two.nll.perplexity());
  EXPECT_EQ(one.kl_mean(), two.kl_mean());
  EXPECT_EQ(one.top1_same, two.top1_same);
}

}  // namespace
}  // namespace pagoda::bench

namespace pagoda {
namespace {

// A tiny GGUF: one matrix per interesting case, a norm, and metadata to carry over.
std::string write_tiny_model(const std::string& dir, std::vector<float>& matrix_values) {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_u32("llama.block_count", 1);
  w.add_u32("general.file_type", 0);
  w.add_string("tokenizer.ggml.model", "llama");
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  matrix_values.resize(64 * 4);
  for (float& v : matrix_values) v = normal(rng);
  std::vector<float> odd(172 * 2), norm(64, 1.0f), embd(64 * 8);
  for (float& v : odd) v = normal(rng);
  for (float& v : embd) v = normal(rng);
  auto bytes = [](const std::vector<float>& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(v.data());
    return std::vector<uint8_t>(p, p + v.size() * sizeof(float));
  };
  w.add_tensor("token_embd.weight", DType::kF32, {64, 8}, bytes(embd));
  w.add_tensor("blk.0.attn_norm.weight", DType::kF32, {64}, bytes(norm));
  w.add_tensor("blk.0.attn_q.weight", DType::kF32, {64, 4}, bytes(matrix_values));
  w.add_tensor("blk.0.ffn_down.weight", DType::kF32, {172, 2}, bytes(odd));
  const std::string path = dir + "/tiny.gguf";
  w.write(path);
  return path;
}

TEST(QuantizeModel, Q8_0KeepsNormsAndMetadata) {
  const std::string dir = test::temp_dir();
  std::vector<float> values;
  const std::string in = write_tiny_model(dir, values);
  quantize_model({.input_path = in, .output_path = dir + "/q8.gguf", .type = "q8_0"}, {});
  auto out = GgufFile::open(dir + "/q8.gguf");
  EXPECT_EQ(out->get_u32("general.file_type"), 7u);
  EXPECT_EQ(out->get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(out->find_tensor("blk.0.attn_norm.weight")->type, DType::kF32);
  const GgufTensorInfo* q = out->find_tensor("blk.0.attn_q.weight");
  ASSERT_EQ(q->type, DType::kQ8_0);
  std::vector<float> back(values.size());
  for (int r = 0; r < 4; ++r) {
    const size_t rb = row_bytes(DType::kQ8_0, 64);
    dequantize_row(DType::kQ8_0, q->data + r * rb, back.data() + r * 64, 64);
  }
  for (size_t i = 0; i < values.size(); ++i) EXPECT_NEAR(back[i], values[i], 1e-3);
  // 172 columns are no whole number of Q8_0 blocks: F16 instead.
  EXPECT_EQ(out->find_tensor("blk.0.ffn_down.weight")->type, DType::kF16);
  // Tied embeddings: token_embd is the output matrix (Q8_0 for q8_0).
  EXPECT_EQ(out->find_tensor("token_embd.weight")->type, DType::kQ8_0);
}

TEST(QuantizeModel, KMixFallsBackOnShortRows) {
  const std::string dir = test::temp_dir();
  std::vector<float> values;
  const std::string in = write_tiny_model(dir, values);
  quantize_model({.input_path = in, .output_path = dir + "/q4km.gguf", .type = "q4_k_m"}, {});
  auto out = GgufFile::open(dir + "/q4km.gguf");
  EXPECT_EQ(out->get_u32("general.file_type"), 15u);
  // 64 columns: Q4_K (256 per block) falls back to Q5_0, as llama.cpp does.
  EXPECT_EQ(out->find_tensor("blk.0.attn_q.weight")->type, DType::kQ5_0);
  // ffn_down of layer 0 gets Q6_K, which falls back to Q8_0, then to F16 for 172 columns.
  EXPECT_EQ(out->find_tensor("blk.0.ffn_down.weight")->type, DType::kF16);
  EXPECT_THROW(quantize_model({.input_path = in, .output_path = dir + "/x.gguf", .type = "q3"}, {}),
               Error);
}

}  // namespace
}  // namespace pagoda
