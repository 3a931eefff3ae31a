#include "planner/hardware.h"

#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <regex>

#include "core/error.h"

namespace pagoda {
namespace {

struct KeyRange {
  double min;
  double max;
  bool min_exclusive;
};

const std::map<std::string, KeyRange>& key_ranges() {
  static const std::map<std::string, KeyRange> ranges = {
      {"memory_gib", {0, 1e6, true}},
      {"memory_utilization", {0, 1, true}},
      {"bandwidth_gbs", {0, 1e6, true}},
      {"bandwidth_efficiency", {0, 10, true}},
      {"f32_tflops", {0, 1e6, true}},
      {"f16_tflops", {0, 1e6, true}},
      {"int8_tops", {0, 1e6, false}},
      {"fp8_tflops", {0, 1e6, false}},
      {"compute_efficiency", {0, 10, true}},
      {"link_gbs", {0, 1e6, false}},
      {"link_latency_us", {0, 1e6, false}},
      {"step_overhead_ms", {0, 1e6, false}},
      {"layer_overhead_us", {0, 1e6, false}},
      {"price_per_hour", {0, 1e6, false}},
      {"overlap", {0, 1, false}},
  };
  return ranges;
}

// A device's spec-sheet figures (dense, no sparsity) and a public on-demand price; the sources
// and dates are in docs/BENCHMARKS.md.
struct GpuSpec {
  const char* name;
  const char* description;
  double memory_gib, bandwidth_gbs, f32, f16, int8, fp8, link_gbs, link_latency_us, price;
  const char* price_source;
};

const std::vector<GpuSpec>& gpu_specs() {
  static const std::vector<GpuSpec> specs = {
      {"a10", "NVIDIA A10 24 GB (PCIe, GDDR6)", 24, 600, 31.2, 125, 250, 0, 32, 25, 0.86,
       "list price, Lambda, May 2026"},
      {"l4", "NVIDIA L4 24 GB (PCIe, GDDR6)", 24, 300, 30.3, 121, 242, 242, 32, 25, 0.80,
       "list price, Modal, May 2026"},
      {"a100-40gb", "NVIDIA A100 SXM4 40 GB (HBM2)", 40, 1555, 19.5, 312, 624, 0, 300, 10, 1.48,
       "list price, Lambda, May 2026"},
      {"a100-80gb", "NVIDIA A100 SXM4 80 GB (HBM2e)", 80, 2039, 19.5, 312, 624, 0, 300, 10, 1.64,
       "list price, Spheron, May 2026"},
      {"h100", "NVIDIA H100 SXM5 80 GB (HBM3)", 80, 3350, 67, 989, 1979, 1979, 450, 10, 2.90,
       "list price, Spheron, May 2026"},
      {"h200", "NVIDIA H200 SXM 141 GB (HBM3e)", 140, 4800, 67, 989, 1979, 1979, 450, 10, 4.54,
       "list price, Spheron, March 2026"},
  };
  return specs;
}

void set_figure(HardwareProfile& p, const std::string& key, double value,
                const std::string& source) {
  p.figures[key] = {value, source};
}

HardwareProfile gpu_profile(const GpuSpec& s) {
  HardwareProfile p;
  p.name = s.name;
  p.description = s.description;
  p.kind = DeviceKind::kGpu;
  const std::string spec = "spec sheet";
  set_figure(p, "memory_gib", s.memory_gib, spec);
  set_figure(p, "bandwidth_gbs", s.bandwidth_gbs, spec);
  set_figure(p, "f32_tflops", s.f32, spec);
  set_figure(p, "f16_tflops", s.f16, spec);
  set_figure(p, "int8_tops", s.int8, spec);
  set_figure(p, "fp8_tflops", s.fp8, spec);
  set_figure(p, "link_gbs", s.link_gbs, spec + " (one direction)");
  set_figure(p, "link_latency_us", s.link_latency_us, "modelled");
  set_figure(p, "price_per_hour", s.price, s.price_source);
  // vLLM's default gpu_memory_utilization; decode kernels reach about 80 % of the spec
  // bandwidth and prefill GEMMs about 60 % of the dense peak (modelled, not measured here).
  set_figure(p, "memory_utilization", 0.9, "modelled (vLLM's default)");
  set_figure(p, "bandwidth_efficiency", 0.8, "modelled");
  set_figure(p, "compute_efficiency", 0.6, "modelled");
  // With CUDA graphs a layer's ten-odd kernels cost launch gaps of a few microseconds each.
  set_figure(p, "step_overhead_ms", 1.0, "modelled");
  set_figure(p, "layer_overhead_us", 20, "modelled");
  // Copy engines and warps in flight stream weights while tensor cores multiply: a roofline.
  set_figure(p, "overlap", 1, "modelled (roofline)");
  return p;
}

// A server CPU box: DDR5-4800 channels (38.4 GB/s each) and cores at 2.5 GHz with two 256-bit
// FMA pipes (32 F32 flops per cycle) and VNNI (4 x that in 8-bit integer operations).
HardwareProfile cpu_box(int64_t cores, int64_t channels, double memory_gib) {
  HardwareProfile p;
  p.name = "cpu-" + std::to_string(cores) + "c-" + std::to_string(channels) + "ch-" +
           std::to_string(static_cast<int64_t>(memory_gib)) + "gb";
  p.description = std::to_string(cores) + " x86 cores (AVX-512 VNNI, 2.5 GHz), " +
                  std::to_string(channels) + " DDR5-4800 channels, " +
                  std::to_string(static_cast<int64_t>(memory_gib)) + " GiB";
  p.kind = DeviceKind::kCpu;
  const std::string model = "modelled (cores x 2.5 GHz x 32 flops)";
  const double f32 = cores * 2.5e9 * 32 / 1e12;
  set_figure(p, "memory_gib", memory_gib, "preset");
  set_figure(p, "bandwidth_gbs", channels * 38.4, "modelled (channels x 38.4 GB/s)");
  set_figure(p, "f32_tflops", f32, model);
  set_figure(p, "f16_tflops", f32, "modelled (F16 weights multiply as F32)");
  set_figure(p, "int8_tops", 4 * f32, "modelled (VNNI: 4 x F32)");
  set_figure(p, "fp8_tflops", 0, "none");
  set_figure(p, "link_gbs", 0, "none");
  set_figure(p, "link_latency_us", 0, "none");
  set_figure(p, "price_per_hour", 0, "unknown (give --hw price_per_hour=...)");
  // STREAM-like reads reach about 60 % of the DIMMs' peak; the multiply-add peak is not
  // reached by memory-fed products.
  set_figure(p, "memory_utilization", 0.9, "modelled (the OS keeps the rest)");
  set_figure(p, "bandwidth_efficiency", 0.6, "modelled");
  set_figure(p, "compute_efficiency", 0.5, "modelled");
  // A layer is 13 backend calls, each a hand-off to the worker threads and back.
  set_figure(p, "step_overhead_ms", 0.3, "modelled");
  set_figure(p, "layer_overhead_us", 50, "modelled");
  // The same cores issue the loads and the multiply-adds: their times add.
  set_figure(p, "overlap", 0, "modelled (the same cores load and multiply)");
  return p;
}

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : " ") + n;
  return s;
}

void check_value(const std::string& key, double value, const std::string& origin) {
  const auto it = key_ranges().find(key);
  if (it == key_ranges().end()) {
    std::vector<std::string> keys;
    for (const auto& k : hardware_keys()) keys.push_back(k.key);
    fail(origin, ": unknown hardware figure '", key, "' (known: ", joined(keys), ")");
  }
  const KeyRange& r = it->second;
  const bool low = r.min_exclusive ? value <= r.min : value < r.min;
  if (!std::isfinite(value) || low || value > r.max) {
    fail(origin, ": ", key, " = ", value, " is out of range (", r.min_exclusive ? "more than " : "",
         r.min, " to ", r.max, ")");
  }
}

}  // namespace

const std::vector<HardwareKey>& hardware_keys() {
  static const std::vector<HardwareKey> keys = {
      {"memory_gib", "device memory, GiB"},
      {"memory_utilization", "share of memory for weights, KV cache and activations"},
      {"bandwidth_gbs", "memory bandwidth, GB/s"},
      {"bandwidth_efficiency", "share of bandwidth_gbs a decode step reaches"},
      {"f32_tflops", "dense F32 multiply-add rate, TFLOP/s"},
      {"f16_tflops", "dense F16 / BF16 rate, TFLOP/s"},
      {"int8_tops", "dense INT8 rate, TOP/s (0: none)"},
      {"fp8_tflops", "dense FP8 rate, TFLOP/s (0: none)"},
      {"compute_efficiency", "share of the compute figures a product reaches"},
      {"link_gbs", "device-to-device bandwidth, one direction, GB/s"},
      {"link_latency_us", "latency of one all-reduce hop, microseconds"},
      {"step_overhead_ms", "fixed time of an engine step (scheduling, sampling), ms"},
      {"layer_overhead_us",
       "fixed time each layer adds to a step (launches, thread hand-offs), us"},
      {"overlap",
       "share of the shorter of a phase's memory and compute times hidden under the longer: 1 a "
       "roofline, 0 they add"},
      {"price_per_hour", "price of one device, USD per hour"},
  };
  return keys;
}

double HardwareProfile::get(const std::string& key) const {
  const auto it = figures.find(key);
  if (it == figures.end()) fail("hardware ", name, ": no figure '", key, "'");
  return it->second.value;
}

const std::string& HardwareProfile::source(const std::string& key) const {
  const auto it = figures.find(key);
  if (it == figures.end()) fail("hardware ", name, ": no figure '", key, "'");
  return it->second.source;
}

void HardwareProfile::set(const std::string& key, double value, const std::string& origin) {
  check_value(key, value, origin);
  figures[key] = {value, origin};
}

std::vector<std::string> hardware_preset_names() {
  std::vector<std::string> names;
  for (const auto& s : gpu_specs()) names.push_back(s.name);
  names.push_back("cpu-32gb");
  names.push_back("cpu-<cores>c-<channels>ch[-<memory>gb]");
  names.push_back("this");
  return names;
}

HardwareProfile find_hardware_preset(const std::string& name) {
  for (const auto& s : gpu_specs()) {
    if (name == s.name) return gpu_profile(s);
  }
  if (name == "cpu-32gb") {
    // A rented 16-vCPU (8-core), 32 GB x86 box; its memory bandwidth is not published, so two
    // DDR5 channels are assumed.
    HardwareProfile p = cpu_box(8, 2, 32);
    p.name = "cpu-32gb";
    p.description = "rented x86 box, 16 vCPUs (8 cores), 32 GB, 2 DDR5 channels assumed";
    p.figures["price_per_hour"] = {0.04, "list price, Hetzner cx53, April 2026"};
    return p;
  }
  static const std::regex box(R"(cpu-(\d{1,4})c-(\d{1,2})ch(?:-(\d{1,6})gb)?)");
  std::smatch m;
  if (std::regex_match(name, m, box)) {
    const int64_t cores = std::stoll(m[1]), channels = std::stoll(m[2]);
    const double memory = m[3].matched ? std::stod(m[3]) : 4.0 * static_cast<double>(cores);
    if (cores == 0 || channels == 0 || memory == 0) {
      fail("--hardware ", name, ": cores, channels and memory must be more than 0");
    }
    return cpu_box(cores, channels, memory);
  }
  fail("--hardware: unknown hardware '", name, "' (known: ", joined(hardware_preset_names()),
       ", or a JSON file)");
}

HardwareProfile hardware_from_json(const std::string& json_text, const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": not JSON (", e.what(), ")");
  }
  if (!j.is_object()) fail(path, ": a hardware file is one JSON object of figures");
  HardwareProfile p;
  const bool has_base = j.contains("base");
  if (has_base) {
    if (!j["base"].is_string()) fail(path, ": base: not a string");
    const std::string base = j["base"].get<std::string>();
    if (base == "this") fail(path, ": base: 'this' is measured; give it with --hardware this");
    p = find_hardware_preset(base);
  }
  const std::string origin = "file " + path;
  for (const auto& [key, value] : j.items()) {
    if (key == "base") continue;
    if (key == "name" || key == "description") {
      if (!value.is_string()) fail(path, ": ", key, ": not a string");
      (key == "name" ? p.name : p.description) = value.get<std::string>();
      continue;
    }
    if (key == "kind") {
      const std::string kind = value.is_string() ? value.get<std::string>() : "";
      if (kind != "gpu" && kind != "cpu") fail(path, ": kind: must be \"gpu\" or \"cpu\"");
      p.kind = kind == "gpu" ? DeviceKind::kGpu : DeviceKind::kCpu;
      continue;
    }
    if (!value.is_number()) fail(path, ": ", key, ": not a number");
    check_value(key, value.get<double>(), path);
    p.figures[key] = {value.get<double>(), origin};
  }
  if (!has_base) {
    if (!j.contains("kind")) fail(path, ": kind: missing (\"gpu\" or \"cpu\"), or give a base");
    for (const auto& k : hardware_keys()) {
      if (!p.figures.count(k.key)) fail(path, ": ", k.key, ": missing (", k.meaning, ")");
    }
  }
  if (p.name.empty()) p.name = path;
  return p;
}

void apply_hardware_override(HardwareProfile& profile, const std::string& assignment) {
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    fail("--hw: '", assignment, "' is not KEY=VALUE (keys: bandwidth_gbs, price_per_hour, ...)");
  }
  const std::string key = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size()) {
    fail("--hw: ", key, ": '", text, "' is not a number");
  }
  profile.set(key, value, "--hw");
}

std::string compute_key(const std::string& compute_type, const HardwareProfile& profile) {
  const bool cpu = profile.kind == DeviceKind::kCpu;
  auto or_f16 = [&](const char* key) {
    return profile.get(key) > 0 ? std::string(key) : std::string("f16_tflops");
  };
  if (compute_type == "F32") return "f32_tflops";
  if (compute_type == "F16" || compute_type == "BF16") return "f16_tflops";
  if (compute_type == "FP8") return cpu ? "f16_tflops" : or_f16("fp8_tflops");
  if (compute_type == "INT8") return or_f16("int8_tops");
  // GGUF block types and AWQ: pagoda's CPU products multiply 8-bit integers; GPU kernels for
  // 4-bit weights (Marlin, llama.cpp's dequantizing paths) multiply in F16.
  return cpu ? or_f16("int8_tops") : "f16_tflops";
}

std::string attention_compute_key(const HardwareProfile& profile) {
  return profile.kind == DeviceKind::kCpu ? "f32_tflops" : "f16_tflops";
}

}  // namespace pagoda
