// The CUDA backend's decode products on 8-bit activations (cuda_mmvq.cu): the host runs the
// same unit products (cuda_q8.cuh) to give the device its expected results, so the device is
// checked against its own arithmetic (only the order of the float sums differs), and the host
// half measures how far that arithmetic is from the reference backend's float products. The
// device tests skip loudly without a GPU; the timing test prints the old and new kernels' time
// per product for scripts/device-check.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_q8.cuh"
#include "backend/kv_format.h"
#include "core/dtype.h"
#include "quant/reference.h"

namespace pagoda {
namespace {

#define GPU_OR_SKIP()                                                                          \
  if (!cuda_backend_built()) GTEST_SKIP() << "*** built without the CUDA backend: SKIPPING ***"; \
  if (cuda_device_count() == 0) GTEST_SKIP() << "*** no CUDA device: SKIPPING a GPU test ***"

constexpr DType kQ8Types[] = {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
                              DType::kQ8_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

std::string name_of(DType t) { return std::string(dtype_traits(t).name); }

std::vector<float> random_values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

struct Matrix {
  std::vector<uint8_t> bytes;
  WeightMatrix w;
};

Matrix make_matrix(DType type, int64_t rows, int64_t cols, uint32_t seed) {
  Matrix m;
  const std::vector<float> values = random_values(rows * cols, seed);
  const size_t rb = row_bytes(type, cols);
  m.bytes.resize(rb * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    quantize_row(type, values.data() + r * cols, m.bytes.data() + rb * r, cols);
  }
  m.w = {type, rows, cols, m.bytes.data(), rb, new_weight_id(), false};
  return m;
}

// Largest |a - b| over the largest |b|.
double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

template <DType T>
float host_row(const uint8_t* row, int64_t cols, const cuda::BlockQ8_1* x) {
  return cuda::dot_row_serial<T>(row, cols, x);
}

// y[n, rows] as the device's q8_1 products compute it, on the host.
std::vector<float> host_q8_product(const Matrix& m, const std::vector<float>& x, int64_t n) {
  const int64_t cols = m.w.cols, units = cols / 32;
  std::vector<cuda::BlockQ8_1> q(static_cast<size_t>(n * units));
  for (int64_t b = 0; b < n * units; ++b) cuda::quantize_q8_1_block(x.data() + 32 * b, &q[b]);
  std::vector<float> y(static_cast<size_t>(n * m.w.rows));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t r = 0; r < m.w.rows; ++r) {
      const uint8_t* row = m.bytes.data() + m.w.row_bytes * r;
      const cuda::BlockQ8_1* xq = q.data() + t * units;
      float v = 0.0f;
      switch (m.w.type) {
        case DType::kQ4_0: v = host_row<DType::kQ4_0>(row, cols, xq); break;
        case DType::kQ4_1: v = host_row<DType::kQ4_1>(row, cols, xq); break;
        case DType::kQ5_0: v = host_row<DType::kQ5_0>(row, cols, xq); break;
        case DType::kQ5_1: v = host_row<DType::kQ5_1>(row, cols, xq); break;
        case DType::kQ8_0: v = host_row<DType::kQ8_0>(row, cols, xq); break;
        case DType::kQ4_K: v = host_row<DType::kQ4_K>(row, cols, xq); break;
        case DType::kQ5_K: v = host_row<DType::kQ5_K>(row, cols, xq); break;
        case DType::kQ6_K: v = host_row<DType::kQ6_K>(row, cols, xq); break;
        default: ADD_FAILURE() << name_of(m.w.type);
      }
      y[static_cast<size_t>(t * m.w.rows + r)] = v;
    }
  }
  return y;
}

// The q8_1 products against the reference's float products, on the host, with the matrices
// and activations of test_cuda_backend.cc's MatmulAndEmbedEveryTypeMatchTheReference (its
// bound for these types on the device comes from here). Measured: 6.1e-3 to 6.5e-3 for every
// type (only x's rounding to 8 bits enters, not the weights' coarseness).
TEST(CudaProducts, HostQ8ProductsNearTheReference) {
  auto ref = make_reference_backend();
  for (DType type : kQ8Types) {
    SCOPED_TRACE(name_of(type));
    double worst = 0;
    for (int64_t cols : {512, 2048}) {
      const Matrix m = make_matrix(type, 67, cols, 7);
      for (int64_t n : {1, 3, 11}) {
        const std::vector<float> x = random_values(n * cols, 11);
        std::vector<float> expected(static_cast<size_t>(n * 67));
        ref->matmul(m.w, x.data(), n, expected.data());
        worst = std::max(worst, relative_error(host_q8_product(m, x, n), expected));
      }
    }
    std::printf("  %-5s q8_1 products against the reference: %.3g\n", name_of(type).c_str(), worst);
    EXPECT_LT(worst, 1e-2);
    EXPECT_GT(worst, 1e-5);  // the activations are rounded to 8 bits, so not the float product
  }
}

// Host values in a device backend's memory, and back.
struct Device {
  Backend& be;
  std::unique_ptr<BackendBuffer> buffer;
  Device(Backend& b, const std::vector<float>& host) : be(b) {
    buffer = be.allocate(std::max<uint64_t>(host.size(), 1) * sizeof(float), "test");
    be.upload(host.data(), host.size() * sizeof(float), buffer->data());
  }
  Device(Backend& b, int64_t count)
      : be(b), buffer(b.allocate(std::max<int64_t>(count, 1) * sizeof(float), "test")) {}
  float* data() const { return static_cast<float*>(buffer->data()); }
  std::vector<float> read(int64_t count) const {
    std::vector<float> host(static_cast<size_t>(count));
    be.download(buffer->data(), host.size() * sizeof(float), host.data());
    return host;
  }
};

// A CUDA backend with the float products of before (PAGODA_CUDA_KERNELS=old) or the new ones.
std::unique_ptr<Backend> cuda_backend(bool old_kernels) {
  const char* saved = std::getenv("PAGODA_CUDA_KERNELS");
  const std::string keep = saved ? saved : "";
  setenv("PAGODA_CUDA_KERNELS", old_kernels ? "old" : "new", 1);
  auto be = make_cuda_backend(0);
  if (saved) setenv("PAGODA_CUDA_KERNELS", keep.c_str(), 1); else unsetenv("PAGODA_CUDA_KERNELS");
  return be;
}

// The device's products are the host's unit products summed in another order.
TEST(CudaProducts, DeviceEqualsTheHostsQ8Arithmetic) {
  GPU_OR_SKIP();
  auto cuda = cuda_backend(false);
  for (DType type : kQ8Types) {
    SCOPED_TRACE(name_of(type));
    for (int64_t cols : {512, 2048, 4096}) {  // 1, 2 and 4 warps a row
      const Matrix m = make_matrix(type, 67, cols, 7);
      for (int64_t n : {1, 2, 3, 8, 11}) {
        const std::vector<float> x = random_values(n * cols, 11);
        Device dx(*cuda, x), dy(*cuda, n * 67);
        cuda->matmul(m.w, dx.data(), n, dy.data());
        EXPECT_LT(relative_error(dy.read(n * 67), host_q8_product(m, x, n)), 1e-5)
            << n << " tokens, " << cols << " columns";
      }
    }
  }
}

// Q, K and V in one launch (one type) or apart (mixed types) give each product's own result;
// a norm's (and SiLU / GELU gating's) quantized output is the one a product would make, and an op
// that changes the normed rows makes the products quantize them again.
TEST(CudaProducts, SharedInputsAndFusedNormGiveTheSameProducts) {
  GPU_OR_SKIP();
  auto cuda = cuda_backend(false);
  const int64_t cols = 1024, n = 3;
  const Matrix q = make_matrix(DType::kQ4_0, 96, cols, 1), k = make_matrix(DType::kQ4_0, 32, cols, 2),
               v = make_matrix(DType::kQ6_K, 32, cols, 3);
  const std::vector<float> x = random_values(n * cols, 4), weight = random_values(cols, 5);
  Device dx(*cuda, x), h(*cuda, n * cols), yq(*cuda, n * 96), yk(*cuda, n * 32), yv(*cuda, n * 32);
  cuda->rms_norm(dx.data(), weight.data(), n, cols, 1e-5f, h.data());
  cuda->matmul_many({{&q.w, yq.data()}, {&k.w, yk.data()}, {&v.w, yv.data()}}, h.data(), n);
  const std::vector<float> normed = h.read(n * cols);
  EXPECT_LT(relative_error(yq.read(n * 96), host_q8_product(q, normed, n)), 1e-5);
  EXPECT_LT(relative_error(yk.read(n * 32), host_q8_product(k, normed, n)), 1e-5);
  EXPECT_LT(relative_error(yv.read(n * 32), host_q8_product(v, normed, n)), 1e-5);
  // Alone, each product gives the same bits as in the group.
  const std::vector<float> grouped = yk.read(n * 32);
  Device hk(*cuda, normed), yk2(*cuda, n * 32);
  cuda->matmul(k.w, hk.data(), n, yk2.data());
  EXPECT_EQ(yk2.read(n * 32), grouped);
  // Changed after the norm: the products see the new rows.
  const std::vector<float> delta = random_values(n * cols, 6);
  Device dd(*cuda, delta);
  cuda->rms_norm(dx.data(), weight.data(), n, cols, 1e-5f, h.data());
  cuda->add(h.data(), dd.data(), n * cols);
  cuda->matmul(q.w, h.data(), n, yq.data());
  EXPECT_LT(relative_error(yq.read(n * 96), host_q8_product(q, h.read(n * cols), n)), 1e-5);
  // SiLU gating quantizes its output for the down projection; the product reads those blocks.
  Device up(*cuda, random_values(n * cols, 7));
  cuda->silu_mul(h.data(), up.data(), n * cols, h.data());
  cuda->matmul(k.w, h.data(), n, yk.data());
  EXPECT_LT(relative_error(yk.read(n * 32), host_q8_product(k, h.read(n * cols), n)), 1e-5);
  cuda->gelu_mul(h.data(), up.data(), n * cols, h.data());
  cuda->matmul(k.w, h.data(), n, yk.data());
  EXPECT_LT(relative_error(yk.read(n * 32), host_q8_product(k, h.read(n * cols), n)), 1e-5);
}

// A decode batch's attention output is quantized by the attention kernel for the output
// product: the product equals the host's of the output read back.
TEST(CudaProducts, AttentionOutputFeedsTheOutputProduct) {
  GPU_OR_SKIP();
  auto cuda = cuda_backend(false);
  const int32_t head_dim = 64, bs = 16, max_blocks = 20, num_seqs = 3;
  AttentionParams p{8, 2, head_dim, 0.125f, 0};
  std::vector<int32_t> table(num_seqs * max_blocks), positions = {5, 40, 300}, query_start = {0, 1, 2, 3};
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>((i * 7 + 3) % table.size());
  std::vector<int64_t> slots;
  for (int32_t s = 0; s < num_seqs; ++s) {
    slots.push_back(int64_t{table[s * max_blocks + positions[s] / bs]} * bs + positions[s] % bs);
  }
  AttentionBatch b{num_seqs, positions.data(), slots.data(), num_seqs, query_start.data(),
                   table.data(), max_blocks, bs};
  const uint64_t bytes = uint64_t(table.size()) * bs * 2 * kv_head_bytes(KvType::kF32, head_dim);
  auto dk = cuda->allocate(bytes, "test"), dv = cuda->allocate(bytes, "test");
  KvLayer cache{dk->data(), dv->data(), KvType::kF32};
  const int64_t width = 8 * head_dim;
  Device k(*cuda, random_values(num_seqs * 2 * head_dim, 1)),
      v(*cuda, random_values(num_seqs * 2 * head_dim, 2)), q(*cuda, random_values(num_seqs * width, 3)),
      out(*cuda, num_seqs * width), y(*cuda, num_seqs * 64);
  cuda->write_kv(k.data(), v.data(), b, p, cache);
  cuda->attention(q.data(), cache, b, p, out.data());
  const Matrix wo = make_matrix(DType::kQ4_0, 64, width, 4);
  cuda->matmul(wo.w, out.data(), num_seqs, y.data());
  EXPECT_LT(relative_error(y.read(num_seqs * 64), host_q8_product(wo, out.read(num_seqs * width), num_seqs)),
            1e-5);
}

uint64_t count_of(const std::string& json, const std::string& key) {
  const size_t at = json.find("\"" + key + "\": ");
  if (at == std::string::npos) return ~uint64_t{0};
  return std::stoull(json.substr(at + key.size() + 4));
}

// The counters the device check divides by the steps: a product of a fresh input is two
// launches (quantize, product) and no wait; reading the result back is one wait.
TEST(CudaProducts, CountsLaunchesAndWaits) {
  if (!cuda_backend_built()) {
    EXPECT_EQ(cuda_counts_json(), "{}");
    GTEST_SKIP() << "*** built without the CUDA backend: SKIPPING ***";
  }
  EXPECT_NE(count_of(cuda_counts_json(), "mallocs"), ~uint64_t{0});
  GPU_OR_SKIP();
  auto cuda = cuda_backend(false);
  const Matrix m = make_matrix(DType::kQ4_0, 64, 512, 1);
  Device x(*cuda, random_values(512, 2)), y(*cuda, 64);
  cuda->matmul(m.w, x.data(), 1, y.data());  // uploads the weights
  y.read(64);
  const std::string before = cuda_counts_json();
  cuda->matmul(m.w, x.data(), 1, y.data());
  const std::string after = cuda_counts_json();
  y.read(64);
  const std::string read = cuda_counts_json();
  EXPECT_EQ(count_of(after, "launches") - count_of(before, "launches"), 2u) << before << after;
  EXPECT_EQ(count_of(after, "syncs"), count_of(before, "syncs"));
  EXPECT_EQ(count_of(after, "mallocs"), count_of(before, "mallocs"));
  EXPECT_EQ(count_of(read, "syncs") - count_of(after, "syncs"), 1u);
  EXPECT_EQ(count_of(read, "downloads") - count_of(after, "downloads"), 1u);
}

// Time per product of the 8B shape's matrices, old kernels beside new, for the device check
// (prints; asserts nothing about speed). Microseconds from the host clock over 50 launches
// ended by one sync; GB/s counts the weight bytes.
TEST(CudaProducts, TimingOfTheDecodeProducts) {
  GPU_OR_SKIP();
  struct Shape { const char* name; int64_t rows, cols; };
  const Shape shapes[] = {{"attn_q", 4096, 4096}, {"attn_kv", 1024, 4096},
                          {"ffn_up", 14336, 4096}, {"ffn_down", 4096, 14336}};
  const char* only = std::getenv("PAGODA_TIMING_TYPES");  // e.g. "Q4_0,Q4_K"
  for (DType type : {DType::kQ4_0, DType::kQ4_K, DType::kQ6_K, DType::kQ8_0}) {
    if (only && std::string(only).find(name_of(type)) == std::string::npos) continue;
    for (const Shape& s : shapes) {
      const Matrix m = make_matrix(type, s.rows, s.cols, 3);
      const std::vector<float> x = random_values(s.cols, 4);
      double us[2] = {0, 0};
      for (int old = 0; old < 2; ++old) {
        auto cuda = cuda_backend(old == 1);
        Device dx(*cuda, x), dy(*cuda, s.rows);
        cuda->matmul(m.w, dx.data(), 1, dy.data());  // uploads the weights
        dy.read(1);
        const int reps = 50;
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < reps; ++i) cuda->matmul(m.w, dx.data(), 1, dy.data());
        dy.read(1);
        us[old] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / reps;
      }
      const double gb = static_cast<double>(m.bytes.size()) / 1e9;
      std::printf("  timing %-5s %-8s %6lldx%-6lld old %8.1f us %7.1f GB/s   new %8.1f us %7.1f GB/s\n",
                  name_of(type).c_str(), s.name, static_cast<long long>(s.rows),
                  static_cast<long long>(s.cols), us[1], gb / (us[1] * 1e-6), us[0],
                  gb / (us[0] * 1e-6));
    }
  }
}

}  // namespace
}  // namespace pagoda
