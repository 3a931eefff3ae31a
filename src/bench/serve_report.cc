// Tables, JSON and charts of `pagoda bench serve` runs. Times are seconds in BenchMetrics and
// milliseconds in every report.
#include "bench/serve_report.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>

namespace pagoda::bench {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct MetricRef {
  const char* key;   // JSON key / CSV prefix
  const char* name;  // for people
  Summary BenchMetrics::*summary;
};
constexpr MetricRef kLatencies[] = {
    {"ttft", "TTFT", &BenchMetrics::ttft_s},
    {"tpot", "TPOT", &BenchMetrics::tpot_s},
    {"itl", "ITL", &BenchMetrics::itl_s},
    {"e2el", "E2EL", &BenchMetrics::e2el_s},
};

struct StatRef {
  const char* key;
  double Summary::*value;
};
constexpr StatRef kStats[] = {
    {"mean", &Summary::mean},
    {"p50", &Summary::median},
    {"p90", &Summary::p90},
    {"p99", &Summary::p99},
};

// A statistic in milliseconds; NaN when nothing was measured.
double ms(const Summary& s, double Summary::*value) {
  return s.num_samples ? s.*value * 1000.0 : kNaN;
}

nlohmann::ordered_json number_or_null(double v) {
  return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
}

nlohmann::ordered_json string_or_null(const std::string& s) {
  return s.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(s);
}

nlohmann::ordered_json summary_json(const Summary& s) {
  nlohmann::ordered_json out = {{"count", s.num_samples}};
  for (const StatRef& stat : kStats) out[stat.key] = number_or_null(ms(s, stat.value));
  out["std"] = number_or_null(ms(s, &Summary::std_dev));
  out["min"] = number_or_null(ms(s, &Summary::min));
  out["max"] = number_or_null(ms(s, &Summary::max));
  return out;
}

std::map<std::string, uint64_t> error_counts(const EndpointRun& run) {
  std::map<std::string, uint64_t> counts;
  for (const std::string& e : run.metrics.errors) ++counts[e];
  return counts;
}

// Where the token counts came from: the server's usage chunks, counted chunks, or both.
std::string token_source(const EndpointRun& run) {
  const uint64_t completed = run.metrics.num_completed;
  if (completed == 0) return "none";
  if (run.num_usage_counted == completed) return "usage";
  return run.num_usage_counted == 0 ? "chunks" : "mixed";
}

std::string token_source_text(const EndpointRun& run) {
  const std::string source = token_source(run);
  if (source == "usage") return "server usage";
  if (source == "chunks") return "counted chunks (no usage)";
  if (source == "mixed") return "usage + counted chunks";
  return "-";
}

nlohmann::ordered_json optional_json(const std::optional<double>& v, double scale) {
  return v ? nlohmann::ordered_json(*v * scale) : nlohmann::ordered_json(nullptr);
}

nlohmann::ordered_json run_json(const EndpointRun& run) {
  const BenchMetrics& m = run.metrics;
  nlohmann::ordered_json out = {
      {"label", run.label},
      {"url", run.url},
      {"model", run.model},
      {"endpoint_error", string_or_null(run.setup_error)},
      {"interrupted", run.interrupted},
      {"concurrency",
       run.fixed_concurrency ? nlohmann::ordered_json(run.max_concurrency) : nullptr},
      {"max_concurrency",
       run.max_concurrency ? nlohmann::ordered_json(run.max_concurrency) : nullptr},
      {"request_rate", number_or_null(run.request_rate)},
      {"num_requests", m.num_requests},
      {"completed", m.num_completed},
      {"failed", m.num_failed},
      {"duration_s", m.duration_s},
      {"total_prompt_tokens", m.total_prompt_tokens},
      {"total_output_tokens", m.total_output_tokens},
      {"token_counts", token_source(run)},
      {"request_throughput", m.request_throughput},
      {"output_throughput", m.output_throughput},
      {"total_token_throughput", m.total_token_throughput},
      {"goodput", optional_json(m.request_goodput, 1.0)},
      {"num_good", m.request_goodput ? nlohmann::ordered_json(m.num_good) : nullptr},
      {"errors", m.errors},
      {"error_counts", error_counts(run)},
  };
  for (const MetricRef& metric : kLatencies) {
    out[std::string(metric.key) + "_ms"] = summary_json(m.*metric.summary);
  }
  return out;
}

bool is_sweep(const std::vector<EndpointRun>& runs) {
  std::map<std::string, std::set<uint64_t>> levels;
  for (const EndpointRun& run : runs) {
    if (run.fixed_concurrency) levels[run.url].insert(run.max_concurrency);
  }
  for (const auto& [url, set] : levels) {
    if (set.size() > 1) return true;
  }
  return false;
}

void add_latency_rows(const std::vector<EndpointRun>& runs, Table& table) {
  for (const MetricRef& metric : kLatencies) {
    for (const StatRef& stat : kStats) {
      std::vector<std::string> row = {std::string(metric.name) + " " + stat.key + " (ms)"};
      for (const EndpointRun& run : runs)
        row.push_back(cell(ms(run.metrics.*metric.summary, stat.value)));
      table.rows.push_back(std::move(row));
    }
  }
}

// One table row: a label, then `value(run)` for each run.
template <typename F>
void add_row(Table& table, const std::string& label, const std::vector<EndpointRun>& runs,
             F value) {
  std::vector<std::string> row = {label};
  for (const EndpointRun& run : runs) row.push_back(value(run));
  table.rows.push_back(std::move(row));
}

std::string count_text(uint64_t n) { return std::to_string(n); }

std::string bar_chart(const MetricRef& metric, const std::vector<EndpointRun>& runs, bool sweep) {
  std::vector<std::string> categories;
  for (const StatRef& stat : kStats) categories.push_back(stat.key);
  std::vector<Series> series;
  for (const EndpointRun& run : runs) {
    Series s{run_name(run, sweep), {}};
    for (size_t j = 0; j < std::size(kStats); ++j) {
      s.points.emplace_back(static_cast<double>(j),
                            ms(run.metrics.*metric.summary, kStats[j].value));
    }
    series.push_back(std::move(s));
  }
  return svg_bar_chart(std::string(metric.name) + " (ms)", "ms", categories, series);
}

std::string throughput_chart(const std::vector<EndpointRun>& runs) {
  std::vector<Series> series;
  std::map<std::string, size_t> index;
  for (const EndpointRun& run : runs) {
    if (!run.fixed_concurrency) continue;
    auto [it, added] = index.emplace(run.label, series.size());
    if (added) series.push_back({run.label, {}});
    series[it->second].points.emplace_back(static_cast<double>(run.max_concurrency),
                                           run.metrics.output_throughput);
  }
  return svg_line_chart("Output throughput against concurrency", "concurrent requests",
                        "output tokens / s", series);
}

// The number in attribute `name` of the first tag of `svg`, or `fallback`.
double root_attribute(const std::string& svg, const std::string& name, double fallback) {
  const size_t tag = svg.find("<svg");
  if (tag == std::string::npos) return fallback;
  const size_t tag_end = svg.find('>', tag);
  const std::string key = " " + name + "=\"";
  const size_t at = svg.find(key, tag);
  if (at == std::string::npos || at > tag_end) return fallback;
  const double v = std::strtod(svg.c_str() + at + key.size(), nullptr);
  return v > 0 ? v : fallback;
}

}  // namespace

std::string run_name(const EndpointRun& run, bool with_concurrency) {
  if (with_concurrency && run.fixed_concurrency) {
    return run.label + " c=" + std::to_string(run.max_concurrency);
  }
  return run.label;
}

std::string load_text(const EndpointRun& run) {
  if (run.fixed_concurrency) return "concurrency " + std::to_string(run.max_concurrency);
  std::string text =
      std::isinf(run.request_rate) ? "all at once" : "rate " + cell(run.request_rate) + "/s";
  if (run.max_concurrency) text += ", max " + std::to_string(run.max_concurrency);
  return text;
}

std::string top_error(const EndpointRun& run) {
  std::string best;
  uint64_t best_count = 0;
  for (const auto& [error, count] : error_counts(run)) {
    if (count > best_count) {
      best = error;
      best_count = count;
    }
  }
  if (best_count == 0) return "";
  return std::to_string(best_count) + "x " + best;
}

nlohmann::ordered_json serve_json(const ServeSettings& settings,
                                  const std::vector<EndpointRun>& runs) {
  nlohmann::ordered_json goodput = nlohmann::ordered_json::object();
  if (settings.goodput.ttft_s) goodput["ttft_ms"] = *settings.goodput.ttft_s * 1000;
  if (settings.goodput.tpot_s) goodput["tpot_ms"] = *settings.goodput.tpot_s * 1000;
  if (settings.goodput.e2el_s) goodput["e2el_ms"] = *settings.goodput.e2el_s * 1000;
  nlohmann::ordered_json out = {
      {"benchmark", "serve"},
      {"settings",
       {{"api", settings.api},
        {"num_prompts", settings.num_prompts},
        {"prompt_len", string_or_null(settings.prompt_len)},
        {"output_len", string_or_null(settings.output_len)},
        {"dataset", string_or_null(settings.dataset)},
        {"seed", settings.seed},
        {"timeout_s", settings.timeout_s},
        {"request_rate", number_or_null(settings.request_rate)},
        {"max_concurrency", settings.max_concurrency
                                ? nlohmann::ordered_json(settings.max_concurrency)
                                : nlohmann::ordered_json(nullptr)},
        {"concurrency", settings.concurrency},
        {"goodput", goodput}}},
  };
  bool interrupted = false;
  nlohmann::ordered_json endpoints = nlohmann::ordered_json::array();
  for (const EndpointRun& run : runs) {
    endpoints.push_back(run_json(run));
    interrupted = interrupted || run.interrupted;
  }
  out["interrupted"] = interrupted;
  out["endpoints"] = std::move(endpoints);
  return out;
}

Table serve_table(const std::vector<EndpointRun>& runs) {
  const bool sweep = is_sweep(runs);
  Table table;
  table.columns.push_back("");
  for (const EndpointRun& run : runs) table.columns.push_back(run_name(run, sweep));
  add_row(table, "url", runs, [](const EndpointRun& r) { return r.url; });
  add_row(table, "model", runs,
          [](const EndpointRun& r) { return r.model.empty() ? "-" : r.model; });
  add_row(table, "load", runs, load_text);
  add_row(table, "completed", runs,
          [](const EndpointRun& r) { return count_text(r.metrics.num_completed); });
  add_row(table, "failed", runs,
          [](const EndpointRun& r) { return count_text(r.metrics.num_failed); });
  add_row(table, "duration (s)", runs,
          [](const EndpointRun& r) { return cell(r.metrics.duration_s); });
  add_row(table, "prompt tokens", runs,
          [](const EndpointRun& r) { return count_text(r.metrics.total_prompt_tokens); });
  add_row(table, "output tokens", runs,
          [](const EndpointRun& r) { return count_text(r.metrics.total_output_tokens); });
  add_row(table, "token counts from", runs, token_source_text);
  add_row(table, "requests/s", runs,
          [](const EndpointRun& r) { return cell(r.metrics.request_throughput, 3); });
  add_row(table, "output tokens/s", runs,
          [](const EndpointRun& r) { return cell(r.metrics.output_throughput); });
  add_row(table, "total tokens/s", runs,
          [](const EndpointRun& r) { return cell(r.metrics.total_token_throughput); });
  if (!runs.empty() && runs.front().metrics.request_goodput) {
    add_row(table, "goodput (req/s)", runs,
            [](const EndpointRun& r) { return cell(r.metrics.request_goodput.value_or(kNaN), 3); });
  }
  add_latency_rows(runs, table);
  add_row(table, "top error", runs, [](const EndpointRun& r) {
    const std::string e = top_error(r);
    return e.empty() ? std::string("-") : std::string(utf8_prefix(e, 60));
  });
  return table;
}

Table serve_csv(const std::vector<EndpointRun>& runs) {
  Table table;
  table.columns = {"label",
                   "url",
                   "model",
                   "concurrency",
                   "request_rate",
                   "max_concurrency",
                   "completed",
                   "failed",
                   "duration_s",
                   "total_prompt_tokens",
                   "total_output_tokens",
                   "token_counts",
                   "request_throughput",
                   "output_throughput",
                   "total_token_throughput",
                   "goodput"};
  for (const MetricRef& metric : kLatencies) {
    for (const StatRef& stat : kStats) {
      table.columns.push_back(std::string(metric.key) + "_" + stat.key + "_ms");
    }
  }
  table.columns.push_back("top_error");
  for (const EndpointRun& run : runs) {
    const BenchMetrics& m = run.metrics;
    std::vector<std::string> row = {
        run.label,
        run.url,
        run.model,
        run.fixed_concurrency ? std::to_string(run.max_concurrency) : "",
        std::isinf(run.request_rate) ? "inf" : cell(run.request_rate, 4),
        run.max_concurrency ? std::to_string(run.max_concurrency) : "",
        std::to_string(m.num_completed),
        std::to_string(m.num_failed),
        cell(m.duration_s, 4),
        std::to_string(m.total_prompt_tokens),
        std::to_string(m.total_output_tokens),
        token_source(run),
        cell(m.request_throughput, 4),
        cell(m.output_throughput, 4),
        cell(m.total_token_throughput, 4),
        cell(m.request_goodput.value_or(kNaN), 4)};
    for (const MetricRef& metric : kLatencies) {
      for (const StatRef& stat : kStats) row.push_back(cell(ms(m.*metric.summary, stat.value), 3));
    }
    row.push_back(top_error(run));
    table.rows.push_back(std::move(row));
  }
  return table;
}

std::string serve_svg(const std::vector<EndpointRun>& runs) {
  const bool sweep = is_sweep(runs);
  std::vector<std::string> charts;
  for (const MetricRef& metric : kLatencies) charts.push_back(bar_chart(metric, runs, sweep));
  if (sweep) charts.push_back(throughput_chart(runs));
  return stack_svgs(charts);
}

std::string stack_svgs(const std::vector<std::string>& charts) {
  std::string body;
  double width = 0;
  double y = 0;
  for (const std::string& chart : charts) {
    const size_t tag = chart.find("<svg");
    if (tag == std::string::npos) continue;
    const double w = root_attribute(chart, "width", 800);
    const double h = root_attribute(chart, "height", 450);
    char position[64];
    std::snprintf(position, sizeof position, " x=\"0\" y=\"%.0f\"", y);
    body += "<svg" + std::string(position) + chart.substr(tag + 4) + "\n";
    width = std::max(width, w);
    y += h;
  }
  char root[256];
  std::snprintf(root, sizeof root,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%.0f\" "
                "height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\">\n",
                width, y, width, y);
  return std::string("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n") + root + body + "</svg>\n";
}

}  // namespace pagoda::bench
