// The CUDA decode products' building blocks (backend/cuda/cuda_q8.cuh) run on the host: the
// same functions the device compiles, with __dp4a emulated. They need no GPU and no CUDA build.
// Activations and the legacy types' unit products are compared bit for bit with the CPU
// backend's scalar kernels (the same q8 scales, the same per-block formula); the K-quants, whose
// CPU path takes 256-value Q8_K activations instead, with the reference dot product within the
// bound activation rounding allows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cuda/cuda_q8.cuh"
#include "core/dtype.h"
#include "quant/reference.h"

namespace pagoda {
namespace {

using cuda::BlockQ8_1;

// Values of varied magnitude per block, some blocks all zero, some with one large outlier.
std::vector<float> activations(int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(cols));
  for (int64_t b = 0; b < cols / 32; ++b) {
    const float scale = std::exp2(static_cast<float>(static_cast<int>(rng() % 12)) - 6.0f);
    for (int i = 0; i < 32; ++i) {
      x[static_cast<size_t>(b * 32 + i)] = b % 7 == 3 ? 0.0f : scale * normal(rng);
    }
    if (b % 5 == 1) x[static_cast<size_t>(b * 32 + rng() % 32)] = -40.0f * scale;
  }
  return x;
}

std::vector<BlockQ8_1> quantize_q8_1(const std::vector<float>& x) {
  std::vector<BlockQ8_1> out(x.size() / 32);
  for (size_t b = 0; b < out.size(); ++b) cuda::quantize_q8_1_block(x.data() + 32 * b, &out[b]);
  return out;
}

std::vector<uint8_t> quantized_rows(DType type, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<float> w(static_cast<size_t>(cols));
  const size_t bytes = row_bytes(type, cols);
  std::vector<uint8_t> out(bytes * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : w) v = normal(rng) + (r % 2 ? 0.02f : 0.0f);  // odd rows off centre (mins)
    quantize_row(type, w.data(), out.data() + bytes * static_cast<size_t>(r), cols);
  }
  return out;
}

float dot_row(DType type, const uint8_t* row, int64_t cols, const BlockQ8_1* x) {
  switch (type) {
    case DType::kQ4_0: return cuda::dot_row_serial<DType::kQ4_0>(row, cols, x);
    case DType::kQ4_1: return cuda::dot_row_serial<DType::kQ4_1>(row, cols, x);
    case DType::kQ5_0: return cuda::dot_row_serial<DType::kQ5_0>(row, cols, x);
    case DType::kQ5_1: return cuda::dot_row_serial<DType::kQ5_1>(row, cols, x);
    case DType::kQ8_0: return cuda::dot_row_serial<DType::kQ8_0>(row, cols, x);
    case DType::kQ4_K: return cuda::dot_row_serial<DType::kQ4_K>(row, cols, x);
    case DType::kQ5_K: return cuda::dot_row_serial<DType::kQ5_K>(row, cols, x);
    case DType::kQ6_K: return cuda::dot_row_serial<DType::kQ6_K>(row, cols, x);
    default: ADD_FAILURE() << "no q8_1 dot for " << std::string(dtype_traits(type).name); return 0.0f;
  }
}

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

TEST(CudaQ8, Dp4aAndByteSubtraction) {
  // bytes (1, -2, 127, -128) . (3, 4, -1, -1) = 3 - 8 - 127 + 128 = -4
  const int a = static_cast<int>(0x807FFE01u), b = static_cast<int>(0xFFFF0403u);
  EXPECT_EQ(cuda::dp4a(a, b, 10), 6);
  EXPECT_EQ(static_cast<uint32_t>(cuda::sub_bytes(0x3F200F00, 0x20202020)), 0x1F00EFE0u);
  EXPECT_EQ(cuda::spread_bits(0xF), 0x10101010);
  EXPECT_EQ(cuda::spread_bits(0x5), 0x00100010);
}

// The quantized activations are the CPU backend's kQ8 rows, value for value.
TEST(CudaQ8, QuantizeMatchesCpuBackend) {
  const int64_t cols = 1024;
  const std::vector<float> x = activations(cols, 7);
  const std::vector<BlockQ8_1> q = quantize_q8_1(x);
  std::vector<uint8_t> cpu(static_cast<size_t>(cpu::act_row_bytes(cpu::ActFormat::kQ8, cols)));
  cpu::cpu_kernels(CpuLevel::kScalar).quantize_q8(x.data(), cols, cpu.data());
  int nonzero = 0;
  for (int64_t b = 0; b < cols / 32; ++b) {
    SCOPED_TRACE(b);
    const BlockQ8_1& blk = q[static_cast<size_t>(b)];
    EXPECT_EQ(std::memcmp(blk.qs, cpu::act_qs(cpu.data()) + 32 * b, 32), 0);
    EXPECT_EQ(bits(cuda::half_to_float(blk.d)), bits(cpu::act_d(cpu.data(), cols)[b]));
    EXPECT_EQ(bits(cuda::half_to_float(blk.s)), bits(cpu::act_sm(cpu.data(), cols)[b]));
    EXPECT_EQ(blk.sum, cpu::act_sum(cpu.data(), cols)[b]);
    nonzero += blk.sum != 0;
  }
  EXPECT_GT(nonzero, cols / 64);  // the data exercises the sums
}

// Q4_0 .. Q8_0: a row's sum of unit products, in unit order, is the CPU scalar kernel's result
// bit for bit (both take q8 activations and the same per-block formula).
TEST(CudaQ8, LegacyTypesMatchCpuBackendBitForBit) {
  const int64_t cols = 512, rows = 6;
  const std::vector<float> x = activations(cols, 11);
  const std::vector<BlockQ8_1> q = quantize_q8_1(x);
  const cpu::Kernels& scalar = cpu::cpu_kernels(CpuLevel::kScalar);
  std::vector<uint8_t> act(static_cast<size_t>(cpu::act_row_bytes(cpu::ActFormat::kQ8, cols)));
  scalar.quantize_q8(x.data(), cols, act.data());
  for (DType type : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0}) {
    SCOPED_TRACE(std::string(dtype_traits(type).name));
    const cpu::MatmulKernel& k = scalar.matmul[cpu::dtype_index(type)];
    ASSERT_EQ(k.act, cpu::ActFormat::kQ8);
    ASSERT_NE(k.tile, nullptr);
    const std::vector<uint8_t> w = quantized_rows(type, rows, cols, 3);
    const size_t bytes = row_bytes(type, cols);
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* row = w.data() + bytes * static_cast<size_t>(r);
      float expected = 0.0f;
      k.tile(row, bytes, 1, act.data(), act.size(), 1, cols, &expected, 1);
      const float got = dot_row(type, row, cols, q.data());
      EXPECT_EQ(bits(got), bits(expected)) << "row " << r << ": " << got << " vs " << expected;
    }
  }
}

// Every type against the reference's float dot product (dequantized weights, float
// activations). The only error beyond float rounding is the activations' rounding to 8 bits,
// at most half a step (amax / 254) per value: the worst case is the sum over blocks of
// sum|w| * amax / 254, plus 1e-4 of sum |w x| for the F16 scales (2^-11 relative) and sums.
// Measured on these rows, every type stays under 0.06 of that worst case (errors of random
// sign cancel); the test allows a quarter of it, so a wrong scale or offset fails.
TEST(CudaQ8, EveryTypeWithinActivationRoundingOfReference) {
  const int64_t cols = 1024, rows = 4;
  const std::vector<float> x = activations(cols, 5);
  const std::vector<BlockQ8_1> q = quantize_q8_1(x);
  for (DType type : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0,
                     DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    SCOPED_TRACE(std::string(dtype_traits(type).name));
    ASSERT_TRUE(cuda::has_q8_dot(type));
    const std::vector<uint8_t> w = quantized_rows(type, rows, cols, 9);
    const size_t bytes = row_bytes(type, cols);
    std::vector<float> deq(static_cast<size_t>(cols));
    double worst = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* row = w.data() + bytes * static_cast<size_t>(r);
      dequantize_row(type, row, deq.data(), cols);
      double ref = 0.0, bound = 0.0, magnitude = 0.0;
      for (int64_t b = 0; b < cols / 32; ++b) {
        double amax = 0.0, wsum = 0.0;
        for (int64_t i = 32 * b; i < 32 * b + 32; ++i) {
          ref += static_cast<double>(deq[i]) * x[i];
          magnitude += std::fabs(static_cast<double>(deq[i]) * x[i]);
          amax = std::max(amax, static_cast<double>(std::fabs(x[i])));
          wsum += std::fabs(deq[i]);
        }
        bound += wsum * amax / 254.0;
      }
      bound = 0.25 * (bound + 1e-4 * magnitude);
      const double err = std::fabs(dot_row(type, row, cols, q.data()) - ref);
      EXPECT_LE(err, bound) << "row " << r << ": reference " << ref;
      worst = std::max(worst, err / bound);
    }
    RecordProperty(std::string("worst_error_over_bound_") + std::string(dtype_traits(type).name), std::to_string(worst));
  }
}

// The product kernel's threads, emulated: every (product, row, unit) is taken by exactly one
// lane, and every row is written by one warp, for one to three products of uneven heights and
// rows of 1 to 448 units (1, 2 and 4 warps a row).
TEST(CudaQ8, ProductSlotsTakeEveryRowAndUnitOnce) {
  const std::vector<std::vector<int64_t>> sets = {{96, 32, 32}, {67}, {1, 5, 3}, {4096, 1024}};
  for (const std::vector<int64_t>& rows : sets) {
    for (int64_t units : {1, 16, 63, 64, 100, 128, 448}) {
      SCOPED_TRACE(std::to_string(rows.size()) + " products, " + std::to_string(units) + " units");
      const int warps = cuda::warps_per_row(units);
      ASSERT_TRUE(warps == 1 || warps == 2 || warps == 4);
      EXPECT_TRUE(warps == 1 || units >= warps * 32);  // no warp without a unit
      const int count = static_cast<int>(rows.size());
      unsigned first[cuda::kMaxQ8Products + 1] = {};
      for (int p = 0; p < count; ++p) first[p + 1] = first[p] + cuda::product_blocks(rows[p], warps);
      std::vector<std::vector<int>> taken(rows.size()), written(rows.size());
      for (int p = 0; p < count; ++p) {
        taken[p].assign(static_cast<size_t>(rows[p] * units), 0);
        written[p].assign(static_cast<size_t>(rows[p]), 0);
      }
      for (unsigned block = 0; block < first[count]; ++block) {
        for (int warp = 0; warp < cuda::kProductWarps; ++warp) {
          for (int lane = 0; lane < 32; ++lane) {
            const cuda::ProductSlot s = cuda::product_slot(first, count, block, warp, lane, warps);
            ASSERT_LT(s.product, count);
            if (s.row >= rows[s.product]) continue;
            for (int64_t u = s.part; u < units; u += s.stride) ++taken[s.product][s.row * units + u];
            if (s.writes && lane == 0) ++written[s.product][s.row];
          }
        }
      }
      for (int p = 0; p < count; ++p) {
        EXPECT_EQ(std::count(taken[p].begin(), taken[p].end(), 1), rows[p] * units) << "product " << p;
        EXPECT_EQ(std::count(written[p].begin(), written[p].end(), 1), rows[p]) << "product " << p;
      }
    }
  }
}

// A row of zeros quantizes to zero quants and scales (no division by zero).
TEST(CudaQ8, ZeroBlockQuantizesToZero) {
  std::vector<float> x(32, 0.0f);
  BlockQ8_1 b{};
  cuda::quantize_q8_1_block(x.data(), &b);
  EXPECT_EQ(b.d, 0);
  EXPECT_EQ(b.s, 0);
  EXPECT_EQ(b.sum, 0);
  for (int8_t v : b.qs) EXPECT_EQ(v, 0);
}

}  // namespace
}  // namespace pagoda
