#include "planner/estimate_report.h"

#include <cmath>
#include <cstdarg>
#include <cstdio>

namespace pagoda {
namespace {

constexpr double kGiB = 1073741824.0;

EstimateJson number_or_null(double v) { return std::isfinite(v) ? EstimateJson(v) : nullptr; }

std::string unit_of(const std::string& key) {
  if (key == "memory_gib") return "GiB";
  if (key == "bandwidth_gbs" || key == "link_gbs") return "GB/s";
  if (key == "int8_tops") return "TOP/s";
  if (key.find("tflops") != std::string::npos) return "TFLOP/s";
  if (key == "link_latency_us") return "us";
  if (key == "step_overhead_ms") return "ms";
  if (key == "layer_overhead_us") return "us";
  if (key == "price_per_hour") return "USD/h";
  return "";
}

std::string money(double usd) {
  if (usd >= 100) return strf("$%.0f", usd);
  if (usd >= 1) return strf("$%.2f", usd);
  return strf("$%.3f", usd);
}

}  // namespace

std::string strf(const char* format, ...) {
  va_list args;
  va_start(args, format);
  char buf[1024];
  std::vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  return buf;
}

std::string hardware_text(const HardwareProfile& p, int num_devices,
                          const std::string& compute_type) {
  std::string s =
      strf("hardware:         %s x %d: %s\n", p.name.c_str(), num_devices, p.description.c_str());
  const std::string mm_key = compute_key(compute_type, p), att_key = attention_compute_key(p);
  for (const auto& k : hardware_keys()) {
    std::string note;
    if (k.key == mm_key) note = "  <- " + compute_type + " weight products";
    if (k.key == att_key) note += (note.empty() ? "  <- " : ", ") + std::string("attention");
    s += strf("  %-21s %10.4g %-7s  %s%s\n", k.key, p.get(k.key), unit_of(k.key).c_str(),
              p.source(k.key).c_str(), note.c_str());
  }
  return s;
}

EstimateJson hardware_json(const HardwareProfile& p, int num_devices, const DeviceRates& r) {
  EstimateJson figures = EstimateJson::object(), sources = EstimateJson::object();
  for (const auto& k : hardware_keys()) {
    figures[k.key] = p.get(k.key);
    sources[k.key] = p.source(k.key);
  }
  return {{"name", p.name},
          {"description", p.description},
          {"kind", p.kind == DeviceKind::kGpu ? "gpu" : "cpu"},
          {"num_devices", num_devices},
          {"figures", figures},
          {"sources", sources},
          {"effective",
           {{"bandwidth_gbs", r.bandwidth / 1e9},
            {"matmul_tflops", r.matmul_flops / 1e12},
            {"attention_tflops", r.attention_flops / 1e12},
            {"step_overhead_ms", r.step_overhead_s * 1e3},
            {"layer_overhead_us", r.layer_overhead_s * 1e6},
            {"link_gbs", r.link_bandwidth / 1e9}}}};
}

namespace {
// The line under the speed table saying why it ends where it does.
std::string batches_end_text(const Deployment& d, const DeploymentOptions& o) {
  if (d.batches.empty()) return "";
  const long long last = static_cast<long long>(d.batches.back().batch);
  const unsigned long long fits = static_cast<unsigned long long>(d.memory.max_batch);
  if (std::string(d.batches_end) == "throughput") {
    return strf(
        "  (ends at %lld: it decodes less than %.0f %% more than the row before; a step holds "
        "%lld sequences and memory %llu)\n",
        last, kBatchGain * 100, static_cast<long long>(o.max_num_seqs), fits);
  }
  if (std::string(d.batches_end) == "max_num_seqs") {
    return strf("  (ends at %lld: a step holds at most --max-seqs %lld sequences; memory %llu)\n",
                last, static_cast<long long>(o.max_num_seqs), fits);
  }
  return strf("  (ends at %lld: the most that fit in memory)\n", last);
}
}  // namespace

std::string deployment_text(const Deployment& d, const DeploymentOptions& o,
                            const std::string& workload) {
  const DeviceMemory& m = d.memory;
  std::string s = strf(
      "effective:        %.4g GB/s, %.4g TFLOP/s weight products, %.4g TFLOP/s attention, "
      "%.3g ms + %.3g us a layer a step%s\n",
      d.rates.bandwidth / 1e9, d.rates.matmul_flops / 1e12, d.rates.attention_flops / 1e12,
      d.rates.step_overhead_s * 1e3, d.rates.layer_overhead_s * 1e6,
      d.num_devices > 1 ? strf(", link %.4g GB/s", d.rates.link_bandwidth / 1e9).c_str() : "");
  s += strf(
      "per device:       %.1f GiB usable = weights %.2f GiB + activations %.2f GiB + K/V %.2f "
      "GiB (%llu tokens at %llu bytes)",
      m.usable_bytes / kGiB, m.weight_bytes / kGiB, m.overhead_bytes / kGiB,
      m.kv_capacity_tokens * static_cast<double>(m.kv_bytes_per_token) / kGiB,
      static_cast<unsigned long long>(m.kv_capacity_tokens),
      static_cast<unsigned long long>(m.kv_bytes_per_token));
  if (m.state_bytes_per_sequence != 0) {
    s += strf(" + recurrent state %.2f GiB (%llu sequences at %llu bytes)",
              static_cast<double>(m.state_bytes) / kGiB,
              static_cast<unsigned long long>(m.state_slots),
              static_cast<unsigned long long>(m.state_bytes_per_sequence));
  }
  s += "\n";
  if (!m.fits) {
    s += strf("                  does NOT fit: no room for one sequence of %llu tokens\n",
              static_cast<unsigned long long>(d.seq_len));
    return s;
  }
  s += strf("                  largest batch of %llu-token sequences: %llu\n",
            static_cast<unsigned long long>(d.seq_len),
            static_cast<unsigned long long>(m.max_batch));
  const long long prompt = std::llround(d.mean_prompt_len),
                  output = std::llround(d.mean_output_len);
  s += strf("speed:            prompt %lld, output %lld tokens; decode at context %lld\n", prompt,
            output, prompt + output / 2);
  s += "  batch   step ms   decode tok/s   prefill tok/s   TTFT ms mean   last    decode bound\n";
  for (const BatchPoint& b : d.batches) {
    s += strf("  %5lld  %8.2f  %13.1f  %14.1f  %13.1f  %8.1f   %s\n",
              static_cast<long long>(b.batch), b.decode_step_s * 1e3, b.decode_tokens_per_s,
              b.prefill_tokens_per_s, b.ttft_mean_s * 1e3, b.ttft_last_s * 1e3,
              b.decode_compute_bound ? "compute" : "memory");
  }
  s += batches_end_text(d, o);
  if (!d.capacity) return s;
  const CapacityResult& c = *d.capacity;
  s += strf(
      "capacity:         %s; SLO p%g TTFT <= %g ms, p%g TPOT <= %g ms; at most %lld sequences, "
      "%lld tokens a step\n",
      workload.c_str(), o.slo.percentile, o.slo.ttft_s * 1e3, o.slo.percentile, o.slo.tpot_s * 1e3,
      static_cast<long long>(d.max_num_seqs), static_cast<long long>(o.max_num_batched_tokens));
  s += strf("  one request alone:   TTFT %.1f ms, TPOT %.2f ms\n", c.alone_ttft_s * 1e3,
            c.alone_tpot_s * 1e3);
  s += strf("  saturated:           %.3g requests/s at any latency\n", c.saturated_qps);
  const double price = d.profile.get("price_per_hour") * d.num_devices;
  auto per_million = [](const CostFigures& f) {
    return strf("%s input, %s output, %s both together", money(f.usd_per_million_input).c_str(),
                money(f.usd_per_million_output).c_str(), money(f.usd_per_million_tokens).c_str());
  };
  if (c.max_qps <= 0) {
    s += "  within the SLO:      no rate (even a lone request misses it)\n";
    if (price > 0) {
      s += strf("cost:             %s/h for %d device%s = %s/month\n", money(price).c_str(),
                d.num_devices, d.num_devices > 1 ? "s" : "", money(d.usd_per_month).c_str());
      s += "  per million tokens, saturated: " + per_million(d.saturated_cost) + "\n";
    }
    return s;
  }
  s += strf(
      "  within the SLO:      %.3g requests/s (limited by %s): p%g TTFT %.0f ms, TPOT %.1f ms, "
      "%.0f requests in flight\n",
      c.max_qps, c.limit, o.slo.percentile, c.ttft_at_max_s * 1e3, c.tpot_at_max_s * 1e3,
      c.mean_concurrency_at_max);
  s += strf("  tokens/s:            %.0f input + %.0f output (prompt %.0f%% of the busy time)\n",
            c.input_tokens_per_s, c.output_tokens_per_s, c.prefill_share * 100);
  if (price <= 0) {
    s += "cost:             no price (give --hw price_per_hour=USD)\n";
    return s;
  }
  s += strf("cost:             %s/h for %d device%s = %s/month\n", money(price).c_str(),
            d.num_devices, d.num_devices > 1 ? "s" : "", money(d.usd_per_month).c_str());
  s += "  per million tokens:  " + per_million(d.cost) + " (within the SLO)\n";
  s += "                       " + per_million(d.saturated_cost) + " (saturated)\n";
  if (o.target_qps && d.target_replicas > 0) {
    s += strf("  for %g requests/s:   %lld replica%s (%lld devices): %s/month\n", *o.target_qps,
              static_cast<long long>(d.target_replicas), d.target_replicas > 1 ? "s" : "",
              static_cast<long long>(d.target_replicas * d.num_devices),
              money(d.target_usd_per_month).c_str());
  }
  return s;
}

EstimateJson deployment_json(const Deployment& d, const DeploymentOptions& o) {
  const DeviceMemory& m = d.memory;
  EstimateJson j;
  j["per_device"] = {{"usable_bytes", m.usable_bytes},
                     {"weight_bytes", m.weight_bytes},
                     {"overhead_bytes", m.overhead_bytes},
                     {"kv_bytes_per_token", m.kv_bytes_per_token},
                     {"kv_capacity_tokens", m.kv_capacity_tokens},
                     {"state_bytes_per_sequence", m.state_bytes_per_sequence},
                     {"state_slots", m.state_slots},
                     {"state_bytes", m.state_bytes},
                     {"seq_len", d.seq_len},
                     {"max_batch", m.max_batch},
                     {"fits", m.fits}};
  EstimateJson batches = EstimateJson::array();
  for (const BatchPoint& b : d.batches) {
    batches.push_back({{"batch", b.batch},
                       {"decode_step_ms", b.decode_step_s * 1e3},
                       {"tpot_ms", b.decode_step_s * 1e3},
                       {"decode_tokens_per_s", b.decode_tokens_per_s},
                       {"prefill_tokens_per_s", b.prefill_tokens_per_s},
                       {"ttft_ms", b.ttft_mean_s * 1e3},
                       {"ttft_last_ms", b.ttft_last_s * 1e3},
                       {"decode_bound", b.decode_compute_bound ? "compute" : "memory"}});
  }
  j["speed"] = {
      {"prompt_len", std::llround(d.mean_prompt_len)},
      {"output_len", std::llround(d.mean_output_len)},
      {"decode_context", std::llround(d.mean_prompt_len) + std::llround(d.mean_output_len) / 2},
      {"ttft_ms",
       d.batches.empty() ? EstimateJson(nullptr) : EstimateJson(d.batches[0].ttft_mean_s * 1e3)},
      {"batches", batches},
      {"batches_end", d.batches_end}};
  if (!d.capacity) {
    j["capacity"] = nullptr;
    j["cost"] = nullptr;
    return j;
  }
  const CapacityResult& c = *d.capacity;
  j["capacity"] = {{"num_requests", o.lengths.size()},
                   {"mean_prompt_len", d.mean_prompt_len},
                   {"mean_output_len", d.mean_output_len},
                   {"slo",
                    {{"percentile", o.slo.percentile},
                     {"ttft_ms", o.slo.ttft_s * 1e3},
                     {"tpot_ms", o.slo.tpot_s * 1e3}}},
                   {"max_num_seqs", o.max_num_seqs},
                   {"max_num_batched_tokens", o.max_num_batched_tokens},
                   {"max_qps", c.max_qps},
                   {"limited_by", c.limit},
                   {"ttft_ms_at_max", number_or_null(c.ttft_at_max_s * 1e3)},
                   {"tpot_ms_at_max", number_or_null(c.tpot_at_max_s * 1e3)},
                   {"concurrency_at_max", c.mean_concurrency_at_max},
                   {"input_tokens_per_s", c.input_tokens_per_s},
                   {"output_tokens_per_s", c.output_tokens_per_s},
                   {"prefill_share", c.prefill_share},
                   {"saturated_qps", c.saturated_qps},
                   {"saturated_prefill_share", c.saturated_prefill_share},
                   {"alone_ttft_ms", c.alone_ttft_s * 1e3},
                   {"alone_tpot_ms", number_or_null(c.alone_tpot_s * 1e3)}};
  const double price = d.profile.get("price_per_hour") * d.num_devices;
  const bool priced = price > 0 && c.max_qps > 0;
  const bool priced_saturated = price > 0 && c.saturated_qps > 0;
  auto maybe = [](bool ok, double v) { return ok ? EstimateJson(v) : EstimateJson(nullptr); };
  j["cost"] = {
      {"usd_per_hour", price},
      {"usd_per_month", d.usd_per_month},
      {"usd_per_million_input_tokens",
       priced ? EstimateJson(d.cost.usd_per_million_input) : nullptr},
      {"usd_per_million_output_tokens",
       priced ? EstimateJson(d.cost.usd_per_million_output) : nullptr},
      {"usd_per_million_tokens", priced ? EstimateJson(d.cost.usd_per_million_tokens) : nullptr},
      {"saturated_usd_per_million_input_tokens",
       maybe(priced_saturated, d.saturated_cost.usd_per_million_input)},
      {"saturated_usd_per_million_output_tokens",
       maybe(priced_saturated, d.saturated_cost.usd_per_million_output)},
      {"saturated_usd_per_million_tokens",
       maybe(priced_saturated, d.saturated_cost.usd_per_million_tokens)},
      {"target_qps", o.target_qps ? EstimateJson(*o.target_qps) : nullptr},
      {"target_replicas",
       o.target_qps && d.target_replicas ? EstimateJson(d.target_replicas) : nullptr},
      {"target_devices", o.target_qps && d.target_replicas
                             ? EstimateJson(d.target_replicas * d.num_devices)
                             : nullptr},
      {"target_usd_per_month",
       o.target_qps && d.target_replicas ? EstimateJson(d.target_usd_per_month) : nullptr}};
  return j;
}

std::string calibration_text(const Calibration& c, const HardwareProfile& p) {
  auto status = [](bool measured) { return measured ? "measured (fit)" : "modelled (kept)"; };
  std::string s =
      "calibration:      fit to the runs' mean TTFT, decode time per token and wall time\n";
  if (c.underdetermined) {
    s += "  (fewer figures than parameters, and holding one at the profile's value misses them:\n"
         "   all three moved, and the runs do not tell them apart)\n";
  }
  s += strf("  bandwidth         x %.3f  -> bandwidth_efficiency %.3f   %s\n", c.scale.bandwidth,
            p.get("bandwidth_efficiency"), status(c.bandwidth_measured));
  s += strf("  compute           x %.3f  -> compute_efficiency %.3f     %s\n", c.scale.compute,
            p.get("compute_efficiency"), status(c.compute_measured));
  s += strf("  overheads         x %.3f  -> %.3g ms a step + %.3g us a layer   %s\n",
            c.scale.overhead, p.get("step_overhead_ms"), p.get("layer_overhead_us"),
            status(c.overhead_measured));
  s += "  run                                          figure             measured    before"
       "     after\n";
  for (const CalibrationFigure& f : c.figures) {
    std::string name = f.path;
    if (name.size() > 44) name = "..." + name.substr(name.size() - 41);
    s += strf("  %-44s %-16s %9.2f ms %+7.1f%% %+7.1f%%\n", name.c_str(), f.figure.c_str(),
              f.measured_s * 1e3, (f.before_s / f.measured_s - 1) * 100,
              (f.after_s / f.measured_s - 1) * 100);
  }
  if (c.worst_error() > kCalibrationMisfit) {
    s += strf("  (no setting of the three reproduces every figure: one stays %.0f%% off. The\n"
              "   model leaves out work this machine spends time on, so its figures for\n"
              "   other lengths are rougher than the table above suggests)\n",
              c.worst_error() * 100);
  }
  return s;
}

std::string checks_text(const std::vector<CalibrationFigure>& figures) {
  std::string s = "checks:           runs replayed on this profile\n";
  s += "  run                                          figure             measured  predicted"
       "   error\n";
  for (const CalibrationFigure& f : figures) {
    std::string name = f.path;
    if (name.size() > 44) name = "..." + name.substr(name.size() - 41);
    s += strf("  %-44s %-16s %9.2f ms %9.2f ms %+6.1f%%\n", name.c_str(), f.figure.c_str(),
              f.measured_s * 1e3, f.after_s * 1e3, (f.after_s / f.measured_s - 1) * 100);
  }
  return s;
}

EstimateJson checks_json(const std::vector<CalibrationFigure>& figures) {
  EstimateJson out = EstimateJson::array();
  for (const CalibrationFigure& f : figures) {
    out.push_back({{"path", f.path},
                   {"figure", f.figure},
                   {"measured_ms", f.measured_s * 1e3},
                   {"predicted_ms", f.after_s * 1e3}});
  }
  return out;
}

EstimateJson calibration_json(const Calibration& c, const HardwareProfile& p) {
  EstimateJson figures = EstimateJson::array();
  for (const CalibrationFigure& f : c.figures) {
    figures.push_back({{"path", f.path},
                       {"figure", f.figure},
                       {"measured_ms", f.measured_s * 1e3},
                       {"predicted_before_ms", f.before_s * 1e3},
                       {"predicted_after_ms", f.after_s * 1e3}});
  }
  return {{"bandwidth_scale", c.scale.bandwidth},
          {"compute_scale", c.scale.compute},
          {"overhead_scale", c.scale.overhead},
          {"step_overhead_ms", p.get("step_overhead_ms")},
          {"layer_overhead_us", p.get("layer_overhead_us")},
          {"bandwidth", c.bandwidth_measured ? "measured" : "modelled"},
          {"compute", c.compute_measured ? "measured" : "modelled"},
          {"overheads", c.overhead_measured ? "measured" : "modelled"},
          {"underdetermined", c.underdetermined},
          {"worst_error", c.worst_error()},
          {"misfit", c.worst_error() > kCalibrationMisfit},
          {"bandwidth_efficiency", p.get("bandwidth_efficiency")},
          {"compute_efficiency", p.get("compute_efficiency")},
          {"figures", figures}};
}

}  // namespace pagoda
