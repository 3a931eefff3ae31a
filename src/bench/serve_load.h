// The load side of `pagoda bench serve`: the request set (random words or a ShareGPT file, the
// same for every endpoint given the seed), arrival times (Poisson at a rate, or all at once), and
// the run itself: worker threads that each send one request at a time, so that at most
// `max_concurrency` are in flight, fed by a dispatcher that releases requests at their times.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "bench/metrics.h"
#include "bench/serve_client.h"
#include "planner/workload.h"  // LengthRange, parse_length_range

namespace pagoda::bench {

// The seeded generator every random choice here uses (SplitMix64: the same numbers everywhere,
// unlike the standard distributions).
class SeededRng {
 public:
  explicit SeededRng(uint64_t seed) : state_(seed) {}
  uint64_t next();
  double uniform();                            // [0, 1)
  uint64_t between(uint64_t lo, uint64_t hi);  // [lo, hi]
  double exponential(double rate);             // mean 1 / rate

 private:
  uint64_t state_;
};

// `count` prompts of common English words, each about its drawn prompt length in tokens (a
// word is about one token), with output lengths drawn from `output`.
std::vector<RequestSpec> random_text_requests(uint64_t count, LengthRange prompt,
                                              LengthRange output, uint64_t seed);

// `count` prompts from a ShareGPT-style JSON file (a list of {"conversations": [{"from",
// "value"}, ...]}): the first turn is the prompt, the second's size (about 4 bytes a token) the
// output length unless `output` is given. Conversations are shuffled with the seed and reused in
// turn when the file has fewer than `count`.
std::vector<RequestSpec> sharegpt_text_requests(const std::string& path, uint64_t count,
                                                std::optional<LengthRange> output, uint64_t seed);

// Send times in seconds from the start: the first at 0, then exponential gaps of mean 1 / rate
// (a Poisson process). An infinite rate sends everything at 0.
std::vector<double> arrival_times(uint64_t count, double rate, uint64_t seed);

// "ttft:500", "tpot:50", "e2el:2000" (milliseconds) into limits; throws Error on anything else.
SloLimits parse_goodput(const std::vector<std::string>& items);

struct LoadPlan {
  double request_rate = std::numeric_limits<double>::infinity();
  uint64_t max_concurrency = 0;  // 0: no cap (but at most 1024 threads)
  uint64_t seed = 0;
};

struct LoadProgress {
  uint64_t total = 0;
  uint64_t sent = 0;
  uint64_t finished = 0;
  uint64_t failed = 0;
  double elapsed_s = 0;
};

struct LoadResult {
  std::vector<StreamedResult> requests;  // every request that was sent, in request order
  double duration_s = 0;                 // start of the run to the last completion
  bool interrupted = false;              // `stop` was set: the rest were never sent
};

// Runs every request of `specs` against one endpoint. `on_progress` is called every few tenths
// of a second from the calling thread. Setting `stop` aborts requests in flight (they count as
// failed, "interrupted") and sends no more.
LoadResult run_load(const ClientConfig& config, const std::vector<RequestSpec>& specs,
                    const LoadPlan& plan, const std::atomic<bool>& stop,
                    const std::function<void(const LoadProgress&)>& on_progress = {});

// One endpoint's run, measured: what the report shows.
struct EndpointRun {
  std::string url;
  std::string label;  // the name in reports (--label, or host:port)
  std::string model;
  double request_rate = std::numeric_limits<double>::infinity();
  uint64_t max_concurrency = 0;    // 0: none
  bool fixed_concurrency = false;  // from --concurrency (closed loop) rather than a rate
  std::string setup_error;         // the endpoint could not be used (GET /v1/models failed)
  uint64_t num_usage_counted = 0;  // completed requests whose token counts came from `usage`
  bool interrupted = false;
  BenchMetrics metrics;
};

struct ServeTarget {
  std::string url;
  std::string label;
};

// Resolves the model (GET /v1/models when `config.model` is empty), runs the load and measures
// it. A failed model lookup counts every request as failed with that reason.
EndpointRun run_endpoint(const ServeTarget& target, ClientConfig config,
                         const std::vector<RequestSpec>& specs, const LoadPlan& plan,
                         const SloLimits& limits, const std::atomic<bool>& stop,
                         const std::function<void(const LoadProgress&)>& on_progress = {});

// "host:port" of a URL, the default label.
std::string url_label(const std::string& url);

}  // namespace pagoda::bench
