// The client side of `pagoda bench serve`: one streamed completion request to an
// OpenAI-compatible server (pagoda, llama.cpp, vLLM, Ollama), timed chunk by chunk into a
// RequestTimeline. Also the pieces it is made of, each testable alone: URL parsing, the request
// body, server-sent-event parsing and the interpretation of each streamed JSON chunk.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bench/metrics.h"

namespace httplib {
class Client;
}

namespace pagoda::bench {

using Clock = std::chrono::steady_clock;

// Seconds from `origin` to now on the steady clock.
double seconds_since(Clock::time_point origin);

// The longest prefix of `text` of at most `max_bytes` that does not split a UTF-8 character.
std::string_view utf8_prefix(std::string_view text, size_t max_bytes);

enum class ApiKind { kCompletions, kChat };  // POST /v1/completions or /v1/chat/completions

// "http://host:8000", "https://host/base/v1/" ... split into what httplib connects to and a path
// prefix. A trailing "/v1" is dropped, so both ".../v1" and the bare origin work.
struct ServerUrl {
  std::string origin;  // scheme://host[:port]
  std::string prefix;  // "" or "/base" (no trailing slash)
};
ServerUrl parse_server_url(const std::string& url);  // throws Error on anything else

struct ClientConfig {
  ServerUrl url;
  ApiKind api = ApiKind::kCompletions;
  std::string model;
  std::string api_key;     // sent as "Authorization: Bearer KEY" when not empty
  double timeout_s = 300;  // whole request, connection included
};

// One request of the benchmark's request set.
struct RequestSpec {
  std::string prompt;
  uint64_t prompt_tokens = 0;  // what the prompt was sized to (the server's count is reported)
  uint64_t output_tokens = 0;  // max_tokens, and min_tokens so that lengths are exact
};

// The JSON body: stream with usage, greedy, exactly `output_tokens` tokens where the server
// supports ignore_eos / min_tokens (vLLM, llama.cpp; others ignore the fields).
std::string request_body(const ClientConfig& config, const RequestSpec& spec);

// Splits a text/event-stream into the data of its events ("data:" lines joined by "\n",
// dispatched on a blank line; comments and other fields ignored; CRLF or LF).
class SseParser {
 public:
  // Adds bytes; returns the data of every event they complete.
  std::vector<std::string> feed(std::string_view bytes);
  // The data of an event the stream left unterminated, if any.
  std::optional<std::string> finish();

 private:
  void take_line(std::string_view line, std::vector<std::string>& events);
  std::string line_;
  std::string data_;
  bool has_data_ = false;
};

// What a streamed completion has said so far.
struct StreamState {
  std::vector<double> arrival_s;  // one per chunk that carried output text
  std::string text;               // all of it
  std::optional<uint64_t> usage_prompt_tokens;
  std::optional<uint64_t> usage_output_tokens;
  bool done = false;  // "[DONE]" seen
  std::string error;  // an error object in the stream, or unparsable JSON
};
// Applies the data of one event that arrived at `now_s`.
void apply_event(const std::string& data, double now_s, StreamState& state);

// The client of an in-flight request, so that another thread can abort it (Ctrl-C).
class AbortSlot {
 public:
  void attach(httplib::Client* client);
  void detach();
  void abort();  // shuts the attached client's socket, if any

 private:
  std::mutex mutex_;
  httplib::Client* client_ = nullptr;
};

struct StreamedResult {
  RequestTimeline timeline;     // times in seconds from the run's origin
  bool usage_reported = false;  // token counts from the server's usage chunk, not counted chunks
};

// Sends one request and waits for the whole stream. Never throws for server or network trouble:
// those give a failed timeline with the reason. `stop` set (or slot->abort()) cancels it.
StreamedResult send_request(const ClientConfig& config, const RequestSpec& spec,
                            Clock::time_point origin, const std::atomic<bool>& stop,
                            AbortSlot* slot = nullptr);

// The first model id of GET /v1/models. Throws Error saying why when there is none.
std::string fetch_first_model(const ClientConfig& config);

}  // namespace pagoda::bench
