// CPU backend ops other than matmul (test_cpu_matmul.cc) against the reference backend, at every
// instruction-set level this machine has and at 1 and 2 threads; and paged attention through a
// shuffled block table against a contiguous one.
//
// Tolerances (absolute, on values of order 1): attention 2e-5 and rms_norm 1e-5 relative (float
// sums where the reference uses double); rope 2e-6 (angles reduced in double, sin / cos in
// float); silu / gelu 1e-5 relative (vectorized exp / tanh); add, scale, add_bias, write_kv and
// embed are exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_features.h"
#include "core/dtype.h"
#include "core/error.h"
#include "quant/reference.h"

namespace pagoda {
namespace {

std::vector<float> normal(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, float abs_tol,
                  float rel_tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], abs_tol + rel_tol * std::fabs(want[i])) << "at " << i;
  }
}

class CpuOps : public testing::TestWithParam<std::tuple<CpuLevel, int>> {
 protected:
  void SetUp() override {
    const CpuLevel level = std::get<0>(GetParam());
    if (level > detected_cpu_level()) GTEST_SKIP() << "this CPU lacks " << cpu_level_name(level);
    set_cpu_level_for_testing(level);
    cpu_ = make_cpu_backend(std::get<1>(GetParam()));
  }
  void TearDown() override { set_cpu_level_for_testing(std::nullopt); }

  std::unique_ptr<Backend> ref_ = make_reference_backend();
  std::unique_ptr<Backend> cpu_;
};

TEST_P(CpuOps, RmsNorm) {
  for (int64_t dim : {1, 7, 640, 1001}) {
    for (int64_t rows : {1, 3, 200}) {
      SCOPED_TRACE(testing::Message() << "dim " << dim << " rows " << rows);
      const std::vector<float> x = normal(rows * dim, 1, 3.0f), weight = normal(dim, 2);
      std::vector<float> want(x.size()), got(x.size());
      ref_->rms_norm(x.data(), weight.data(), rows, dim, 1e-6f, want.data());
      cpu_->rms_norm(x.data(), weight.data(), rows, dim, 1e-6f, got.data());
      expect_close(got, want, 1e-6f, 1e-5f);
      std::vector<float> in_place = x;  // y may alias x
      cpu_->rms_norm(in_place.data(), weight.data(), rows, dim, 1e-6f, in_place.data());
      expect_close(in_place, want, 1e-6f, 1e-5f);
    }
  }
}

TEST_P(CpuOps, Rope) {
  const std::vector<int32_t> positions = {0, 1, 7, 1000, 30000, 5, 131071};
  const std::vector<float> factors = {1.0f, 2.0f, 4.0f, 8.0f, 1.5f, 3.0f, 1.0f, 2.0f};
  for (bool split_half : {false, true}) {
    for (int64_t head_dim : {8, 64, 256}) {
      for (int32_t rotary_dim : {static_cast<int32_t>(head_dim), static_cast<int32_t>(head_dim / 2)}) {
        for (int variant = 0; variant < 3; ++variant) {
          RopeParams p;
          p.rotary_dim = rotary_dim;
          p.split_half = split_half;
          p.theta = variant == 0 ? 10000.0f : 1e6f;
          p.position_scale = variant == 1 ? 0.125f : 1.0f;
          p.freq_factors = variant == 2 && rotary_dim / 2 <= 8 ? factors.data() : nullptr;
          SCOPED_TRACE(testing::Message() << "split " << split_half << " head " << head_dim
                                          << " rotary " << rotary_dim << " variant " << variant);
          const int64_t num_tokens = static_cast<int64_t>(positions.size()), heads = 3;
          std::vector<float> want = normal(num_tokens * heads * head_dim, 3), got = want;
          ref_->rope(want.data(), positions.data(), num_tokens, heads, head_dim, p);
          cpu_->rope(got.data(), positions.data(), num_tokens, heads, head_dim, p);
          expect_close(got, want, 2e-6f, 2e-6f);
        }
      }
    }
  }
}

TEST_P(CpuOps, Activations) {
  for (int64_t n : {1, 7, 8, 100, 70001}) {
    SCOPED_TRACE(testing::Message() << "n " << n);
    std::vector<float> gate = normal(n, 4, 4.0f);
    const std::vector<float> up = normal(n, 5);
    const float extremes[] = {-100.0f, 100.0f, -1e-3f, 1e-3f, 0.0f, -20.0f, 20.0f, -88.5f};
    for (size_t i = 0; i < std::size(extremes) && i < gate.size(); ++i) gate[i] = extremes[i];
    std::vector<float> want(n), got(n);
    ref_->silu_mul(gate.data(), up.data(), n, want.data());
    cpu_->silu_mul(gate.data(), up.data(), n, got.data());
    expect_close(got, want, 1e-6f, 1e-5f);
    ref_->gelu_mul(gate.data(), up.data(), n, want.data());
    cpu_->gelu_mul(gate.data(), up.data(), n, got.data());
    expect_close(got, want, 1e-6f, 1e-5f);
    got = gate;  // out may alias gate, as the models call it
    cpu_->gelu_mul(got.data(), up.data(), n, got.data());
    expect_close(got, want, 1e-6f, 1e-5f);
  }
}

TEST_P(CpuOps, AddScaleBiasAreExact) {
  for (int64_t n : {1, 9, 640, 70001}) {
    const std::vector<float> x = normal(n, 6), y = normal(n, 7);
    std::vector<float> want = x, got = x;
    ref_->add(want.data(), y.data(), n);
    cpu_->add(got.data(), y.data(), n);
    EXPECT_EQ(got, want) << "add " << n;
    ref_->scale(want.data(), 0.3f, n);
    cpu_->scale(got.data(), 0.3f, n);
    EXPECT_EQ(got, want) << "scale " << n;
  }
  const int64_t rows = 5, dim = 13;
  const std::vector<float> bias = normal(dim, 8);
  std::vector<float> want = normal(rows * dim, 9), got = want;
  ref_->add_bias(want.data(), bias.data(), rows, dim);
  cpu_->add_bias(got.data(), bias.data(), rows, dim);
  EXPECT_EQ(got, want);
}

TEST_P(CpuOps, EmbedEveryType) {
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ5_0,
                     DType::kQ4_K, DType::kQ6_K}) {
    const int64_t rows = 11, cols = 256;
    const size_t row_bytes = pagoda::row_bytes(type, cols);
    std::vector<uint8_t> table(row_bytes * rows);
    const std::vector<float> values = normal(rows * cols, 10);
    for (int64_t r = 0; r < rows; ++r) quantize_row(type, values.data() + r * cols, table.data() + r * row_bytes, cols);
    const WeightMatrix w{type, rows, cols, table.data(), row_bytes};
    const std::vector<int32_t> ids = {3, 0, 10, 3};
    std::vector<float> want(ids.size() * cols), got(want.size());
    ref_->embed(w, ids.data(), static_cast<int64_t>(ids.size()), want.data());
    cpu_->embed(w, ids.data(), static_cast<int64_t>(ids.size()), got.data());
    EXPECT_EQ(got, want) << dtype_traits(type).name;
    const int32_t bad = 11;
    EXPECT_THROW(cpu_->embed(w, &bad, 1, got.data()), Error);
  }
}

// Sequences with cached history and new tokens, K/V in a block pool. The block table is either
// contiguous (sequence s owns a run of blocks) or a shuffled assignment of the same blocks.
struct PagedAttention {
  AttentionParams params;
  int32_t block_size = 4;
  std::vector<int32_t> context;     // per sequence: tokens in the cache after this step
  std::vector<int32_t> new_tokens;  // per sequence: how many of them are this step's queries
  int32_t max_blocks = 0;
  KvType kv_type = KvType::kF32;

  std::vector<float> run(Backend& backend, bool shuffled, uint32_t seed) const {
    const auto num_seqs = static_cast<int32_t>(context.size());
    const int64_t kv_dim = int64_t{params.num_kv_heads} * params.head_dim;
    const int32_t num_blocks = num_seqs * max_blocks;
    std::vector<int32_t> order(num_blocks);
    std::iota(order.begin(), order.end(), 0);
    if (shuffled) std::shuffle(order.begin(), order.end(), std::mt19937(seed));
    std::vector<int32_t> table(order.begin(), order.end());  // [num_seqs, max_blocks]

    // The whole history goes into the cache through write_kv; then the new tokens attend.
    // All ones where nothing was written: NaN in F32 and F16 caches, and codes and scales
    // that would show in a quantized one.
    const size_t cache_bytes = static_cast<size_t>(int64_t{num_blocks} * block_size * params.num_kv_heads *
                                                   kv_head_bytes(kv_type, params.head_dim));
    std::vector<uint8_t> k_cache(cache_bytes, 0xff), v_cache(cache_bytes, 0xff);
    const KvLayer cache{k_cache.data(), v_cache.data(), kv_type};
    std::vector<int32_t> positions, query_start = {0};
    std::vector<int64_t> slots;
    std::vector<int32_t> q_positions, q_start = {0};
    for (int32_t s = 0; s < num_seqs; ++s) {
      for (int32_t j = 0; j < context[s]; ++j) {
        positions.push_back(j);
        slots.push_back(int64_t{table[s * max_blocks + j / block_size]} * block_size + j % block_size);
        if (j >= context[s] - new_tokens[s]) q_positions.push_back(j);
      }
      query_start.push_back(static_cast<int32_t>(positions.size()));
      q_start.push_back(static_cast<int32_t>(q_positions.size()));
    }
    const auto num_history = static_cast<int32_t>(positions.size());
    // K/V depend on (sequence, position) only, so every table layout stores the same values.
    const std::vector<float> k = normal(num_history * kv_dim, 20), v = normal(num_history * kv_dim, 21);
    AttentionBatch write{num_history, positions.data(), slots.data(), num_seqs, query_start.data(),
                         table.data(), max_blocks, block_size};
    backend.write_kv(k.data(), v.data(), write, params, cache);

    const auto num_queries = static_cast<int32_t>(q_positions.size());
    const std::vector<float> q = normal(num_queries * int64_t{params.num_heads} * params.head_dim, 22);
    AttentionBatch attend{num_queries, q_positions.data(), nullptr, num_seqs, q_start.data(),
                          table.data(), max_blocks, block_size};
    std::vector<float> out(q.size(), NAN);
    backend.attention(q.data(), cache, attend, params, out.data());
    return out;
  }
};

std::vector<PagedAttention> attention_cases() {
  std::vector<PagedAttention> cases;
  struct Heads {
    int32_t heads, kv_heads, dim;
  };
  for (Heads h : {Heads{4, 1, 256}, Heads{4, 2, 20}, Heads{2, 2, 7}, Heads{8, 8, 64}, Heads{8, 1, 33}}) {
    for (int32_t window : {0, 5}) {
      PagedAttention c;
      c.params = {h.heads, h.kv_heads, h.dim, 1.0f / std::sqrt(static_cast<float>(h.dim)), window};
      c.context = {1, 19, 17, 40};
      c.new_tokens = {1, 3, 17, 1};  // a first token, a chunk, a whole prompt, a decode step
      c.max_blocks = 10;
      cases.push_back(c);
    }
  }
  return cases;
}

TEST_P(CpuOps, PagedAttentionMatchesTheReference) {
  for (const PagedAttention& c : attention_cases()) {
    SCOPED_TRACE(testing::Message() << "heads " << c.params.num_heads << "/" << c.params.num_kv_heads
                                    << " dim " << c.params.head_dim << " window " << c.params.window);
    const std::vector<float> want = c.run(*ref_, false, 0);
    expect_close(c.run(*cpu_, false, 0), want, 2e-5f, 2e-5f);
    expect_close(c.run(*cpu_, true, 31), want, 2e-5f, 2e-5f);
  }
}

// Attention sinks (gpt-oss): a per-head logit in each row's softmax denominator. Sinks from far
// below the scores (no effect) to far above (the row's output shrinks towards zero), so the CPU
// backend's shift by max(top score, sink) is exercised on both sides.
TEST_P(CpuOps, PagedAttentionWithSinksMatchesTheReference) {
  for (PagedAttention c : attention_cases()) {
    SCOPED_TRACE(testing::Message() << "heads " << c.params.num_heads << "/" << c.params.num_kv_heads
                                    << " dim " << c.params.head_dim << " window " << c.params.window);
    const std::vector<float> plain = c.run(*ref_, false, 0);
    std::vector<float> sinks(static_cast<size_t>(c.params.num_heads));
    for (size_t h = 0; h < sinks.size(); ++h) sinks[h] = -30.0f + 12.0f * static_cast<float>(h % 5);
    c.params.sinks = sinks.data();
    const std::vector<float> want = c.run(*ref_, false, 0);
    expect_close(c.run(*cpu_, false, 0), want, 2e-5f, 2e-5f);
    expect_close(c.run(*cpu_, true, 31), want, 2e-5f, 2e-5f);
    // Head 0's sink (-30) leaves it as it was; head 3's (+6) takes weight from every row.
    const int64_t dim = c.params.head_dim, heads = c.params.num_heads;
    double moved = 0;
    for (size_t t = 0; t < want.size() / (heads * dim); ++t) {
      for (int64_t d = 0; d < dim; ++d) {
        EXPECT_NEAR(want[t * heads * dim + d], plain[t * heads * dim + d], 1e-5);
        if (heads > 3) moved += std::fabs(want[(t * heads + 3) * dim + d] - plain[(t * heads + 3) * dim + d]);
      }
    }
    if (heads > 3) {
      EXPECT_GT(moved, 0.1);
    }
  }
}

// One cached token and a sink: out = v * e^s / (e^s + e^sink), s the scaled score.
TEST_P(CpuOps, AttentionSinkWeighsAgainstTheOnlyKey) {
  PagedAttention c;
  const float sink = 0.7f;
  c.params = {1, 1, 4, 0.5f, 0};
  c.params.sinks = &sink;
  c.context = {1};
  c.new_tokens = {1};
  c.max_blocks = 1;
  const std::vector<float> k = normal(4, 20), v = normal(4, 21), q = normal(4, 22);
  double s = 0;
  for (int d = 0; d < 4; ++d) s += 0.5 * q[d] * k[d];
  const double w = std::exp(s) / (std::exp(s) + std::exp(double{sink}));
  for (Backend* be : {ref_.get(), cpu_.get()}) {
    const std::vector<float> out = c.run(*be, false, 0);
    for (int d = 0; d < 4; ++d) EXPECT_NEAR(out[d], w * v[d], 1e-5) << be->name();
  }
}

// An F16 cache: the same conversions (round to nearest even) in both backends, so the fast one
// matches the reference as closely as with F32; and the result is near the F32 cache's.
TEST_P(CpuOps, PagedAttentionWithF16Cache) {
  for (PagedAttention c : attention_cases()) {
    const std::vector<float> f32 = c.run(*ref_, false, 0);
    c.kv_type = KvType::kF16;
    const std::vector<float> want = c.run(*ref_, false, 0);
    expect_close(c.run(*cpu_, true, 7), want, 2e-5f, 2e-5f);
    expect_close(want, f32, 2e-3f, 2e-3f);
  }
}

// Q8_0 and FP8 caches: both backends store the same codes (backend/kv_format.cc), so the fast
// one matches the reference as closely as with F32; and the result stays near the F32 cache's,
// within twice the worst |error| / (1 + |value|) measured over these cases: Q8_0 1.5e-2, FP8
// 7.6e-2 (3 mantissa bits: up to 6% per value). Random normal K/V, so no outliers to hide behind.
TEST_P(CpuOps, PagedAttentionWithQuantizedCaches) {
  for (KvType type : {KvType::kQ8_0, KvType::kFp8}) {
    for (PagedAttention c : attention_cases()) {
      SCOPED_TRACE(testing::Message() << kv_type_info(type).name << " heads " << c.params.num_heads << "/"
                                      << c.params.num_kv_heads << " dim " << c.params.head_dim);
      const std::vector<float> f32 = c.run(*ref_, false, 0);
      c.kv_type = type;
      const std::vector<float> want = c.run(*ref_, false, 0);
      expect_close(c.run(*cpu_, true, 7), want, 2e-5f, 2e-5f);
      const float bound = type == KvType::kQ8_0 ? 3e-2f : 1.5e-1f;
      expect_close(want, f32, bound, bound);
    }
  }
}

TEST_P(CpuOps, ShuffledBlockTableEqualsContiguous) {
  for (const PagedAttention& c : attention_cases()) {
    const std::vector<float> contiguous = c.run(*cpu_, false, 0);
    for (uint32_t seed : {1u, 2u, 3u}) {
      EXPECT_EQ(c.run(*cpu_, true, seed), contiguous) << "seed " << seed;
    }
  }
}

// Many sequences decoding one token each: enough of them that each item takes all KV heads of
// its sequence (attention.cc, make_items), shuffled blocks, F32 and F16 caches.
TEST_P(CpuOps, ManyDecodingSequences) {
  for (KvType kv_type : {KvType::kF32, KvType::kF16, KvType::kQ8_0, KvType::kFp8}) {
    for (AttentionParams params : {AttentionParams{8, 2, 64, 0.125f, 0},
                                   AttentionParams{6, 3, 20, 0.2f, 9}}) {
      PagedAttention c;
      c.params = params;
      c.block_size = 16;
      c.kv_type = kv_type;
      for (int32_t s = 0; s < 12; ++s) {
        c.context.push_back(1 + 13 * s);
        c.new_tokens.push_back(1);
      }
      c.max_blocks = 10;
      expect_close(c.run(*cpu_, true, 3), c.run(*ref_, false, 0), 2e-5f, 2e-5f);
    }
  }
}

// Long contexts, so the threaded path runs: several tokens, and a single decode token whose
// query heads are split between threads.
TEST_P(CpuOps, LongContextAttention) {
  for (int32_t new_tokens : {9, 1}) {
    PagedAttention c;
    c.params = {4, 1, 256, 0.0625f, 0};
    c.block_size = 16;
    c.context = {700};
    c.new_tokens = {new_tokens};
    c.max_blocks = 44;
    expect_close(c.run(*cpu_, true, 5), c.run(*ref_, false, 0), 2e-5f, 2e-5f);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Levels, CpuOps,
    testing::Combine(testing::Values(CpuLevel::kScalar, CpuLevel::kAvx2, CpuLevel::kAvx512),
                     testing::Values(1, 2)),
    [](const testing::TestParamInfo<CpuOps::ParamType>& info) {
      return std::string(cpu_level_name(std::get<0>(info.param))) + "_" +
             std::to_string(std::get<1>(info.param)) + "threads";
    });

}  // namespace
}  // namespace pagoda
