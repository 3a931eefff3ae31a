#include "planner/calibrate.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <tuple>

#include "planner/workload.h"
#include "core/error.h"
#include "kv/block_pool.h"
#include "model/model_file.h"

namespace pagoda {
namespace {

using Json = nlohmann::json;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

const Json& field(const Json& j, const char* key, const std::string& path, const char* where) {
  if (!j.is_object() || !j.contains(key)) fail(path, ": ", where, key, ": missing");
  return j[key];
}

double number(const Json& j, const char* key, const std::string& path, const char* where = "") {
  const Json& v = field(j, key, path, where);
  if (!v.is_number()) fail(path, ": ", where, key, ": not a number");
  return v.get<double>();
}

// A summary's mean in seconds, or NaN when it is null (no sample).
double mean_s(const Json& j, const char* key, const std::string& path, const char* where = "") {
  const Json& v = field(j, key, path, where);
  if (v.is_object() && v.contains("mean") && v["mean"].is_null()) return kNaN;
  return number(v, "mean", path, key) * 1e-3;
}

int64_t positive(const Json& j, const char* key, const std::string& path, const char* where = "") {
  const double v = number(j, key, path, where);
  if (!(v >= 1 && v <= 1e12) || v != std::floor(v)) {
    fail(path, ": ", where, key, ": ", v, " is not a positive whole number");
  }
  return static_cast<int64_t>(v);
}

// The report's K/V bytes per token: its cache's bytes over its slots.
uint64_t kv_per_token(double kv_cache_bytes, double num_slots, const std::string& path) {
  if (!(kv_cache_bytes > 0) || !(num_slots > 0)) fail(path, ": kv_cache_bytes: no K/V cache");
  return static_cast<uint64_t>(std::llround(kv_cache_bytes / num_slots));
}

std::vector<SimRequest> throughput_requests(const Json& w, const std::string& path,
                                            const Vocab* vocab, int32_t vocab_size) {
  const Json& source = field(w, "source", path, "workload.");
  if (!source.is_string() || source.get<std::string>() != "synthetic") {
    fail(path,
         ": workload.source: only synthetic workloads can be replayed (a dataset's request "
         "lengths are not in the report)");
  }
  const int64_t n = positive(w, "num_requests", path, "workload.");
  auto range = [&](const char* key) {
    const Json& v = field(w, key, path, "workload.");
    if (!v.is_string()) fail(path, ": workload.", key, ": not a length range");
    return bench::parse_length_range(v.get<std::string>(), std::string("workload.") + key);
  };
  const bench::LengthRange prompt = range("prompt_len"), output = range("output_len");
  std::vector<SimRequest> requests;
  if (prompt.fixed() && output.fixed()) {
    requests.assign(n, {0, prompt.min, output.min});
    return requests;
  }
  // Random lengths: draw them again with the run's seed and id pool, as the run did.
  const uint64_t seed = static_cast<uint64_t>(number(w, "seed", path, "workload."));
  const auto pool = bench::prompt_token_pool(vocab, vocab_size);
  for (const auto& r :
       bench::synthetic_requests(static_cast<int32_t>(n), prompt, output, pool, seed)) {
    requests.push_back({0, static_cast<int64_t>(r.prompt.size()), r.output_len});
  }
  return requests;
}

}  // namespace

CalibrationRun calibration_run_from_json(const std::string& json_text, const std::string& path,
                                         const ModelCost& cost, const Vocab* vocab,
                                         int32_t vocab_size) {
  Json j;
  try {
    j = Json::parse(json_text);
  } catch (const Json::exception& e) {
    fail(path, ": not JSON (", e.what(), ")");
  }
  CalibrationRun run;
  run.path = path;
  run.cost = cost;
  const Json& benchmark = field(j, "benchmark", path, "");
  run.benchmark = benchmark.is_string() ? benchmark.get<std::string>() : "";
  if (run.benchmark != "latency" && run.benchmark != "throughput") {
    fail(path,
         ": benchmark: a `pagoda bench latency` or `pagoda bench throughput` --json report "
         "is needed");
  }
  if (j.contains("interrupted") && j["interrupted"] == true) {
    fail(path, ": interrupted: the run was stopped before it finished");
  }
  if (j.contains("model_path") && j["model_path"].is_string()) {
    run.model_path = j["model_path"].get<std::string>();
  }
  if (j.contains("threads") && j["threads"].is_number()) run.threads = j["threads"].get<int>();
  if (run.benchmark == "latency") {
    const int64_t prompt = positive(j, "prompt_tokens", path);
    const int64_t output = positive(j, "output_tokens", path);
    run.requests = {{0, prompt, output}};
    run.engine.max_num_seqs = 1;
    run.engine.max_num_batched_tokens = 2048;  // the latency run's default
    if (j.contains("max_num_batched_tokens")) {
      run.engine.max_num_batched_tokens = positive(j, "max_num_batched_tokens", path);
    }
    const int64_t slots =
        (prompt + output + kDefaultBlockSize - 1) / kDefaultBlockSize * kDefaultBlockSize;
    run.cost.kv_bytes_per_token =
        kv_per_token(number(j, "kv_cache_bytes", path), static_cast<double>(slots), path);
    run.ttft_s = mean_s(j, "ttft_ms", path);
    run.last_ttft_s = kNaN;
    run.decode_s = mean_s(j, "decode_ms_per_token", path);
    run.wall_s = kNaN;
    return run;
  }
  run.requests = throughput_requests(field(j, "workload", path, ""), path, vocab, vocab_size);
  run.engine.max_num_seqs = positive(j, "max_num_seqs", path);
  run.engine.max_num_batched_tokens = positive(j, "max_num_batched_tokens", path);
  const double slots = number(j, "num_kv_blocks", path) * number(j, "block_size", path);
  run.engine.kv_capacity_tokens = static_cast<uint64_t>(slots);
  run.cost.kv_bytes_per_token = kv_per_token(number(j, "kv_cache_bytes", path), slots, path);
  const Json& runs = field(j, "runs", path, "");
  const Json* batched = nullptr;
  if (runs.is_array()) {
    for (const Json& r : runs) {
      if (r.is_object() && r.contains("mode") && r["mode"] == "batched") batched = &r;
    }
  }
  if (!batched) fail(path, ": runs: no batched run");
  if (batched->contains("interrupted") && (*batched)["interrupted"] == true) {
    fail(path, ": runs[batched].interrupted: the run was stopped before it finished");
  }
  run.ttft_s = mean_s(*batched, "ttft_ms", path, "runs[batched].");
  const Json& ttft = field(*batched, "ttft_ms", path, "runs[batched].");
  run.last_ttft_s =
      ttft.contains("max") && ttft["max"].is_number() ? ttft["max"].get<double>() * 1e-3 : kNaN;
  run.decode_s = mean_s(*batched, "decode_ms_per_token", path, "runs[batched].");
  run.wall_s = number(*batched, "wall_s", path, "runs[batched].");
  return run;
}

CalibrationRun read_calibration_run(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("--calibrate ", path, ": cannot read");
  std::stringstream text;
  text << in.rdbuf();
  Json j;
  try {
    j = Json::parse(text.str());
  } catch (const Json::exception& e) {
    fail("--calibrate ", path, ": not JSON (", e.what(), ")");
  }
  if (!j.is_object() || !j.contains("model_path") || !j["model_path"].is_string()) {
    fail("--calibrate ", path, ": model_path: missing (a `pagoda bench` --json report?)");
  }
  const std::string model_path = j["model_path"].get<std::string>();
  std::unique_ptr<ModelFile> file;
  try {
    file = ModelFile::open(model_path);
  } catch (const Error& e) {
    fail("--calibrate ", path, ": model_path ", model_path, ": ", e.what());
  }
  ModelCost cost;
  cost.config = file->config();
  cost.weights = file_weights(*file);
  const Vocab* vocab = file->has_vocab() ? &file->vocab() : nullptr;
  return calibration_run_from_json(text.str(), path, cost, vocab,
                                   static_cast<int32_t>(cost.config.vocab_size));
}

DeviceRates scaled_rates(const HardwareProfile& profile, const ModelCost& cost,
                         const CalibrationScale& s) {
  DeviceRates r = device_rates(profile, cost.weights.compute_type, 1);
  r.bandwidth *= s.bandwidth;
  r.matmul_flops *= s.compute;
  r.attention_flops *= s.compute;
  if (r.step_overhead_s == 0 && r.layer_overhead_s == 0) r.step_overhead_s = 1e-5;  // to scale
  r.step_overhead_s *= s.overhead;
  r.layer_overhead_s *= s.overhead;
  return r;
}

PredictedRun predict_run(const CalibrationRun& run, const DeviceRates& rates) {
  const SimResult sim = simulate(run.requests, run.engine, run.cost, rates);
  double last = 0;
  for (const auto& r : sim.requests) last = std::max(last, r.ttft_s());
  return {sim.mean_ttft_s(), last, sim.mean_tpot_s(), sim.end_s};
}

namespace {

// (figure, measured, predicted) of each figure the run measured.
std::vector<std::tuple<const char*, double, double>> figures_of(const CalibrationRun& run,
                                                                const PredictedRun& p) {
  std::vector<std::tuple<const char*, double, double>> out;
  for (const auto& [name, m, predicted] : {std::tuple{"TTFT", run.ttft_s, p.ttft_s},
                                           {"last TTFT", run.last_ttft_s, p.last_ttft_s},
                                           {"decode per token", run.decode_s, p.decode_s},
                                           {"wall", run.wall_s, p.wall_s}}) {
    if (std::isfinite(m) && m > 0) out.emplace_back(name, m, predicted);
  }
  return out;
}

using Point = std::array<double, 3>;  // log of the bandwidth, compute and overhead scales

CalibrationScale scale_of(const Point& x) {
  return {std::exp(x[0]), std::exp(x[1]), std::exp(x[2])};
}

// Log predictions of every measured figure, in a fixed order.
std::vector<double> log_predictions(const std::vector<CalibrationRun>& runs,
                                    const HardwareProfile& profile, const Point& x) {
  std::vector<double> out;
  for (const CalibrationRun& run : runs) {
    const PredictedRun p = predict_run(run, scaled_rates(profile, run.cost, scale_of(x)));
    for (const auto& [name, m, predicted] : figures_of(run, p)) {
      out.push_back(std::log(predicted));
    }
  }
  return out;
}

std::vector<double> log_measurements(const std::vector<CalibrationRun>& runs) {
  std::vector<double> out;
  for (const CalibrationRun& run : runs) {
    for (const auto& [name, m, predicted] : figures_of(run, PredictedRun{})) {
      out.push_back(std::log(m));
    }
  }
  return out;
}

// Nelder-Mead over the free coordinates (the others stay as in `start`): the objective is
// piecewise smooth (the roofline's max), so no gradients.
Point minimize(const std::function<double(const Point&)>& f, const Point& start,
               const std::array<bool, 3>& free) {
  std::vector<int> dims;
  for (int d = 0; d < 3; ++d) {
    if (free[d]) dims.push_back(d);
  }
  const int n = static_cast<int>(dims.size());
  if (n == 0) return start;
  std::vector<Point> p(n + 1, start);
  std::vector<double> v(n + 1);
  for (int i = 0; i <= n; ++i) {
    if (i > 0) p[i][dims[i - 1]] += 0.5;
    v[i] = f(p[i]);
  }
  std::vector<int> idx(n + 1);
  for (int iter = 0; iter < 800; ++iter) {
    std::iota(idx.begin(), idx.end(), 0);
    std::sort(idx.begin(), idx.end(), [&](int a, int b) { return v[a] < v[b]; });
    const int best = idx[0], worst = idx[n], second = idx[n - 1];
    double spread = 0;
    for (int i = 0; i <= n; ++i) {
      for (int d : dims) spread = std::max(spread, std::fabs(p[i][d] - p[best][d]));
    }
    if (spread < 1e-9) break;
    Point centre = start;
    for (int d : dims) {
      centre[d] = 0;
      for (int k = 0; k < n; ++k) centre[d] += p[idx[k]][d] / n;
    }
    auto along = [&](double t) {
      Point q = start;
      for (int d : dims) q[d] = centre[d] + t * (p[worst][d] - centre[d]);
      return q;
    };
    const Point reflected = along(-1);
    const double vr = f(reflected);
    if (vr < v[best]) {
      const Point expanded = along(-2);
      const double ve = f(expanded);
      if (ve < vr) {
        p[worst] = expanded, v[worst] = ve;
      } else {
        p[worst] = reflected, v[worst] = vr;
      }
    } else if (vr < v[second]) {
      p[worst] = reflected, v[worst] = vr;
    } else {
      const Point contracted = along(vr < v[worst] ? -0.5 : 0.5);
      const double vc = f(contracted);
      if (vc < std::min(vr, v[worst])) {
        p[worst] = contracted, v[worst] = vc;
      } else {
        for (int i = 0; i <= n; ++i) {
          if (i == best) continue;
          for (int d : dims) p[i][d] = p[best][d] + 0.5 * (p[i][d] - p[best][d]);
          v[i] = f(p[i]);
        }
      }
    }
  }
  return p[std::min_element(v.begin(), v.end()) - v.begin()];
}

// Which parameters the runs determine. Each has a column of d(log prediction) / d(log
// parameter) at `x`; taking them by falling size, a parameter counts as measured when what its
// column adds beyond the columns already taken (Gram-Schmidt) moves some prediction by 5 % or
// more per unit of log: with fewer figures than parameters the weakest is left out.
std::array<bool, 3> determined(const std::vector<CalibrationRun>& runs,
                               const HardwareProfile& profile, const Point& x) {
  constexpr double h = 0.05;
  std::array<std::vector<double>, 3> columns;
  for (int d = 0; d < 3; ++d) {
    Point up = x, down = x;
    up[d] += h;
    down[d] -= h;
    const auto a = log_predictions(runs, profile, up), b = log_predictions(runs, profile, down);
    for (size_t i = 0; i < a.size(); ++i) columns[d].push_back((a[i] - b[i]) / (2 * h));
  }
  auto dot = [](const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
  };
  std::array<int, 3> order = {0, 1, 2};
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return dot(columns[a], columns[a]) > dot(columns[b], columns[b]);
  });
  std::vector<std::vector<double>> basis;
  std::array<bool, 3> flags{};
  for (int d : order) {
    std::vector<double> r = columns[d];
    for (const auto& q : basis) {
      const double k = dot(r, q);
      for (size_t i = 0; i < r.size(); ++i) r[i] -= k * q[i];
    }
    const double norm = std::sqrt(dot(r, r));
    if (norm < 0.05) continue;
    flags[d] = true;
    for (double& v : r) v /= norm;
    basis.push_back(std::move(r));
  }
  return flags;
}

}  // namespace

Calibration calibrate(const std::vector<CalibrationRun>& runs, const HardwareProfile& profile) {
  const std::vector<double> measured = log_measurements(runs);
  if (measured.empty()) fail("--calibrate: the reports hold no measured TTFT, decode or wall time");
  const Point prior = {0, 0, 0};
  // A weak pull towards the profile keeps a figure the runs cannot see where it was; once
  // those are held fixed, a much weaker one only breaks ties.
  double pull = 1e-4;
  auto objective = [&](const Point& x) {
    const std::vector<double> predicted = log_predictions(runs, profile, x);
    double sum = 0;
    for (size_t i = 0; i < measured.size(); ++i) {
      sum += (predicted[i] - measured[i]) * (predicted[i] - measured[i]);
    }
    for (int d = 0; d < 3; ++d) sum += pull * (x[d] - prior[d]) * (x[d] - prior[d]);
    return sum;
  };
  const std::array<bool, 3> all = {true, true, true};
  Point x = minimize(objective, prior, all);
  x = minimize(objective, x, all);  // a restart from the best point escapes a collapsed simplex

  Calibration c;
  const std::array<bool, 3> measured_flags = determined(runs, profile, x);
  c.bandwidth_measured = measured_flags[0];
  c.compute_measured = measured_flags[1];
  c.overhead_measured = measured_flags[2];
  // Fit again with the figures the runs cannot see held at the profile's values (else the
  // prior's pull would share the misfit out among all three).
  auto rms_error = [&](const Point& at) {
    const std::vector<double> predicted = log_predictions(runs, profile, at);
    double sum = 0;
    for (size_t i = 0; i < measured.size(); ++i) {
      sum += (predicted[i] - measured[i]) * (predicted[i] - measured[i]);
    }
    return std::sqrt(sum / static_cast<double>(measured.size()));
  };
  if (measured_flags != all) {
    const Point free_fit = x;
    Point held = x;
    for (int d = 0; d < 3; ++d) {
      if (!measured_flags[d]) held[d] = prior[d];
    }
    pull = 1e-8;
    x = minimize(objective, held, measured_flags);
    x = minimize(objective, x, measured_flags);
    if (rms_error(x) > rms_error(free_fit) + 0.005) {
      x = free_fit;
      c.underdetermined = true;
      c.bandwidth_measured = c.compute_measured = c.overhead_measured = true;
    }
  }
  c.scale = scale_of(x);

  const CalibrationScale before{1, 1, 1};
  for (const CalibrationRun& run : runs) {
    const auto b = figures_of(run, predict_run(run, scaled_rates(profile, run.cost, before)));
    const auto a = figures_of(run, predict_run(run, scaled_rates(profile, run.cost, c.scale)));
    for (size_t i = 0; i < a.size(); ++i) {
      c.figures.push_back(
          {run.path, std::get<0>(a[i]), std::get<1>(a[i]), std::get<2>(b[i]), std::get<2>(a[i])});
    }
  }
  return c;
}

double Calibration::worst_error() const {
  double worst = 0;
  for (const CalibrationFigure& f : figures) {
    worst = std::max(worst, std::fabs(f.after_s / f.measured_s - 1));
  }
  return worst;
}

std::vector<CalibrationFigure> check_runs(const std::vector<CalibrationRun>& runs,
                                          const HardwareProfile& profile) {
  std::vector<CalibrationFigure> out;
  for (const CalibrationRun& run : runs) {
    const PredictedRun p = predict_run(run, scaled_rates(profile, run.cost, {1, 1, 1}));
    for (const auto& [name, m, predicted] : figures_of(run, p)) {
      out.push_back({run.path, name, m, predicted, predicted});
    }
  }
  return out;
}

HardwareProfile apply_calibration(const HardwareProfile& profile, const Calibration& c) {
  HardwareProfile p = profile;
  if (c.bandwidth_measured) {
    p.figures["bandwidth_efficiency"] = {profile.get("bandwidth_efficiency") * c.scale.bandwidth,
                                         "calibrated"};
  }
  if (c.compute_measured) {
    p.figures["compute_efficiency"] = {profile.get("compute_efficiency") * c.scale.compute,
                                       "calibrated"};
  }
  if (c.overhead_measured) {
    double step = profile.get("step_overhead_ms"), layer = profile.get("layer_overhead_us");
    if (step == 0 && layer == 0) step = 1e-2;  // what scaled_rates scales
    p.figures["step_overhead_ms"] = {step * c.scale.overhead, "calibrated"};
    p.figures["layer_overhead_us"] = {layer * c.scale.overhead, "calibrated"};
  }
  return p;
}

}  // namespace pagoda
