// The in-process benchmark driver (see offline_run.h).
#include "bench/offline_run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <unordered_map>

namespace pagoda::bench {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double ratio(double num, int64_t den) { return den > 0 ? num / static_cast<double>(den) : kNaN; }

// Queues requests, steps the engine and fills one RequestResult per request.
class Runner {
 public:
  Runner(Engine& engine, const std::vector<BenchRequest>& requests, const RunHooks& hooks)
      : engine_(engine), requests_(requests), hooks_(hooks), start_(Clock::now()) {
    result_.requests.resize(requests.size());
    for (RequestResult& r : result_.requests) r.start_s = r.first_token_s = r.end_s = kNaN;
    preemptions_before_ = engine.stats().scheduler.num_preemptions;
  }

  void add(size_t index) {
    RequestResult& r = result_.requests[index];
    r.num_prompt_tokens = static_cast<int32_t>(requests_[index].prompt.size());
    r.start_s = now();
    ids_[engine_.add_request(generation_request(requests_[index]))] = index;
  }

  // Steps until the engine is idle; false when stopped (everything live was aborted).
  bool drain() {
    while (engine_.has_work()) {
      if (stop_requested()) {
        abort_all();
        return false;
      }
      step();
    }
    return true;
  }

  bool stop_requested() const { return hooks_.stop && hooks_.stop->load(); }

  OfflineResult finish() {
    result_.wall_s = now();
    result_.num_preemptions = engine_.stats().scheduler.num_preemptions - preemptions_before_;
    return std::move(result_);
  }

  void mark_interrupted() { result_.interrupted = true; }

 private:
  using Clock = std::chrono::steady_clock;

  double now() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

  void step() {
    const std::vector<OutputEvent> events = engine_.step();
    const double t = now();
    int32_t num_finished = 0;
    for (const OutputEvent& e : events) num_finished += record(e, t);
    sample_stats(num_finished);
    if (hooks_.on_step) hooks_.on_step(num_output_tokens_);
  }

  // Returns 1 when the event ends its request.
  int32_t record(const OutputEvent& e, double t) {
    const auto it = ids_.find(e.request_id);
    if (it == ids_.end()) return 0;
    RequestResult& r = result_.requests[it->second];
    if (!e.token_ids.empty()) {
      if (r.num_output_tokens == 0) r.first_token_s = t;
      r.num_output_tokens += static_cast<int32_t>(e.token_ids.size());
      num_output_tokens_ += static_cast<int64_t>(e.token_ids.size());
      r.end_s = t;
    }
    if (!e.request_finished) return 0;
    r.finished = e.finish_reason == FinishReason::kLength || e.finish_reason == FinishReason::kStop;
    ids_.erase(it);
    return 1;
  }

  void sample_stats(int32_t num_finished) {
    const SchedulerStats s = engine_.stats().scheduler;
    StepTotals& t = result_.steps;
    ++t.num_steps;
    t.num_tokens += s.num_tokens_last_step;
    // The sequences of this step: those still running plus those it finished.
    t.num_seqs += s.num_running + num_finished;
    t.sum_kv_utilization += s.kv.utilization();
    t.peak_kv_utilization = std::max(t.peak_kv_utilization, s.kv.utilization());
    t.peak_running = std::max(t.peak_running, s.num_running + num_finished);
  }

  void abort_all() {
    std::vector<RequestId> live;
    for (const auto& [id, index] : ids_) live.push_back(id);
    for (RequestId id : live) engine_.abort(id);
    ids_.clear();
    result_.interrupted = true;
  }

  Engine& engine_;
  const std::vector<BenchRequest>& requests_;
  const RunHooks& hooks_;
  Clock::time_point start_;
  OfflineResult result_;
  std::unordered_map<RequestId, size_t> ids_;  // live requests
  int64_t num_output_tokens_ = 0;
  int64_t preemptions_before_ = 0;
};

}  // namespace

double RequestResult::decode_s_per_token() const {
  if (num_output_tokens < 2) return kNaN;
  return (end_s - first_token_s) / (num_output_tokens - 1);
}

double StepTotals::mean_tokens_per_step() const {
  return ratio(static_cast<double>(num_tokens), num_steps);
}
double StepTotals::mean_seqs_per_step() const {
  return ratio(static_cast<double>(num_seqs), num_steps);
}
double StepTotals::mean_kv_utilization() const { return ratio(sum_kv_utilization, num_steps); }

int64_t OfflineResult::num_prompt_tokens() const {
  int64_t n = 0;
  for (const RequestResult& r : requests) n += std::isnan(r.start_s) ? 0 : r.num_prompt_tokens;
  return n;
}
int64_t OfflineResult::num_output_tokens() const {
  int64_t n = 0;
  for (const RequestResult& r : requests) n += r.num_output_tokens;
  return n;
}
int64_t OfflineResult::num_finished() const {
  return std::count_if(requests.begin(), requests.end(),
                       [](const RequestResult& r) { return r.finished; });
}

GenerationRequest generation_request(const BenchRequest& request) {
  GenerationRequest g;
  g.prompt = request.prompt;
  g.sampling.temperature = 0;
  g.max_tokens = request.output_len;
  return g;
}

OfflineResult run_batched(Engine& engine, const std::vector<BenchRequest>& requests,
                          const RunHooks& hooks) {
  Runner runner(engine, requests, hooks);
  if (runner.stop_requested()) {
    runner.mark_interrupted();
    return runner.finish();
  }
  for (size_t i = 0; i < requests.size(); ++i) runner.add(i);
  runner.drain();
  return runner.finish();
}

OfflineResult run_sequential(Engine& engine, const std::vector<BenchRequest>& requests,
                             const RunHooks& hooks) {
  Runner runner(engine, requests, hooks);
  for (size_t i = 0; i < requests.size(); ++i) {
    if (runner.stop_requested()) {
      runner.mark_interrupted();
      break;
    }
    runner.add(i);
    if (!runner.drain()) break;
  }
  return runner.finish();
}

}  // namespace pagoda::bench
