// The CPU backend's thread pool: every chunk of every job runs exactly once, on a valid thread
// index, over many back-to-back jobs (the generation handoff between jobs is where a race would
// show), and a pool shuts down cleanly whether its workers are spinning or asleep.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "backend/cpu/thread_pool.h"

namespace pagoda::cpu {
namespace {

void expect_each_chunk_once(ThreadPool& pool, int64_t num_chunks) {
  std::vector<std::atomic<int>> runs(static_cast<size_t>(num_chunks));
  std::atomic<bool> bad_thread{false};
  pool.run(num_chunks, [&](int64_t chunk, int thread) {
    if (thread < 0 || thread >= pool.num_threads()) bad_thread = true;
    runs[chunk].fetch_add(1);
  });
  for (int64_t c = 0; c < num_chunks; ++c) ASSERT_EQ(runs[c].load(), 1) << "chunk " << c << " of " << num_chunks;
  EXPECT_FALSE(bad_thread);
}

TEST(CpuThreadPool, EveryChunkRunsOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {0, 1, 2, 3, 7, 100, 1000}) expect_each_chunk_once(pool, n);
  }
}

TEST(CpuThreadPool, ManyBackToBackJobs) {
  ThreadPool pool(3);
  int64_t total = 0;
  std::atomic<int64_t> sum{0};
  for (int job = 0; job < 20000; ++job) {
    const int64_t n = 1 + job % 5;
    pool.run(n, [&](int64_t chunk, int) { sum.fetch_add(chunk + 1); });
    total += n * (n + 1) / 2;
  }
  EXPECT_EQ(sum.load(), total);
}

TEST(CpuThreadPool, WorksAfterWorkersFallAsleep) {
  ThreadPool pool(2);
  expect_each_chunk_once(pool, 10);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the spin, into the futex
  expect_each_chunk_once(pool, 10);
}

TEST(CpuThreadPool, ShutsDownIdleOrAsleep) {
  { ThreadPool pool(4); }
  {
    ThreadPool pool(2);
    expect_each_chunk_once(pool, 5);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace
}  // namespace pagoda::cpu
