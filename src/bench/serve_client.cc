// One streamed completion request, timed at the client: httplib for HTTP, our own SSE parser,
// nlohmann::json for each chunk.
#include "bench/serve_client.h"

#include <httplib.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace pagoda::bench {
namespace {

constexpr size_t kMaxErrorText = 300;

// Text fit for a one-line error message: line breaks become spaces, long text is cut.
std::string one_line(std::string_view text) {
  std::string s(utf8_prefix(text, kMaxErrorText));
  for (char& c : s) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  while (!s.empty() && s.back() == ' ') s.pop_back();
  if (text.size() > kMaxErrorText) s += "...";
  return s;
}

std::string api_path(ApiKind api) {
  return api == ApiKind::kChat ? "/v1/chat/completions" : "/v1/completions";
}

// The output text a chunk carries: "text" (completions) or delta.content (chat; reasoning
// models stream delta.reasoning_content first, which is output as well).
std::string chunk_text(const nlohmann::json& choice) {
  if (!choice.is_object()) return "";
  auto text = choice.find("text");
  if (text != choice.end() && text->is_string()) return text->get<std::string>();
  auto delta = choice.find("delta");
  if (delta == choice.end() || !delta->is_object()) return "";
  std::string out;
  for (const char* key : {"reasoning_content", "reasoning", "content"}) {
    auto field = delta->find(key);
    if (field != delta->end() && field->is_string()) out += field->get<std::string>();
  }
  return out;
}

std::string error_text(const nlohmann::json& error) {
  if (error.is_string()) return error.get<std::string>();
  if (error.is_object()) {
    auto message = error.find("message");
    if (message != error.end() && message->is_string()) return message->get<std::string>();
  }
  return error.dump();
}

// The message of an error response: error.message of a JSON body, or the body itself.
std::string http_error_text(const std::string& body) {
  const nlohmann::json parsed = nlohmann::json::parse(body, nullptr, false);
  if (parsed.is_object() && parsed.contains("error")) return one_line(error_text(parsed["error"]));
  return one_line(body);
}

void apply_usage(const nlohmann::json& usage, StreamState& state) {
  if (!usage.is_object()) return;
  auto prompt = usage.find("prompt_tokens");
  if (prompt != usage.end() && prompt->is_number_unsigned()) {
    state.usage_prompt_tokens = prompt->get<uint64_t>();
  }
  auto output = usage.find("completion_tokens");
  if (output != usage.end() && output->is_number_unsigned()) {
    state.usage_output_tokens = output->get<uint64_t>();
  }
}

void configure(httplib::Client& client, const ClientConfig& config) {
  const double timeout = std::max(config.timeout_s, 0.001);
  const auto seconds = static_cast<time_t>(timeout);
  const auto micros = static_cast<time_t>((timeout - static_cast<double>(seconds)) * 1e6);
  client.set_connection_timeout(seconds, micros);
  client.set_read_timeout(seconds, micros);
  client.set_write_timeout(seconds, micros);
  client.set_decompress(false);  // no Accept-Encoding: chunks must arrive as they are sent
  client.set_tcp_nodelay(true);
  if (!config.api_key.empty()) client.set_bearer_token_auth(config.api_key);
}

// Everything the content receiver learns while the response streams in.
struct Exchange {
  int status = 0;
  std::string content_type;
  std::string error_body;  // of a non-200 response
  std::string cancel_reason;
  SseParser parser;
  StreamState state;
};

bool receive(Exchange& x, std::string_view bytes, double now_s, double deadline_s,
             const ClientConfig& config, const std::atomic<bool>& stop) {
  if (stop.load()) {
    x.cancel_reason = "interrupted";
    return false;
  }
  if (now_s > deadline_s) {
    x.cancel_reason = str_cat("timed out after ", config.timeout_s, " s");
    return false;
  }
  if (x.status != 200) {
    if (x.error_body.size() < kMaxErrorText * 2) x.error_body.append(bytes);
    return true;
  }
  for (const std::string& event : x.parser.feed(bytes)) apply_event(event, now_s, x.state);
  return x.state.error.empty();
}

// Why the request failed, or "" when it succeeded.
std::string failure(Exchange& x, const httplib::Result& result, double elapsed_s,
                    const ClientConfig& config, const std::string& target) {
  if (!x.cancel_reason.empty()) return x.cancel_reason;
  if (!x.state.error.empty()) return "server error in stream: " + one_line(x.state.error);
  if (!result) {
    if (elapsed_s >= config.timeout_s * 0.99) {
      return str_cat("timed out after ", config.timeout_s, " s");
    }
    return str_cat("POST ", target, ": ", httplib::to_string(result.error()));
  }
  if (x.status != 200) return str_cat("HTTP ", x.status, ": ", http_error_text(x.error_body));
  if (auto rest = x.parser.finish()) apply_event(*rest, elapsed_s, x.state);
  if (!x.state.error.empty()) return "server error in stream: " + one_line(x.state.error);
  if (x.state.arrival_s.empty()) {
    if (x.content_type.find("text/event-stream") == std::string::npos) {
      return "response was not streamed (Content-Type: " + x.content_type + ")";
    }
    return "no output text streamed";
  }
  return "";
}

void fill_counts(const StreamState& state, const RequestSpec& spec, StreamedResult& result) {
  RequestTimeline& t = result.timeline;
  t.arrival_s = state.arrival_s;
  result.usage_reported = state.usage_output_tokens.has_value();
  t.num_output_tokens = state.usage_output_tokens.value_or(state.arrival_s.size());
  t.num_prompt_tokens = state.usage_prompt_tokens.value_or(spec.prompt_tokens);
}

}  // namespace

std::string_view utf8_prefix(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t end = max_bytes;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end);
}

double seconds_since(Clock::time_point origin) {
  return std::chrono::duration<double>(Clock::now() - origin).count();
}

ServerUrl parse_server_url(const std::string& url) {
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) fail("--url ", url, ": expected http://HOST:PORT");
  const std::string scheme = url.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https") {
    fail("--url ", url, ": the scheme must be http or https");
  }
  const size_t path_start = url.find('/', scheme_end + 3);
  ServerUrl out;
  out.origin = url.substr(0, path_start);
  if (out.origin.size() == scheme_end + 3) fail("--url ", url, ": no host");
  std::string path = path_start == std::string::npos ? "" : url.substr(path_start);
  if (path.find_first_of("?#") != std::string::npos) {
    fail("--url ", url, ": a query or fragment is not allowed");
  }
  while (!path.empty() && path.back() == '/') path.pop_back();
  if (path.size() >= 3 && path.compare(path.size() - 3, 3, "/v1") == 0)
    path.resize(path.size() - 3);
  out.prefix = path;
  return out;
}

std::string request_body(const ClientConfig& config, const RequestSpec& spec) {
  nlohmann::json body = {
      {"model", config.model},
      {"stream", true},
      {"stream_options", {{"include_usage", true}}},
      {"max_tokens", spec.output_tokens},
      {"min_tokens", spec.output_tokens},
      {"temperature", 0},
      {"ignore_eos", true},
  };
  if (config.api == ApiKind::kChat) {
    body["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", spec.prompt}}});
    body["max_completion_tokens"] = spec.output_tokens;
  } else {
    body["prompt"] = spec.prompt;
  }
  return body.dump();
}

std::vector<std::string> SseParser::feed(std::string_view bytes) {
  std::vector<std::string> events;
  while (!bytes.empty()) {
    const size_t newline = bytes.find('\n');
    if (newline == std::string_view::npos) {
      line_.append(bytes);
      break;
    }
    line_.append(bytes.substr(0, newline));
    bytes.remove_prefix(newline + 1);
    std::string line = std::move(line_);
    line_.clear();
    if (!line.empty() && line.back() == '\r') line.pop_back();
    take_line(line, events);
  }
  return events;
}

std::optional<std::string> SseParser::finish() {
  std::vector<std::string> events;
  if (!line_.empty()) {
    std::string line = std::move(line_);
    line_.clear();
    if (line.back() == '\r') line.pop_back();
    take_line(line, events);
  }
  take_line("", events);
  if (events.empty()) return std::nullopt;
  return events.front();
}

void SseParser::take_line(std::string_view line, std::vector<std::string>& events) {
  if (line.empty()) {
    if (has_data_) events.push_back(std::move(data_));
    data_.clear();
    has_data_ = false;
    return;
  }
  if (line.front() == ':') return;  // comment (keep-alive)
  const size_t colon = line.find(':');
  const std::string_view field = line.substr(0, colon);
  std::string_view value = colon == std::string_view::npos ? "" : line.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (field != "data") return;
  if (has_data_) data_ += '\n';
  data_.append(value);
  has_data_ = true;
}

void apply_event(const std::string& data, double now_s, StreamState& state) {
  std::string_view text = data;
  while (!text.empty() && (text.back() == ' ' || text.back() == '\n')) text.remove_suffix(1);
  if (text == "[DONE]") {
    state.done = true;
    return;
  }
  const nlohmann::json chunk = nlohmann::json::parse(text, nullptr, false);
  if (chunk.is_discarded() || !chunk.is_object()) {
    state.error = "unparsable event: " + one_line(text);
    return;
  }
  auto error = chunk.find("error");
  if (error != chunk.end() && !error->is_null()) {
    state.error = error_text(*error);
    return;
  }
  auto choices = chunk.find("choices");
  if (choices != chunk.end() && choices->is_array() && !choices->empty()) {
    const std::string piece = chunk_text(choices->front());
    if (!piece.empty()) {
      state.arrival_s.push_back(now_s);
      state.text += piece;
    }
  }
  auto usage = chunk.find("usage");
  if (usage != chunk.end()) apply_usage(*usage, state);
}

void AbortSlot::attach(httplib::Client* client) {
  std::lock_guard<std::mutex> lock(mutex_);
  client_ = client;
}

void AbortSlot::detach() { attach(nullptr); }

void AbortSlot::abort() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (client_) client_->stop();
}

StreamedResult send_request(const ClientConfig& config, const RequestSpec& spec,
                            Clock::time_point origin, const std::atomic<bool>& stop,
                            AbortSlot* slot) {
  StreamedResult result;
  RequestTimeline& t = result.timeline;
  const std::string target = config.url.origin + config.url.prefix + api_path(config.api);
  httplib::Client client(config.url.origin);
  configure(client, config);
  httplib::Request request;
  request.method = "POST";
  request.path = config.url.prefix + api_path(config.api);
  request.body = request_body(config, spec);
  request.set_header("Content-Type", "application/json");
  request.set_header("Accept", "text/event-stream");
  Exchange x;
  request.response_handler = [&x](const httplib::Response& response) {
    x.status = response.status;
    x.content_type = response.get_header_value("Content-Type");
    return true;
  };
  t.start_s = seconds_since(origin);
  const double deadline_s = t.start_s + config.timeout_s;
  request.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    return receive(x, std::string_view(data, size), seconds_since(origin), deadline_s, config,
                   stop);
  };
  if (slot) slot->attach(&client);
  httplib::Result response =
      stop.load() ? httplib::Result{nullptr, httplib::Error::Canceled} : client.send(request);
  if (slot) slot->detach();
  t.end_s = seconds_since(origin);
  if (stop.load() && x.cancel_reason.empty() && !response) x.cancel_reason = "interrupted";
  t.error = failure(x, response, t.end_s - t.start_s, config, target);
  t.success = t.error.empty();
  fill_counts(x.state, spec, result);
  return result;
}

std::string fetch_first_model(const ClientConfig& config) {
  httplib::Client client(config.url.origin);
  configure(client, config);
  const std::string path = config.url.prefix + "/v1/models";
  const std::string target = config.url.origin + path;
  httplib::Result response = client.Get(path);
  if (!response) fail("GET ", target, ": ", httplib::to_string(response.error()));
  if (response->status != 200) {
    fail("GET ", target, ": HTTP ", response->status, ": ", http_error_text(response->body));
  }
  const nlohmann::json list = nlohmann::json::parse(response->body, nullptr, false);
  if (list.is_object()) {
    auto data = list.find("data");
    if (data != list.end() && data->is_array()) {
      for (const auto& model : *data) {
        if (model.is_object() && model.contains("id") && model["id"].is_string()) {
          return model["id"].get<std::string>();
        }
      }
    }
  }
  fail("GET ", target,
       ": no model id in the answer (give --model NAME): ", one_line(response->body));
}

}  // namespace pagoda::bench
