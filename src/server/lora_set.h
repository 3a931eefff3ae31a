// The LoRA adapters a served model runs, by name: those of `serve --lora NAME=PATH` and those
// loaded and unloaded at run time (vLLM's /v1/load_lora_adapter and /v1/unload_lora_adapter).
// Each lives in a slot of the model's LoraBackend (GenerationRequest::adapter is the slot), and
// `--max-loras` adapters may be named at once, in that many slots and one more (where an adapter
// replaced or unloaded while requests still run on it can drain). Thread-safe.
//
// A request holds its adapter (AdapterHold) from parsing to its last event. Unloading takes the
// name away at once, but the slot is filled again only once no request holds the adapter, so
// a request never runs on another adapter's weights; the weights are freed then (or at once
// when nothing holds them).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::server {

// A named adapter: a request whose `model` is the name runs on it.
struct ServedAdapter {
  std::string name;
  int32_t index = 0;    // its slot: GenerationRequest::adapter
  uint64_t digest = 0;  // of its contents: the prefix-cache key of its requests
  std::string path;
};

// A request's hold on its adapter (null: the base model).
using AdapterHold = std::shared_ptr<const ServedAdapter>;

// What the model side does for the set (cli/serve_model implements it over model/lora.h).
class AdapterHost {
 public:
  virtual ~AdapterHost() = default;
  struct Opened {
    std::shared_ptr<const void> adapter;  // owns the adapter's weights
    uint64_t digest = 0;
    std::string summary;  // for the log: "14 weights, alpha 32"
  };
  // Reads `path` (a GGUF adapter or a PEFT folder) and checks it against the base model;
  // throws pagoda::Error naming the problem. Any thread.
  virtual Opened open(const std::string& path) = 0;
  // Puts `adapter` (from open; null: none) in `slot` of the model's backend between two engine
  // steps, and returns once it is there. Any thread but the engine's.
  virtual void install(int32_t slot, const void* adapter) = 0;
};

class LoraSet {
 public:
  // `max_loras`: adapters named at once (--max-loras). `host` null: no adapter can be loaded
  // (the model runs without a LoRA backend). `runtime_loading`: the load and unload routes are
  // open (serve --allow-lora-loading).
  LoraSet(int32_t max_loras, std::shared_ptr<AdapterHost> host, bool runtime_loading);
  ~LoraSet();
  LoraSet(const LoraSet&) = delete;
  LoraSet& operator=(const LoraSet&) = delete;

  // Opens the adapter at `path` and names it `name`. `replace`: a name already taken moves to
  // the new adapter (its old one drains as an unloaded one does). Throws ApiError: 400 for a
  // name taken or a file that is no adapter of the model, 409 when every slot is named, 503
  // (with Retry-After) when a slot is free of names but still held by requests.
  ServedAdapter load(const std::string& name, const std::string& path, bool replace);
  // Takes `name` away; its slot is freed once no request holds it. ApiError 404: no such name.
  void unload(const std::string& name);

  // The adapter named `name`, held; null when no adapter has that name.
  AdapterHold find(std::string_view name) const;

  struct Listed {
    ServedAdapter adapter;
    int64_t requests = 0;  // requests holding it now
  };
  // The named adapters, in load order.
  std::vector<Listed> list() const;
  std::vector<std::string> names() const;

  int32_t max_loras() const { return max_loras_; }
  // The backend's slots: max_loras() + 1.
  int32_t slots() const { return static_cast<int32_t>(slots_.size()); }
  bool can_load() const { return host_ != nullptr; }
  bool runtime_loading() const { return runtime_loading_ && host_ != nullptr; }

  // Every slot named or held has an adapter, no two names share a slot, names are unique.
  void check_invariants() const;

 private:
  struct Slot {
    std::shared_ptr<const void> weights;     // what install() put there; null: empty
    std::weak_ptr<const ServedAdapter> held;  // live while named or held by a request
    bool busy = false;                       // a load or a sweep is filling or emptying it
  };
  bool slot_free(const Slot& s) const { return !s.busy && s.held.expired(); }
  // Empties the slots that nothing names or holds any more, freeing their weights. Without
  // the lock: install() waits for the engine.
  void sweep();

  const std::shared_ptr<AdapterHost> host_;
  const bool runtime_loading_;
  const int32_t max_loras_;
  mutable std::mutex mutex_;
  std::vector<Slot> slots_;  // slot k + 1 of the backend
  std::vector<AdapterHold> named_;  // in load order
  std::vector<std::string> loading_;  // names being loaded now
};

}  // namespace pagoda::server
