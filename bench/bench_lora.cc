// The cost of LoRA adapters in a decode step: every product of a SmolLM2-135M-shaped model (30
// layers, Q4_1 weights, 576 wide, feed-forward 1536) at 16 tokens, with no adapter or with the
// tokens split evenly over N rank-16 F16 adapters on q/k/v/o/gate/up/down, called as
// LoraBackend calls the backend (the base products, then one add_low_rank per product group).
//   build/bench/bench_lora [--benchmark_filter=adapters:8]
// Every adapter's matrices are distinct memory (8 adapters: about 78 MB, as many bytes as the
// base weights), so a step reads them from DRAM.
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"
#include "quant/reference.h"

namespace {

using pagoda::Backend;
using pagoda::DType;
using pagoda::WeightMatrix;

constexpr int64_t kLayers = 30, kHidden = 576, kKv = 192, kFfn = 1536, kRank = 16, kTokens = 16;

// Random bytes of one matrix in `type` (rows x cols), kept alive by `store`.
WeightMatrix random_matrix(DType type, int64_t rows, int64_t cols, std::mt19937& rng,
                           std::vector<std::unique_ptr<std::vector<uint8_t>>>& store) {
  std::normal_distribution<float> normal(0.0f, 0.05f);
  const uint64_t row_bytes = pagoda::row_bytes(type, cols);
  auto bytes = std::make_unique<std::vector<uint8_t>>(row_bytes * static_cast<uint64_t>(rows));
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : row) v = normal(rng);
    pagoda::quantize_row(type, row.data(), bytes->data() + row_bytes * static_cast<uint64_t>(r), cols);
  }
  WeightMatrix w{type, rows, cols, bytes->data(), row_bytes};
  w.id = pagoda::new_weight_id();
  store.push_back(std::move(bytes));
  return w;
}

// One layer's base matrices and, per adapter, an (A, B) pair for each.
struct Layer {
  WeightMatrix q, k, v, o, gate, up, down;
  std::vector<std::vector<std::pair<WeightMatrix, WeightMatrix>>> pairs;  // [adapter][7]
};

struct Model {
  std::vector<std::unique_ptr<std::vector<uint8_t>>> store;
  std::vector<Layer> layers;
};

Model make_model(int adapters) {
  Model m;
  std::mt19937 rng(5);
  for (int64_t l = 0; l < kLayers; ++l) {
    Layer layer;
    const auto base = [&](int64_t rows, int64_t cols) {
      return random_matrix(DType::kQ4_1, rows, cols, rng, m.store);
    };
    layer.q = base(kHidden, kHidden), layer.k = base(kKv, kHidden), layer.v = base(kKv, kHidden);
    layer.o = base(kHidden, kHidden), layer.gate = base(kFfn, kHidden);
    layer.up = base(kFfn, kHidden), layer.down = base(kHidden, kFfn);
    for (int a = 0; a < adapters; ++a) {
      std::vector<std::pair<WeightMatrix, WeightMatrix>> pairs;
      for (const WeightMatrix* w : {&layer.q, &layer.k, &layer.v, &layer.o, &layer.gate,
                                    &layer.up, &layer.down}) {
        pairs.emplace_back(random_matrix(DType::kF16, kRank, w->cols, rng, m.store),
                           random_matrix(DType::kF16, w->rows, kRank, rng, m.store));
      }
      layer.pairs.push_back(std::move(pairs));
    }
    m.layers.push_back(std::move(layer));
  }
  return m;
}

// One step's products over the layers; `rows[a]` are adapter a's tokens.
void step(Backend& backend, const Model& m, const std::vector<std::vector<int32_t>>& rows,
          std::vector<float>& x, std::vector<float>& xf, std::vector<float>* y) {
  std::vector<Backend::LowRankTerm> terms;
  const auto group = [&](std::initializer_list<Backend::Product> products,
                         std::initializer_list<int> which, const Layer& layer, const float* in) {
    terms.clear();
    auto p = products.begin();
    for (int w : which) {
      for (size_t a = 0; a < layer.pairs.size(); ++a) {
        const auto& [A, B] = layer.pairs[a][static_cast<size_t>(w)];
        terms.push_back({&A, &B, 0.5f, p->y, rows[a]});
      }
      ++p;
    }
    backend.matmul_many(products, in, kTokens);
    if (!terms.empty()) backend.add_low_rank(terms, in, kTokens);
  };
  for (const Layer& l : m.layers) {
    group({{&l.q, y[0].data()}, {&l.k, y[1].data()}, {&l.v, y[2].data()}}, {0, 1, 2}, l, x.data());
    group({{&l.o, y[3].data()}}, {3}, l, x.data());
    group({{&l.gate, xf.data()}, {&l.up, y[4].data()}}, {4, 5}, l, x.data());
    group({{&l.down, y[5].data()}}, {6}, l, xf.data());
  }
}

void lora_step(benchmark::State& state) {
  const int adapters = static_cast<int>(state.range(0));
  const Model m = make_model(adapters);
  auto backend = pagoda::make_cpu_backend(static_cast<int>(state.range(1)));
  std::vector<std::vector<int32_t>> rows(static_cast<size_t>(adapters));
  for (int32_t t = 0; t < kTokens; ++t) {
    if (adapters > 0) rows[static_cast<size_t>(t % adapters)].push_back(t);
  }
  std::vector<float> x(kTokens * kHidden, 0.1f), xf(kTokens * kFfn, 0.1f);
  std::vector<float> y[6];
  for (auto& v : y) v.assign(kTokens * kFfn, 0.0f);
  step(*backend, m, rows, x, xf, y);  // packs every matrix
  for (auto _ : state) {
    step(*backend, m, rows, x, xf, y);
    benchmark::DoNotOptimize(y[5].data());
  }
  state.counters["tok/s"] = benchmark::Counter(static_cast<double>(kTokens) * state.iterations(),
                                               benchmark::Counter::kIsRate);
}

}  // namespace

// {adapters, threads}
BENCHMARK(lora_step)
    ->ArgNames({"adapters", "threads"})
    ->Args({0, 2})
    ->Args({1, 2})
    ->Args({8, 2})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

BENCHMARK_MAIN();
