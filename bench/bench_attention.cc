// Paged attention speed at the shapes continuous batching runs: one layer of a Llama-3.2-1B
// shape (32 query heads, 8 KV heads, head dim 64, blocks of 16) for S sequences of C cached
// tokens each, their blocks shuffled through a pool as a long-running engine leaves them.
//   decode: one new token per sequence (each step of a batched decode);
//   prefill: a 512-token prompt chunk of one sequence.
// Reported: K/V GB/s read (decode) and GFLOP/s of the q.k and p.v products.
//   build/bench/bench_attention [--benchmark_filter=decode]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/large_buffer.h"

namespace {

constexpr int32_t kHeads = 32, kKvHeads = 8, kHeadDim = 64, kBlock = 16;

struct Case {
  pagoda::LargeBuffer k, v;  // as the engine's KV cache (huge pages where the system gives them)
  std::vector<int32_t> positions, query_start, table;
  std::vector<int64_t> slots;
  std::vector<float> q, out;
  pagoda::AttentionBatch batch;
  pagoda::AttentionParams params;
  pagoda::KvLayer layer;
  double kv_bytes_read = 0, flops = 0;
};

// `seqs` sequences with `context` cached tokens, of which the last `new_tokens` are the queries.
Case make_case(int32_t seqs, int32_t context, int32_t new_tokens, pagoda::KvType kv_type) {
  Case c;
  const int32_t blocks_per_seq = (context + kBlock - 1) / kBlock;
  const int64_t num_blocks = int64_t{seqs} * blocks_per_seq;
  const auto head_bytes = static_cast<size_t>(pagoda::kv_head_bytes(kv_type, kHeadDim));
  const size_t layer_bytes = num_blocks * kBlock * kKvHeads * head_bytes;
  std::mt19937 rng(3);
  c.k = pagoda::LargeBuffer(layer_bytes, "K");
  c.v = pagoda::LargeBuffer(layer_bytes, "V");
  for (size_t i = 0; i + 1 < layer_bytes; i += 2) {  // small values in every type
    const uint16_t h = static_cast<uint16_t>(0x2c00 + rng() % 0x400);
    std::memcpy(c.k.data() + i, &h, 2);
    std::memcpy(c.v.data() + i, &h, 2);
  }
  std::vector<int32_t> order(static_cast<size_t>(num_blocks));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  c.table = order;
  c.query_start.push_back(0);
  for (int32_t s = 0; s < seqs; ++s) {
    for (int32_t t = context - new_tokens; t < context; ++t) {
      c.positions.push_back(t);
      c.slots.push_back(int64_t{c.table[s * blocks_per_seq + t / kBlock]} * kBlock + t % kBlock);
      c.flops += 4.0 * (t + 1) * kHeadDim * kHeads;
    }
    c.query_start.push_back(static_cast<int32_t>(c.positions.size()));
  }
  const auto tokens = static_cast<int32_t>(c.positions.size());
  std::normal_distribution<float> normal(0.0f, 1.0f);
  c.q.resize(static_cast<size_t>(tokens) * kHeads * kHeadDim);
  for (float& x : c.q) x = normal(rng);
  c.out.resize(c.q.size());
  c.batch = {tokens, c.positions.data(), c.slots.data(), seqs, c.query_start.data(), c.table.data(),
             blocks_per_seq, kBlock};
  c.params = {kHeads, kKvHeads, kHeadDim, 0.125f, 0};
  c.layer = {c.k.data(), c.v.data(), kv_type};
  c.kv_bytes_read = 2.0 * seqs * context * kKvHeads * static_cast<double>(head_bytes);
  return c;
}

void attention(benchmark::State& state, pagoda::KvType kv_type, int32_t new_tokens) {
  const auto seqs = static_cast<int32_t>(state.range(0));
  const auto context = static_cast<int32_t>(state.range(1));
  Case c = make_case(seqs, context, new_tokens, kv_type);
  auto backend = pagoda::make_cpu_backend(2);
  for (auto _ : state) {
    backend->attention(c.q.data(), c.layer, c.batch, c.params, c.out.data());
    benchmark::DoNotOptimize(c.out.data());
  }
  const auto n = static_cast<double>(state.iterations());
  state.counters["KV_GB/s"] = benchmark::Counter(c.kv_bytes_read * n / 1e9, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(c.flops * n / 1e9, benchmark::Counter::kIsRate);
}

}  // namespace

int main(int argc, char** argv) {
  for (const pagoda::KvTypeInfo& t : pagoda::kv_types()) {
    const pagoda::KvType type = t.type;
    const std::string name(t.name);
    benchmark::RegisterBenchmark(("decode/" + name + "/threads:2").c_str(), attention, type, 1)
        ->ArgNames({"seqs", "context"})
        ->Args({64, 384})
        ->Args({16, 512})
        ->Args({1, 512})
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("prefill/" + name + "/threads:2").c_str(), attention, type, 512)
        ->ArgNames({"seqs", "context"})
        ->Args({1, 512})
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
