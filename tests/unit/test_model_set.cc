// The control plane of a server of several models (server/model_set.h) without any model: the
// room plan, loads on demand, least-recently-used eviction that never takes a busy model,
// timeouts, failures, keep_alive, and the invariants after every step.
#include "server/model_set.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "core/error.h"

namespace pagoda::server {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(RoomPlan, FitsEvictsLeastRecentlyUsedIdleWaitsOnBusyNeverPastBudget) {
  const auto t0 = Clock::now();
  const std::vector<Resident> loaded = {{0, 100, false, t0 + 2s}, {1, 100, false, t0 + 1s},
                                        {2, 100, true, t0}};
  // Room under max_loaded: nothing evicted.
  EXPECT_EQ(plan_room(50, loaded, 4, 0, std::nullopt).kind, RoomPlan::kFits);
  EXPECT_TRUE(plan_room(50, loaded, 4, 0, std::nullopt).evict.empty());
  // At max_loaded: the least recently used idle one (1), not the busy older one (2).
  RoomPlan p = plan_room(50, loaded, 3, 0, std::nullopt);
  ASSERT_EQ(p.kind, RoomPlan::kFits);
  EXPECT_EQ(p.evict, std::vector<int>{1});
  // A budget that needs two models gone.
  p = plan_room(250, loaded, 8, 400, std::nullopt);
  ASSERT_EQ(p.kind, RoomPlan::kFits);
  EXPECT_EQ(p.evict, (std::vector<int>{1, 0}));
  // Machine memory: evicting frees what the evicted models took.
  p = plan_room(150, loaded, 8, 0, uint64_t{60});
  ASSERT_EQ(p.kind, RoomPlan::kFits);
  EXPECT_EQ(p.evict, std::vector<int>{1});
  // Only the busy one could make room: wait for it.
  EXPECT_EQ(plan_room(250, loaded, 8, 0, uint64_t{0}).kind, RoomPlan::kWait);
  // More than the budget alone: never, in one line.
  p = plan_room(500, loaded, 8, 400, std::nullopt);
  EXPECT_EQ(p.kind, RoomPlan::kNever);
  EXPECT_NE(p.reason.find("memory budget"), std::string::npos);
  EXPECT_EQ(p.reason.find('\n'), std::string::npos);
  // Nothing busy and still no room: never.
  EXPECT_EQ(plan_room(500, {{0, 100, false, t0}}, 8, 0, uint64_t{100}).kind, RoomPlan::kNever);
}

// A fake loader: models appear after `delay`; a spec whose path is "bad" fails.
struct FakeLoader {
  std::atomic<int> loads{0};
  Clock::duration delay = 0ms;
  std::shared_ptr<ServedModel> operator()(const ModelSpec& spec) {
    ++loads;
    std::this_thread::sleep_for(delay);
    if (spec.path == "bad") throw Error("bad: not a model file");
    auto m = std::make_shared<ServedModel>();
    m->context.name = spec.id;
    return m;
  }
};

std::vector<ModelSpec> specs(int n, uint64_t bytes = 10) {
  std::vector<ModelSpec> out;
  for (int i = 0; i < n; ++i) {
    ModelSpec s;
    s.id = std::string(1, 'm');
    s.id += std::to_string(i);
    s.path = std::string(1, 'p');
    s.path += std::to_string(i);
    s.memory_bytes = bytes;
    out.push_back(s);
  }
  return out;
}

// Acquires and waits: the lease, or the error.
struct Outcome {
  ModelLease lease;
  std::optional<ApiError> error;
};
Outcome get(ModelSet& set, int index, std::optional<double> keep = std::nullopt) {
  std::promise<Outcome> done;
  set.acquire(
      index, keep, [&](ModelLease l) { done.set_value({std::move(l), std::nullopt}); },
      [&](ApiError e) { done.set_value({{}, e}); });
  return done.get_future().get();
}

std::string state_of(const ModelSet& set, int index) {
  return state_name(set.status().at(static_cast<size_t>(index)).state);
}

ModelSetOptions options(int max_loaded, double timeout_s = 30) {
  ModelSetOptions o;
  o.max_loaded = max_loaded;
  o.load_timeout_s = timeout_s;
  return o;
}

TEST(ModelSet, LoadsOnDemandAndEvictsTheIdleOneNeverTheBusyOne) {
  auto loader = std::make_shared<FakeLoader>();
  ModelSet set(specs(3), [loader](const ModelSpec& s) { return (*loader)(s); }, options(2));
  set.check_invariants();
  EXPECT_EQ(state_of(set, 0), "on disk");
  Outcome a = get(set, 0);
  ASSERT_TRUE(a.lease) << a.error->what();
  EXPECT_EQ(a.lease->context.name, "m0");
  EXPECT_EQ(state_of(set, 0), "loaded");
  { Outcome b = get(set, 1); ASSERT_TRUE(b.lease); }  // m1 used, then idle
  set.check_invariants();
  // m0 is busy (a lease) and least recently used: m1 goes for m2.
  Outcome c = get(set, 2);
  ASSERT_TRUE(c.lease);
  set.check_invariants();
  EXPECT_EQ(state_of(set, 0), "loaded");
  EXPECT_EQ(state_of(set, 1), "on disk");
  EXPECT_EQ(state_of(set, 2), "loaded");
  EXPECT_EQ(loader->loads.load(), 3);
  // A loaded model is had without a load.
  EXPECT_TRUE(set.try_acquire(0, std::nullopt));
  EXPECT_FALSE(set.try_acquire(1, std::nullopt));
  EXPECT_EQ(loader->loads.load(), 3);
}

TEST(ModelSet, WaitsForABusyModelThenLoadsWhenItIsReleased) {
  auto loader = std::make_shared<FakeLoader>();
  ModelSet set(specs(2), [loader](const ModelSpec& s) { return (*loader)(s); }, options(1));
  Outcome a = get(set, 0);
  ASSERT_TRUE(a.lease);
  std::promise<Outcome> second;
  set.acquire(
      1, std::nullopt, [&](ModelLease l) { second.set_value({std::move(l), std::nullopt}); },
      [&](ApiError e) { second.set_value({{}, e}); });
  auto f = second.get_future();
  EXPECT_EQ(f.wait_for(300ms), std::future_status::timeout);  // m0 is busy: no room
  set.check_invariants();
  a.lease = ModelLease();  // the request on m0 ends
  Outcome b = f.get();
  ASSERT_TRUE(b.lease) << b.error->what();
  EXPECT_EQ(state_of(set, 0), "on disk");
  set.check_invariants();
}

TEST(ModelSet, ALoadPastTheTimeoutIs503WithRetryAfterAndTheLoadGoesOn) {
  auto loader = std::make_shared<FakeLoader>();
  loader->delay = 600ms;
  ModelSet set(specs(1), [loader](const ModelSpec& s) { return (*loader)(s); }, options(1, 0.1));
  Outcome a = get(set, 0);
  ASSERT_FALSE(a.lease);
  EXPECT_EQ(a.error->status(), 503);
  EXPECT_GE(a.error->retry_after_s(), 1);
  EXPECT_EQ(a.error->code(), "model_loading");
  const auto deadline = Clock::now() + 5s;
  while (state_of(set, 0) != "loaded" && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(state_of(set, 0), "loaded");
  set.check_invariants();
}

TEST(ModelSet, AFailedLoadIsThatModelsErrorAndIsTriedAgain) {
  auto loader = std::make_shared<FakeLoader>();
  std::vector<ModelSpec> s = specs(2);
  s[1].path = "bad";
  ModelSet set(s, [loader](const ModelSpec& sp) { return (*loader)(sp); }, options(2));
  Outcome bad = get(set, 1);
  ASSERT_FALSE(bad.lease);
  EXPECT_EQ(bad.error->status(), 500);
  EXPECT_NE(std::string(bad.error->what()).find("model 'm1' could not be loaded: bad"),
            std::string::npos);
  EXPECT_EQ(set.status()[1].last_error, "bad: not a model file");
  EXPECT_TRUE(get(set, 0).lease);  // the other model serves
  EXPECT_FALSE(get(set, 1).lease);  // tried again, fails again
  EXPECT_EQ(loader->loads.load(), 3);
  set.check_invariants();
}

TEST(ModelSet, AModelPastTheBudgetIsRefusedAtOnce) {
  auto loader = std::make_shared<FakeLoader>();
  ModelSetOptions o = options(2);
  o.memory_budget = 5;
  ModelSet set(specs(1, 10), [loader](const ModelSpec& s) { return (*loader)(s); }, o);
  Outcome a = get(set, 0);
  ASSERT_FALSE(a.lease);
  EXPECT_EQ(a.error->code(), "insufficient_memory");
  EXPECT_EQ(loader->loads.load(), 0);
}

TEST(ModelSet, KeepAliveZeroAndIdleUnload) {
  auto loader = std::make_shared<FakeLoader>();
  ModelSetOptions o = options(2);
  o.idle_unload_s = 0.2;
  ModelSet set(specs(2), [loader](const ModelSpec& s) { return (*loader)(s); }, o);
  { ASSERT_TRUE(get(set, 0, -1.0).lease); }  // keep_alive negative: kept
  { ASSERT_TRUE(get(set, 1).lease); }        // the default: 0.2 s
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(state_of(set, 0), "loaded");
  EXPECT_EQ(state_of(set, 1), "on disk");
  EXPECT_TRUE(set.unload_when_idle(0));
  const auto deadline = Clock::now() + 5s;
  while (state_of(set, 0) != "on disk" && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(state_of(set, 0), "on disk");
  set.check_invariants();
}

TEST(ModelSet, FindsIdsAliasesAndOllamaTags) {
  std::vector<ModelSpec> s = specs(2);
  s[1].aliases = {"m1.gguf"};
  ModelSet set(s, [](const ModelSpec&) { return std::make_shared<ServedModel>(); }, options(1));
  EXPECT_EQ(set.find("m0"), 0);
  EXPECT_EQ(set.find("m1:latest"), 1);
  EXPECT_EQ(set.find("m1.gguf"), 1);
  EXPECT_EQ(set.find("m2"), -1);
  EXPECT_EQ(set.not_found("m2").status(), 404);
}

TEST(ModelSet, StopAnswersWaitersWith503) {
  auto loader = std::make_shared<FakeLoader>();
  ModelSet set(specs(2), [loader](const ModelSpec& s) { return (*loader)(s); }, options(1));
  Outcome a = get(set, 0);
  std::promise<Outcome> waiting;
  set.acquire(
      1, std::nullopt, [&](ModelLease l) { waiting.set_value({std::move(l), std::nullopt}); },
      [&](ApiError e) { waiting.set_value({{}, e}); });
  set.stop();
  Outcome b = waiting.get_future().get();
  ASSERT_FALSE(b.lease);
  EXPECT_EQ(b.error->status(), 503);
}

}  // namespace
}  // namespace pagoda::server
