// Loading and unloading the models of a server (see model_set.h).
#include "server/model_set.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/memory.h"

namespace pagoda::server {
namespace {

std::string gib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", double(bytes) / double(uint64_t{1} << 30));
  return buf;
}

constexpr std::string_view kLatest = ":latest";

}  // namespace

ServedModel::~ServedModel() {
  // Compile jobs answer through the requests that asked; none is left now.
  if (context.grammars) context.grammars->stop();
}

const char* state_name(ModelState s) {
  switch (s) {
    case ModelState::kOnDisk: return "on disk";
    case ModelState::kLoading: return "loading";
    case ModelState::kLoaded: return "loaded";
  }
  return "?";
}

RoomPlan plan_room(uint64_t need, std::vector<Resident> loaded, int max_loaded, uint64_t budget,
                   std::optional<uint64_t> available) {
  RoomPlan plan;
  if (budget > 0 && need > budget) {
    plan.kind = RoomPlan::kNever;
    plan.reason = "needs " + gib(need) + ", more than the memory budget of " + gib(budget) +
                  " (--max-memory-gb)";
    return plan;
  }
  std::sort(loaded.begin(), loaded.end(),
            [](const Resident& a, const Resident& b) { return a.last_used < b.last_used; });
  uint64_t used = 0;
  for (const Resident& r : loaded) used += r.bytes;
  size_t count = loaded.size();
  uint64_t freed = 0;
  auto fits = [&] {
    return count < static_cast<size_t>(max_loaded) && (budget == 0 || used + need <= budget) &&
           (!available || need <= *available + freed);
  };
  bool busy = false;
  for (const Resident& r : loaded) {
    if (fits()) break;
    if (r.busy) {
      busy = true;
      continue;
    }
    plan.evict.push_back(r.index);
    used -= r.bytes;
    freed += r.bytes;
    --count;
  }
  if (fits()) return plan;
  plan.evict.clear();
  if (busy) {
    plan.kind = RoomPlan::kWait;
    return plan;
  }
  plan.kind = RoomPlan::kNever;
  plan.reason = "needs " + gib(need) + " but only " + gib(available.value_or(0) + freed) +
                " are available with every other model unloaded";
  return plan;
}

ModelSet::ModelSet(std::shared_ptr<ServedModel> model) : single_(true) {
  ModelSpec spec;
  spec.id = model->context.name;
  spec.aliases = model->context.aliases;
  spec.description = model->context.description;
  specs_.push_back(std::move(spec));
  entries_.resize(1);
  entries_[0].state = ModelState::kLoaded;
  entries_[0].model = std::move(model);
  entries_[0].keep_alive_s = -1;
}

ModelSet::ModelSet(std::vector<ModelSpec> specs, ModelLoader loader, ModelSetOptions options,
                   std::vector<std::shared_ptr<ServedModel>> preloaded)
    : single_(false),
      specs_(std::move(specs)),
      loader_(std::move(loader)),
      options_(options),
      entries_(specs_.size()) {
  const auto now = Clock::now();
  for (size_t i = 0; i < preloaded.size() && i < entries_.size(); ++i) {
    if (!preloaded[i]) continue;
    entries_[i].state = ModelState::kLoaded;
    entries_[i].model = std::move(preloaded[i]);
    entries_[i].last_used = now;
  }
  keeper_ = std::thread([this] { keeper_main(); });
}

ModelSet::~ModelSet() {
  stop();
  if (keeper_.joinable()) keeper_.join();
  if (load_thread_.joinable()) load_thread_.join();
}

void ModelSet::set_post(Post post) {
  std::lock_guard lock(mutex_);
  post_ = std::move(post);
}

int ModelSet::find(std::string_view id) const {
  std::string_view bare = id;
  if (bare.size() > kLatest.size() && bare.substr(bare.size() - kLatest.size()) == kLatest) {
    bare.remove_suffix(kLatest.size());
  }
  for (size_t i = 0; i < specs_.size(); ++i) {
    const ModelSpec& s = specs_[i];
    for (std::string_view want : {id, bare}) {
      if (s.id == want || std::find(s.aliases.begin(), s.aliases.end(), want) != s.aliases.end()) {
        return static_cast<int>(i);
      }
    }
  }
  return -1;
}

ApiError ModelSet::not_found(std::string_view id) const {
  std::string served;
  for (const ModelSpec& s : specs_) served += (served.empty() ? "'" : ", '") + s.id + "'";
  return ApiError(404, "invalid_request_error",
                  "The model '" + std::string(id) + "' does not exist; this server serves " +
                      served + " (GET /v1/models lists them)",
                  "model", "model_not_found");
}

ApiError ModelSet::error_for(int index, int status, const std::string& message,
                             const std::string& code) const {
  return ApiError(status, "server_error", "model '" + specs_[index].id + "' " + message, "model",
                  code);
}

std::optional<double> ModelSet::keep_of(const Entry& e) const {
  if (e.keep_alive_s) return e.keep_alive_s;
  return options_.idle_unload_s;
}

ModelLease ModelSet::lease_locked(int index, std::optional<double> keep_alive_s) {
  Entry& e = entries_[index];
  ++e.leases;
  e.last_used = Clock::now();
  if (keep_alive_s) e.keep_alive_s = keep_alive_s;
  ModelLease lease;
  lease.hold_ = std::make_shared<ModelLease::Hold>();
  lease.hold_->model = e.model;
  if (!single_) lease.hold_->release = [this, index] { release(index); };
  return lease;
}

void ModelSet::release(int index) {
  std::lock_guard lock(mutex_);
  Entry& e = entries_[index];
  --e.leases;
  e.last_used = Clock::now();
  changed_.notify_all();
}

void ModelSet::acquire(int index, std::optional<double> keep_alive_s,
                       std::function<void(ModelLease)> ready,
                       std::function<void(ApiError)> failed) {
  std::unique_lock lock(mutex_);
  if (stopping_) {
    lock.unlock();
    return failed(ApiError(503, "server_error", "the server is shutting down"));
  }
  Entry& e = entries_.at(static_cast<size_t>(index));
  if (e.state == ModelState::kLoaded) {
    e.unload_asap = false;
    ModelLease lease = lease_locked(index, keep_alive_s);
    lock.unlock();
    return ready(std::move(lease));
  }
  const auto timeout = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options_.load_timeout_s));
  e.waiters.push_back({std::move(ready), std::move(failed), Clock::now() + timeout});
  if (keep_alive_s) e.keep_alive_s = keep_alive_s;
  if (e.state == ModelState::kOnDisk && !e.queued) {
    e.queued = true;
    queue_.push_back(index);
  }
  changed_.notify_all();
}

ModelLease ModelSet::try_acquire(int index, std::optional<double> keep_alive_s) {
  std::lock_guard lock(mutex_);
  Entry& e = entries_.at(static_cast<size_t>(index));
  if (stopping_ || e.state != ModelState::kLoaded) return {};
  e.unload_asap = false;
  return lease_locked(index, keep_alive_s);
}

bool ModelSet::unload_when_idle(int index) {
  std::lock_guard lock(mutex_);
  Entry& e = entries_.at(static_cast<size_t>(index));
  if (single_ || e.state != ModelState::kLoaded) return false;
  e.unload_asap = true;
  changed_.notify_all();
  return true;
}

std::vector<ModelStatus> ModelSet::status() const {
  std::lock_guard lock(mutex_);
  std::vector<ModelStatus> out;
  const auto now = Clock::now();
  for (size_t i = 0; i < specs_.size(); ++i) {
    const Entry& e = entries_[i];
    ModelStatus s{&specs_[i], e.state, e.model, e.last_error, std::nullopt};
    const std::optional<double> keep = keep_of(e);
    if (e.state == ModelState::kLoaded && !single_ && keep && *keep >= 0) {
      const auto left = e.leases > 0 ? Clock::duration::zero()
                                     : e.last_used - now + std::chrono::duration_cast<Clock::duration>(
                                                               std::chrono::duration<double>(*keep));
      s.expires_at = std::chrono::system_clock::now() +
                     std::chrono::duration_cast<std::chrono::system_clock::duration>(
                         std::max(left, Clock::duration::zero()));
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<std::shared_ptr<ServedModel>> ModelSet::loaded() const {
  std::lock_guard lock(mutex_);
  std::vector<std::shared_ptr<ServedModel>> out;
  for (const Entry& e : entries_) {
    if (e.state == ModelState::kLoaded) out.push_back(e.model);
  }
  return out;
}

void ModelSet::check_invariants() const {
  std::lock_guard lock(mutex_);
  int resident = 0, loading = 0;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    const std::string name = "model '" + specs_[i].id + "'";
    if (e.state != ModelState::kOnDisk) ++resident;
    if (e.state == ModelState::kLoading) ++loading;
    if (e.leases < 0) throw Error(name + " has a negative lease count");
    if (e.leases > 0 && e.state != ModelState::kLoaded) throw Error(name + " has leases but is not loaded");
    if ((e.state == ModelState::kLoaded) != (e.model != nullptr)) {
      throw Error(name + ": loaded state and model disagree");
    }
    if (!e.waiters.empty() && !e.queued && e.state != ModelState::kLoading) {
      throw Error(name + " has waiters but is neither queued nor loading");
    }
    if (e.queued != (std::count(queue_.begin(), queue_.end(), int(i)) == 1)) {
      throw Error(name + ": queued flag and load queue disagree");
    }
  }
  if (!single_ && resident > options_.max_loaded) throw Error("more models loaded than --max-loaded");
  if (loading > 1 || (loading == 1) != loading_) throw Error("loads and the loading flag disagree");
}

void ModelSet::stop() {
  std::vector<Waiter> left;
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
    for (Entry& e : entries_) {
      for (Waiter& w : e.waiters) left.push_back(std::move(w));
      e.waiters.clear();
      e.queued = false;
    }
    queue_.clear();
    changed_.notify_all();
  }
  for (Waiter& w : left) w.failed(ApiError(503, "server_error", "the server is shutting down"));
}

void ModelSet::keeper_main() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    std::vector<std::function<void()>> later;
    const auto now = Clock::now();
    expire_waiters_locked(now, later);
    unload_idle_locked(now, later);
    start_load_locked(later);
    if (!later.empty()) {
      lock.unlock();
      for (auto& f : later) f();
      later.clear();
      lock.lock();
      continue;
    }
    // Wake for the next deadline: a waiter's timeout or an idle model's unload.
    auto wake = now + std::chrono::seconds(1);
    for (const Entry& e : entries_) {
      for (const Waiter& w : e.waiters) wake = std::min(wake, w.deadline);
    }
    changed_.wait_until(lock, wake);
  }
}

void ModelSet::expire_waiters_locked(Clock::time_point now,
                                     std::vector<std::function<void()>>& later) {
  for (size_t i = 0; i < entries_.size(); ++i) {
    Entry& e = entries_[i];
    for (auto it = e.waiters.begin(); it != e.waiters.end();) {
      if (it->deadline > now) {
        ++it;
        continue;
      }
      const int wait_s = static_cast<int>(std::ceil(options_.load_timeout_s));
      ApiError error = error_for(static_cast<int>(i), 503,
                                 e.state == ModelState::kLoading
                                     ? "is still loading after " + std::to_string(wait_s) + " s; retry later"
                                     : "is waiting for room to load (the models loaded are busy); retry later",
                                 "model_loading");
      error.with_retry_after(std::max(1, wait_s / 4));
      later.push_back([f = std::move(it->failed), error] { f(error); });
      it = e.waiters.erase(it);
    }
    // Nobody waits for a queued model any more: it is not loaded.
    if (e.queued && e.waiters.empty()) {
      e.queued = false;
      queue_.erase(std::find(queue_.begin(), queue_.end(), static_cast<int>(i)));
    }
  }
}

void ModelSet::unload_idle_locked(Clock::time_point now, std::vector<std::function<void()>>& later) {
  for (size_t i = 0; i < entries_.size(); ++i) {
    Entry& e = entries_[i];
    if (e.state != ModelState::kLoaded || e.leases > 0) continue;
    const std::optional<double> keep = keep_of(e);
    const bool expired = keep && *keep >= 0 &&
                         now - e.last_used >= std::chrono::duration<double>(*keep);
    if (!e.unload_asap && !expired) continue;
    e.state = ModelState::kOnDisk;
    e.unload_asap = false;
    e.keep_alive_s.reset();
    std::fprintf(stderr, "serve: unloading model '%s' (idle)\n", specs_[i].id.c_str());
    later.push_back([m = std::move(e.model)]() mutable { m.reset(); });
  }
}

void ModelSet::start_load_locked(std::vector<std::function<void()>>& later) {
  if (loading_ || queue_.empty()) return;
  const int index = queue_.front();
  Entry& e = entries_[index];
  std::vector<Resident> residents;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& r = entries_[i];
    if (r.state == ModelState::kOnDisk) continue;
    residents.push_back({static_cast<int>(i), specs_[i].memory_bytes,
                         r.leases > 0 || r.state == ModelState::kLoading, r.last_used});
  }
  const RoomPlan plan = plan_room(specs_[index].memory_bytes, residents, options_.max_loaded,
                                  options_.memory_budget, available_memory_bytes());
  if (plan.kind == RoomPlan::kWait) return;  // a release wakes the keeper
  queue_.pop_front();
  e.queued = false;
  if (plan.kind == RoomPlan::kNever) {
    const ApiError error = error_for(index, 503, plan.reason, "insufficient_memory");
    for (Waiter& w : e.waiters) later.push_back([f = std::move(w.failed), error] { f(error); });
    e.waiters.clear();
    e.last_error = plan.reason;
    return;
  }
  std::vector<std::shared_ptr<ServedModel>> evicted;
  for (int i : plan.evict) {
    std::fprintf(stderr, "serve: unloading model '%s' to make room for '%s'\n",
                 specs_[i].id.c_str(), specs_[index].id.c_str());
    entries_[i].state = ModelState::kOnDisk;
    entries_[i].keep_alive_s.reset();
    evicted.push_back(std::move(entries_[i].model));
  }
  e.state = ModelState::kLoading;
  loading_ = true;
  // The last load's thread may still be answering its waiters (which takes this lock when a
  // lease ends): it is joined without the lock.
  if (load_thread_.joinable()) {
    auto last = std::make_shared<std::thread>(std::move(load_thread_));
    later.push_back([last] { last->join(); });
  }
  load_thread_ = std::thread([this, index, evicted = std::move(evicted)]() mutable {
    evicted.clear();  // their memory goes back before the new model takes its own
    std::shared_ptr<ServedModel> model;
    std::string error;
    std::fprintf(stderr, "serve: loading model '%s' (%s)\n", specs_[index].id.c_str(),
                 specs_[index].path.c_str());
    try {
      model = loader_(specs_[index]);
    } catch (const std::exception& ex) {
      error = ex.what();
    }
    finish_load(index, std::move(model), std::move(error));
  });
}

void ModelSet::finish_load(int index, std::shared_ptr<ServedModel> model, std::string error) {
  std::vector<std::function<void()>> calls;
  Post post;
  {
    std::lock_guard lock(mutex_);
    Entry& e = entries_[index];
    loading_ = false;
    if (model == nullptr && error.empty()) error = "the loader returned nothing";
    if (!error.empty()) {
      std::fprintf(stderr, "serve: model '%s' failed to load: %s\n", specs_[index].id.c_str(),
                   error.c_str());
      e.state = ModelState::kOnDisk;
      e.last_error = error;
      const ApiError failure =
          ApiError(500, "server_error", "model '" + specs_[index].id + "' could not be loaded: " + error,
                   "model", "model_load_failed");
      for (Waiter& w : e.waiters) calls.push_back([f = std::move(w.failed), failure] { f(failure); });
    } else {
      e.state = ModelState::kLoaded;
      e.model = std::move(model);
      e.last_error.clear();
      e.last_used = Clock::now();
      for (Waiter& w : e.waiters) {
        calls.push_back([f = std::move(w.ready), l = lease_locked(index, std::nullopt)] { f(l); });
      }
    }
    e.waiters.clear();
    post = post_;
    changed_.notify_all();
  }
  for (auto& c : calls) {
    if (post) {
      post(std::move(c));
    } else {
      c();
    }
  }
}

}  // namespace pagoda::server
