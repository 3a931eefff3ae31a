// Backend::add_low_rank (LoRA terms): the CPU backend's kernels at every instruction-set level
// and at 1 and 2 threads, and the reference backend's default, against sums in double; a row's
// result the same, bit for bit, alone as mixed with other rows and adapters; and a matrix's
// packed copy dropped by drop_weights.
//
// Tolerance: 1e-5 relative to the sum of the products' magnitudes (float sums of up to 300
// terms where the expected values are summed in double; F16 weights are exact in float).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_features.h"
#include "core/dtype.h"
#include "quant/fp16.h"

namespace pagoda {
namespace {

std::vector<float> normal(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// A rows x cols matrix in F32 or F16 (values rounded to F16 first, so both hold the same).
struct Matrix {
  Matrix(int64_t rows, int64_t cols, DType type, uint32_t seed) : values(normal(rows * cols, seed)) {
    for (float& v : values) v = fp16_to_fp32(fp32_to_fp16(v));
    if (type == DType::kF16) {
      halves.resize(values.size());
      for (size_t i = 0; i < values.size(); ++i) halves[i] = fp32_to_fp16(values[i]);
    }
    w.type = type;
    w.rows = rows;
    w.cols = cols;
    w.data = type == DType::kF16 ? reinterpret_cast<const uint8_t*>(halves.data())
                                 : reinterpret_cast<const uint8_t*>(values.data());
    w.row_bytes = static_cast<uint64_t>(cols) * (type == DType::kF16 ? 2 : 4);
    w.id = new_weight_id();
  }
  std::vector<float> values;
  std::vector<uint16_t> halves;
  WeightMatrix w;
};

// An adapter's pair for a product of `cols` inputs and `rows` outputs.
struct Pair {
  Pair(int64_t rank, int64_t cols, int64_t rows, DType type, uint32_t seed, float scale)
      : a(rank, cols, type, seed), b(rows, rank, type, seed + 1), scale(scale) {}
  Matrix a, b;
  float scale;
};

struct Case {
  int64_t tokens, cols, rows, rank;
};

class CpuLoraProducts : public testing::TestWithParam<std::tuple<CpuLevel, int>> {
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

// y0[t] + p.scale * B (A x[t]) in double, and the sum of the magnitudes of its products.
void expect_row(const Pair& p, const float* x, const float* y0, const float* got) {
  const int64_t rank = p.a.w.rows, cols = p.a.w.cols, rows = p.b.w.rows;
  std::vector<double> u(static_cast<size_t>(rank)), u_abs(static_cast<size_t>(rank));
  for (int64_t j = 0; j < rank; ++j) {
    for (int64_t c = 0; c < cols; ++c) {
      u[j] += double{p.a.values[j * cols + c]} * x[c];
      u_abs[j] += std::fabs(double{p.a.values[j * cols + c]} * x[c]);
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    double want = 0, bound = std::fabs(y0[r]);
    for (int64_t j = 0; j < rank; ++j) {
      want += double{p.b.values[r * rank + j]} * u[j];
      bound += std::fabs(double{p.b.values[r * rank + j]}) * u_abs[j] * std::fabs(p.scale);
    }
    ASSERT_NEAR(got[r], y0[r] + p.scale * want, 1e-5 * bound) << "output " << r;
  }
}

TEST_P(CpuLoraProducts, MixedRowsMatchDoubleSumsAndEachRowAlone) {
  // Ranks below, at and past a group of 16; columns and rows with tails; the last case is
  // large enough to be spread over the threads.
  for (const Case& c : {Case{7, 40, 24, 4}, Case{9, 67, 100, 16}, Case{13, 300, 70, 20},
                        Case{64, 300, 300, 16}}) {
    for (DType type : {DType::kF16, DType::kF32}) {
      SCOPED_TRACE(testing::Message() << c.tokens << " tokens " << c.cols << " cols " << c.rows
                                      << " rows rank " << c.rank << " " << dtype_traits(type).name);
      // Adapters 1 and 2 on product y1 (rows of each, some of neither); adapter 3 on y2.
      const Pair p1(c.rank, c.cols, c.rows, type, 10, 0.5f), p2(c.rank, c.cols, c.rows, type, 20, 2.0f);
      const Pair p3(c.rank, c.cols, c.rows + 5, type, 30, -1.0f);
      std::vector<int32_t> rows1, rows2, rows3;
      for (int32_t t = 0; t < c.tokens; ++t) {
        if (t % 3 == 0) rows1.push_back(t);
        if (t % 3 == 1) rows2.push_back(t);
        if (t % 2 == 0) rows3.push_back(t);
      }
      const std::vector<float> x = normal(c.tokens * c.cols, 1);
      const std::vector<float> y1_0 = normal(c.tokens * c.rows, 2), y2_0 = normal(c.tokens * (c.rows + 5), 3);
      for (Backend* be : {cpu_.get(), ref_.get()}) {
        std::vector<float> y1 = y1_0, y2 = y2_0;
        const Backend::LowRankTerm terms[] = {{&p1.a.w, &p1.b.w, p1.scale, y1.data(), rows1},
                                              {&p2.a.w, &p2.b.w, p2.scale, y1.data(), rows2},
                                              {&p3.a.w, &p3.b.w, p3.scale, y2.data(), rows3}};
        be->add_low_rank(terms, x.data(), c.tokens);
        for (int32_t t = 0; t < c.tokens; ++t) {
          SCOPED_TRACE(testing::Message() << be->name() << " token " << t);
          const float* xt = x.data() + t * c.cols;
          const int64_t o1 = t * c.rows, o2 = t * (c.rows + 5);
          if (t % 3 == 2) {  // no adapter: y1's row untouched
            for (int64_t r = 0; r < c.rows; ++r) ASSERT_EQ(y1[o1 + r], y1_0[o1 + r]);
          } else {
            expect_row(t % 3 == 0 ? p1 : p2, xt, y1_0.data() + o1, y1.data() + o1);
          }
          if (t % 2 == 0) expect_row(p3, xt, y2_0.data() + o2, y2.data() + o2);
          if (be != cpu_.get()) continue;
          // The row alone: the same bits.
          std::vector<float> alone(y1_0.begin() + o1, y1_0.begin() + o1 + c.rows);
          const int32_t zero = 0;
          const Pair& p = t % 3 == 0 ? p1 : p2;
          const Backend::LowRankTerm one{&p.a.w, &p.b.w, p.scale, alone.data(), {&zero, 1}};
          if (t % 3 != 2) {
            be->add_low_rank({&one, 1}, xt, 1);
            for (int64_t r = 0; r < c.rows; ++r) ASSERT_EQ(alone[r], y1[o1 + r]) << "output " << r;
          }
        }
      }
    }
  }
}

// The packed copies are the backend's until drop_weights: a matrix's id dropped, its bytes are
// read again (what LoraBackend::set_adapter relies on to free an unloaded adapter's copies).
TEST_P(CpuLoraProducts, DroppedMatricesAreRepacked) {
  Pair p(16, 64, 32, DType::kF16, 5, 1.0f);
  const std::vector<float> x = normal(64, 6);
  const int32_t zero = 0;
  auto run = [&] {
    std::vector<float> y(32, 0.0f);
    const Backend::LowRankTerm term{&p.a.w, &p.b.w, p.scale, y.data(), {&zero, 1}};
    cpu_->add_low_rank({&term, 1}, x.data(), 1);
    return y;
  };
  const std::vector<float> first = run();
  for (uint16_t& h : p.b.halves) h ^= 0x8000;  // B negated, under the same id
  EXPECT_EQ(run(), first) << "the copy is kept while the id names it";
  const uint64_t ids[] = {p.b.w.id};
  cpu_->drop_weights(ids);
  const std::vector<float> again = run();
  for (size_t i = 0; i < again.size(); ++i) ASSERT_EQ(again[i], -first[i]) << i;
}

INSTANTIATE_TEST_SUITE_P(
    Levels, CpuLoraProducts,
    testing::Combine(testing::Values(CpuLevel::kScalar, CpuLevel::kAvx2, CpuLevel::kAvx512),
                     testing::Values(1, 2)),
    [](const testing::TestParamInfo<CpuLoraProducts::ParamType>& info) {
      return std::string(cpu_level_name(std::get<0>(info.param))) + "_" +
             std::to_string(std::get<1>(info.param)) + "threads";
    });

}  // namespace
}  // namespace pagoda
