// Grammar compilation on threads of its own, so that a request's grammar never holds a thread
// that parses other requests, and every compile can be cancelled: by its own flag (its client
// left) or all at once by stop() (the server is shutting down). Each job runs under one
// GrammarBudget (GrammarLimits, its clock started when the job starts, its flag as the cancel
// flag), from the source of its GBNF text (a JSON schema, a regex) to its first token mask.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "grammar/grammar_budget.h"
#include "grammar/grammar_cache.h"

namespace pagoda {

class GrammarCompiler {
 public:
  // Makes the GBNF text (throws Error when it cannot).
  using Source = std::function<std::string(GrammarBudget&)>;
  // Called once per job on a compiler thread: the grammar, or the exception that ended it
  // (Error, GrammarLimitError, GrammarCancelled).
  using Done = std::function<void(std::shared_ptr<GrammarMasks>, std::exception_ptr)>;

  GrammarCompiler(std::shared_ptr<GrammarCache> cache, GrammarLimits limits, int num_threads);
  ~GrammarCompiler();
  GrammarCompiler(const GrammarCompiler&) = delete;
  GrammarCompiler& operator=(const GrammarCompiler&) = delete;

  // Queues a compile; setting *cancelled ends it (queued or running) with GrammarCancelled.
  void submit(Source source, std::shared_ptr<std::atomic<bool>> cancelled, Done done);
  // Cancels every job, queued and running (each gets GrammarCancelled), and joins the threads;
  // a job submitted later is cancelled at once. Any thread but a compiler thread.
  void stop();

  const GrammarLimits& limits() const { return limits_; }
  GrammarCache& cache() { return *cache_; }

 private:
  struct Job {
    Source source;
    std::shared_ptr<std::atomic<bool>> cancelled;
    Done done;
  };
  void run();
  void compile(Job& job);

  const std::shared_ptr<GrammarCache> cache_;
  const GrammarLimits limits_;
  std::mutex stop_mutex_;  // one stop() joins the threads
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Job> queue_;
  std::vector<std::shared_ptr<std::atomic<bool>>> running_;  // the flags of running jobs
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace pagoda
