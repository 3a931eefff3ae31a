// POST /v1/completions and /v1/chat/completions: parse, check the queue, submit, then answer
// as one JSON object or as a stream of Server-Sent Events. Both answers are written by a
// content provider that polls the generation, so a client that goes away is noticed while its
// request is still running (the socket stops being writable) and the request is aborted.
#include <httplib.h>

#include <ctime>

#include "server/api_error.h"
#include "server/generation.h"
#include "server/http_server.h"
#include "server/responses.h"

namespace pagoda::server {
namespace {

using nlohmann::json;
constexpr std::chrono::milliseconds kPollInterval{50};

std::string sse(const json& j) { return "data: " + dump(j) + "\n\n"; }

bool write(httplib::DataSink& sink, const std::string& s) { return sink.write(s.data(), s.size()); }

}  // namespace

void HttpServer::handle_generation(const httplib::Request& req, httplib::Response& res,
                                   Endpoint endpoint) {
  const auto arrival = std::chrono::steady_clock::now();
  if (draining_) throw ApiError(503, "server_error", "the server is shutting down");
  const json body = parse_json_body(req.body);
  auto request = std::make_shared<ApiRequest>(
      endpoint == Endpoint::kChat ? parse_chat_request(body, model_, options_.limits, req.body)
                                  : parse_completion_request(body, model_, options_.limits));
  if (in_flight_.fetch_add(1) >= options_.max_pending) {
    in_flight_.fetch_sub(1);
    throw ApiError(503, "server_error",
                   "the server is at its limit of " + std::to_string(options_.max_pending) +
                       " requests in flight; retry later",
                   "", "queue_full");
  }
  std::shared_ptr<Generation> g;
  try {
    g = std::make_shared<Generation>(engine_, *model_.tokenizer, *request, arrival);
  } catch (...) {
    in_flight_.fetch_sub(1);
    throw;
  }
  ResponseHead head;
  head.id = (endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_++);
  head.created = static_cast<int64_t>(std::time(nullptr));
  head.model = model_.name;

  auto provider = [this, g, request, head](size_t, httplib::DataSink& sink) {
    const Tokenizer& tok = *model_.tokenizer;
    const bool stream = request->stream;
    std::vector<bool> started(g->choices().size(), false);
    std::vector<size_t> offsets(g->choices().size(), 0);
    // The client went away: end its request now, freeing its blocks.
    const auto client_gone = [&] {
      g->abort();
      metrics_.count_abort();
      return false;
    };
    try {
      if (stream && request->echo) {
        for (size_t i = 0; i < g->choices().size(); ++i) {
          ChoiceDelta d;
          d.index = static_cast<int32_t>(i);
          d.text = request->prompt_texts[i / static_cast<size_t>(request->n)];
          offsets[i] = d.text.size();
          if (!write(sink, sse(completion_chunk(head, tok, *request, d, 0)))) return client_gone();
        }
      }
      while (!g->done()) {
        if (aborting_) g->abort();
        const std::vector<ChoiceDelta> deltas = g->poll(kPollInterval);
        if (deltas.empty()) {
          if (!sink.is_writable()) return client_gone();
          continue;
        }
        if (!stream) continue;
        for (const ChoiceDelta& d : deltas) {
          const size_t i = static_cast<size_t>(d.index);
          const json chunk = request->endpoint == Endpoint::kChat
                                 ? chat_chunk(head, tok, *request, d, !started[i])
                                 : completion_chunk(head, tok, *request, d, offsets[i]);
          started[i] = true;
          offsets[i] += d.text.size();
          if (!write(sink, sse(chunk))) return client_gone();
        }
      }
      metrics_.record_generation(g->num_prompt_tokens(), g->num_completion_tokens(), g->ttft_s(),
                                 g->tpot_s(), g->e2e_s());
      if (stream) {
        if (request->include_usage) write(sink, sse(usage_chunk(head, *request, *g)));
        write(sink, "data: [DONE]\n\n");
      } else {
        const json out = request->endpoint == Endpoint::kChat
                             ? chat_response(head, tok, *request, *g)
                             : completion_response(head, tok, *request, *g);
        write(sink, dump(out));
      }
    } catch (const ApiError& e) {
      g->abort();
      write(sink, stream ? sse(e.to_json()) + "data: [DONE]\n\n" : dump(e.to_json()));
    }
    sink.done();
    return true;
  };
  auto release = [this](bool) { in_flight_.fetch_sub(1); };
  res.status = 200;
  if (request->stream) {
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", provider, release);
  } else {
    res.set_chunked_content_provider("application/json", provider, release);
  }
}

}  // namespace pagoda::server
