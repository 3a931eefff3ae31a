// CPU backend matrix products against the reference backend: every weight type, shapes whose
// row lengths are not multiples of the vector width and token counts that leave partial tiles,
// at every instruction-set level this machine has (scalar always) and at 1 and 2 threads.
//
// Error measure: sum of squared differences over the expected output power
// sum_{t,r,c} (w[r,c] x[t,c])^2 (the mean of y^2 for random signs; unlike sum y^2 it does not
// blow up when one short dot product happens to cancel). Bounds, over all shapes of a type:
// float weights 1e-10 (float instead of double sums; also Q8_K, which no level has a kernel
// for and which goes through float rows); weights dotted with 8-bit activations
// 1e-4 (Q8, one scale per 32: about 3e-5 expected for Gaussian data) and 2e-4 (Q8K, one scale
// per 256: about 5e-5); FP8_E4M3 1e-10 (its codes are decoded exactly and dotted with the float
// activations, as float weights are), and so are the 2- and 3-bit i-quants (decoded to
// floats by the reference decoder). A single shape may have only one output, whose squared error is one
// draw of a chi-square variable, so each shape alone only has to stay within 30 times that
// (a wrong quant, scale or offset anywhere gives 1e-2 or more).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/kernels.h"
#include "core/dtype.h"
#include "quant/fp16.h"
#include "quant/reference.h"

namespace pagoda {
namespace {

struct TypeCase {
  DType type;
  double bound;
};

const TypeCase kTypes[] = {
    {DType::kF32, 1e-10},  {DType::kF16, 1e-10},  {DType::kBF16, 1e-10}, {DType::kQ8_0, 1e-4},
    {DType::kQ4_0, 1e-4},  {DType::kQ4_1, 1e-4},  {DType::kQ5_0, 1e-4},  {DType::kQ5_1, 1e-4},
    {DType::kQ2_K, 2e-4},  {DType::kQ3_K, 2e-4},  {DType::kQ4_K, 2e-4},  {DType::kQ5_K, 2e-4},
    {DType::kQ6_K, 2e-4},  {DType::kQ8_K, 1e-10},  // Q8_K: no kernel, rows dequantized to float
    {DType::kIQ4_NL, 1e-4}, {DType::kIQ4_XS, 1e-4},  // Q8 activations, as the legacy types
    {DType::kMXFP4, 1e-4},  // Q8 activations too (an E2M1 grid instead of IQ4's)
    {DType::kFP8_E4M3, 1e-10},  // float activations
    // Decoded by the reference decoder and dotted with the float activations (random blocks:
    // pagoda does not encode these types).
    {DType::kIQ2_XXS, 1e-10}, {DType::kIQ2_XS, 1e-10}, {DType::kIQ2_S, 1e-10},
    {DType::kIQ3_XXS, 1e-10}, {DType::kIQ3_S, 1e-10},
};

std::vector<float> normal(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// A quantized weight matrix plus its dequantized values.
struct Weights {
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // [rows, cols]
  WeightMatrix matrix;
};

// Random blocks of a type pagoda only decodes (the 2- and 3-bit i-quants, whose every bit
// pattern is a valid block): random bytes, then each block's leading F16 scale set to about
// 1/64, which puts the values near unit size.
void random_blocks(DType type, uint32_t seed, uint8_t* dst, int64_t cols) {
  const DTypeTraits& traits = dtype_traits(type);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int64_t b = 0; b < cols / traits.block_size; ++b) {
    uint8_t* block = dst + b * traits.type_size;
    for (uint32_t i = 0; i < traits.type_size; ++i) block[i] = static_cast<uint8_t>(byte(rng));
    const uint16_t d = fp32_to_fp16(std::ldexp(1.0f + static_cast<float>(byte(rng)) / 256.0f, -6));
    std::memcpy(block, &d, 2);
  }
}

Weights make_weights(DType type, int64_t rows, int64_t cols, uint32_t seed) {
  Weights w;
  const size_t row_bytes = pagoda::row_bytes(type, cols);
  // One spare byte in front so rows start at odd addresses, as tensors in a mapped file may.
  w.bytes.resize(row_bytes * rows + 1);
  std::vector<float> source = normal(static_cast<size_t>(rows * cols), seed);
  w.values.resize(source.size());
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* dst = w.bytes.data() + 1 + r * row_bytes;
    if (can_quantize(type)) {
      quantize_row(type, source.data() + r * cols, dst, cols);
    } else {
      random_blocks(type, seed * 7919u + static_cast<uint32_t>(r), dst, cols);
    }
    dequantize_row(type, dst, w.values.data() + r * cols, cols);
  }
  w.matrix = {type, rows, cols, w.bytes.data() + 1, row_bytes};
  return w;
}

struct ErrorSums {
  double err = 0, power = 0;
  double ratio() const { return power > 0 ? err / power : err; }
};

ErrorSums error_sums(const std::vector<float>& got, const std::vector<float>& want,
                     const Weights& w, const std::vector<float>& x, int64_t num_tokens) {
  const int64_t rows = w.matrix.rows, cols = w.matrix.cols;
  double err = 0, power = 0;
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      const double d = static_cast<double>(got[t * rows + r]) - want[t * rows + r];
      err += d * d;
      for (int64_t c = 0; c < cols; ++c) {
        const double p = static_cast<double>(w.values[r * cols + c]) * x[t * cols + c];
        power += p * p;
      }
    }
  }
  return {err, power};
}

double error_over_power(const std::vector<float>& got, const std::vector<float>& want,
                        const Weights& w, const std::vector<float>& x, int64_t num_tokens) {
  return error_sums(got, want, w, x, num_tokens).ratio();
}

std::vector<int64_t> cols_for(DType type) {
  const int64_t block = dtype_traits(type).block_size;
  if (block == 1) return {1, 7, 8, 17, 33, 100, 259};
  if (block == 32) return {32, 96, 160, 544};
  return {256, 512, 1280};
}

// Parameters: level, threads, and whether the weights carry an id (so that the backend packs
// the types that have a packed kernel at that level) or not (row-major tiles only).
class CpuMatmul : public testing::TestWithParam<std::tuple<CpuLevel, int, bool>> {
 protected:
  void SetUp() override {
    level_ = std::get<0>(GetParam());
    threads_ = std::get<1>(GetParam());
    packed_ = std::get<2>(GetParam());
    if (level_ > detected_cpu_level()) GTEST_SKIP() << "this CPU lacks " << cpu_level_name(level_);
    set_cpu_level_for_testing(level_);
  }
  void TearDown() override { set_cpu_level_for_testing(std::nullopt); }

  Weights weights(DType type, int64_t rows, int64_t cols, uint32_t seed) const {
    Weights w = make_weights(type, rows, cols, seed);
    if (packed_) w.matrix.id = new_weight_id();
    return w;
  }

  CpuLevel level_ = CpuLevel::kScalar;
  int threads_ = 1;
  bool packed_ = false;
};

TEST_P(CpuMatmul, EveryTypeMatchesTheReference) {
  auto ref = make_reference_backend();
  auto cpu = make_cpu_backend(threads_);
  uint32_t seed = 1;
  for (const TypeCase& tc : kTypes) {
    ErrorSums total;
    for (int64_t cols : cols_for(tc.type)) {
      for (int64_t rows : {1, 3, 5, 17, 67}) {
        const Weights w = weights(tc.type, rows, cols, ++seed);
        for (int64_t num_tokens : {1, 3, 17}) {
          SCOPED_TRACE(testing::Message() << dtype_traits(tc.type).name << " rows " << rows << " cols "
                                          << cols << " tokens " << num_tokens);
          const std::vector<float> x = normal(static_cast<size_t>(num_tokens * cols), ++seed);
          std::vector<float> want(static_cast<size_t>(num_tokens * rows));
          std::vector<float> got(want.size(), NAN);
          ref->matmul(w.matrix, x.data(), num_tokens, want.data());
          cpu->matmul(w.matrix, x.data(), num_tokens, got.data());
          const ErrorSums e = error_sums(got, want, w, x, num_tokens);
          EXPECT_LE(e.ratio(), 30 * tc.bound);
          total.err += e.err;
          total.power += e.power;
        }
      }
    }
    EXPECT_LE(total.ratio(), tc.bound) << dtype_traits(tc.type).name << " over all shapes";
  }
}

// Enough rows and tokens for several work items per thread, token groups and full tiles, with
// activations whose scale varies by orders of magnitude across blocks.
TEST_P(CpuMatmul, LargeProductsMatchTheReference) {
  auto ref = make_reference_backend();
  auto cpu = make_cpu_backend(threads_);
  for (DType type : {DType::kQ8_0, DType::kQ4_0, DType::kQ5_0, DType::kQ4_K, DType::kQ6_K, DType::kF16,
                     DType::kFP8_E4M3, DType::kIQ2_XS, DType::kIQ3_S}) {
    SCOPED_TRACE(dtype_traits(type).name);
    const int64_t rows = 300, cols = 1024, num_tokens = 70;
    const Weights w = weights(type, rows, cols, 5);
    std::vector<float> x = normal(static_cast<size_t>(num_tokens * cols), 6);
    for (size_t i = 0; i < x.size(); ++i) x[i] *= std::pow(10.0f, static_cast<float>((i / 256) % 5) - 2);
    std::vector<float> want(static_cast<size_t>(num_tokens * rows)), got(want.size(), NAN);
    ref->matmul(w.matrix, x.data(), num_tokens, want.data());
    cpu->matmul(w.matrix, x.data(), num_tokens, got.data());
    const bool float_activations = type == DType::kF16 || type == DType::kFP8_E4M3 ||
                                   type == DType::kIQ2_XS || type == DType::kIQ3_S;
    const double bound = float_activations ? 1e-10 : 2e-4;
    EXPECT_LE(error_over_power(got, want, w, x, num_tokens), bound);
  }
}

// A token's output does not depend on what else is in the batch: prefill tiles (several tokens
// per weight block, weights unpacked into panels) do the same arithmetic as decode tiles.
TEST_P(CpuMatmul, BatchedEqualsOneTokenAtATime) {
  auto cpu = make_cpu_backend(threads_);
  for (const TypeCase& tc : kTypes) {
    const int64_t cols = dtype_traits(tc.type).block_size == 1 ? 77 : 512;
    const int64_t rows = 70, num_tokens = 19;
    const Weights w = weights(tc.type, rows, cols, 13);
    const std::vector<float> x = normal(static_cast<size_t>(num_tokens * cols), 14);
    std::vector<float> batched(static_cast<size_t>(num_tokens * rows)), single(batched.size());
    cpu->matmul(w.matrix, x.data(), num_tokens, batched.data());
    for (int64_t t = 0; t < num_tokens; ++t) {
      cpu->matmul(w.matrix, x.data() + t * cols, 1, single.data() + t * rows);
    }
    EXPECT_EQ(batched, single) << dtype_traits(tc.type).name;
  }
}

// Products sharing their input in one call (Q, K, V; gate and up) give each product's own
// result bit for bit, whatever mix of types (packed ones join one job, others run alone).
TEST_P(CpuMatmul, ManyProductsEqualEachAlone) {
  auto cpu = make_cpu_backend(threads_);
  const int64_t cols = 512;
  const std::vector<std::vector<DType>> mixes = {
      {DType::kQ4_0, DType::kQ4_0, DType::kQ4_0}, {DType::kQ4_K, DType::kQ6_K}, {DType::kQ8_0, DType::kQ5_0, DType::kF16}};
  for (const std::vector<DType>& mix : mixes) {
    std::vector<Weights> ws;
    for (size_t i = 0; i < mix.size(); ++i) ws.push_back(weights(mix[i], 40 + 33 * static_cast<int64_t>(i), cols, 21 + i));
    for (int64_t num_tokens : {1, 11}) {
      SCOPED_TRACE(testing::Message() << dtype_traits(mix[0]).name << " mix, tokens " << num_tokens);
      const std::vector<float> x = normal(static_cast<size_t>(num_tokens * cols), 31);
      std::vector<std::vector<float>> alone(mix.size()), together(mix.size());
      for (size_t i = 0; i < mix.size(); ++i) {
        alone[i].resize(static_cast<size_t>(num_tokens * ws[i].matrix.rows));
        together[i].assign(alone[i].size(), NAN);
        cpu->matmul(ws[i].matrix, x.data(), num_tokens, alone[i].data());
      }
      if (mix.size() == 2) {
        cpu->matmul_many({{&ws[0].matrix, together[0].data()}, {&ws[1].matrix, together[1].data()}}, x.data(),
                         num_tokens);
      } else {
        cpu->matmul_many({{&ws[0].matrix, together[0].data()}, {&ws[1].matrix, together[1].data()},
                          {&ws[2].matrix, together[2].data()}},
                         x.data(), num_tokens);
      }
      for (size_t i = 0; i < mix.size(); ++i) EXPECT_EQ(together[i], alone[i]) << "product " << i;
    }
  }
}

TEST_P(CpuMatmul, ZeroActivationsGiveZero) {
  auto cpu = make_cpu_backend(threads_);
  for (DType type : {DType::kQ8_0, DType::kQ4_1, DType::kQ5_1, DType::kQ2_K, DType::kQ4_K}) {
    const int64_t cols = 256;
    const Weights w = weights(type, 9, cols, 3);
    std::vector<float> x(2 * cols, 0.0f), y(18, NAN);
    cpu->matmul(w.matrix, x.data(), 2, y.data());
    for (float v : y) EXPECT_EQ(v, 0.0f) << dtype_traits(type).name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Levels, CpuMatmul,
    testing::Combine(testing::Values(CpuLevel::kScalar, CpuLevel::kAvx2, CpuLevel::kAvx512),
                     testing::Values(1, 2), testing::Bool()),
    [](const testing::TestParamInfo<CpuMatmul::ParamType>& info) {
      return std::string(cpu_level_name(std::get<0>(info.param))) + "_" +
             std::to_string(std::get<1>(info.param)) + "threads" +
             (std::get<2>(info.param) ? "_packed" : "");
    });

// Every level computes the same integer sums, so levels differ only by float summation order.
// FP8_E4M3 runs on tiles of its own at every level (float activations), and packed at the
// AVX-512 level, rather than falling back to one dequantized row at a time.
TEST(CpuKernels, FP8HasItsOwnTiles) {
  const int type = cpu::dtype_index(DType::kFP8_E4M3);
  ASSERT_GE(type, 0);
  for (const CpuLevel level : {CpuLevel::kScalar, CpuLevel::kAvx2, CpuLevel::kAvx512}) {
    const cpu::Kernels& k = cpu::cpu_kernels(level);
    EXPECT_NE(k.matmul[type].tile, nullptr) << cpu_level_name(level);
    EXPECT_EQ(k.matmul[type].act, cpu::ActFormat::kF32) << cpu_level_name(level);
    if (level == CpuLevel::kAvx512 && detected_cpu_level() >= CpuLevel::kAvx512) {
      EXPECT_NE(k.packed[type].tile, nullptr);
    }
  }
}

TEST(CpuKernels, LevelsAgreeWithScalar) {
  for (const TypeCase& tc : kTypes) {
    const int64_t cols = dtype_traits(tc.type).block_size == 1 ? 45 : 512;
    const int64_t rows = 6, num_tokens = 5;
    Weights w = make_weights(tc.type, rows, cols, 9);
    w.matrix.id = new_weight_id();  // packed where a level has a packed kernel
    const std::vector<float> x = normal(static_cast<size_t>(num_tokens * cols), 10);
    std::vector<float> scalar(static_cast<size_t>(num_tokens * rows));
    set_cpu_level_for_testing(CpuLevel::kScalar);
    make_cpu_backend(1)->matmul(w.matrix, x.data(), num_tokens, scalar.data());
    for (CpuLevel level : {CpuLevel::kAvx2, CpuLevel::kAvx512}) {
      if (level > detected_cpu_level()) continue;
      set_cpu_level_for_testing(level);
      std::vector<float> got(scalar.size());
      make_cpu_backend(1)->matmul(w.matrix, x.data(), num_tokens, got.data());
      for (int64_t t = 0; t < num_tokens; ++t) {
        for (int64_t r = 0; r < rows; ++r) {
          // Float rounding of block sums that may cancel: relative to the sum of magnitudes.
          double magnitude = 0;
          for (int64_t c = 0; c < cols; ++c) magnitude += std::fabs(w.values[r * cols + c] * x[t * cols + c]);
          EXPECT_NEAR(got[t * rows + r], scalar[t * rows + r], 1e-6 * magnitude)
              << dtype_traits(tc.type).name << " " << cpu_level_name(level) << " token " << t << " row " << r;
        }
      }
    }
  }
  set_cpu_level_for_testing(std::nullopt);
}

// The activation quantizers of every level produce the same bytes.
TEST(CpuKernels, ActivationQuantizersAreBitIdentical) {
  const int64_t cols = 1024;
  std::vector<float> x = normal(cols, 12, 3.0f);
  x[5] = 0.0f;
  std::fill(x.begin() + 256, x.begin() + 512, 0.0f);  // an all-zero super-block
  x[700] = -1e-30f;
  for (cpu::ActFormat format : {cpu::ActFormat::kQ8, cpu::ActFormat::kQ8K}) {
    const int64_t bytes = cpu::act_row_bytes(format, cols);
    std::vector<uint8_t> want(bytes, 0), got(bytes, 0);
    const cpu::Kernels& scalar = cpu::cpu_kernels(CpuLevel::kScalar);
    (format == cpu::ActFormat::kQ8 ? scalar.quantize_q8 : scalar.quantize_q8k)(x.data(), cols, want.data());
    for (CpuLevel level : {CpuLevel::kAvx2, CpuLevel::kAvx512}) {
      if (level > detected_cpu_level()) continue;
      const cpu::Kernels& k = cpu::cpu_kernels(level);
      std::fill(got.begin(), got.end(), 0);
      (format == cpu::ActFormat::kQ8 ? k.quantize_q8 : k.quantize_q8k)(x.data(), cols, got.data());
      EXPECT_EQ(got, want) << cpu_level_name(level);
    }
    // The quants decode back to the input within half a step, plus what rounding the step to
    // F16 (kQ8, relative 2^-11) moves the largest quant, 127 steps out.
    const int block = format == cpu::ActFormat::kQ8 ? cpu::kQ8Block : cpu::kQ8KBlock;
    const float* d = cpu::act_d(want.data(), cols);
    for (int64_t i = 0; i < cols; ++i) {
      const float step = d[i / block];
      EXPECT_NEAR(cpu::act_qs(want.data())[i] * step, x[i], (0.501f + 127.0f / 2048) * step + 1e-30f) << i;
    }
  }
}

// The AVX-512 level's exponential ops (x86_vector512.inc) give the AVX2 level's bits, and
// scale_max gives the scalar level's at every level: lengths around the vector widths, inputs
// past exp's clamps and underflow.
TEST(CpuKernels, ExponentialAndScaleMaxOpsMatchBitForBit) {
  if (detected_cpu_level() < CpuLevel::kAvx2) GTEST_SKIP() << "this CPU lacks avx2";
  const cpu::Kernels& scalar = cpu::cpu_kernels(CpuLevel::kScalar);
  const cpu::Kernels& avx2 = cpu::cpu_kernels(CpuLevel::kAvx2);
  for (int64_t trial = 0; trial < 13 * 20; ++trial) {
    const int64_t n =
        std::array<int64_t, 13>{1, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 100, 257}[trial % 13];
    std::vector<float> x = normal(n, static_cast<uint32_t>(trial), 2.0f), up = normal(n, 99, 1.0f);
    x[0] = -120.0f;                         // below the underflow bound
    if (trial < 13 && n > 3) x[3] = 95.0f;  // above the clamp (first round only: it swamps sums)
    for (CpuLevel level : {CpuLevel::kAvx2, CpuLevel::kAvx512}) {
      if (level > detected_cpu_level()) continue;
      const cpu::Kernels& k = cpu::cpu_kernels(level);
      std::vector<float> want = x, got = x;
      const float want_sum = avx2.exp_shift_sum(want.data(), n, 3.0f);
      const float got_sum = k.exp_shift_sum(got.data(), n, 3.0f);
      EXPECT_EQ(std::memcmp(&got_sum, &want_sum, 4), 0) << cpu_level_name(level) << " n " << n;
      EXPECT_EQ(std::memcmp(got.data(), want.data(), n * 4), 0)
          << cpu_level_name(level) << " n " << n;
      avx2.silu_mul(x.data(), up.data(), n, want.data());
      k.silu_mul(x.data(), up.data(), n, got.data());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), n * 4), 0)
          << cpu_level_name(level) << " n " << n;
      want = x;
      got = x;
      const float want_top = scalar.scale_max(want.data(), 0.125f, n);
      const float got_top = k.scale_max(got.data(), 0.125f, n);
      EXPECT_EQ(got_top, want_top) << cpu_level_name(level) << " n " << n;
      EXPECT_EQ(got, want) << cpu_level_name(level) << " n " << n;
    }
  }
}

TEST(CpuKernels, ForcedLevelIsClampedAndNamed) {
  set_cpu_level_for_testing(CpuLevel::kAvx512);
  EXPECT_LE(active_cpu_level(), detected_cpu_level());
  set_cpu_level_for_testing(CpuLevel::kScalar);
  EXPECT_EQ(active_cpu_level(), CpuLevel::kScalar);
  set_cpu_level_for_testing(std::nullopt);
  EXPECT_EQ(cpu_level_from_name("avx2"), CpuLevel::kAvx2);
  EXPECT_EQ(cpu_level_from_name("sse9"), std::nullopt);
}

}  // namespace
}  // namespace pagoda
