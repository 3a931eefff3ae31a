#include "grammar/grammar_compiler.h"

#include <algorithm>

namespace pagoda {

GrammarCompiler::GrammarCompiler(std::shared_ptr<GrammarCache> cache, GrammarLimits limits,
                                 int num_threads)
    : cache_(std::move(cache)), limits_(limits) {
  for (int i = 0; i < std::max(1, num_threads); ++i) threads_.emplace_back([this] { run(); });
}

GrammarCompiler::~GrammarCompiler() { stop(); }

void GrammarCompiler::submit(Source source, std::shared_ptr<std::atomic<bool>> cancelled,
                             Done done) {
  if (!cancelled) cancelled = std::make_shared<std::atomic<bool>>(false);
  {
    std::lock_guard lock(mutex_);
    if (!stopping_) {
      queue_.push_back({std::move(source), std::move(cancelled), std::move(done)});
      ready_.notify_one();
      return;
    }
  }
  done(nullptr, std::make_exception_ptr(GrammarCancelled()));
}

void GrammarCompiler::stop() {
  std::lock_guard stopping(stop_mutex_);
  std::deque<Job> left;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    left.swap(queue_);
    for (auto& flag : running_) flag->store(true);
    ready_.notify_all();
  }
  for (Job& job : left) job.done(nullptr, std::make_exception_ptr(GrammarCancelled()));
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

void GrammarCompiler::run() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mutex_);
      ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping
      job = std::move(queue_.front());
      queue_.pop_front();
      running_.push_back(job.cancelled);
    }
    compile(job);
    std::lock_guard lock(mutex_);
    running_.erase(std::find(running_.begin(), running_.end(), job.cancelled));
  }
}

void GrammarCompiler::compile(Job& job) {
  std::shared_ptr<GrammarMasks> masks;
  std::exception_ptr error;
  try {
    GrammarBudget budget(limits_, job.cancelled.get());
    budget.check_now();
    const std::string gbnf = job.source(budget);
    masks = cache_->get(gbnf, budget);
  } catch (...) {
    error = std::current_exception();
  }
  job.done(std::move(masks), error);
}

}  // namespace pagoda
