// The server's Prometheus metrics: request counters by endpoint and status, token counters,
// latency histograms, and gauges read from the engine's stats at scrape time. Thread-safe:
// HTTP handler threads record, the /metrics handler renders.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine_stats.h"

namespace pagoda::server {

// A cumulative histogram with fixed upper bounds (seconds), as Prometheus defines one.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // The _bucket / _sum / _count lines of metric `name`.
  std::string render(const std::string& name) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // [bounds + 1]: the last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// `{model="id"}` with the id escaped as Prometheus labels need (empty for an empty id), and
// `extra` labels after it.
std::string model_labels(const std::string& model, const std::string& extra = "");
// `key="value"` with the value escaped as Prometheus labels need.
std::string label(const std::string& key, const std::string& value);

class ServerMetrics {
 public:
  ServerMetrics();

  void count_request(const std::string& endpoint, int status);
  // One finished generation request: its tokens and latencies (TTFT, and TPOT when it produced
  // more than one token; negative = not measured).
  void record_generation(int64_t prompt_tokens, int64_t generated_tokens, double ttft_s,
                         double tpot_s, double e2e_s);
  void count_abort() { std::lock_guard lock(mutex_); ++num_aborted_; }
  // A finished request of LoRA adapter `adapter` (also counted by record_generation).
  void record_adapter(const std::string& adapter, int64_t prompt_tokens, int64_t generated_tokens);
  // An unloaded adapter's series end (names loaded and unloaded at run time are not bounded).
  void forget_adapter(const std::string& adapter);

  // The whole exposition (text format 0.0.4), engine gauges from `stats`.
  std::string render(const EngineStats& stats) const;
  // A server of several models: each engine series labelled model="id" (an empty id: none).
  using ModelStats = std::vector<std::pair<std::string, EngineStats>>;
  std::string render(const ModelStats& models) const;

 private:
  static void render_engines(std::ostringstream& out, const ModelStats& models);

  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;  // (endpoint, status) -> count
  uint64_t prompt_tokens_ = 0;
  uint64_t generated_tokens_ = 0;
  uint64_t num_aborted_ = 0;
  struct AdapterCounts {
    uint64_t requests = 0, prompt_tokens = 0, generated_tokens = 0;
  };
  std::map<std::string, AdapterCounts> adapters_;
  Histogram ttft_;
  Histogram tpot_;
  Histogram e2e_;
};

}  // namespace pagoda::server
