// One engine thread: it owns the Engine and runs step() while there is work. Other threads
// (HTTP handlers, tests) talk to it through two kinds of queue: the submission queue (new
// requests, aborts) and one output queue per request (OutputStream). Those are the only locks;
// the Engine itself is touched by the engine thread alone.
//
// Delivery: events are pushed onto the request's OutputStream on the engine thread. A consumer
// may wait on the stream, or set a listener that is told an event is there (it must only hand
// that news on, as posting a task does): a slow consumer never stalls the step loop.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_stats.h"

namespace pagoda {

// The events of one request, in order, from the engine thread to one consumer. Thread-safe.
// Invariant: nothing is pushed after the event with request_finished.
class OutputStream {
 public:
  explicit OutputStream(RequestId id) : id_(id) {}
  RequestId id() const { return id_; }

  // Waits for the next event; nullopt once the request's last event has been taken.
  std::optional<OutputEvent> next();
  // The next event if one is there now; nullopt otherwise (see done()).
  std::optional<OutputEvent> try_next();
  // Waits up to `timeout` for the next event; nullopt when none came (or none will: done()).
  std::optional<OutputEvent> next_for(std::chrono::milliseconds timeout);
  // The last event has been pushed and taken: nothing more will come.
  bool done() const;

  // Called after each event is pushed, on the pushing thread, outside the stream's lock; and
  // once at once if events are already waiting. It must return quickly and not call back into
  // this stream's push().
  void set_listener(std::function<void()> listener);

  // The engine thread's side.
  void push(OutputEvent event);

 private:
  const RequestId id_;
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<OutputEvent> events_;
  bool closed_ = false;  // the request_finished event has been pushed
  std::function<void()> listener_;
};

class EngineThread {
 public:
  // Takes an engine without requests and starts the thread, which blocks on the submission
  // queue while the engine has no work.
  explicit EngineThread(std::unique_ptr<Engine> engine);
  // Stops the thread: every unfinished request ends with a kAbort event.
  ~EngineThread();
  EngineThread(const EngineThread&) = delete;
  EngineThread& operator=(const EngineThread&) = delete;

  // Queues a request from any thread and returns the stream its events arrive on; the stream's
  // id is the request's id. A bad request throws Error here, on the caller's thread
  // (Engine::check_request); so does submitting after the engine thread failed or stopped.
  std::shared_ptr<OutputStream> submit(GenerationRequest request);

  // Ends request `id` from any thread, as soon as the engine thread sees it (before its next
  // step); its stream then gets kAbort events. Unknown or finished ids are ignored.
  void abort(RequestId id);

  // The engine's numbers after its last step (or request / abort), from any thread.
  EngineStats stats() const;

  // Runs `task` on the engine thread between two steps, when the engine's model and backend are
  // free for it (embeddings from the generative model), and returns once it has run, rethrowing
  // its exception. Any thread but the engine thread.
  void run_between_steps(std::function<void()> task);
  // The same, with the engine (saved prefixes: Engine::export_prefix, import_prefix).
  void with_engine(const std::function<void(Engine&)>& task) {
    run_between_steps([&] { task(*engine_); });
  }
  // What the engine fixed when it was made; any thread.
  int32_t block_size() const { return engine_->config().block_size; }
  uint64_t kv_block_bytes() const { return engine_->kv_block_bytes(); }

 private:
  struct Submission {
    RequestId id;
    GenerationRequest request;
    std::shared_ptr<OutputStream> stream;
  };

  void loop();
  void deliver(std::vector<OutputEvent> events);
  // Ends every stream (live requests and unprocessed submissions) with `reason`.
  void close_all(FinishReason reason, const std::string& error);

  std::unique_ptr<Engine> engine_;  // used by the engine thread only, once it runs
  // Engine thread only: the streams of requests the engine holds.
  std::unordered_map<RequestId, std::shared_ptr<OutputStream>> streams_;

  mutable std::mutex mutex_;  // guards what follows, up to thread_
  std::condition_variable wake_;
  std::deque<Submission> submissions_;
  std::vector<RequestId> aborts_;
  std::deque<std::packaged_task<void()>> tasks_;
  bool stopping_ = false;
  std::string failure_;  // set when the engine thread died of an exception
  EngineStats stats_;
  RequestId next_id_ = 1;

  std::thread thread_;  // last: starts once everything above is built
};

}  // namespace pagoda
