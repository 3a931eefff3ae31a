#include "kv/load_thread.h"

namespace pagoda {

LoadThread::LoadThread(ReadFn read) : read_(std::move(read)), thread_([this] { loop(); }) {}

LoadThread::~LoadThread() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  work_.notify_all();
  thread_.join();
}

uint64_t LoadThread::start(std::vector<LowerTier::BlockLoad> loads) {
  uint64_t ticket;
  {
    std::lock_guard lock(mutex_);
    ticket = next_ticket_++;
    queue_.push_back({ticket, std::move(loads), std::chrono::steady_clock::now()});
  }
  work_.notify_one();
  return ticket;
}

std::optional<int32_t> LoadThread::finish(uint64_t ticket) {
  std::lock_guard lock(mutex_);
  auto it = landed_.find(ticket);
  if (it == landed_.end()) return std::nullopt;
  const int32_t n = it->second;
  landed_.erase(it);
  return n;
}

void LoadThread::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  landed_cv_.wait_for(lock, timeout, [this] { return !landed_.empty(); });
}

TierLoadStats LoadThread::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void LoadThread::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    work_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_, and nothing left
    Queued q = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    int32_t n = 0;
    for (const LowerTier::BlockLoad& l : q.loads) {
      if (!read_(l)) break;
      ++n;
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - q.started).count();
    lock.lock();
    stats_.add(n, seconds);
    landed_[q.ticket] = n;
    landed_cv_.notify_all();
  }
}

}  // namespace pagoda
