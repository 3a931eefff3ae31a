// The CUDA backend's prompt attention on the F16 tensor cores (cuda_flash.cuh), run on the host:
// the kernel's tiles, rows, mask, K/V addresses and online softmax, with F16-rounded operands,
// against the reference backend over a paged F16 cache (GQA, sliding windows, block sizes that
// do and do not divide a chunk, prompts that start past position 0). No GPU needed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_flash.cuh"
#include "backend/kv_format.h"

namespace pagoda {
namespace {

std::vector<float> random_values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// The PTX ISA's m16n8k16 layout, a few entries written out (lane 5: group 1, thread 1), and the
// identity that lets the scores' C tiles serve as P's A fragment without a shuffle.
TEST(CudaFlash, FragmentMappingIsThePtxLayout) {
  EXPECT_EQ(cuda::f16_a_row(5, 1), 9);
  EXPECT_EQ(cuda::f16_a_k(5, 2), 10);
  EXPECT_EQ(cuda::f16_b_k(5, 1), 10);
  EXPECT_EQ(cuda::f16_b_col(5), 1);
  EXPECT_EQ(cuda::f16_c_row(5, 3), 9);
  EXPECT_EQ(cuda::f16_c_col(5, 3), 3);
  std::set<std::pair<int, int>> a, b;
  for (int l = 0; l < 32; ++l) {
    for (int r = 0; r < 4; ++r) {
      for (int h = 0; h < 2; ++h) a.insert({cuda::f16_a_row(l, r), cuda::f16_a_k(l, r) + h});
      // A register r of step s holds C tile p_tile(s, r)'s values p_value(r), + 1: same row,
      // and the positions 16 s + f16_a_k(l, r), + 1.
      for (int s = 0; s < 2; ++s) {
        const int tile = cuda::p_tile(s, r), i = cuda::p_value(r);
        EXPECT_EQ(cuda::f16_c_row(l, i), cuda::f16_a_row(l, r));
        EXPECT_EQ(cuda::f16_c_row(l, i + 1), cuda::f16_a_row(l, r));
        EXPECT_EQ(8 * tile + cuda::f16_c_col(l, i), 16 * s + cuda::f16_a_k(l, r));
        EXPECT_EQ(8 * tile + cuda::f16_c_col(l, i + 1), 16 * s + cuda::f16_a_k(l, r) + 1);
      }
    }
    for (int r = 0; r < 2; ++r) {
      for (int h = 0; h < 2; ++h) b.insert({cuda::f16_b_k(l, r) + h, cuda::f16_b_col(l)});
    }
  }
  EXPECT_EQ(a.size(), 16u * 16u);
  EXPECT_EQ(b.size(), 16u * 8u);
}

TEST(CudaFlash, TilesAndRows) {
  EXPECT_EQ(cuda::flash_tile_tokens(1), 64);
  EXPECT_EQ(cuda::flash_tile_tokens(4), 16);
  EXPECT_EQ(cuda::flash_tile_tokens(3), 21);
  // Group of 3, tile of 21 tokens from token 40, KV head 2: row 62 is token 60's third head.
  const cuda::FlashRow r = cuda::flash_row(40, 21, 3, 2, 62);
  EXPECT_EQ(r.token, 60);
  EXPECT_EQ(r.head, 8);
  EXPECT_EQ(cuda::flash_row(40, 21, 3, 2, 63).token, -1);  // 63 = 21 * 3: past the tile
  EXPECT_EQ(cuda::flash_row(40, 5, 3, 0, 15).token, -1);   // a short tile
  // Tiles break at a gap in the positions and at the size.
  const std::vector<int32_t> positions = {0, 1, 2, 3, 7, 8, 9, 10, 11};
  std::vector<int32_t> tiles;
  cuda::prompt_tiles(positions.data(), 0, 9, 3, &tiles);
  EXPECT_EQ(tiles, (std::vector<int32_t>{0, 3, 3, 1, 4, 3, 7, 2}));
  EXPECT_TRUE(cuda::sees(10, 0, 0));
  EXPECT_FALSE(cuda::sees(10, 0, 11));
  EXPECT_TRUE(cuda::sees(10, 5, 6));
  EXPECT_FALSE(cuda::sees(10, 5, 5));
  const cuda::SoftmaxStep nothing = cuda::softmax_step(-INFINITY, -INFINITY);
  EXPECT_EQ(nothing.correction, 0.0f);
  EXPECT_EQ(std::exp(-INFINITY - nothing.base), 0.0f);
}

struct Case {
  int32_t heads, kv_heads, head_dim, window, block_size;
  bool sinks = false;  // a learned logit per query head in each row's softmax (gpt-oss)
};

// Largest |a - b| over the largest |b|, over the tokens' rows only.
double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::fabs(double(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return diff / scale;
}

struct Errors {
  double host = 0;         // the host emulation against the reference
  double device = 0;       // the device against the reference (with a device)
  double device_host = 0;  // the device against the host emulation
};

// The device's attention over the same cache contents (written by its own write_kv).
std::vector<float> on_device(Backend& cuda, const std::vector<float>& q, const std::vector<float>& k,
                             const std::vector<float>& v, const AttentionBatch& b,
                             const AttentionParams& p, uint64_t bytes) {
  auto dk = cuda.allocate(bytes, "test"), dv = cuda.allocate(bytes, "test");
  auto put = [&](const std::vector<float>& host) {
    auto buffer = cuda.allocate(host.size() * sizeof(float), "test");
    cuda.upload(host.data(), host.size() * sizeof(float), buffer->data());
    return buffer;
  };
  auto dq = put(q), dkeys = put(k), dvalues = put(v), out = put(std::vector<float>(q.size()));
  const KvLayer cache{dk->data(), dv->data(), KvType::kF16};
  cuda.write_kv(static_cast<float*>(dkeys->data()), static_cast<float*>(dvalues->data()), b, p, cache);
  cuda.attention(static_cast<float*>(dq->data()), cache, b, p, static_cast<float*>(out->data()));
  std::vector<float> host(q.size());
  cuda.download(out->data(), host.size() * sizeof(float), host.data());
  return host;
}

// Three prompts over shuffled blocks: 37 tokens from 0, 301 from 0 (many chunks), 50 from 100
// (a prompt after a cached prefix: positions 0 .. 99 were never written and read as zeros by
// both sides).
Errors flash_error(const Case& c, Backend* cuda = nullptr) {
  const int32_t bs = c.block_size, max_blocks = 400 / bs + 2, num_seqs = 3;
  const int32_t num_blocks = num_seqs * max_blocks;
  std::vector<int32_t> table(static_cast<size_t>(num_blocks));
  for (int32_t i = 0; i < num_blocks; ++i) table[i] = (i * 37 + 11) % num_blocks;
  std::vector<int32_t> positions, query_start = {0}, seq_of;
  std::vector<int64_t> slots;
  const int32_t spans[num_seqs][2] = {{0, 37}, {0, 301}, {100, 150}};
  for (int32_t s = 0; s < num_seqs; ++s) {
    for (int32_t pos = spans[s][0]; pos < spans[s][1]; ++pos) {
      positions.push_back(pos);
      seq_of.push_back(s);
      slots.push_back(int64_t{table[s * max_blocks + pos / bs]} * bs + pos % bs);
    }
    query_start.push_back(static_cast<int32_t>(positions.size()));
  }
  const auto n = static_cast<int32_t>(positions.size());
  AttentionBatch b{n, positions.data(), slots.data(), num_seqs, query_start.data(),
                   table.data(), max_blocks, bs};
  AttentionParams p{c.heads, c.kv_heads, c.head_dim, 1.0f / std::sqrt(float(c.head_dim)), c.window};
  // Sinks from -3 to 4 against scores of order 1: from negligible to most of a row's weight.
  std::vector<float> sinks;
  for (int32_t h = 0; h < c.heads; ++h) sinks.push_back(-3.0f + 7.0f * static_cast<float>(h) / c.heads);
  if (c.sinks) p.sinks = sinks.data();
  const int64_t kv = int64_t{n} * c.kv_heads * c.head_dim, qn = int64_t{n} * c.heads * c.head_dim;
  const std::vector<float> k = random_values(kv, 21), v = random_values(kv, 22),
                           q = random_values(qn, 23);
  const uint64_t bytes = uint64_t(num_blocks) * bs * c.kv_heads * kv_head_bytes(KvType::kF16, c.head_dim);
  std::vector<uint8_t> hk(bytes), hv(bytes);
  KvLayer cache{hk.data(), hv.data(), KvType::kF16};
  auto ref = make_reference_backend();
  ref->write_kv(k.data(), v.data(), b, p, cache);
  std::vector<float> expected(static_cast<size_t>(qn)), got(static_cast<size_t>(qn), NAN);
  ref->attention(q.data(), cache, b, p, expected.data());
  std::vector<int32_t> tiles;
  for (int32_t s = 0; s < num_seqs; ++s) {
    cuda::prompt_tiles(positions.data(), query_start[s], query_start[s + 1],
                       cuda::flash_tile_tokens(c.heads / c.kv_heads), &tiles);
  }
  cuda::flash_attention_host(q.data(), reinterpret_cast<const uint16_t*>(hk.data()),
                             reinterpret_cast<const uint16_t*>(hv.data()), seq_of.data(),
                             positions.data(), table.data(), max_blocks, bs, tiles.data(),
                             static_cast<int64_t>(tiles.size() / 2), c.heads, c.kv_heads,
                             c.head_dim, p.scale, c.window, p.sinks, got.data());
  Errors e;
  e.host = relative_error(got, expected);  // a row left unwritten is NaN: fails
  if (cuda != nullptr) {
    const std::vector<float> device = on_device(*cuda, q, k, v, b, p, bytes);
    e.device = relative_error(device, expected);
    e.device_host = relative_error(device, got);
  }
  return e;
}

// Measured: 1.9e-4 to 2.8e-4 (the F16 rounding of Q and P); the bound is about twice the largest, so
// a wrong mask, address or softmax step (errors of order 1) fails.
TEST(CudaFlash, HostEmulationMatchesTheReference) {
  const Case cases[] = {{8, 2, 64, 0, 16},  {8, 2, 128, 0, 16}, {8, 2, 64, 5, 16},
                        {8, 2, 64, 300, 16}, {6, 2, 64, 0, 48},  {4, 4, 128, 70, 32},
                        {8, 1, 64, 0, 8},   {8, 2, 64, 0, 16, true}, {4, 4, 128, 70, 32, true}};
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.heads) + "/" + std::to_string(c.kv_heads) + " heads, dim " +
                 std::to_string(c.head_dim) + ", window " + std::to_string(c.window) +
                 ", block " + std::to_string(c.block_size) + (c.sinks ? ", sinks" : ""));
    const double error = flash_error(c).host;
    std::printf("  flash emulation against the reference: %.3g\n", error);
    EXPECT_LT(error, 6e-4);
  }
}

// On a device: the kernel against the reference (the host emulation's bound) and against the
// emulation (the same operands; the sums inside one product run in another order, and where
// that moves a probability across an F16 rounding boundary P differs by one F16 step, 2^-11).
TEST(CudaFlash, DeviceMatchesTheReferenceAndTheEmulation) {
  if (!cuda_backend_built()) GTEST_SKIP() << "*** built without the CUDA backend: SKIPPING ***";
  if (cuda_device_count() == 0) GTEST_SKIP() << "*** no CUDA device: SKIPPING a GPU test ***";
  auto cuda = make_cuda_backend(0);
  for (const Case& c : {Case{8, 2, 64, 0, 16}, Case{8, 2, 128, 0, 16}, Case{8, 2, 64, 5, 16},
                        Case{6, 2, 64, 0, 48}, Case{4, 4, 128, 70, 32}, Case{8, 1, 64, 0, 8},
                        Case{8, 2, 64, 0, 16, true}, Case{4, 4, 128, 70, 32, true}}) {
    SCOPED_TRACE(std::to_string(c.heads) + "/" + std::to_string(c.kv_heads) + " heads, dim " +
                 std::to_string(c.head_dim) + ", window " + std::to_string(c.window) +
                 (c.sinks ? ", sinks" : ""));
    const Errors e = flash_error(c, cuda.get());
    std::printf("  flash on the device: %.3g against the reference, %.3g against the emulation\n",
                e.device, e.device_host);
    EXPECT_LT(e.device, 6e-4);
    EXPECT_LT(e.device_host, 3e-4);
  }
}

}  // namespace
}  // namespace pagoda
