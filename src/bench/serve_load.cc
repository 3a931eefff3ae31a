// Request sets, arrival times and the multi-threaded run of `pagoda bench serve`.
#include "bench/serve_load.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/error.h"

namespace pagoda::bench {
namespace {

// Everyday words, almost all one token with a leading space in common BPE vocabularies.
constexpr const char* kWords[] = {
    "the",     "of",     "and",    "to",     "in",      "is",      "you",    "that",    "it",
    "he",      "was",    "for",    "on",     "are",     "as",      "with",   "his",     "they",
    "at",      "be",     "this",   "have",   "from",    "or",      "one",    "had",     "by",
    "word",    "but",    "not",    "what",   "all",     "were",    "we",     "when",    "your",
    "can",     "said",   "there",  "use",    "an",      "each",    "which",  "she",     "do",
    "how",     "their",  "if",     "will",   "up",      "other",   "about",  "out",     "many",
    "then",    "them",   "these",  "so",     "some",    "her",     "would",  "make",    "like",
    "him",     "into",   "time",   "has",    "look",    "two",     "more",   "write",   "go",
    "see",     "number", "no",     "way",    "could",   "people",  "my",     "than",    "first",
    "water",   "been",   "call",   "who",    "oil",     "its",     "now",    "find",    "long",
    "down",    "day",    "did",    "get",    "come",    "made",    "may",    "part",    "over",
    "new",     "sound",  "take",   "only",   "little",  "work",    "know",   "place",   "year",
    "live",    "me",     "back",   "give",   "most",    "very",    "after",  "thing",   "our",
    "just",    "name",   "good",   "man",    "think",   "say",     "great",  "where",   "help",
    "through", "much",   "before", "line",   "right",   "too",     "mean",   "old",     "any",
    "same",    "tell",   "boy",    "follow", "came",    "want",    "show",   "also",    "around",
    "form",    "three",  "small",  "set",    "put",     "end",     "does",   "another", "well",
    "large",   "must",   "big",    "even",   "such",    "because", "turn",   "here",    "why",
    "ask",     "went",   "men",    "read",   "need",    "land",    "house",  "home",    "us",
    "move",    "try",    "kind",   "hand",   "picture", "again",   "change", "off",     "play",
    "spell",   "air",    "away",   "animal", "point",   "page",    "letter", "mother",  "answer",
    "found",   "study",  "still",  "learn",  "should",  "world",   "high",   "every",   "near",
    "add",     "food",
};
constexpr size_t kNumWords = sizeof(kWords) / sizeof(kWords[0]);

// Threads a run may start when no concurrency cap is given: the cap then is this.
constexpr uint64_t kMaxWorkers = 1024;

std::string word_prompt(uint64_t num_words, SeededRng& rng) {
  std::string prompt;
  for (uint64_t w = 0; w < num_words; ++w) {
    if (w) prompt += ' ';
    prompt += kWords[rng.between(0, kNumWords - 1)];
  }
  return prompt;
}

struct Conversation {
  std::string prompt;
  std::string reply;
};

std::vector<Conversation> read_sharegpt(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot open the dataset");
  std::stringstream bytes;
  bytes << in.rdbuf();
  const nlohmann::json root = nlohmann::json::parse(bytes.str(), nullptr, false);
  if (!root.is_array()) fail(path, ": expected a JSON list of conversations (ShareGPT format)");
  std::vector<Conversation> out;
  for (const auto& item : root) {
    if (!item.is_object() || !item.contains("conversations")) continue;
    const auto& turns = item["conversations"];
    if (!turns.is_array() || turns.size() < 2) continue;
    if (!turns[0].is_object() || !turns[1].is_object()) continue;
    const auto prompt = turns[0].find("value");
    const auto reply = turns[1].find("value");
    if (prompt == turns[0].end() || reply == turns[1].end()) continue;
    if (!prompt->is_string() || !reply->is_string() || prompt->get<std::string>().empty()) continue;
    out.push_back({prompt->get<std::string>(), reply->get<std::string>()});
  }
  if (out.empty()) fail(path, ": no conversation with two turns");
  return out;
}

uint64_t approx_tokens(const std::string& text) {
  return std::clamp<uint64_t>(text.size() / 4, 1, 4096);
}

// State shared by the dispatcher, the workers and the thread that waits for them.
struct RunState {
  std::mutex mutex;
  std::condition_variable wake_dispatcher;
  std::condition_variable wake_workers;
  std::condition_variable wake_main;
  std::deque<size_t> queue;  // released, not yet taken by a worker
  bool dispatch_done = false;
  uint64_t running_workers = 0;
  LoadProgress progress;
  std::vector<std::optional<StreamedResult>> results;
};

void dispatch(RunState& s, const std::vector<double>& times, Clock::time_point origin,
              const std::atomic<bool>& stop) {
  std::unique_lock<std::mutex> lock(s.mutex);
  for (size_t i = 0; i < times.size(); ++i) {
    const auto when = origin + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(times[i]));
    s.wake_dispatcher.wait_until(lock, when, [&] { return stop.load(); });
    if (stop.load()) break;
    s.queue.push_back(i);
    s.wake_workers.notify_one();
  }
  s.dispatch_done = true;
  s.wake_workers.notify_all();
  s.wake_main.notify_all();
}

// Takes the next released request, or nullopt when there will be none (or `stop`).
std::optional<size_t> next_request(RunState& s, const std::atomic<bool>& stop) {
  std::unique_lock<std::mutex> lock(s.mutex);
  s.wake_workers.wait(lock, [&] { return stop.load() || !s.queue.empty() || s.dispatch_done; });
  if (stop.load() || s.queue.empty()) return std::nullopt;
  const size_t i = s.queue.front();
  s.queue.pop_front();
  ++s.progress.sent;
  return i;
}

void work(RunState& s, const ClientConfig& config, const std::vector<RequestSpec>& specs,
          Clock::time_point origin, const std::atomic<bool>& stop, AbortSlot& slot) {
  while (auto i = next_request(s, stop)) {
    StreamedResult result = send_request(config, specs[*i], origin, stop, &slot);
    std::lock_guard<std::mutex> lock(s.mutex);
    ++s.progress.finished;
    if (!result.timeline.success) ++s.progress.failed;
    s.results[*i] = std::move(result);
    s.wake_main.notify_all();
  }
  std::lock_guard<std::mutex> lock(s.mutex);
  --s.running_workers;
  s.wake_main.notify_all();
}

bool all_finished(const RunState& s) {
  return s.dispatch_done && s.queue.empty() && s.progress.finished == s.progress.sent;
}

// Waits for the run to end, reporting progress, and aborts requests in flight once `stop` is set.
void supervise(RunState& s, std::vector<AbortSlot>& slots, Clock::time_point origin,
               const std::atomic<bool>& stop,
               const std::function<void(const LoadProgress&)>& on_progress) {
  auto last_report = Clock::now() - std::chrono::seconds(1);
  std::unique_lock<std::mutex> lock(s.mutex);
  while (true) {
    const bool stopping = stop.load();
    if (stopping ? s.running_workers == 0 : all_finished(s)) break;
    if (stopping) {
      for (AbortSlot& slot : slots) slot.abort();
      s.wake_dispatcher.notify_all();
      s.wake_workers.notify_all();
    }
    if (on_progress && Clock::now() - last_report >= std::chrono::milliseconds(200)) {
      s.progress.elapsed_s = seconds_since(origin);
      LoadProgress snapshot = s.progress;
      lock.unlock();
      on_progress(snapshot);
      lock.lock();
      last_report = Clock::now();
      continue;
    }
    s.wake_main.wait_for(lock, std::chrono::milliseconds(100));
  }
  s.progress.elapsed_s = seconds_since(origin);
  if (on_progress) {
    LoadProgress snapshot = s.progress;
    lock.unlock();
    on_progress(snapshot);
  }
}

}  // namespace

uint64_t SeededRng::next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double SeededRng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

uint64_t SeededRng::between(uint64_t lo, uint64_t hi) {
  PAGODA_CHECK(lo <= hi);
  const uint64_t span = hi - lo + 1;
  return span == 0 ? next() : lo + next() % span;
}

double SeededRng::exponential(double rate) { return -std::log1p(-uniform()) / rate; }

std::vector<RequestSpec> random_text_requests(uint64_t count, LengthRange prompt,
                                              LengthRange output, uint64_t seed) {
  SeededRng rng(seed);
  std::vector<RequestSpec> specs(count);
  for (RequestSpec& spec : specs) {
    spec.prompt_tokens = rng.between(prompt.min, prompt.max);
    spec.output_tokens = rng.between(output.min, output.max);
    spec.prompt = word_prompt(spec.prompt_tokens, rng);
  }
  return specs;
}

std::vector<RequestSpec> sharegpt_text_requests(const std::string& path, uint64_t count,
                                                std::optional<LengthRange> output, uint64_t seed) {
  std::vector<Conversation> conversations = read_sharegpt(path);
  SeededRng rng(seed);
  for (size_t i = conversations.size(); i > 1; --i) {
    std::swap(conversations[i - 1], conversations[rng.between(0, i - 1)]);
  }
  std::vector<RequestSpec> specs(count);
  for (uint64_t i = 0; i < count; ++i) {
    const Conversation& c = conversations[i % conversations.size()];
    specs[i].prompt = c.prompt;
    specs[i].prompt_tokens = approx_tokens(c.prompt);
    specs[i].output_tokens =
        output ? rng.between(output->min, output->max) : approx_tokens(c.reply);
  }
  return specs;
}

std::vector<double> arrival_times(uint64_t count, double rate, uint64_t seed) {
  if (!(rate > 0)) fail("--request-rate must be more than 0, got ", rate);
  std::vector<double> times(count, 0.0);
  if (std::isinf(rate)) return times;
  SeededRng rng(seed ^ 0x5A5A5A5A5A5A5A5Aull);  // not the prompts' stream
  for (uint64_t i = 1; i < count; ++i) times[i] = times[i - 1] + rng.exponential(rate);
  return times;
}

SloLimits parse_goodput(const std::vector<std::string>& items) {
  SloLimits limits;
  for (const std::string& item : items) {
    const size_t colon = item.find(':');
    const std::string key = item.substr(0, colon);
    std::optional<double>* slot = key == "ttft"   ? &limits.ttft_s
                                  : key == "tpot" ? &limits.tpot_s
                                  : key == "e2el" ? &limits.e2el_s
                                                  : nullptr;
    if (!slot || colon == std::string::npos) {
      fail("--goodput ", item, ": expected ttft:MS, tpot:MS or e2el:MS");
    }
    if (slot->has_value()) fail("--goodput: ", key, " is given twice");
    char* end = nullptr;
    const std::string value = item.substr(colon + 1);
    const double ms = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !(ms > 0) || !std::isfinite(ms)) {
      fail("--goodput ", item, ": the limit must be a number of milliseconds > 0");
    }
    *slot = ms / 1000.0;
  }
  return limits;
}

LoadResult run_load(const ClientConfig& config, const std::vector<RequestSpec>& specs,
                    const LoadPlan& plan, const std::atomic<bool>& stop,
                    const std::function<void(const LoadProgress&)>& on_progress) {
  const std::vector<double> times = arrival_times(specs.size(), plan.request_rate, plan.seed);
  const uint64_t cap = plan.max_concurrency ? plan.max_concurrency : kMaxWorkers;
  const uint64_t num_workers = std::min<uint64_t>(cap, specs.size());
  RunState s;
  s.results.resize(specs.size());
  s.progress.total = specs.size();
  s.running_workers = num_workers;
  std::vector<AbortSlot> slots(num_workers);
  const Clock::time_point origin = Clock::now();
  std::vector<std::thread> threads;
  threads.emplace_back(dispatch, std::ref(s), std::cref(times), origin, std::cref(stop));
  for (uint64_t w = 0; w < num_workers; ++w) {
    threads.emplace_back(work, std::ref(s), std::cref(config), std::cref(specs), origin,
                         std::cref(stop), std::ref(slots[w]));
  }
  supervise(s, slots, origin, stop, on_progress);
  for (std::thread& t : threads) t.join();
  LoadResult out;
  out.interrupted = stop.load();
  double last_end = 0;
  for (auto& result : s.results) {
    if (!result) continue;
    last_end = std::max(last_end, result->timeline.end_s);
    out.requests.push_back(std::move(*result));
  }
  out.duration_s = std::max(out.interrupted ? s.progress.elapsed_s : last_end, 1e-9);
  return out;
}

std::string url_label(const std::string& url) {
  const size_t scheme_end = url.find("://");
  const size_t host_start = scheme_end == std::string::npos ? 0 : scheme_end + 3;
  const size_t host_end = url.find('/', host_start);
  return url.substr(host_start,
                    host_end == std::string::npos ? std::string::npos : host_end - host_start);
}

EndpointRun run_endpoint(const ServeTarget& target, ClientConfig config,
                         const std::vector<RequestSpec>& specs, const LoadPlan& plan,
                         const SloLimits& limits, const std::atomic<bool>& stop,
                         const std::function<void(const LoadProgress&)>& on_progress) {
  EndpointRun run;
  run.url = target.url;
  run.label = target.label.empty() ? url_label(target.url) : target.label;
  run.request_rate = plan.request_rate;
  run.max_concurrency = plan.max_concurrency;
  const Clock::time_point origin = Clock::now();
  config.url = parse_server_url(target.url);
  if (config.model.empty()) {
    try {
      config.model = fetch_first_model(config);
    } catch (const Error& e) {
      run.setup_error = e.what();
    }
  }
  run.model = config.model;
  std::vector<RequestTimeline> timelines;
  double duration_s = 0;
  if (!run.setup_error.empty()) {
    RequestTimeline failed;
    failed.error = run.setup_error;
    timelines.assign(specs.size(), failed);
    duration_s = std::max(seconds_since(origin), 1e-9);
  } else {
    LoadResult load = run_load(config, specs, plan, stop, on_progress);
    for (const StreamedResult& r : load.requests) {
      if (r.timeline.success && r.usage_reported) ++run.num_usage_counted;
      timelines.push_back(r.timeline);
    }
    run.interrupted = load.interrupted;
    duration_s = load.duration_s;
  }
  run.metrics = aggregate_metrics(timelines, duration_s, limits);
  return run;
}

}  // namespace pagoda::bench
