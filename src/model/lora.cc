#include "model/lora.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "core/error.h"
#include "model/architecture.h"
#include "model/weights.h"

namespace pagoda {
namespace {

constexpr std::string_view kSuffixA = ".lora_a", kSuffixB = ".lora_b";

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string shape_text(const std::vector<uint64_t>& shape) {
  std::string s;
  for (uint64_t d : shape) s += (s.empty() ? "" : " x ") + std::to_string(d);
  return s;
}

WeightMatrix matrix_of(const GgufTensorInfo& t) {
  WeightMatrix w;
  w.type = t.type;
  w.cols = static_cast<int64_t>(t.shape[0]);
  w.rows = static_cast<int64_t>(t.shape[1]);
  w.row_bytes = t.num_bytes / t.shape[1];
  w.data = t.data;
  w.id = new_weight_id();
  w.mapped = true;
  return w;
}

uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace

std::unique_ptr<LoraAdapter> LoraAdapter::open(const std::string& path, const ModelFile& base,
                                               float user_scale) {
  if (!base.gguf()) {
    fail("--lora ", path, ": the base model must be a GGUF file (", base.path(), " is ",
         base.format(), "); convert it with `pagoda convert` first");
  }
  auto adapter = std::unique_ptr<LoraAdapter>(new LoraAdapter());
  adapter->path_ = path;
  adapter->file_ = GgufFile::open(path);
  const GgufFile& f = *adapter->file_;
  const std::string type = f.try_string("general.type").value_or("");
  if (type != "adapter") {
    fail(path, ": general.type is '", type, "', not 'adapter': not a LoRA adapter file (a model?)");
  }
  const std::string kind = f.try_string("adapter.type").value_or("");
  if (kind != "lora") fail(path, ": adapter.type is '", kind, "', only 'lora' adapters are read");
  if (f.has("adapter.alora.invocation_tokens")) {
    fail(path, ": an activated LoRA (adapter.alora.invocation_tokens) is not supported");
  }
  const std::string arch = f.try_string("general.architecture").value_or("");
  const Architecture* mine = find_architecture(arch);
  if (!mine || mine != find_architecture(base.config().architecture)) {
    fail(path, ": an adapter for '", arch, "', the model is '", base.config().architecture, "'");
  }
  adapter->alpha_ = static_cast<float>(f.try_f64("adapter.lora.alpha").value_or(0.0));

  std::map<std::string, std::pair<const GgufTensorInfo*, const GgufTensorInfo*>> pairs;
  for (const GgufTensorInfo& t : f.tensors()) {
    const bool is_a = ends_with(t.name, kSuffixA), is_b = ends_with(t.name, kSuffixB);
    if (!is_a && !is_b) fail(path, ": tensor '", t.name, "' is neither a lora_a nor a lora_b");
    auto& pair = pairs[t.name.substr(0, t.name.size() - kSuffixA.size())];
    (is_a ? pair.first : pair.second) = &t;
  }
  if (pairs.empty()) fail(path, ": the adapter has no tensors");
  std::map<std::string, const TensorRef*> base_tensors;
  for (const TensorRef& t : base.tensors()) base_tensors[t.name] = &t;
  uint64_t digest = 1469598103934665603ull;
  for (const auto& [target, pair] : pairs) {
    const auto [a, b] = pair;
    if (!a || !b) fail(path, ": '", target, "' has a lora_", a ? "a" : "b", " and no lora_", a ? "b" : "a");
    if (target == "token_embd.weight") {
      fail(path, ": an adapter on the token embeddings (token_embd) is not supported");
    }
    auto it = base_tensors.find(target);
    if (it == base_tensors.end()) {
      fail(path, ": the adapter changes '", target, "', which the model does not have (another base model?)");
    }
    const TensorRef& w = *it->second;
    if (w.shape.size() != 2) {
      fail(path, ": '", target, "' is ", shape_text(w.shape), ": adapters on stacked experts are not supported");
    }
    if (a->shape.size() != 2 || b->shape.size() != 2 || a->shape[0] != w.shape[0] ||
        b->shape[1] != w.shape[1] || a->shape[1] != b->shape[0]) {
      fail(path, ": '", target, "' is ", shape_text(w.shape), " but its lora_a is ",
           shape_text(a->shape), " and lora_b ", shape_text(b->shape), " (expected ",
           w.shape[0], " x rank and rank x ", w.shape[1], ": another base model?)");
    }
    LoraWeight lw;
    lw.target = target;
    lw.a = matrix_of(*a);
    lw.b = matrix_of(*b);
    const float rank = static_cast<float>(lw.a.rows);
    lw.scale = adapter->alpha_ != 0 ? user_scale * adapter->alpha_ / rank : user_scale;
    digest = fnv1a(digest, target.data(), target.size());
    digest = fnv1a(digest, &lw.scale, sizeof lw.scale);
    digest = fnv1a(digest, a->data, a->num_bytes);
    digest = fnv1a(digest, b->data, b->num_bytes);
    adapter->weights_.push_back(std::move(lw));
  }
  adapter->digest_ = digest;
  return adapter;
}

}  // namespace pagoda
