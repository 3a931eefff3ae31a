#include "tools/peft_lora.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "format/gguf_writer.h"
#include "format/safetensors.h"
#include "model/architecture.h"
#include "model/weights.h"
#include "quant/reference.h"
#include "tools/convert.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

Json read_config(const std::string& folder) {
  const fs::path path = fs::path(folder) / "adapter_config.json";
  std::ifstream in(path);
  if (!in) fail(folder, ": no adapter_config.json (not a PEFT adapter folder)");
  std::stringstream text;
  text << in.rdbuf();
  try {
    return Json::parse(text.str());
  } catch (const Json::exception& e) {
    fail(path.string(), ": not JSON (", e.what(), ")");
  }
}

// What the GGUF form cannot say, refused by name.
void check_config(const Json& c, const std::string& folder) {
  if (!c.is_object()) fail(folder, "/adapter_config.json: not a JSON object");
  const std::string type = c.value("peft_type", std::string("LORA"));
  if (type != "LORA") fail(folder, ": peft_type ", type, " is not LORA");
  auto flag = [&](const char* key) { return c.contains(key) && c[key].is_boolean() && c[key].get<bool>(); };
  if (flag("use_rslora")) fail(folder, ": rsLoRA (use_rslora) is not supported");
  if (flag("use_dora")) fail(folder, ": DoRA (use_dora) is not supported");
  if (flag("fan_in_fan_out")) fail(folder, ": fan_in_fan_out adapters are not supported");
  for (const char* key : {"rank_pattern", "alpha_pattern"}) {
    if (c.contains(key) && !c[key].is_null() && !c[key].empty()) {
      fail(folder, ": per-module ranks or alphas (", key, ") are not supported");
    }
  }
  if (c.contains("modules_to_save") && !c["modules_to_save"].is_null() &&
      !c["modules_to_save"].empty()) {
    fail(folder, ": modules_to_save (whole modules trained beside the adapter) is not supported");
  }
  if (c.contains("bias") && c["bias"] != "none") {
    fail(folder, ": trained biases (bias ", c["bias"].dump(), ") are not supported");
  }
  if (!c.contains("r") || !c["r"].is_number_integer() || c["r"].get<int64_t>() < 1) {
    fail(folder, "/adapter_config.json: r (the rank) is missing or not a positive integer");
  }
}

struct Pair {
  const SafetensorsTensorInfo* a = nullptr;
  const SafetensorsTensorInfo* b = nullptr;
};

std::vector<float> values_of(const SafetensorsTensorInfo& t) {
  std::vector<float> v(static_cast<size_t>(t.num_elements));
  dequantize_row(t.type, t.data, v.data(), static_cast<int64_t>(t.num_elements));
  return v;
}

}  // namespace

bool is_peft_folder(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::exists(fs::path(path) / "adapter_config.json", ec);
}

PeftSummary convert_peft_lora(const std::string& folder, const ModelFile& base,
                              const std::string& out_path) {
  const Json config = read_config(folder);
  check_config(config, folder);
  const std::string st_path = (fs::path(folder) / "adapter_model.safetensors").string();
  if (!fs::exists(st_path)) fail(folder, ": no adapter_model.safetensors");
  auto st = SafetensorsFile::open(st_path);
  const Architecture* arch = find_architecture(base.config().architecture);
  if (arch == nullptr) fail(folder, ": the base's family '", base.config().architecture, "' is unknown");
  std::map<std::string, Pair> pairs;
  for (const SafetensorsTensorInfo& t : st->tensors()) {
    std::string name = t.name;
    if (name.rfind("base_model.model.", 0) == 0) name = name.substr(17);
    const bool is_a = ends_with(name, ".lora_A.weight"), is_b = ends_with(name, ".lora_B.weight");
    if (!is_a && !is_b) fail(st_path, ": tensor '", t.name, "' is neither a lora_A nor a lora_B");
    const std::string hf = name.substr(0, name.size() - 14) + ".weight";
    const std::string gguf = gguf_tensor_name(hf, arch);
    if (gguf.empty() || gguf == hf) fail(st_path, ": '", t.name, "' names no weight of a ", arch->name, " model");
    if (gguf == "token_embd.weight") fail(st_path, ": an adapter on the token embeddings is not supported");
    (is_a ? pairs[gguf].a : pairs[gguf].b) = &t;
  }
  if (pairs.empty()) fail(st_path, ": the adapter has no tensors");
  const ModelConfig& c = base.config();
  PeftSummary s;
  s.rank = config["r"].get<int64_t>();
  s.alpha = config.value("lora_alpha", static_cast<float>(s.rank));
  GgufWriter w;
  w.add_string("general.architecture", std::string(arch->name));
  w.add_string("general.type", "adapter");
  w.add_string("adapter.type", "lora");
  w.add_f32("adapter.lora.alpha", s.alpha);
  for (const auto& [gguf, pair] : pairs) {
    if (!pair.a || !pair.b) fail(st_path, ": '", gguf, "' has only one of lora_A and lora_B");
    if (pair.a->shape.size() != 2 || pair.b->shape.size() != 2 ||
        static_cast<int64_t>(pair.a->shape[1]) != s.rank || pair.b->shape[0] != pair.a->shape[1]) {
      fail(st_path, ": '", gguf, "': lora_A and lora_B are not of rank ", s.rank);
    }
    std::vector<float> a = values_of(*pair.a), b = values_of(*pair.b);
    const uint32_t heads = ends_with(gguf, ".attn_q.weight")   ? c.num_heads
                           : ends_with(gguf, ".attn_k.weight") ? c.num_kv_heads
                                                               : 0;
    if (arch->gguf_rope_adjacent_pairs && heads > 0) {
      const uint64_t rows = pair.b->shape[1], rank = pair.b->shape[0];
      if (rows != uint64_t{heads} * c.head_dim) fail(st_path, ": '", gguf, "' has ", rows, " rows, not heads x head_dim");
      std::vector<float> permuted(b.size());
      for (uint64_t r = 0; r < rows; ++r) {
        const uint64_t from = rope_pair_source_row(r, c.head_dim);
        std::copy_n(b.begin() + static_cast<std::ptrdiff_t>(from * rank), rank,
                    permuted.begin() + static_cast<std::ptrdiff_t>(r * rank));
      }
      b = std::move(permuted);
      ++s.num_permuted;
    }
    auto bytes = [](const std::vector<float>& v) {
      std::vector<uint8_t> out(v.size() * sizeof(float));
      std::memcpy(out.data(), v.data(), out.size());
      return out;
    };
    w.add_tensor(gguf + ".lora_a", DType::kF32, pair.a->shape, bytes(a));
    w.add_tensor(gguf + ".lora_b", DType::kF32, pair.b->shape, bytes(b));
    ++s.num_pairs;
  }
  w.write(out_path);
  return s;
}

std::unique_ptr<LoraAdapter> open_lora_adapter(const std::string& path, const ModelFile& base,
                                               float user_scale) {
  if (!is_peft_folder(path)) return LoraAdapter::open(path, base, user_scale);
  static std::atomic<uint64_t> counter{0};
  const fs::path tmp = fs::temp_directory_path() /
                       ("pagoda-lora-" + std::to_string(::getpid()) + "-" +
                        std::to_string(counter.fetch_add(1)) + ".gguf");
  struct Remove {
    fs::path p;
    ~Remove() {
      std::error_code ec;
      fs::remove(p, ec);
    }
  } remove{tmp};
  convert_peft_lora(path, base, tmp.string());
  return LoraAdapter::open(tmp.string(), base, user_scale);
}

}  // namespace pagoda
