// The models one server runs (pagoda serve with several -m or --models-dir): which are on disk,
// which are loaded, loading one when a request names it and unloading the least recently used
// idle one to make room (--max-loaded, a memory budget, keep_alive, --idle-unload).
//
// Threads: acquire() from any thread; loads run one at a time on a loader thread and unloads on
// the keeper thread, never on a request's. A request waiting for its model holds no thread: its
// continuation is handed to `post` when the model is ready, or its error when the load fails or
// its wait times out (503 with Retry-After).
//
// Invariants (check_invariants): a model with leases is loaded and is never unloaded; at most
// max_loaded models are loaded or loading; one load at a time; a waiter belongs to a model that
// is loading or queued to load.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine_thread.h"
#include "server/api_error.h"
#include "server/openai_request.h"

namespace pagoda::server {

// A loaded model: what its requests run on. `owner` holds the weights, backend and engine;
// it is declared first so it goes last, after the context that points into it.
struct ServedModel {
  std::shared_ptr<void> owner;
  ModelContext context;
  EngineThread* engine = nullptr;
  nlohmann::json info;  // its /v1/models entry
  ~ServedModel();
};

// A model the server can run, known before it is loaded.
struct ModelSpec {
  std::string id;                    // what requests name (the file's stem by default)
  std::vector<std::string> aliases;  // other names: the file's name
  std::string path;
  uint64_t memory_bytes = 0;         // weights + KV cache + buffers, estimated from the header
  ModelDescription description;      // for Ollama's /api/tags before it is loaded
};

enum class ModelState { kOnDisk, kLoading, kLoaded };
// "on disk", "loading", "loaded".
const char* state_name(ModelState s);

struct ModelSetOptions {
  int max_loaded = 1;           // models loaded at once
  uint64_t memory_budget = 0;   // bytes all loaded models may take; 0: only what the machine has
  double load_timeout_s = 300;  // a request waits this long for its model, then gets 503
  double idle_unload_s = -1;    // a model idle this long is unloaded; negative: kept
};

// What to do to load a model of `need` bytes (a pure function, tested without models).
struct Resident {
  int index = 0;
  uint64_t bytes = 0;
  bool busy = false;  // has leases or is loading
  std::chrono::steady_clock::time_point last_used;
};
struct RoomPlan {
  enum Kind { kFits, kWait, kNever } kind = kFits;
  std::vector<int> evict;  // kFits: unload these first (least recently used first)
  std::string reason;      // kNever: why it can never fit
};
// `available`: bytes the machine can still give (nullopt: unknown); `budget` 0: none.
RoomPlan plan_room(uint64_t need, std::vector<Resident> loaded, int max_loaded, uint64_t budget,
                   std::optional<uint64_t> available);

class ModelSet;

// A request's hold on a loaded model (copies share it): while one lives, the model stays.
// Leases end before their set does.
class ModelLease {
 public:
  ModelLease() = default;
  const ServedModel* operator->() const { return hold_->model.get(); }
  const ServedModel& operator*() const { return *hold_->model; }
  explicit operator bool() const { return hold_ != nullptr; }

  struct Hold {
    std::shared_ptr<ServedModel> model;
    std::function<void()> release;
    // The model is let go before the set hears of the release: once it has, the keeper may
    // unload the model, and the last reference must not be this one. A lease often ends on the
    // model's own engine thread (its last event), which cannot join itself.
    ~Hold() {
      model.reset();
      if (release) release();
    }
  };

 private:
  friend class ModelSet;
  std::shared_ptr<Hold> hold_;
};

// Loads the model of a spec (on the loader thread); throws pagoda::Error when it cannot.
using ModelLoader = std::function<std::shared_ptr<ServedModel>(const ModelSpec&)>;
using Post = std::function<void(std::function<void()>)>;

// One model's state as /v1/models, /api/tags and /api/ps show it.
struct ModelStatus {
  const ModelSpec* spec = nullptr;
  ModelState state = ModelState::kOnDisk;
  std::shared_ptr<ServedModel> model;  // when loaded
  std::string last_error;              // the last failed load's message
  // When an idle model will be unloaded; nullopt: kept (or busy).
  std::optional<std::chrono::system_clock::time_point> expires_at;
};

class ModelSet {
 public:
  // A server of one model, loaded for its whole life (pagoda serve -m FILE).
  explicit ModelSet(std::shared_ptr<ServedModel> model);
  // A server of several: `preloaded` (may be empty) are loaded already, in spec order.
  ModelSet(std::vector<ModelSpec> specs, ModelLoader loader, ModelSetOptions options,
           std::vector<std::shared_ptr<ServedModel>> preloaded = {});
  ~ModelSet();
  ModelSet(const ModelSet&) = delete;
  ModelSet& operator=(const ModelSet&) = delete;

  // Where continuations of requests that waited for a load run (the server's work threads).
  // Before then they run on the loader thread.
  void set_post(Post post);

  bool single() const { return single_; }
  const std::vector<ModelSpec>& specs() const { return specs_; }
  // The spec a request's model id names: its id or an alias, bare or with Ollama's ":latest".
  // -1: none.
  int find(std::string_view id) const;
  // The 404 for an id no spec has, listing the ones there are.
  ApiError not_found(std::string_view id) const;

  // Calls ready(lease) once model `index` is loaded (now, when it is), or failed(error): the
  // load failed (500 with its message), the model can never fit (503), or it was not loaded
  // within load_timeout_s (503, Retry-After). `keep_alive_s` (nullopt: --idle-unload's) is how
  // long it stays loaded once idle: 0 unloads it after this request, negative keeps it.
  void acquire(int index, std::optional<double> keep_alive_s,
               std::function<void(ModelLease)> ready, std::function<void(ApiError)> failed);
  // The lease of model `index` when it is loaded (empty otherwise): the path of a request
  // that need not wait.
  ModelLease try_acquire(int index, std::optional<double> keep_alive_s);
  // Unloads model `index` now if it is idle, else once its requests end (Ollama's
  // keep_alive 0 with nothing to generate). False when it is not loaded.
  bool unload_when_idle(int index);

  std::vector<ModelStatus> status() const;
  // The loaded models (for /metrics and /stats).
  std::vector<std::shared_ptr<ServedModel>> loaded() const;
  // Throws pagoda::Error naming the first broken invariant.
  void check_invariants() const;
  // Ends waits (503) and stops loading; loaded models stay until destruction.
  void stop();

 private:
  struct Waiter {
    std::function<void(ModelLease)> ready;
    std::function<void(ApiError)> failed;
    std::chrono::steady_clock::time_point deadline;
  };
  struct Entry {
    ModelState state = ModelState::kOnDisk;
    std::shared_ptr<ServedModel> model;
    int leases = 0;
    bool queued = false;
    bool unload_asap = false;
    std::chrono::steady_clock::time_point last_used;
    std::optional<double> keep_alive_s;  // of the last request; nullopt: the default
    std::deque<Waiter> waiters;
    std::string last_error;
  };
  using Clock = std::chrono::steady_clock;

  ModelLease lease_locked(int index, std::optional<double> keep_alive_s);
  void release(int index);
  void keeper_main();
  // Under the lock, the keeper's rounds; what must run without the lock goes to `later`.
  void expire_waiters_locked(Clock::time_point now, std::vector<std::function<void()>>& later);
  void unload_idle_locked(Clock::time_point now, std::vector<std::function<void()>>& later);
  void start_load_locked(std::vector<std::function<void()>>& later);
  void finish_load(int index, std::shared_ptr<ServedModel> model, std::string error);
  std::optional<double> keep_of(const Entry& e) const;
  ApiError error_for(int index, int status, const std::string& message, const std::string& code) const;

  const bool single_;
  std::vector<ModelSpec> specs_;
  ModelLoader loader_;
  ModelSetOptions options_;
  Post post_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Entry> entries_;
  std::deque<int> queue_;  // models to load, in the order first asked for
  bool loading_ = false;
  bool stopping_ = false;
  std::thread keeper_;
  std::thread load_thread_;
};

}  // namespace pagoda::server
