// Hardware profiles for `pagoda estimate`: memory, memory bandwidth, dense compute per number
// format, the link between devices and an hourly price, each figure with where it came from
// (a spec sheet, a list price, the run-time probe of `this` machine, the command line, a JSON
// file, or a fit to `pagoda bench` measurements). Figures are per device.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pagoda {

enum class DeviceKind { kGpu, kCpu };

struct HardwareFigure {
  double value = 0;
  std::string source;  // "spec sheet", "probe", "--hw", "file hw.json", "calibrated", ...
};

// The figures every profile has, with units; overrides and JSON files use these keys.
struct HardwareKey {
  const char* key;
  const char* meaning;
};
const std::vector<HardwareKey>& hardware_keys();

struct HardwareProfile {
  std::string name;         // "a100-80gb", "cpu-8c-2ch-32gb", "this", a file's "name"
  std::string description;  // "NVIDIA A100 SXM4 80 GB"
  DeviceKind kind = DeviceKind::kGpu;
  std::map<std::string, HardwareFigure> figures;  // one per hardware_keys() entry

  double get(const std::string& key) const;  // throws Error for a key that is not one
  const std::string& source(const std::string& key) const;
  // Throws Error naming `origin` for an unknown key or a value out of the key's range.
  void set(const std::string& key, double value, const std::string& origin);
};

// The built-in presets (a10, l4, a100-40gb, a100-80gb, h100, h200, cpu-32gb) and the CPU box
// family cpu-<cores>c-<channels>ch[-<memory>gb]; names for --help.
std::vector<std::string> hardware_preset_names();
// A preset or CPU box by name. Throws Error listing the names for anything else ("this" is
// measured: probe_this_machine).
HardwareProfile find_hardware_preset(const std::string& name);

// A JSON object of figures: {"base": "a100-80gb", "name": "...", "kind": "gpu"|"cpu",
// "bandwidth_gbs": 1800, ...}. Without "base" every figure must be given. Throws Error naming
// `path` and the key for an unknown key, a missing figure or a value that is not a number.
HardwareProfile hardware_from_json(const std::string& json_text, const std::string& path);

// "bandwidth_gbs=900" applied to the profile (source "--hw"). Throws Error naming the option.
void apply_hardware_override(HardwareProfile& profile, const std::string& assignment);

// What the probe of the machine it runs on measures, and how.
struct ProbeOptions {
  std::string weight_type = "Q4_0";  // the matmul whose rate is the INT8 figure (a GGUF name)
  int64_t rows = 2048;               // the products' shape: the model's FFN (intermediate x hidden)
  int64_t cols = 2048;
  int num_threads = 0;            // 0: every core
  double seconds_per_test = 0.2;  // each of the three tests runs about this long
};
// Times an F16-weight product (the F32 multiply-add rate: the F16 and F32 figures), a product
// with `weight_type` weights over 256 tokens (the INT8 figure, since pagoda's quantized
// products multiply 8-bit integers), a one-token product over 256 MiB of them (the
// bandwidth) and a near-empty call (13 of which make a layer's fixed
// overhead); memory is MemTotal. Takes about 3.5 x seconds_per_test plus packing 256 MiB.
HardwareProfile probe_this_machine(const ProbeOptions& options);

// The compute figure a weight type multiplies at on a device: "f32_tflops", "f16_tflops",
// "int8_tops" or "fp8_tflops". `compute_type` is a WeightEstimate::compute_type ("Q4_K",
// "F16", "AWQ-4bit", "FP8", "INT8").
std::string compute_key(const std::string& compute_type, const HardwareProfile& profile);
// Attention runs in F32 on CPUs (pagoda's kernels), in F16 on GPUs (flash-attention style).
std::string attention_compute_key(const HardwareProfile& profile);

}  // namespace pagoda
