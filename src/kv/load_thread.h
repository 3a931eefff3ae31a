// A lower tier's reads on a thread of their own (lower_tier.h's start_load, finish_load and
// wait_for_loads): each load's blocks are read in order, stopping at the first that does not
// read, while the caller goes on; a load lands whole when its last read is done.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kv/lower_tier.h"

namespace pagoda {

class LoadThread {
 public:
  // Reads one block (on the thread); false: a miss.
  using ReadFn = std::function<bool(const LowerTier::BlockLoad&)>;
  explicit LoadThread(ReadFn read);  // starts the thread
  ~LoadThread();                     // reads what is queued, then stops
  LoadThread(const LoadThread&) = delete;
  LoadThread& operator=(const LoadThread&) = delete;

  uint64_t start(std::vector<LowerTier::BlockLoad> loads);  // the load's ticket
  std::optional<int32_t> finish(uint64_t ticket);           // as LowerTier::finish_load
  void wait(std::chrono::milliseconds timeout);             // as LowerTier::wait_for_loads
  TierLoadStats stats() const;                              // as LowerTier::load_stats; any thread

 private:
  void loop();

  ReadFn read_;
  struct Queued {
    uint64_t ticket = 0;
    std::vector<LowerTier::BlockLoad> loads;
    std::chrono::steady_clock::time_point started;
  };
  mutable std::mutex mutex_;  // guards what follows, up to thread_
  std::condition_variable work_, landed_cv_;
  std::deque<Queued> queue_;
  TierLoadStats stats_;
  std::unordered_map<uint64_t, int32_t> landed_;  // ticket: blocks read
  uint64_t next_ticket_ = 1;
  bool stop_ = false;
  std::thread thread_;  // last: starts once everything above is built
};

}  // namespace pagoda
