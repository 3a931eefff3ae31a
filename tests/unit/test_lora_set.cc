// The LoRA adapters of a served model by name (server/lora_set.h), without a model: a fake host
// records what lands in which backend slot. A request's hold keeps its slot from being filled
// again; --max-loras bounds the names; the invariants hold after every step.
#include "server/lora_set.h"

#include <gtest/gtest.h>

#include <map>

#include "core/error.h"
#include "server/api_error.h"

namespace pagoda::server {
namespace {

// Adapters are ints (their path's length as the digest); "bad" is no adapter. Each install is
// checked as the backend would need it: nothing is put over a slot a live adapter is in.
struct FakeHost final : AdapterHost {
  std::map<int32_t, const void*> slots;  // what the backend holds
  int installs = 0;
  std::weak_ptr<const void> last_opened;

  Opened open(const std::string& path) override {
    if (path == "bad") fail("bad: not an adapter of this model");
    auto weights = std::make_shared<const int>(static_cast<int>(path.size()));
    last_opened = weights;
    return {weights, path.size(), "fake"};
  }
  void install(int32_t slot, const void* adapter) override {
    ++installs;
    if (adapter == nullptr) {
      slots.erase(slot);
    } else {
      slots[slot] = adapter;
    }
  }
};

int status_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ApiError& e) {
    return e.status();
  }
  return 200;
}

TEST(LoraSet, LoadsFindsListsAndCountsHolds) {
  auto host = std::make_shared<FakeHost>();
  LoraSet set(4, host, true);
  EXPECT_EQ(set.slots(), 5);
  const ServedAdapter a = set.load("a", "a.gguf", false);
  const ServedAdapter b = set.load("b", "bb.gguf", false);
  set.check_invariants();
  EXPECT_NE(a.index, b.index);
  EXPECT_EQ(host->slots.size(), 2u);
  EXPECT_EQ(set.find("a")->digest, 6u);
  EXPECT_EQ(set.find("zz"), nullptr);
  AdapterHold held = set.find("b");
  const std::vector<LoraSet::Listed> listed = set.list();
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0].adapter.name, "a");
  EXPECT_EQ(listed[0].requests, 0);
  EXPECT_EQ(listed[1].requests, 1);
  EXPECT_EQ(set.names(), (std::vector<std::string>{"a", "b"}));
}

TEST(LoraSet, RefusesTakenNamesBadFilesUnknownNamesAndPastMaxLoras) {
  auto host = std::make_shared<FakeHost>();
  LoraSet set(2, host, true);
  set.load("a", "a.gguf", false);
  EXPECT_EQ(status_of([&] { set.load("a", "other.gguf", false); }), 400);
  EXPECT_EQ(status_of([&] { set.load("c", "bad", false); }), 400);
  EXPECT_EQ(status_of([&] { set.load("", "x.gguf", false); }), 400);
  EXPECT_EQ(status_of([&] { set.unload("nobody"); }), 404);
  set.check_invariants();
  set.load("b", "b.gguf", false);  // a bad file left no slot taken
  EXPECT_EQ(status_of([&] { set.load("c", "c.gguf", false); }), 409);
  set.unload("a");
  set.load("c", "c.gguf", false);
  set.check_invariants();
  EXPECT_EQ(set.names(), (std::vector<std::string>{"b", "c"}));
}

TEST(LoraSet, AnUnloadedAdaptersSlotWaitsForItsLastRequest) {
  auto host = std::make_shared<FakeHost>();
  LoraSet set(1, host, true);
  set.load("a", "a.gguf", false);
  std::weak_ptr<const void> a_weights = host->last_opened;
  AdapterHold request = set.find("a");
  set.unload("a");
  EXPECT_EQ(set.find("a"), nullptr);  // the name is gone at once
  EXPECT_FALSE(a_weights.expired());  // the weights stay while a request runs on them
  EXPECT_EQ(host->slots.count(request->index), 1u);
  // The spare slot takes the next adapter; the held one is left alone.
  const ServedAdapter b = set.load("b", "b.gguf", false);
  EXPECT_NE(b.index, request->index);
  EXPECT_EQ(host->slots.at(request->index), a_weights.lock().get());
  set.check_invariants();
  // Both slots in use (one named, one held): a replacement must wait.
  AdapterHold b_request = set.find("b");
  const int refused = status_of([&] { set.load("b", "b2.gguf", true); });
  EXPECT_EQ(refused, 503);
  // The request ends: its slot is emptied by the next change and the weights freed.
  const int32_t freed = request->index;
  request.reset();
  set.load("b", "b2.gguf", true);
  EXPECT_TRUE(a_weights.expired());
  EXPECT_EQ(set.find("b")->index, freed);
  EXPECT_EQ(set.find("b")->digest, 7u);
  EXPECT_EQ(b_request->digest, 6u);  // the old b's request keeps its own adapter
  set.check_invariants();
  b_request.reset();
  set.unload("b");
  EXPECT_TRUE(host->slots.empty());  // nothing named or held: every slot emptied
}

TEST(LoraSet, ReplacingFreesTheOldAdapterWhenNothingHoldsIt) {
  auto host = std::make_shared<FakeHost>();
  LoraSet set(1, host, true);
  set.load("a", "a.gguf", false);
  std::weak_ptr<const void> old = host->last_opened;
  set.load("a", "a2.gguf", true);
  EXPECT_TRUE(old.expired());
  EXPECT_EQ(host->slots.size(), 1u);
  EXPECT_EQ(set.find("a")->path, "a2.gguf");
  set.check_invariants();
}

TEST(LoraSet, WithoutAHostNothingLoads) {
  LoraSet set(2, nullptr, true);
  EXPECT_FALSE(set.can_load());
  EXPECT_FALSE(set.runtime_loading());
  EXPECT_EQ(status_of([&] { set.load("a", "a.gguf", false); }), 400);
}

}  // namespace
}  // namespace pagoda::server
