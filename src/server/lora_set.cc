#include "server/lora_set.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "server/api_error.h"

namespace pagoda::server {
namespace {

ApiError not_found(const std::string& name) {
  return ApiError(404, "invalid_request_error",
                  "The LoRA adapter '" + name + "' cannot be found", "lora_name",
                  "adapter_not_found");
}

}  // namespace

LoraSet::LoraSet(int32_t max_loras, std::shared_ptr<AdapterHost> host, bool runtime_loading)
    : host_(std::move(host)), runtime_loading_(runtime_loading),
      max_loras_(std::max(max_loras, 0)), slots_(static_cast<size_t>(max_loras_) + 1) {}

LoraSet::~LoraSet() = default;

ServedAdapter LoraSet::load(const std::string& name, const std::string& path, bool replace) {
  if (host_ == nullptr) {
    throw ApiError(400, "invalid_request_error",
                   "this model runs without adapters (its backend does not apply them)",
                   "lora_name", "adapters_unavailable");
  }
  if (name.empty()) throw bad_param("lora_name", "'lora_name' must not be empty");
  sweep();
  size_t slot = 0;
  {
    std::lock_guard lock(mutex_);
    if (std::find(loading_.begin(), loading_.end(), name) != loading_.end()) {
      throw ApiError(409, "invalid_request_error",
                     "The LoRA adapter '" + name + "' is being loaded now", "lora_name",
                     "adapter_loading");
    }
    const auto named = std::find_if(named_.begin(), named_.end(),
                                    [&](const AdapterHold& a) { return a->name == name; });
    if (named != named_.end() && !replace) {
      throw ApiError(400, "invalid_request_error",
                     "The LoRA adapter '" + name + "' has already been loaded (give "
                     "load_inplace true to replace it)", "lora_name", "adapter_exists");
    }
    const size_t others = named_.size() - (named != named_.end() ? 1 : 0);
    if (others + loading_.size() >= static_cast<size_t>(max_loras_)) {
      throw ApiError(409, "invalid_request_error",
                     std::to_string(max_loras_) + " LoRA adapters are loaded or loading, as "
                     "many as --max-loras allows: unload one first", "lora_name",
                     "too_many_adapters");
    }
    const auto free = std::find_if(slots_.begin(), slots_.end(),
                                   [this](const Slot& s) { return slot_free(s); });
    if (free == slots_.end()) {
      throw ApiError(503, "server_error",
                     "no LoRA slot is free yet: requests still run on adapters that were "
                     "unloaded or replaced; try again when they end", "lora_name", "adapter_slots_draining")
          .with_retry_after(1);
    }
    slot = static_cast<size_t>(free - slots_.begin());
    free->busy = true;
    loading_.push_back(name);
  }
  auto give_up = [&] {
    std::lock_guard lock(mutex_);
    slots_[slot].busy = false;
    loading_.erase(std::find(loading_.begin(), loading_.end(), name));
  };
  AdapterHost::Opened opened;
  try {
    opened = host_->open(path);
    host_->install(static_cast<int32_t>(slot) + 1, opened.adapter.get());
  } catch (const Error& e) {
    give_up();
    throw ApiError(400, "invalid_request_error", e.what(), "lora_path", "adapter_unreadable");
  } catch (...) {
    give_up();
    throw;
  }
  auto adapter = std::make_shared<const ServedAdapter>(
      ServedAdapter{name, static_cast<int32_t>(slot) + 1, opened.digest, path});
  {
    std::lock_guard lock(mutex_);
    Slot& s = slots_[slot];
    s.weights = std::move(opened.adapter);  // old weights, if any, left the backend in install
    s.held = adapter;
    s.busy = false;
    loading_.erase(std::find(loading_.begin(), loading_.end(), name));
    const auto named = std::find_if(named_.begin(), named_.end(),
                                    [&](const AdapterHold& a) { return a->name == name; });
    if (named != named_.end()) {
      *named = adapter;
    } else {
      named_.push_back(adapter);
    }
  }
  std::fprintf(stderr, "serve: LoRA adapter '%s' in slot %zu: %s, %s\n", name.c_str(), slot + 1,
               path.c_str(), opened.summary.c_str());
  sweep();  // frees what a replaced adapter left, when nothing holds it
  return *adapter;
}

void LoraSet::unload(const std::string& name) {
  {
    std::lock_guard lock(mutex_);
    const auto named = std::find_if(named_.begin(), named_.end(),
                                    [&](const AdapterHold& a) { return a->name == name; });
    if (named == named_.end()) throw not_found(name);
    named_.erase(named);
  }
  std::fprintf(stderr, "serve: LoRA adapter '%s' unloaded\n", name.c_str());
  sweep();
}

void LoraSet::sweep() {
  if (host_ == nullptr) return;
  for (size_t k = 0;; ++k) {
    std::shared_ptr<const void> weights;
    {
      std::lock_guard lock(mutex_);
      if (k >= slots_.size()) return;
      Slot& s = slots_[k];
      if (!slot_free(s) || s.weights == nullptr) continue;
      s.busy = true;
      weights = s.weights;
    }
    try {
      host_->install(static_cast<int32_t>(k) + 1, nullptr);
    } catch (...) {
      std::lock_guard lock(mutex_);
      slots_[k].busy = false;
      throw;
    }
    std::lock_guard lock(mutex_);
    slots_[k].weights.reset();
    slots_[k].busy = false;
  }
}

AdapterHold LoraSet::find(std::string_view name) const {
  std::lock_guard lock(mutex_);
  for (const AdapterHold& a : named_) {
    if (a->name == name) return a;
  }
  return nullptr;
}

std::vector<LoraSet::Listed> LoraSet::list() const {
  std::lock_guard lock(mutex_);
  std::vector<Listed> out;
  for (const AdapterHold& a : named_) {
    out.push_back({*a, static_cast<int64_t>(a.use_count()) - 1});  // less the name's own hold
  }
  return out;
}

std::vector<std::string> LoraSet::names() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> out;
  for (const AdapterHold& a : named_) out.push_back(a->name);
  return out;
}

void LoraSet::check_invariants() const {
  std::lock_guard lock(mutex_);
  std::vector<int32_t> seen;
  for (const AdapterHold& a : named_) {
    if (a->index < 1 || a->index > static_cast<int32_t>(slots_.size())) {
      fail("LoraSet: '", a->name, "' in slot ", a->index, " of ", slots_.size());
    }
    const Slot& s = slots_[static_cast<size_t>(a->index - 1)];
    if (s.held.lock() != a) fail("LoraSet: slot ", a->index, " does not hold '", a->name, "'");
    if (s.weights == nullptr) fail("LoraSet: '", a->name, "' has no weights in its slot");
    if (std::find(seen.begin(), seen.end(), a->index) != seen.end()) {
      fail("LoraSet: two names in slot ", a->index);
    }
    seen.push_back(a->index);
    for (const AdapterHold& b : named_) {
      if (b != a && b->name == a->name) fail("LoraSet: the name '", a->name, "' twice");
    }
  }
  for (size_t k = 0; k < slots_.size(); ++k) {
    if (!slots_[k].held.expired() && slots_[k].weights == nullptr) {
      fail("LoraSet: slot ", k + 1, " is held but empty");
    }
  }
}

}  // namespace pagoda::server
