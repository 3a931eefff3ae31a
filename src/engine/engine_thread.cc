#include "engine/engine_thread.h"

#include <exception>
#include <iterator>
#include <utility>

#include "core/error.h"

namespace pagoda {

std::optional<OutputEvent> OutputStream::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait(lock, [&] { return !events_.empty() || closed_; });
  if (events_.empty()) return std::nullopt;
  OutputEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

std::optional<OutputEvent> OutputStream::try_next() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (events_.empty()) return std::nullopt;
  OutputEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

std::optional<OutputEvent> OutputStream::next_for(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait_for(lock, timeout, [&] { return !events_.empty() || closed_; });
  if (events_.empty()) return std::nullopt;
  OutputEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

bool OutputStream::done() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return closed_ && events_.empty();
}

void OutputStream::set_listener(std::function<void()> listener) {
  bool waiting = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    listener_ = listener;
    waiting = !events_.empty();
  }
  if (waiting && listener) listener();
}

void OutputStream::push(OutputEvent event) {
  std::function<void()> listener;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    PAGODA_CHECK(!closed_);
    closed_ = event.request_finished;
    events_.push_back(std::move(event));
    listener = listener_;
  }
  ready_.notify_all();
  if (listener) listener();
}

EngineThread::EngineThread(std::unique_ptr<Engine> engine) : engine_(std::move(engine)) {
  PAGODA_CHECK(engine_ != nullptr && !engine_->has_work());
  stats_ = engine_->stats();
  thread_ = std::thread([this] { loop(); });
}

EngineThread::~EngineThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::shared_ptr<OutputStream> EngineThread::submit(GenerationRequest request) {
  engine_->check_request(request);  // reads only what the Engine's constructor fixed
  std::shared_ptr<OutputStream> stream;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failure_.empty()) fail("the engine has stopped: ", failure_);
    if (stopping_) fail("the engine is shutting down");
    stream = std::make_shared<OutputStream>(next_id_++);
    submissions_.push_back({stream->id(), std::move(request), stream});
  }
  wake_.notify_all();
  return stream;
}

void EngineThread::abort(RequestId id) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    aborts_.push_back(id);
  }
  wake_.notify_all();
}

void EngineThread::run_between_steps(std::function<void()> task) {
  std::packaged_task<void()> packaged(std::move(task));
  std::future<void> done = packaged.get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ || !failure_.empty()) fail("the engine has stopped");
    tasks_.push_back(std::move(packaged));
  }
  wake_.notify_all();
  done.get();
}

EngineStats EngineThread::stats() const {
  EngineStats s;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    s = stats_;
  }
  // The disk tier's writes go on after the last step: read them now.
  s.kv_disk = engine_->kv_disk_stats();
  return s;
}

void EngineThread::deliver(std::vector<OutputEvent> events) {
  for (OutputEvent& e : events) {
    auto it = streams_.find(e.request_id);
    PAGODA_CHECK(it != streams_.end());
    const bool last = e.request_finished;
    it->second->push(std::move(e));
    if (last) streams_.erase(it);
  }
}

void EngineThread::loop() {
  try {
    for (;;) {
      std::deque<Submission> submissions;
      std::vector<RequestId> aborts;
      std::deque<std::packaged_task<void()>> tasks;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] {
          return stopping_ || !submissions_.empty() || !aborts_.empty() || !tasks_.empty() ||
                 engine_->has_work();
        });
        if (stopping_) break;
        submissions.swap(submissions_);
        aborts.swap(aborts_);
        tasks.swap(tasks_);
      }
      for (auto& task : tasks) task();  // its exception goes to the caller's future
      // Submissions before aborts: an abort may name a request submitted in the same batch.
      for (Submission& s : submissions) {
        try {
          engine_->add_request(s.id, std::move(s.request));
          streams_.emplace(s.id, std::move(s.stream));
        } catch (const Error& e) {
          OutputEvent event;
          event.request_id = s.id;
          event.finish_reason = FinishReason::kError;
          event.error = e.what();
          event.request_finished = true;
          s.stream->push(std::move(event));
        }
      }
      std::vector<OutputEvent> events;
      for (RequestId id : aborts) {
        std::vector<OutputEvent> aborted = engine_->abort(id);
        events.insert(events.end(), std::make_move_iterator(aborted.begin()),
                      std::make_move_iterator(aborted.end()));
      }
      if (engine_->has_work()) {
        std::vector<OutputEvent> stepped = engine_->step();
        events.insert(events.end(), std::make_move_iterator(stepped.begin()),
                      std::make_move_iterator(stepped.end()));
      }
      {
        // Before delivery: whoever sees a request end also sees it counted.
        std::lock_guard<std::mutex> lock(mutex_);
        stats_ = engine_->stats();
      }
      deliver(std::move(events));
    }
    // Stopping: every live request ends as an abort, one event per unfinished sample.
    std::vector<RequestId> live;
    for (const auto& [id, stream] : streams_) live.push_back(id);
    for (RequestId id : live) deliver(engine_->abort(id));
    close_all(FinishReason::kAbort, "");
  } catch (const std::exception& e) {
    // The step was cut off halfway: the engine cannot go on. Everyone waiting is told.
    {
      std::lock_guard<std::mutex> lock(mutex_);
      failure_ = e.what();
    }
    close_all(FinishReason::kError, e.what());
  }
}

void EngineThread::close_all(FinishReason reason, const std::string& error) {
  std::deque<Submission> submissions;
  std::deque<std::packaged_task<void()>> tasks;  // dropped unrun: their callers get an error
  {
    std::lock_guard<std::mutex> lock(mutex_);
    submissions.swap(submissions_);
    tasks.swap(tasks_);
  }
  auto close = [&](RequestId id, OutputStream& stream) {
    OutputEvent e;
    e.request_id = id;
    e.finish_reason = reason;
    e.error = error;
    e.request_finished = true;
    stream.push(std::move(e));
  };
  for (auto& [id, stream] : streams_) close(id, *stream);
  streams_.clear();
  for (Submission& s : submissions) close(s.id, *s.stream);
}

}  // namespace pagoda
