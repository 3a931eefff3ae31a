// model/awq: folding scales leaves an F32 model's function unchanged (stories260K, every group,
// grouped-query attn_output included, through quantize_model); the scale search never does
// worse than alpha 0 (plain rounding) on its own objective and finds better scales when a few
// input columns carry most of the activation; the collector counts each distinct input once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "engine/generator.h"
#include "format/gguf.h"
#include "tools/awq.h"
#include "tools/imatrix.h"
#include "model/model.h"
#include "model/model_file.h"
#include "tools/quantize.h"
#include "quant/reference.h"
#include "test_util.h"

namespace pagoda {
namespace {

TEST(Awq, InputKeys) {
  const std::pair<const char*, const char*> cases[] = {
      {"blk.3.attn_q.weight", "blk.3.attn_in"},       {"blk.3.attn_v.weight", "blk.3.attn_in"},
      {"blk.12.ffn_up.weight", "blk.12.ffn_in"},      {"blk.12.ffn_gate.weight", "blk.12.ffn_in"},
      {"blk.0.ffn_down.weight", "blk.0.ffn_down"},    {"blk.0.attn_output.weight", "blk.0.attn_output"},
      {"blk.0.ffn_down_exps.weight", ""},             {"output.weight", ""},
      {"blk.0.attn_norm.weight", ""}};
  for (const auto& [name, key] : cases) EXPECT_EQ(awq_input_key(name), key) << name;
}

std::vector<float> logits_of(const std::string& path, const std::vector<TokenId>& prompt) {
  auto file = ModelFile::open(path);
  auto model = Model::load(*file);
  auto backend = make_reference_backend();
  Generator g(*model, *backend, 64);
  return g.prompt_logits(prompt);
}

// Writes stories260K in F32 with random scales in [0.25, 4] folded into every group; `keep`
// drops the division of the named tensor (a broken fold, for the negative control).
std::string write_folded(const std::string& model, const std::string& out, const std::string& keep,
                         AwqPlan* plan_out) {
  auto in = GgufFile::open(model);
  AwqPlan plan = awq_plan(*in);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> log2s(-2.0f, 2.0f);
  AwqScaling scaling;
  for (AwqGroup g : plan.groups) {
    std::vector<float> s(static_cast<size_t>(g.num_scales()));
    for (float& v : s) v = std::exp2(log2s(rng));
    std::erase(g.divided, keep);
    fold_awq_scales(g, s, *in, scaling);
  }
  QuantizeOptions o;
  o.input_path = model;
  o.output_path = out;
  o.type = "f32";
  o.awq_scaling = &scaling;
  quantize_model(o, {});
  if (plan_out) *plan_out = plan;
  return out;
}

TEST(Awq, FoldedScalesLeaveF32ModelUnchanged) {
  PAGODA_SHARED_OR_SKIP(model, "models/stories260K.gguf");
  AwqPlan plan;
  const std::string dir = test::temp_dir();
  const std::string folded = write_folded(model, dir + "/folded.gguf", "", &plan);
  // 5 layers: q/k/v, attn_output (8 heads on 4 KV heads), gate/up and ffn_down each.
  EXPECT_EQ(plan.groups.size(), 20u);
  EXPECT_TRUE(plan.skipped.empty()) << plan.skipped.front();
  ASSERT_FALSE(plan.groups[1].scale_index.empty());
  EXPECT_EQ(plan.groups[1].input, "blk.0.attn_output");
  EXPECT_EQ(plan.groups[1].num_scales(), 32);

  {  // the weights did change
    auto a = GgufFile::open(model), b = GgufFile::open(folded);
    for (const char* name : {"blk.0.attn_q.weight", "blk.0.attn_norm.weight", "blk.2.ffn_up.weight",
                             "blk.4.attn_v.weight", "blk.4.attn_output.weight"}) {
      const auto* ta = a->find_tensor(name);
      const auto* tb = b->find_tensor(name);
      ASSERT_TRUE(ta && tb && ta->num_bytes == tb->num_bytes) << name;
      EXPECT_NE(std::memcmp(ta->data, tb->data, ta->num_bytes), 0) << name;
    }
  }
  const std::vector<TokenId> prompt = {1, 403, 407, 261, 378, 418, 296, 431, 289, 360, 271, 330, 261, 356};
  const std::vector<float> want = logits_of(model, prompt);
  const std::vector<float> got = logits_of(folded, prompt);
  ASSERT_EQ(got.size(), want.size());
  double max_diff = 0, max_abs = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(got[i] - want[i])));
    max_abs = std::max(max_abs, static_cast<double>(std::fabs(want[i])));
  }
  EXPECT_LT(max_diff, 1e-4 * max_abs) << "largest logit " << max_abs;

  // Negative control: the same scales without dividing ffn_up's rows back change the output.
  const std::string broken = write_folded(model, dir + "/broken.gguf", "blk.2.ffn_up.weight", nullptr);
  const std::vector<float> bad = logits_of(broken, prompt);
  double bad_diff = 0;
  for (size_t i = 0; i < want.size(); ++i) bad_diff = std::max(bad_diff, static_cast<double>(std::fabs(bad[i] - want[i])));
  EXPECT_GT(bad_diff, 1e-2 * max_abs);
}

struct SearchCase {
  std::vector<float> w, x, mean_abs;
  int64_t rows = 48, cols = 0, n = 96;
};

// Weights N(0, 1); inputs N(0, 1) with every 61st column (3, 64, 125, ...) twenty times larger.
SearchCase make_case(uint32_t seed, int64_t cols) {
  SearchCase k;
  k.cols = cols;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  k.w.resize(static_cast<size_t>(k.rows * k.cols));
  for (float& v : k.w) v = normal(rng);
  k.x.resize(static_cast<size_t>(k.n * k.cols));
  k.mean_abs.assign(static_cast<size_t>(k.cols), 0.0f);
  for (int64_t t = 0; t < k.n; ++t) {
    for (int64_t c = 0; c < k.cols; ++c) {
      const float v = normal(rng) * (c % 61 == 3 ? 20.0f : 1.0f);
      k.x[t * k.cols + c] = v;
      k.mean_abs[c] += std::fabs(v) / static_cast<float>(k.n);
    }
  }
  return k;
}

// The objective at s = 1, computed here from quantize_row.
double rtn_error(const SearchCase& k, DType type) {
  std::vector<uint8_t> q(row_bytes(type, k.cols));
  std::vector<float> back(static_cast<size_t>(k.cols));
  double err = 0;
  for (int64_t r = 0; r < k.rows; ++r) {
    quantize_row(type, k.w.data() + r * k.cols, q.data(), k.cols);
    dequantize_row(type, q.data(), back.data(), k.cols);
    for (int64_t t = 0; t < k.n; ++t) {
      double dot = 0;
      for (int64_t c = 0; c < k.cols; ++c) dot += (k.w[r * k.cols + c] - back[c]) * static_cast<double>(k.x[t * k.cols + c]);
      err += dot * dot;
    }
  }
  return err;
}

TEST(Awq, SearchNeverWorseThanAlphaZero) {
  for (DType type : {DType::kQ4_0, DType::kQ4_K}) {
    for (uint32_t seed : {1u, 2u, 3u}) {
      const SearchCase c = make_case(seed, type == DType::kQ4_K ? 256 : 128);
      const AwqMatrix m{c.w.data(), c.rows, type, nullptr};
      const AwqSearch s = awq_search({&m, 1}, c.cols, c.x.data(), c.n, c.mean_abs, {}, 21, 1);
      ASSERT_EQ(s.errors.size(), 21u);
      EXPECT_NEAR(s.errors[0], rtn_error(c, type), 1e-4 * s.errors[0]);
      const double best = *std::min_element(s.errors.begin(), s.errors.end());
      const auto at = static_cast<size_t>(std::lround(s.alpha * 20));
      EXPECT_EQ(s.errors[at], best);
      EXPECT_LE(best, s.errors[0]);
      // A few columns carry most of the output: stretching them helps clearly.
      EXPECT_GT(s.alpha, 0.0) << dtype_traits(type).name << " seed " << seed;
      EXPECT_LT(best, 0.9 * s.errors[0]) << dtype_traits(type).name << " seed " << seed;
      // With importance weights the search still starts from, and never loses to, alpha 0.
      std::vector<float> imp(static_cast<size_t>(c.cols));
      for (int64_t j = 0; j < c.cols; ++j) imp[j] = c.mean_abs[j] * c.mean_abs[j];
      const AwqMatrix mi{c.w.data(), c.rows, type, imp.data()};
      const AwqSearch si = awq_search({&mi, 1}, c.cols, c.x.data(), c.n, c.mean_abs, {}, 11, 1);
      EXPECT_LE(*std::min_element(si.errors.begin(), si.errors.end()), si.errors[0]);
    }
  }
  // Nothing to gain (an unquantized type): every alpha ties at 0 and alpha 0 is kept.
  const SearchCase k = make_case(4, 128);
  const AwqMatrix f{k.w.data(), k.rows, DType::kF32, nullptr};
  const AwqSearch s = awq_search({&f, 1}, k.cols, k.x.data(), k.n, k.mean_abs, {}, 21, 1);
  EXPECT_EQ(s.alpha, 0.0);
  EXPECT_EQ(s.scales, std::vector<float>(static_cast<size_t>(k.cols), 1.0f));
}

TEST(Awq, CollectorCountsEachInputOnce) {
  PAGODA_SHARED_OR_SKIP(path, "models/stories260K.gguf");
  auto file = ModelFile::open(path);
  auto model = Model::load(*file);
  auto backend = make_reference_backend();
  AwqStats stats;
  stats.max_sample_rows = 10;
  stats.sample_stride = 3;
  auto collector = make_awq_collector(*backend, *file, stats);
  std::vector<TokenId> chunk(32);
  for (size_t i = 0; i < chunk.size(); ++i) chunk[i] = static_cast<TokenId>(1 + 7 * i);
  run_imatrix_chunks(*model, *collector, {chunk, chunk}, nullptr);
  ASSERT_EQ(stats.inputs.size(), 20u);  // 5 layers x 4 inputs
  for (const auto& [key, in] : stats.inputs) {
    EXPECT_EQ(in.rows_seen, 64) << key;  // q, k and v (gate and up) count once
    EXPECT_EQ(in.sample_rows(), 10) << key;  // every third row, up to 10
  }
  EXPECT_EQ(stats.inputs.at("blk.0.ffn_down").cols, 172);
  // The first sampled row is the first token's input, row 3 the fourth token's... of chunk one.
  const AwqInput& attn = stats.inputs.at("blk.0.attn_in");
  EXPECT_EQ(attn.cols, 64);
  float abs_first = 0;
  for (int64_t c = 0; c < 64; ++c) abs_first += std::fabs(attn.sample[c]);
  EXPECT_GT(abs_first, 0.0f);
}

}  // namespace
}  // namespace pagoda
