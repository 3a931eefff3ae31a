// Reports of `pagoda bench serve`: the endpoints' runs side by side as a terminal table, one CSV
// row per run, JSON with every number, and SVG charts (latency percentiles as grouped bars; for a
// concurrency sweep, output throughput against concurrency).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/metrics.h"
#include "bench/report.h"
#include "bench/serve_load.h"

namespace pagoda::bench {

// What the command was asked to do, echoed in the JSON.
struct ServeSettings {
  std::string api = "completions";  // or "chat"
  uint64_t num_prompts = 0;
  std::string prompt_len;  // as given: "256" or "64:512" (empty with a dataset)
  std::string output_len;  // as given (empty: a dataset's reply lengths)
  std::string dataset;
  uint64_t seed = 0;
  double timeout_s = 0;
  double request_rate = 0;            // infinite: all at once (null in JSON)
  uint64_t max_concurrency = 0;       // 0: none
  std::vector<uint64_t> concurrency;  // the --concurrency levels, if given
  SloLimits goodput;
};

// The column name of a run: its label, with the concurrency when several were swept.
std::string run_name(const EndpointRun& run, bool with_concurrency);

// How the load was applied: "concurrency 4", "rate 2/s, max 8", "all at once".
std::string load_text(const EndpointRun& run);

// The most frequent error of a run with its count ("" when nothing failed).
std::string top_error(const EndpointRun& run);

nlohmann::ordered_json serve_json(const ServeSettings& settings,
                                  const std::vector<EndpointRun>& runs);
Table serve_table(const std::vector<EndpointRun>& runs);  // a row per metric, a column per run
Table serve_csv(const std::vector<EndpointRun>& runs);    // a row per run
std::string serve_svg(const std::vector<EndpointRun>& runs);

// Several complete SVG documents stacked top to bottom in one (nested <svg> elements).
std::string stack_svgs(const std::vector<std::string>& charts);

}  // namespace pagoda::bench
