// Internal to backend/cpu: the threads one CpuBackend spreads its ops over.
//
// Why not an OpenMP parallel region: its closing barrier waits for every thread of the team,
// even one that found no work left. When another process holds a core, the descheduled thread
// stalls each op for a scheduler time slice, far longer than the op itself, and decode on a
// shared machine slows many times over (docs/BENCHMARKS.md, "CPU kernel choices, measured").
// Here a job is a count of chunks that threads claim from one atomic counter; the caller claims
// chunks too and returns once every chunk is done, so a worker that never woke costs nothing.
//
// Several backends may share one pool (the models of one server): run() takes a lock, so their
// jobs take turns, each job alone on the threads.
// Invariants: one job at a time (run_mutex_), never run() from inside a job; state_ packs the job's
// generation (16 bits), its chunk count (24 bits) and the next unclaimed chunk (24 bits), so a
// claim is checked against the count of the same job; job_ is rewritten only once every chunk
// of the previous job is done, so a thread holding a claim reads the job it claimed from.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace pagoda::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);  // the caller counts as one of them
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  static constexpr int64_t kMaxChunks = (int64_t{1} << 24) - 1;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls f(chunk, thread) for every chunk in [0, num_chunks), thread in [0, num_threads())
  // (0 is the caller), and returns when all calls have returned. Runs inline when there is
  // one chunk or one thread.
  template <typename F>
  void run(int64_t num_chunks, F&& f) {
    if (num_chunks <= 0) return;
    if (num_chunks == 1 || workers_.empty()) {
      for (int64_t c = 0; c < num_chunks; ++c) f(c, 0);
      return;
    }
    std::lock_guard lock(run_mutex_);
    // Jobs larger than the state's chunk field go in slices.
    for (int64_t first = 0; first < num_chunks; first += kMaxChunks) {
      auto slice = [&f, first](int64_t chunk, int thread) { f(first + chunk, thread); };
      dispatch(std::min(kMaxChunks, num_chunks - first), &call<decltype(slice)>, &slice);
    }
  }

 private:
  using ChunkFn = void (*)(void* ctx, int64_t chunk, int thread);
  template <typename F>
  static void call(void* ctx, int64_t chunk, int thread) {
    (*static_cast<F*>(ctx))(chunk, thread);
  }
  struct Job {
    ChunkFn fn = nullptr;
    void* ctx = nullptr;
  };

  void dispatch(int64_t num_chunks, ChunkFn fn, void* ctx);
  // Claims and runs chunks of generation `generation` until none is left.
  void work(uint64_t generation, int thread);
  void worker_main(int thread);

  std::mutex run_mutex_;
  Job job_;
  std::atomic<uint64_t> state_{0};
  std::atomic<int64_t> num_done_{0};
  std::atomic<bool> stop_{false};
  std::vector<std::thread> workers_;
};

}  // namespace pagoda::cpu
