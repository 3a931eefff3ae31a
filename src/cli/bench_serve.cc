// pagoda bench serve --url URL [--url URL2 ...]: load OpenAI-compatible servers with the same
// request set, one after another, and report TTFT, TPOT, ITL, E2EL, throughput and goodput as
// vLLM's `bench serve` defines them, side by side (src/bench/serve_*.h).
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <limits>
#include <memory>

#include "bench/report.h"
#include "bench/serve_client.h"
#include "bench/serve_load.h"
#include "bench/serve_report.h"
#include "cli/bench_commands.h"
#include "core/error.h"

namespace pagoda::cli {
namespace {

std::atomic<bool> g_stop{false};

void on_sigint(int) {
  g_stop = true;
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C ends the process at once
}

struct ServeArgs {
  std::vector<std::string> urls;
  std::vector<std::string> labels;
  std::string model;
  std::string api_key;
  std::string endpoint = "completions";
  uint64_t num_prompts = 100;
  std::string prompt_len = "256";
  std::string output_len = "128";
  std::string dataset;
  uint64_t seed = 0;
  std::string request_rate = "inf";
  std::vector<uint64_t> concurrency;
  uint64_t max_concurrency = 0;
  std::vector<std::string> goodput;
  double timeout_s = 300;
  std::string json_path;
  std::string csv_path;
  std::string svg_path;
};

double parse_rate(const std::string& text) {
  if (text == "inf") return std::numeric_limits<double>::infinity();
  char* end = nullptr;
  const double rate = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(rate > 0) || std::isnan(rate)) {
    fail("--request-rate ", text, ": expected requests per second > 0, or inf");
  }
  return rate;
}

std::vector<bench::ServeTarget> targets(const ServeArgs& a) {
  if (!a.labels.empty() && a.labels.size() != a.urls.size()) {
    fail("--label is given ", a.labels.size(), " times for ", a.urls.size(), " --url");
  }
  std::vector<bench::ServeTarget> out;
  for (size_t i = 0; i < a.urls.size(); ++i) {
    bench::parse_server_url(a.urls[i]);  // bad URLs are bad arguments: fail before any run
    out.push_back({a.urls[i], a.labels.empty() ? "" : a.labels[i]});
  }
  return out;
}

std::vector<bench::RequestSpec> request_set(const ServeArgs& a, const CLI::App& cmd) {
  const bench::LengthRange output = bench::parse_length_range(a.output_len, "--output-len");
  if (!a.dataset.empty()) {
    std::optional<bench::LengthRange> fixed;
    if (cmd.count("--output-len")) fixed = output;
    return bench::sharegpt_text_requests(a.dataset, a.num_prompts, fixed, a.seed);
  }
  const bench::LengthRange prompt = bench::parse_length_range(a.prompt_len, "--prompt-len");
  return bench::random_text_requests(a.num_prompts, prompt, output, a.seed);
}

// One plan per --concurrency level, or the single rate plan.
std::vector<bench::LoadPlan> load_plans(const ServeArgs& a) {
  std::vector<bench::LoadPlan> plans;
  for (uint64_t level : a.concurrency) {
    if (level == 0) fail("--concurrency must be at least 1");
    plans.push_back({std::numeric_limits<double>::infinity(), level, a.seed});
  }
  if (plans.empty()) plans.push_back({parse_rate(a.request_rate), a.max_concurrency, a.seed});
  return plans;
}

// The progress line on stderr: rewritten in place on a terminal, one line per run otherwise.
class ProgressLine {
 public:
  explicit ProgressLine(std::string name) : name_(std::move(name)), tty_(isatty(2)) {}
  void update(const bench::LoadProgress& p) {
    if (!tty_) return;
    std::fprintf(stderr, "\r%s: %llu/%llu done, %llu failed, %llu in flight, %.1f s   ",
                 name_.c_str(), static_cast<unsigned long long>(p.finished),
                 static_cast<unsigned long long>(p.total),
                 static_cast<unsigned long long>(p.failed),
                 static_cast<unsigned long long>(p.sent - p.finished), p.elapsed_s);
    std::fflush(stderr);
  }
  void finish(const bench::EndpointRun& run) {
    const BenchMetrics& m = run.metrics;
    std::fprintf(stderr, "%s%s: %llu completed, %llu failed in %.2f s%s%s\n",
                 tty_ ? "\r\033[K" : "", name_.c_str(),
                 static_cast<unsigned long long>(m.num_completed),
                 static_cast<unsigned long long>(m.num_failed), m.duration_s,
                 run.interrupted ? " (interrupted)" : "",
                 run.setup_error.empty() ? "" : (": " + run.setup_error).c_str());
  }

 private:
  std::string name_;
  bool tty_;
};

bench::ClientConfig client_config(const ServeArgs& a) {
  bench::ClientConfig config;
  config.api = a.endpoint == "chat" ? bench::ApiKind::kChat : bench::ApiKind::kCompletions;
  config.model = a.model;
  config.api_key = a.api_key;
  config.timeout_s = a.timeout_s;
  return config;
}

std::vector<bench::EndpointRun> run_all(const ServeArgs& a,
                                        const std::vector<bench::ServeTarget>& urls,
                                        const std::vector<bench::RequestSpec>& specs,
                                        const std::vector<bench::LoadPlan>& plans,
                                        const SloLimits& limits) {
  std::vector<bench::EndpointRun> runs;
  const bool sweep = plans.size() > 1;
  for (const bench::ServeTarget& target : urls) {
    for (const bench::LoadPlan& plan : plans) {
      if (g_stop) return runs;
      bench::EndpointRun named;
      named.label = target.label.empty() ? bench::url_label(target.url) : target.label;
      named.fixed_concurrency = !a.concurrency.empty();
      named.max_concurrency = plan.max_concurrency;
      ProgressLine progress(bench::run_name(named, sweep));
      bench::EndpointRun run =
          bench::run_endpoint(target, client_config(a), specs, plan, limits, g_stop,
                              [&](const bench::LoadProgress& p) { progress.update(p); });
      run.fixed_concurrency = named.fixed_concurrency;
      progress.finish(run);
      runs.push_back(std::move(run));
    }
  }
  return runs;
}

bench::ServeSettings settings(const ServeArgs& a, const SloLimits& limits, bool output_given) {
  bench::ServeSettings s;
  s.api = a.endpoint;
  s.num_prompts = a.num_prompts;
  s.prompt_len = a.dataset.empty() ? a.prompt_len : "";
  s.output_len = a.dataset.empty() || output_given ? a.output_len : "";
  s.dataset = a.dataset;
  s.seed = a.seed;
  s.timeout_s = a.timeout_s;
  s.request_rate = a.concurrency.empty() ? parse_rate(a.request_rate) : INFINITY;
  s.max_concurrency = a.max_concurrency;
  s.concurrency = a.concurrency;
  s.goodput = limits;
  return s;
}

void write_reports(const ServeArgs& a, const bench::ServeSettings& settings,
                   const std::vector<bench::EndpointRun>& runs) {
  const std::string table = bench::serve_table(runs).to_text();
  const bool stdout_taken = a.json_path == "-" || a.csv_path == "-" || a.svg_path == "-";
  (stdout_taken ? std::cerr : std::cout) << table << std::flush;
  if (!a.json_path.empty()) {
    // Servers may send anything in error messages and names: invalid UTF-8 becomes U+FFFD.
    const auto json = bench::serve_json(settings, runs);
    bench::write_output(
        a.json_path,
        json.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n");
  }
  if (!a.csv_path.empty()) bench::write_output(a.csv_path, bench::serve_csv(runs).to_csv());
  if (!a.svg_path.empty()) bench::write_output(a.svg_path, bench::serve_svg(runs));
}

void add_options(CLI::App& cmd, ServeArgs& a) {
  cmd.add_option("--url", a.urls, "Server to load, e.g. http://127.0.0.1:8080 (repeat for more)")
      ->required();
  cmd.add_option("--label", a.labels, "Name of each --url in reports (default host:port)");
  cmd.add_option("--model", a.model, "Model name to send (default: first of GET /v1/models)");
  cmd.add_option("--api-key", a.api_key, "Sent as 'Authorization: Bearer KEY'");
  cmd.add_option("--endpoint", a.endpoint, "completions (/v1/completions) or chat")
      ->check(CLI::IsMember({"completions", "chat"}))
      ->default_val("completions");
  cmd.add_option("--num-prompts", a.num_prompts, "Requests per run")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1000000}))
      ->default_val(100);
  cmd.add_option("--prompt-len", a.prompt_len, "Prompt tokens (about): N or LO:HI uniform")
      ->default_val("256");
  cmd.add_option("--output-len", a.output_len, "Output tokens: N or LO:HI uniform")
      ->default_val("128");
  cmd.add_option("--dataset", a.dataset, "ShareGPT-style JSON file of conversations for prompts");
  cmd.add_option("--seed", a.seed, "Seed of prompts, lengths and arrivals")->default_val(0);
  auto* rate = cmd.add_option("--request-rate", a.request_rate,
                              "Poisson arrivals, requests/s; inf = all at once")
                   ->default_val("inf");
  auto* max = cmd.add_option("--max-concurrency", a.max_concurrency,
                             "At most this many requests in flight (with --request-rate)");
  cmd.add_option("--concurrency", a.concurrency,
                 "Fixed concurrency C (closed loop); a list 1,4,16 runs each in turn")
      ->delimiter(',')
      ->excludes(rate)
      ->excludes(max);
  cmd.add_option("--goodput", a.goodput, "SLO limits for goodput: ttft:MS tpot:MS e2el:MS");
  cmd.add_option("--timeout", a.timeout_s, "Seconds a request may take")
      ->check(CLI::Range(0.001, 1e6))
      ->default_val(300);
  cmd.add_option("--json", a.json_path, "Write every number as JSON to PATH ('-': stdout)");
  cmd.add_option("--csv", a.csv_path, "Write one CSV row per run to PATH ('-': stdout)");
  cmd.add_option("--svg", a.svg_path, "Write latency (and concurrency sweep) charts to PATH");
}

}  // namespace

Action add_bench_serve(CLI::App& bench) {
  auto a = std::make_shared<ServeArgs>();
  auto* cmd = bench.add_subcommand(
      "serve", "Load OpenAI-compatible servers and compare TTFT, TPOT, ITL, E2EL, throughput");
  add_options(*cmd, *a);
  return [a, cmd] {
    const std::vector<bench::ServeTarget> urls = targets(*a);
    const SloLimits limits = bench::parse_goodput(a->goodput);
    const std::vector<bench::LoadPlan> plans = load_plans(*a);
    const std::vector<bench::RequestSpec> specs = request_set(*a, *cmd);
    g_stop = false;
    auto old_handler = std::signal(SIGINT, on_sigint);
    auto old_pipe = std::signal(SIGPIPE, SIG_IGN);  // a server closing early is a failed request
    const std::vector<bench::EndpointRun> runs = run_all(*a, urls, specs, plans, limits);
    std::signal(SIGINT, old_handler);
    std::signal(SIGPIPE, old_pipe);
    if (g_stop) std::cerr << "interrupted: reporting what was measured so far\n";
    write_reports(*a, settings(*a, limits, cmd->count("--output-len") > 0), runs);
    return 0;
  };
}

}  // namespace pagoda::cli
