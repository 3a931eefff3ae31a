// The CUDA backend's products of many tokens on the int8 tensor cores (cuda_mmq.cuh), run on the
// host: the kernel's staging, fragment loads and per-unit formula with the mma emulated through
// the same fragment mapping. No GPU and no CUDA build needed. The legacy types' products are
// the CPU backend's bit for bit; every type's are the decode products' (cuda_q8.cuh) bit for bit.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/kernels.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_mmq.cuh"
#include "core/dtype.h"
#include "quant/reference.h"

namespace pagoda {
namespace {

using cuda::BlockQ8_1;

std::vector<float> activations(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(count));
  for (size_t i = 0; i < x.size(); ++i) {
    const float scale = std::exp2(static_cast<float>(static_cast<int>((i / 32) % 9)) - 4.0f);
    x[i] = (i / 32) % 11 == 4 ? 0.0f : scale * normal(rng);
  }
  return x;
}

std::vector<uint8_t> weights(DType type, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<float> w(static_cast<size_t>(cols));
  const size_t bytes = row_bytes(type, cols);
  std::vector<uint8_t> out(bytes * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : w) v = normal(rng) + (r % 3 == 1 ? 0.03f : 0.0f);  // some rows off centre
    quantize_row(type, w.data(), out.data() + bytes * static_cast<size_t>(r), cols);
  }
  return out;
}

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

template <class F>
void by_mmq_type(DType type, F&& f) {
  if (!cuda::by_q8_type(type, f)) ADD_FAILURE() << "no tile product for " << dtype_traits(type).name;
}

struct Product {
  std::vector<uint8_t> w;
  std::vector<BlockQ8_1> x;
  int64_t rows, cols, n;
};

Product make_product(DType type, int64_t rows, int64_t cols, int64_t n, uint32_t seed) {
  Product p{weights(type, rows, cols, seed), {}, rows, cols, n};
  const std::vector<float> x = activations(n * cols, seed + 1);
  p.x.resize(static_cast<size_t>(n * cols / 32));
  for (size_t b = 0; b < p.x.size(); ++b) cuda::quantize_q8_1_block(x.data() + 32 * b, &p.x[b]);
  return p;
}

std::vector<float> tile_product(DType type, const Product& p) {
  std::vector<float> y(static_cast<size_t>(p.n * p.rows), -1234.5f);
  by_mmq_type(type, [&]<DType T>() {
    cuda::mmq_product_host<T>(p.w.data(), row_bytes(type, p.cols), p.rows, p.x.data(),
                              p.cols / 32, p.n, y.data());
  });
  return y;
}

// The PTX ISA's table for m16n8k32 .s8, a few entries written out: lane 5 is group 1, thread 1.
TEST(CudaMmq, FragmentMappingIsThePtxLayout) {
  EXPECT_EQ(cuda::mma_a_row(5, 0), 1);
  EXPECT_EQ(cuda::mma_a_k(5, 0), 4);
  EXPECT_EQ(cuda::mma_a_row(5, 1), 9);
  EXPECT_EQ(cuda::mma_a_k(5, 1), 4);
  EXPECT_EQ(cuda::mma_a_row(5, 2), 1);
  EXPECT_EQ(cuda::mma_a_k(5, 2), 20);
  EXPECT_EQ(cuda::mma_a_row(31, 3), 15);
  EXPECT_EQ(cuda::mma_a_k(31, 3), 28);
  EXPECT_EQ(cuda::mma_b_col(5), 1);
  EXPECT_EQ(cuda::mma_b_k(5, 1), 20);
  EXPECT_EQ(cuda::mma_c_row(5, 2), 9);
  EXPECT_EQ(cuda::mma_c_col(5, 1), 3);
  // Every element of A, B and C is held by exactly one (lane, register).
  std::set<std::pair<int, int>> a, b, c;
  for (int l = 0; l < 32; ++l) {
    for (int r = 0; r < 4; ++r) {
      for (int k = 0; k < 4; ++k) a.insert({cuda::mma_a_row(l, r), cuda::mma_a_k(l, r) + k});
      c.insert({cuda::mma_c_row(l, r), cuda::mma_c_col(l, r)});
    }
    for (int r = 0; r < 2; ++r) {
      for (int k = 0; k < 4; ++k) b.insert({cuda::mma_b_k(l, r) + k, cuda::mma_b_col(l)});
    }
  }
  EXPECT_EQ(a.size(), 16u * 32u);
  EXPECT_EQ(b.size(), 32u * 8u);
  EXPECT_EQ(c.size(), 16u * 8u);
}

// The emulated mma is a 16 x 8 x 32 integer product of the matrices the fragments hold.
TEST(CudaMmq, EmulatedMmaIsTheIntegerProduct) {
  std::mt19937 rng(3);
  int8_t am[16][32], bm[32][8];
  for (auto& row : am) for (int8_t& v : row) v = static_cast<int8_t>(rng() % 256);
  for (auto& row : bm) for (int8_t& v : row) v = static_cast<int8_t>(rng() % 256);
  int a[32][4], b[32][2], c[32][4];
  auto pack = [](const int8_t* p) {
    uint32_t w = 0;
    for (int k = 0; k < 4; ++k) w |= static_cast<uint32_t>(static_cast<uint8_t>(p[k])) << (8 * k);
    return static_cast<int>(w);
  };
  for (int l = 0; l < 32; ++l) {
    for (int r = 0; r < 4; ++r) a[l][r] = pack(&am[cuda::mma_a_row(l, r)][cuda::mma_a_k(l, r)]);
    for (int r = 0; r < 2; ++r) {
      int8_t col[4];
      for (int k = 0; k < 4; ++k) col[k] = bm[cuda::mma_b_k(l, r) + k][cuda::mma_b_col(l)];
      b[l][r] = pack(col);
    }
    for (int i = 0; i < 4; ++i) c[l][i] = 1000 * l + i;
  }
  cuda::mma_s8_host(a, b, c);
  for (int l = 0; l < 32; ++l) {
    for (int i = 0; i < 4; ++i) {
      int expected = 1000 * l + i;
      for (int k = 0; k < 32; ++k) expected += am[cuda::mma_c_row(l, i)][k] * bm[k][cuda::mma_c_col(l, i)];
      EXPECT_EQ(c[l][i], expected) << "lane " << l << " element " << i;
    }
  }
}

// A unit unpacked to int8 dotted with an activation block through unit_result is dot_unit's
// value bit for bit (the integer sums are equal: offsets subtracted per weight instead of
// through the block's sum).
TEST(CudaMmq, UnpackedUnitsGiveTheDecodeProductsUnitValues) {
  for (DType type : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0,
                     DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    SCOPED_TRACE(std::string(dtype_traits(type).name));
    const Product p = make_product(type, 3, 512, 1, 21);
    by_mmq_type(type, [&]<DType T>() {
      for (int64_t r = 0; r < p.rows; ++r) {
        const uint8_t* row = p.w.data() + row_bytes(type, p.cols) * r;
        for (int64_t u = 0; u < p.cols / 32; ++u) {
          int words[8];
          cuda::UnitScale s;
          cuda::unpack_unit<T>(row, u, words, &s);
          const BlockQ8_1& x = p.x[u];
          int sumi = 0;
          for (int i = 0; i < 8; ++i) sumi = cuda::dp4a(words[i], cuda::x_word(x, i), sumi);
          const cuda::BlockScale xs{cuda::half_to_float(x.d), cuda::half_to_float(x.s), x.sum};
          int lo = 0, hi = 0;  // the halves' sums, for Q6_K
          for (int i = 0; i < 8; ++i) (i < 4 ? lo : hi) = cuda::dp4a(words[i], cuda::x_word(x, i), i < 4 ? lo : hi);
          const int first = cuda::split_sums(T) ? lo : sumi;
          ASSERT_EQ(bits(cuda::unit_result<T>(s, first, hi, xs)), bits(cuda::dot_unit<T>(row, u, x)))
              << "row " << r << " unit " << u;
        }
      }
    });
  }
}

// Shapes that leave partial tiles on every side: rows not a multiple of 64, tokens not of 64,
// units not of the 4 a stage holds.
constexpr int64_t kRows = 80, kCols = 352, kTokens = 70;

// Q4_0 .. Q8_0: the tile product of every (row, token) is the CPU backend's product bit for bit.
TEST(CudaMmq, LegacyTileProductsAreTheCpuBackendsBitForBit) {
  const cpu::Kernels& scalar = cpu::cpu_kernels(CpuLevel::kScalar);
  const std::vector<float> x = activations(kTokens * kCols, 31);
  const int64_t act_bytes = cpu::act_row_bytes(cpu::ActFormat::kQ8, kCols);
  std::vector<uint8_t> act(static_cast<size_t>(act_bytes * kTokens));
  for (int64_t t = 0; t < kTokens; ++t) {
    scalar.quantize_q8(x.data() + t * kCols, kCols, act.data() + t * act_bytes);
  }
  for (DType type : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0}) {
    SCOPED_TRACE(std::string(dtype_traits(type).name));
    const cpu::MatmulKernel& k = scalar.matmul[cpu::dtype_index(type)];
    ASSERT_EQ(k.act, cpu::ActFormat::kQ8);
    Product p = make_product(type, kRows, kCols, kTokens, 31);
    p.x.resize(static_cast<size_t>(kTokens * kCols / 32));
    for (size_t b = 0; b < p.x.size(); ++b) cuda::quantize_q8_1_block(x.data() + 32 * b, &p.x[b]);
    const std::vector<float> y = tile_product(type, p);
    const size_t bytes = row_bytes(type, kCols);
    int mismatches = 0;
    for (int64_t t = 0; t < kTokens; ++t) {
      for (int64_t r = 0; r < kRows; ++r) {
        float expected = 0.0f;
        k.tile(p.w.data() + bytes * r, bytes, 1, act.data() + t * act_bytes, act_bytes, 1, kCols,
               &expected, 1);
        mismatches += bits(y[t * kRows + r]) != bits(expected);
      }
    }
    EXPECT_EQ(mismatches, 0);
  }
}

// Every type: the tile product is the decode products' row sums (dot_row_serial) bit for bit,
// and (K-quants, whose CPU path takes 256-value activations) near the reference float product.
TEST(CudaMmq, TileProductsAreTheDecodeProductsBitForBit) {
  for (DType type : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0,
                     DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    SCOPED_TRACE(std::string(dtype_traits(type).name));
    const int64_t cols = dtype_traits(type).block_size == 256 ? 768 : kCols;
    const Product p = make_product(type, kRows, cols, kTokens, 41);
    const std::vector<float> y = tile_product(type, p);
    const size_t bytes = row_bytes(type, cols);
    int mismatches = 0;
    double worst = 0, scale = 1e-30;
    const std::vector<float> xf = activations(kTokens * cols, 42);
    std::vector<float> wrow(static_cast<size_t>(cols));
    for (int64_t r = 0; r < kRows; ++r) {
      dequantize_row(type, p.w.data() + bytes * r, wrow.data(), cols);
      by_mmq_type(type, [&]<DType T>() {
        for (int64_t t = 0; t < kTokens; ++t) {
          const float expected =
              cuda::dot_row_serial<T>(p.w.data() + bytes * r, cols, p.x.data() + t * cols / 32);
          const float got = y[t * kRows + r];
          mismatches += bits(got) != bits(expected);
          double ref = 0;
          for (int64_t c = 0; c < cols; ++c) ref += double(wrow[c]) * xf[t * cols + c];
          worst = std::max(worst, std::fabs(got - ref));
          scale = std::max(scale, std::fabs(ref));
        }
      });
    }
    EXPECT_EQ(mismatches, 0);
    EXPECT_LT(worst / scale, 2e-2);  // only the activations' rounding to 8 bits
  }
}

// ---- on a device (skipped loudly without one) ----

#define GPU_OR_SKIP()                                                                          \
  if (!cuda_backend_built()) GTEST_SKIP() << "*** built without the CUDA backend: SKIPPING ***"; \
  if (cuda_device_count() == 0) GTEST_SKIP() << "*** no CUDA device: SKIPPING a GPU test ***"

// A CUDA backend with the products of before (PAGODA_CUDA_KERNELS=old: cuBLAS on weights
// decoded to F16) or the new ones.
std::unique_ptr<Backend> cuda_backend(bool old_kernels) {
  const char* saved = std::getenv("PAGODA_CUDA_KERNELS");
  const std::string keep = saved ? saved : "";
  setenv("PAGODA_CUDA_KERNELS", old_kernels ? "old" : "new", 1);
  auto be = make_cuda_backend(0);
  if (saved) setenv("PAGODA_CUDA_KERNELS", keep.c_str(), 1); else unsetenv("PAGODA_CUDA_KERNELS");
  return be;
}

struct OnDevice {
  Backend& be;
  std::unique_ptr<BackendBuffer> buffer;
  OnDevice(Backend& b, const std::vector<float>& host)
      : be(b), buffer(b.allocate(host.size() * sizeof(float), "test")) {
    be.upload(host.data(), host.size() * sizeof(float), buffer->data());
  }
  OnDevice(Backend& b, int64_t count) : be(b), buffer(b.allocate(count * sizeof(float), "test")) {}
  float* data() const { return static_cast<float*>(buffer->data()); }
  std::vector<float> read(int64_t count) const {
    std::vector<float> host(static_cast<size_t>(count));
    be.download(buffer->data(), host.size() * sizeof(float), host.data());
    return host;
  }
};

// The device's tile products (16 tokens or more) are the host emulation's bit for bit: the
// same integer sums, the same rounded float operations in the same order.
TEST(CudaMmq, DeviceEqualsTheHostEmulationBitForBit) {
  GPU_OR_SKIP();
  auto cuda = cuda_backend(false);
  for (DType type : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0,
                     DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    SCOPED_TRACE(std::string(dtype_traits(type).name));
    const int64_t cols = dtype_traits(type).block_size == 256 ? 768 : kCols;
    for (int64_t n : {16, 70, 129}) {
      const Product p = make_product(type, kRows, cols, n, 51);
      const std::vector<float> x = activations(n * cols, 52);
      const WeightMatrix w{type, kRows, cols, p.w.data(), row_bytes(type, cols), new_weight_id(), false};
      OnDevice dx(*cuda, x), dy(*cuda, n * kRows);
      cuda->matmul(w, dx.data(), n, dy.data());
      const std::vector<float> got = dy.read(n * kRows), expected = tile_product(type, p);
      int mismatches = 0;
      for (size_t i = 0; i < got.size(); ++i) mismatches += bits(got[i]) != bits(expected[i]);
      EXPECT_EQ(mismatches, 0) << n << " tokens";
    }
  }
}

// Q, K and V of a prompt (one input, 40 tokens) through matmul_many: the tile types' products
// are the host emulation's bits, as each product alone; a Q6_K one beside them (cuBLAS) does
// not disturb them.
TEST(CudaMmq, SharedInputOfManyTokens) {
  GPU_OR_SKIP();
  auto cuda = cuda_backend(false);
  const int64_t n = 40, cols = 512;
  const std::vector<float> x = activations(n * cols, 62);
  const Product pq = make_product(DType::kQ4_0, 96, cols, n, 61),
                pk = make_product(DType::kQ4_K, 32, cols, n, 61);
  const std::vector<uint8_t> v6 = weights(DType::kQ6_K, 32, cols, 63);
  auto matrix = [&](DType type, int64_t rows, const std::vector<uint8_t>& bytes) {
    return WeightMatrix{type, rows, cols, bytes.data(), row_bytes(type, cols), new_weight_id(), false};
  };
  const WeightMatrix q = matrix(DType::kQ4_0, 96, pq.w), k = matrix(DType::kQ4_K, 32, pk.w),
                     v = matrix(DType::kQ6_K, 32, v6);
  OnDevice dx(*cuda, x), yq(*cuda, n * 96), yk(*cuda, n * 32), yv(*cuda, n * 32), alone(*cuda, n * 32);
  cuda->matmul_many({{&q, yq.data()}, {&k, yk.data()}, {&v, yv.data()}}, dx.data(), n);
  auto same_bits = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  };
  EXPECT_TRUE(same_bits(yq.read(n * 96), tile_product(DType::kQ4_0, pq)));
  EXPECT_TRUE(same_bits(yk.read(n * 32), tile_product(DType::kQ4_K, pk)));
  cuda->matmul(k, dx.data(), n, alone.data());
  EXPECT_TRUE(same_bits(alone.read(n * 32), yk.read(n * 32)));
}

// Old (cuBLAS on weights decoded to F16 per product) beside new (int8 tiles) per 8B matrix at
// 512 and 4096 tokens, for scripts/device-check --prefill. PAGODA_TIMING_TYPES=Q4_0,Q8_0 picks.
TEST(CudaMmq, TimingOfThePrefillProducts) {
  GPU_OR_SKIP();
  struct Shape { const char* name; int64_t rows, cols; };
  const Shape shapes[] = {{"attn_q", 4096, 4096}, {"ffn_up", 14336, 4096}, {"ffn_down", 4096, 14336}};
  const char* only = std::getenv("PAGODA_TIMING_TYPES");
  for (DType type : {DType::kQ4_0, DType::kQ4_K, DType::kQ6_K, DType::kQ8_0}) {
    const std::string name(dtype_traits(type).name);
    if (only && std::string(only).find(name) == std::string::npos) continue;
    for (const Shape& s : shapes) {
      const std::vector<uint8_t> bytes = weights(type, s.rows, s.cols, 3);
      const WeightMatrix w{type, s.rows, s.cols, bytes.data(), row_bytes(type, s.cols), new_weight_id(), false};
      for (int64_t n : {512, 4096}) {
        const std::vector<float> x = activations(n * s.cols, 4);
        double us[2] = {0, 0};
        for (int old = 0; old < 2; ++old) {
          auto cuda = cuda_backend(old == 1);
          OnDevice dx(*cuda, x), dy(*cuda, n * s.rows);
          cuda->matmul(w, dx.data(), n, dy.data());  // uploads the weights
          dy.read(1);
          const int reps = 10;
          const auto start = std::chrono::steady_clock::now();
          for (int i = 0; i < reps; ++i) cuda->matmul(w, dx.data(), n, dy.data());
          dy.read(1);
          us[old] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / reps;
        }
        const double flop = 2.0 * static_cast<double>(s.rows * s.cols * n);
        std::printf("  timing prefill %-5s %-8s %6lldx%-6lld n=%-5lld old %9.1f us %6.1f TFLOP/s   new %9.1f us %6.1f TFLOP/s\n",
                    name.c_str(), s.name, static_cast<long long>(s.rows),
                    static_cast<long long>(s.cols), static_cast<long long>(n), us[1],
                    flop / (us[1] * 1e6), us[0], flop / (us[0] * 1e6));
      }
    }
  }
}

}  // namespace
}  // namespace pagoda
