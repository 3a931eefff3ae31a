// `--hardware this`: a short run-time measurement of the machine the estimate runs on. The
// products go through the CPU backend, so what is measured is what pagoda's kernels reach, not
// the instruction-set peak.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "planner/hardware.h"
#include "core/dtype.h"
#include "core/error.h"
#include "quant/reference.h"

namespace pagoda {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The fastest of repeated calls within `budget_s` (at least 3): on a shared machine the
// fastest is the one least disturbed.
template <typename F>
double best_time(F&& call, double budget_s) {
  double best = 1e30;
  const auto start = Clock::now();
  for (int i = 0; i < 3 || seconds_since(start) < budget_s; ++i) {
    const auto t0 = Clock::now();
    call();
    best = std::min(best, seconds_since(t0));
    if (i > 10000) break;
  }
  return best;
}

// Bytes per second a one-token product streams from memory (decode's case), over 256 MiB of
// `type` (8x the last-level cache of most servers; one quantized row, marked per row). Its own
// arithmetic is left in: at one token it mostly hides under the loads, and what does not
// stands for the small calls of a real step that stream less well than one large product.
double decode_bandwidth(Backend& backend, DType type, double budget_s) {
  constexpr int64_t kCols = 4096;
  const size_t bytes_per_row = row_bytes(type, kCols);
  const int64_t rows = static_cast<int64_t>((size_t{256} << 20) / bytes_per_row) / 64 * 64;
  std::vector<float> row(kCols);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (float& v : row) v = normal(rng);
  std::vector<uint8_t> data(bytes_per_row * rows);
  quantize_row(type, row.data(), data.data(), kCols);
  // Every row differs in one quant byte (Q6_K ends in its F16 scale: its first byte then), so
  // no two pages are alike for a hypervisor to merge into one cached copy.
  const size_t mark = type == DType::kQ6_K ? 0 : bytes_per_row - 1;
  for (int64_t r = 1; r < rows; ++r) {
    uint8_t* dst = data.data() + r * bytes_per_row;
    std::copy_n(data.data(), bytes_per_row, dst);
    dst[mark] = static_cast<uint8_t>(r * 131 + (r >> 8));
  }
  WeightMatrix w;
  w.type = type;
  w.rows = rows;
  w.cols = kCols;
  w.data = data.data();
  w.row_bytes = bytes_per_row;
  w.id = new_weight_id();
  backend.prepare(w);
  std::vector<float> x(kCols, 0.01f), y(rows);
  const double t = best_time([&] { backend.matmul(w, x.data(), 1, y.data()); }, budget_s);
  return static_cast<double>(data.size()) / t;
}

// Flops per second of a product of 256 tokens by a `rows` x `cols` matrix of `type` (the
// model's feed-forward shape, which holds most of its flops: kernels run faster on narrow
// rows that stay in cache than on wide ones).
double product_rate(Backend& backend, DType type, int64_t kRows, int64_t kCols, double budget_s) {
  constexpr int64_t kTokens = 256;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> row(kCols);
  const size_t bytes_per_row = row_bytes(type, kCols);
  std::vector<uint8_t> data(bytes_per_row * kRows);
  for (int64_t r = 0; r < kRows; ++r) {
    for (float& v : row) v = normal(rng);
    quantize_row(type, row.data(), data.data() + r * bytes_per_row, kCols);
  }
  WeightMatrix w;
  w.type = type;
  w.rows = kRows;
  w.cols = kCols;
  w.data = data.data();
  w.row_bytes = bytes_per_row;
  w.id = new_weight_id();
  backend.prepare(w);
  std::vector<float> x(kTokens * kCols), y(kTokens * kRows);
  for (float& v : x) v = normal(rng);
  const double t = best_time([&] { backend.matmul(w, x.data(), kTokens, y.data()); }, budget_s);
  return 2.0 * kRows * kCols * kTokens / t;
}

// Median time of a backend call with next to nothing to compute (one token through a 64 x 256
// matrix): the hand-off to the worker threads and back that each of a layer's calls costs.
double call_overhead(Backend& backend, double budget_s) {
  constexpr int64_t kRows = 64, kCols = 256;
  std::vector<uint16_t> data(kRows * kCols, 0x3c00);  // F16 ones
  WeightMatrix w;
  w.type = DType::kF16;
  w.rows = kRows;
  w.cols = kCols;
  w.data = reinterpret_cast<const uint8_t*>(data.data());
  w.row_bytes = kCols * 2;
  w.id = new_weight_id();
  backend.prepare(w);
  std::vector<float> x(kCols, 1.0f), y(kRows);
  std::vector<double> times;
  const auto start = Clock::now();
  while (times.size() < 200 || (seconds_since(start) < budget_s && times.size() < 100000)) {
    const auto t0 = Clock::now();
    backend.matmul(w, x.data(), 1, y.data());
    times.push_back(seconds_since(t0));
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

double mem_total_gib() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  while (in >> key >> kib) {
    if (key == "MemTotal:") return static_cast<double>(kib) / (1024.0 * 1024.0);
    in.ignore(256, '\n');
  }
  fail("--hardware this: cannot read MemTotal from /proc/meminfo");
}

}  // namespace

HardwareProfile probe_this_machine(const ProbeOptions& o) {
  const auto type = dtype_from_name(o.weight_type);
  if (!type || !can_quantize(*type)) {
    fail("--hardware this: cannot time products of ", o.weight_type, " weights");
  }
  const int threads =
      o.num_threads > 0 ? o.num_threads : std::max(1u, std::thread::hardware_concurrency());
  auto backend = make_cpu_backend(threads);
  int64_t rows = o.rows, cols = o.cols;
  const auto& traits = dtype_traits(*type);
  if (rows < 16 || cols < 256 || cols % traits.block_size != 0 ||
      rows * cols > (int64_t{1} << 26)) {
    rows = cols = 2048;  // a shape the kernels cannot take whole, or too large to time quickly
  }
  const double fma = product_rate(*backend, DType::kF16, rows, cols, o.seconds_per_test);
  const double int8 = product_rate(*backend, *type, rows, cols, o.seconds_per_test);
  const double bandwidth = decode_bandwidth(*backend, *type, o.seconds_per_test);
  const double call = call_overhead(*backend, o.seconds_per_test / 2);

  HardwareProfile p;
  p.name = "this";
  p.kind = DeviceKind::kCpu;
  p.description = "this machine, " + std::to_string(threads) + " threads, measured";
  const std::string probe = "probe";
  p.figures["memory_gib"] = {mem_total_gib(), "probe (MemTotal)"};
  p.figures["bandwidth_gbs"] = {bandwidth / 1e9,
                                probe + " (1-token " + o.weight_type + " product over 256 MiB)"};
  const std::string shape = std::to_string(rows) + " x " + std::to_string(cols);
  p.figures["f32_tflops"] = {fma / 1e12, probe + " (F16 " + shape + " product, 256 tokens)"};
  p.figures["f16_tflops"] = {fma / 1e12, probe + " (F16 " + shape + " product, 256 tokens)"};
  p.figures["int8_tops"] = {int8 / 1e12,
                            probe + " (" + o.weight_type + " " + shape + " product, 256 tokens)"};
  p.figures["fp8_tflops"] = {0, "none"};
  p.figures["link_gbs"] = {0, "none"};
  p.figures["link_latency_us"] = {0, "none"};
  p.figures["price_per_hour"] = {0, "unknown (give --hw price_per_hour=...)"};
  // The probe measured what the kernels reach, so no further discount.
  p.figures["memory_utilization"] = {0.9, "modelled (the OS keeps the rest)"};
  p.figures["bandwidth_efficiency"] = {1.0, "measured by the probe"};
  p.figures["compute_efficiency"] = {1.0, "measured by the probe"};
  p.figures["step_overhead_ms"] = {0.3, "modelled"};
  p.figures["overlap"] = {0, "modelled (the same cores load and multiply)"};
  // A layer of the forward pass is 13 backend calls.
  p.figures["layer_overhead_us"] = {13 * call * 1e6, "probe (13 x a near-empty call)"};
  return p;
}

}  // namespace pagoda
