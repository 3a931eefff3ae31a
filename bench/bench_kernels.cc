// CPU backend kernel speed: weight GB/s of a matrix-vector product (decode) and GFLOP/s of a
// 512-token matrix product (prefill) for each weight type, plus the machine's streaming read
// bandwidth to compare the GB/s against.
//   build/bench/bench_kernels [--benchmark_filter=Q4_K] (PAGODA_CPU_LEVEL=avx2|scalar to compare)
// The weights are 2048 inputs x 8192 outputs. "hot" repeats one matrix (it fits in a large L3),
// "cold" cycles through copies totalling 512 MiB so every pass streams from DRAM.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"
#include "quant/reference.h"

namespace {

using pagoda::DType;

constexpr int64_t kRows = 8192;
constexpr int64_t kCols = 2048;
constexpr int64_t kDistinctRows = 64;  // quantized once, then repeated (speed is data-blind)
constexpr size_t kColdBytes = size_t{512} << 20;

struct Matrices {
  std::vector<uint8_t> data;  // num_copies matrices back to back
  pagoda::WeightMatrix first;
  int64_t num_copies = 1;
  uint64_t bytes = 0;  // of one matrix
  std::vector<uint64_t> ids;  // per copy: WeightMatrix::id (all 0: row-major tiles only)

  pagoda::WeightMatrix copy(int64_t i) const {
    pagoda::WeightMatrix w = first;
    w.data = data.data() + i * bytes;
    w.id = ids[static_cast<size_t>(i)];
    return w;
  }
};

// `packed`: the matrices carry ids, so the backend packs them (types with a packed kernel).
Matrices make_matrices(DType type, bool cold, bool packed) {
  Matrices m;
  const uint64_t row_bytes = pagoda::row_bytes(type, kCols);
  m.bytes = row_bytes * kRows;
  m.num_copies = cold ? static_cast<int64_t>((kColdBytes + m.bytes - 1) / m.bytes) : 1;
  m.data.resize(m.bytes * m.num_copies);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> row(kCols);
  for (int64_t r = 0; r < kDistinctRows; ++r) {
    for (float& v : row) v = normal(rng);
    pagoda::quantize_row(type, row.data(), m.data.data() + r * row_bytes, kCols);
  }
  for (int64_t r = kDistinctRows; r < kRows * m.num_copies; ++r) {
    std::memcpy(m.data.data() + r * row_bytes, m.data.data() + (r % kDistinctRows) * row_bytes, row_bytes);
  }
  m.first = {type, kRows, kCols, m.data.data(), row_bytes};
  for (int64_t i = 0; i < m.num_copies; ++i) m.ids.push_back(packed ? pagoda::new_weight_id() : 0);
  m.first.id = m.ids[0];
  return m;
}

std::vector<float> random_activations(int64_t n) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = normal(rng);
  return x;
}

void matvec(benchmark::State& state, DType type, int threads, bool cold, bool packed) {
  Matrices m = make_matrices(type, cold, packed);
  auto backend = pagoda::make_cpu_backend(threads);
  std::vector<float> x = random_activations(kCols), y(kRows);
  for (int64_t i = 0; i < m.num_copies; ++i) backend->matmul(m.copy(i), x.data(), 1, y.data());  // packs
  int64_t copy = 0;
  for (auto _ : state) {
    backend->matmul(m.copy(copy++ % m.num_copies), x.data(), 1, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * m.bytes));
}

void matmul512(benchmark::State& state, DType type, int threads, bool packed) {
  constexpr int64_t kTokens = 512;
  Matrices m = make_matrices(type, false, packed);
  auto backend = pagoda::make_cpu_backend(threads);
  std::vector<float> x = random_activations(kTokens * kCols), y(kTokens * kRows);
  for (auto _ : state) {
    backend->matmul(m.first, x.data(), kTokens, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * kRows * kCols * kTokens * static_cast<double>(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
}

// The product at the batch sizes continuous batching runs (decode of many sequences, short
// prompt chunks): between the matrix-vector and the long-prefill cases above.
void matmul_batch(benchmark::State& state, DType type, bool packed) {
  const int64_t tokens = state.range(0);
  Matrices m = make_matrices(type, false, packed);
  auto backend = pagoda::make_cpu_backend(2);
  std::vector<float> x = random_activations(tokens * kCols), y(tokens * kRows);
  for (auto _ : state) {
    backend->matmul(m.first, x.data(), tokens, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * kRows * kCols * tokens * static_cast<double>(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
  state.counters["ms/token"] = benchmark::Counter(
      static_cast<double>(tokens) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// Sum of a 1 GiB array: the streaming read bandwidth that decode is measured against.
void stream_read(benchmark::State& state, int threads) {
  const size_t n = (size_t{1} << 30) / sizeof(uint64_t);
  std::unique_ptr<uint64_t[]> data(new uint64_t[n]);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (size_t i = 0; i < n; ++i) data[i] = i;
  for (auto _ : state) {
    uint64_t total = 0;
    // Four independent sums per thread, so the adds keep up with the loads.
#pragma omp parallel for num_threads(threads) schedule(static) reduction(+ : total)
    for (size_t i = 0; i < n; i += 8) {
      total += (data[i] + data[i + 4]) + (data[i + 1] + data[i + 5]) + (data[i + 2] + data[i + 6]) +
               (data[i + 3] + data[i + 7]);
    }
    benchmark::DoNotOptimize(total);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n * sizeof(uint64_t)));
}

#if defined(__x86_64__)
#include <immintrin.h>
// One core's float multiply-add ceiling: 512-bit FMAs on registers only, 12 independent chains
// (more than latency x throughput), against which the F16 / BF16 tiles are read.
__attribute__((target("avx512f"))) void fma_peak(benchmark::State& state) {
  constexpr int kChains = 12;
  constexpr int64_t kSteps = 1 << 20;
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
  for (auto _ : state) {
    for (int64_t s = 0; s < kSteps; ++s) {
      for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
    }
    for (int i = 0; i < kChains; ++i) benchmark::DoNotOptimize(acc[i]);
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * 16 * kChains * kSteps * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
#endif

constexpr DType kTypes[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ6_K, DType::kQ5_0,
                            DType::kF32,  DType::kF16,  DType::kQ4_1, DType::kQ5_1, DType::kQ5_K,
                            DType::kQ3_K, DType::kQ2_K, DType::kBF16, DType::kIQ4_NL, DType::kMXFP4};

}  // namespace

int main(int argc, char** argv) {
  // "/packed": weights packed by the backend (packed.h) where the type has a packed kernel.
  for (bool packed : {false, true}) {
    const std::string suffix = packed ? "/packed" : "";
    for (DType type : kTypes) {
      const std::string name(pagoda::dtype_traits(type).name);
      for (bool cold : {false, true}) {
        for (int threads : {1, 2}) {
          benchmark::RegisterBenchmark(
              ("matvec/" + name + (cold ? "/cold" : "/hot") + "/threads:" + std::to_string(threads) + suffix).c_str(),
              matvec, type, threads, cold, packed)
              ->UseRealTime()
              ->Unit(benchmark::kMicrosecond);
        }
      }
    }
    for (DType type : kTypes) {
      for (int threads : {1, 2}) {
        benchmark::RegisterBenchmark(
            ("matmul512/" + std::string(pagoda::dtype_traits(type).name) + "/threads:" + std::to_string(threads) + suffix).c_str(),
            matmul512, type, threads, packed)
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
      }
    }
    for (DType type : {DType::kQ4_0, DType::kQ4_K, DType::kQ8_0, DType::kQ6_K}) {
      benchmark::RegisterBenchmark(
          ("matmul_batch/" + std::string(pagoda::dtype_traits(type).name) + "/threads:2" + suffix).c_str(),
          matmul_batch, type, packed)
          ->Arg(1)->Arg(4)->Arg(8)->Arg(16)->Arg(32)->Arg(64)->Arg(256)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) {
    benchmark::RegisterBenchmark("fma_peak/threads:1", fma_peak)->UseRealTime()->Unit(benchmark::kMillisecond);
  }
#endif
  for (int threads : {1, 2}) {
    benchmark::RegisterBenchmark(("stream_read/threads:" + std::to_string(threads)).c_str(), stream_read, threads)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
