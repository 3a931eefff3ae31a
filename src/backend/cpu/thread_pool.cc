#include "backend/cpu/thread_pool.h"

#include <chrono>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace pagoda::cpu {
namespace {

// How long an idle worker polls for the next job before sleeping: a decode step issues ops a
// few microseconds apart, and a futex wake costs about as much as a small op.
constexpr auto kSpinTime = std::chrono::microseconds(200);

inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// state_ = generation << 48 | num_chunks << 24 | next chunk
constexpr uint64_t kGenerationShift = 48;
uint64_t generation_of(uint64_t state) { return state >> kGenerationShift; }
int64_t num_chunks_of(uint64_t state) { return static_cast<int64_t>((state >> 24) & 0xffffff); }
int64_t next_of(uint64_t state) { return static_cast<int64_t>(state & 0xffffff); }

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  for (int t = 1; t < num_threads; ++t) workers_.emplace_back([this, t] { worker_main(t); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  const uint64_t generation = (generation_of(state_.load()) + 1) & 0xffff;
  state_.store(generation << kGenerationShift);  // a new generation wakes everyone
  state_.notify_all();
  for (std::thread& w : workers_) w.join();
}

void ThreadPool::dispatch(int64_t num_chunks, ChunkFn fn, void* ctx) {
  // Every chunk of the previous job is done (the last dispatch waited for it): job_ is free.
  job_ = {fn, ctx};
  num_done_.store(0, std::memory_order_relaxed);
  const uint64_t generation = (generation_of(state_.load(std::memory_order_relaxed)) + 1) & 0xffff;
  const uint64_t state = generation << kGenerationShift | static_cast<uint64_t>(num_chunks) << 24;
  state_.store(state, std::memory_order_release);
  state_.notify_all();
  work(generation, 0);
  // Chunks claimed by workers may still be running.
  for (int spins = 0; num_done_.load(std::memory_order_acquire) < num_chunks; ++spins) {
    if (spins < 4096) {
      cpu_relax();
    } else {
      std::this_thread::yield();  // a preempted worker may need this core to finish
    }
  }
}

void ThreadPool::work(uint64_t generation, int thread) {
  uint64_t state = state_.load(std::memory_order_acquire);
  while (generation_of(state) == generation && next_of(state) < num_chunks_of(state)) {
    if (!state_.compare_exchange_weak(state, state + 1, std::memory_order_acq_rel)) continue;
    // The claim holds the job open, so job_ is the one this chunk belongs to.
    job_.fn(job_.ctx, next_of(state), thread);
    num_done_.fetch_add(1, std::memory_order_acq_rel);
    state = state_.load(std::memory_order_acquire);
  }
}

void ThreadPool::worker_main(int thread) {
  uint64_t seen = 0;
  while (true) {
    uint64_t state = state_.load(std::memory_order_acquire);
    const auto spin_until = std::chrono::steady_clock::now() + kSpinTime;
    while (generation_of(state) == seen) {
      if (std::chrono::steady_clock::now() < spin_until) {
        for (int i = 0; i < 64; ++i) cpu_relax();
      } else {
        state_.wait(state, std::memory_order_acquire);
      }
      state = state_.load(std::memory_order_acquire);
    }
    if (stop_.load()) return;
    seen = generation_of(state);
    work(seen, thread);
  }
}

}  // namespace pagoda::cpu
