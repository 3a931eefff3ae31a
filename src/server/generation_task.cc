// POST /v1/completions and /v1/chat/completions: parse, admit, submit, then answer as one JSON
// object or as a stream of Server-Sent Events, driven by the engine's events (see
// generation_task.h).
#include "server/generation_task.h"

#include <cmath>
#include <ctime>

#include "server/api_error.h"

namespace pagoda::server {
namespace {

using nlohmann::json;

// Responses keep their keys in the order written (top_logprobs most likely first).
template <typename Json>
std::string sse(const Json& j) {
  return "data: " + dump(j) + "\n\n";
}

}  // namespace

void HttpServer::start_generation(const HttpRequest& req, const std::shared_ptr<Exchange>& ex,
                                  Endpoint endpoint, const ModelLease& m) {
  const ModelContext& model = m->context;
  const auto arrival = std::chrono::steady_clock::now();
  if (draining_) throw ApiError(503, "server_error", "the server is shutting down");
  const json body = parse_json_body(req.body, options_.limits.max_json_depth);
  const bool ollama = endpoint == Endpoint::kOllamaChat || endpoint == Endpoint::kOllamaGenerate;
  auto request = std::make_shared<ApiRequest>(
      ollama ? parse_ollama_request(req.body, model, options_.limits,
                                    endpoint == Endpoint::kOllamaGenerate)
      : endpoint == Endpoint::kMessages ? parse_messages_request(req.body, model, options_.limits)
      : endpoint == Endpoint::kResponses
          ? parse_responses_request(req.body, model, options_.limits, responses_)
      : endpoint == Endpoint::kChat   ? parse_chat_request(body, model, options_.limits, req.body)
                                  : parse_completion_request(body, model, options_.limits, req.body));
  // Admission counts sequences: a request of 64 prompts with n = 16 weighs 1024 short ones.
  const int32_t num_sequences = static_cast<int32_t>(request->prompts.size()) * request->n;
  if (num_sequences > options_.max_pending) {
    throw bad_param(request->n > 1 ? "n" : "prompt",
                    "the request asks for " + std::to_string(num_sequences) +
                        " sequences (prompts x n); this server runs at most " +
                        std::to_string(options_.max_pending) + " at once");
  }
  if (in_flight_.fetch_add(num_sequences) + num_sequences > options_.max_pending) {
    in_flight_.fetch_sub(num_sequences);
    throw ApiError(503, "server_error",
                   "the server is at its limit of " + std::to_string(options_.max_pending) +
                       " sequences in flight; retry later",
                   "", "queue_full");
  }
  auto launch = [this, ex, endpoint, num_sequences, arrival, m](std::shared_ptr<ApiRequest> request) {
    std::unique_ptr<Generation> g;
    try {
      g = std::make_unique<Generation>(*m->engine, *m->context.tokenizer, *request, arrival);
    } catch (...) {
      in_flight_.fetch_sub(num_sequences);
      throw;
    }
    ResponseHead head;
    // A stored response is read back by its id alone: that id is random, the others count.
    head.id = endpoint == Endpoint::kResponses ? ResponseStore::new_id()
              : (endpoint == Endpoint::kMessages      ? "msg_"
                 : endpoint == Endpoint::kCompletions ? "cmpl-"
                                                      : "chatcmpl-") +
                    std::to_string(next_id_++);
    head.created = static_cast<int64_t>(std::time(nullptr));
    head.model = request->adapter != 0 ? request->model : m->context.name;  // an adapter: its name
    auto task = std::make_shared<GenerationTask>(*this, m, ex, std::move(request), std::move(g),
                                                 std::move(head), num_sequences);
    track(task);
    task->start();
  };
  if (!request->grammar_source) return launch(std::move(request));
  // Structured output: the grammar compiles on the compiler's threads and the generation
  // starts from there. A client that leaves cancels its compile; so does the shutdown.
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  ex->on_closed([cancelled] { cancelled->store(true); });
  auto done = [this, ex, request, endpoint, ollama, num_sequences, launch](
                  std::shared_ptr<GrammarMasks> masks, std::exception_ptr error) {
    auto answer = [&ex, endpoint, ollama](const ApiError& e) {
      const auto body = endpoint == Endpoint::kMessages ? anthropic_error_json(e)
                        : ollama                        ? ollama_error_json(e)
                                                        : e.to_json();
      ex->respond({e.status(), "application/json", dump(body), {}});
    };
    if (error) {
      in_flight_.fetch_sub(num_sequences);
      try {
        std::rethrow_exception(error);
      } catch (const GrammarCancelled&) {
        // Cancelled by the shutdown, or by a client that is gone and needs no answer.
        if (draining_) answer(ApiError(503, "server_error", "the server is shutting down"));
      } catch (const GrammarLimitError& e) {
        answer(ApiError(400, "invalid_request_error", e.what(), request->grammar_param,
                        "grammar_too_large"));
      } catch (const Error& e) {
        answer(bad_param(request->grammar_param, e.what()));
      } catch (const nlohmann::json::exception& e) {  // a schema value of the wrong JSON type
        answer(bad_param(request->grammar_param, std::string("JSON schema: ") + e.what()));
      } catch (const std::exception& e) {
        answer(ApiError(500, "server_error", e.what()));
      }
      return;
    }
    request->grammar = std::move(masks);
    try {
      launch(request);
    } catch (const ApiError& e) {
      answer(e);
    } catch (const std::exception& e) {
      answer(ApiError(500, "server_error", e.what()));
    }
  };
  model.grammars->submit(request->grammar_source, cancelled, std::move(done));
}

GenerationTask::GenerationTask(HttpServer& server, ModelLease model, std::shared_ptr<Exchange> ex,
                               std::shared_ptr<ApiRequest> request, std::unique_ptr<Generation> g,
                               ResponseHead head, int32_t num_sequences)
    : server_(server),
      model_(std::move(model)),
      ex_(std::move(ex)),
      request_(std::move(request)),
      g_(std::move(g)),
      head_(std::move(head)),
      num_sequences_(num_sequences),
      started_(g_->choices().size(), false),
      offsets_(g_->choices().size(), 0) {
  if (request_->endpoint == Endpoint::kMessages) {
    messages_ = std::make_unique<MessagesWriter>(head_, *request_);
  } else if (request_->endpoint == Endpoint::kResponses) {
    responses_ = std::make_unique<ResponsesWriter>(head_, *request_, *model_->context.tokenizer);
  } else if (request_->endpoint == Endpoint::kOllamaChat ||
             request_->endpoint == Endpoint::kOllamaGenerate) {
    ollama_ = std::make_unique<OllamaWriter>(*request_, *model_->context.tokenizer);
  } else if (request_->endpoint == Endpoint::kChat && request_->stream && !request_->tools.empty()) {
    for (size_t i = 0; i < g_->choices().size(); ++i) {
      tool_streams_.emplace_back(request_->tool_format, &request_->tools);
    }
  }
}

void GenerationTask::start() {
  const std::weak_ptr<GenerationTask> weak = weak_from_this();
  ex_->on_closed([weak] {
    if (auto self = weak.lock()) self->client_left();
  });
  ex_->annotate(dump(json{{"prompt_tokens", g_->num_prompt_tokens()}}));
  if (request_->stream) {
    ex_->start_stream(200, ollama_ ? "application/x-ndjson" : "text/event-stream",
                      {{"Cache-Control", "no-cache"}});
    if (messages_) ex_->write(messages_->start(g_->num_prompt_tokens()));
    if (responses_) ex_->write(responses_->start());
    if (request_->echo) {
      for (size_t i = 0; i < g_->choices().size(); ++i) {
        ChoiceDelta d;
        d.index = static_cast<int32_t>(i);
        d.text = request_->prompt_texts[i / static_cast<size_t>(request_->n)];
        offsets_[i] = d.text.size();
        // With logprobs the prompt's scores come with the first event: the echo waits for it.
        if (request_->logprobs) continue;
        ex_->write(sse(completion_chunk(head_, *model_->context.tokenizer, *request_, d, 0)));
      }
    }
  }
  g_->set_listener([weak] {
    if (auto self = weak.lock()) self->notify();
  });
  notify();
}

void GenerationTask::notify() {
  if (pump_posted_.exchange(true)) return;
  ex_->post([self = shared_from_this()] { self->pump(); });
}

void GenerationTask::pump() {
  pump_posted_ = false;  // before taking: an event that arrives now posts the pump again
  if (ended_) return;
  try {
    const std::vector<ChoiceDelta> deltas = g_->take();
    send(deltas);
    if (g_->done()) complete();
  } catch (const ApiError& e) {
    fail(e);
  }
}

void GenerationTask::abort() {
  ex_->post([self = shared_from_this()] {
    if (self->ended_) return;
    // Anthropic's stop reasons, Ollama's done reasons and a Response's statuses have none for
    // a cut-off generation.
    if (self->messages_ || self->ollama_ || self->responses_) {
      return self->fail(ApiError(503, "server_error",
                                 "the server is shutting down; the generation was ended"));
    }
    self->send(self->g_->abort_with_deltas());
    self->complete();
  });
}

void GenerationTask::fail_now(ApiError e) {
  ex_->post([self = shared_from_this(), e = std::move(e)] {
    if (!self->ended_) self->fail(e);
  });
}

void GenerationTask::send(const std::vector<ChoiceDelta>& deltas) {
  if (!request_->stream) return;
  if (messages_) {
    for (const ChoiceDelta& d : deltas) ex_->write(messages_->delta(d));
    return;
  }
  if (ollama_) {
    for (const ChoiceDelta& d : deltas) ex_->write(ollama_->delta(d));
    return;
  }
  if (responses_) {
    for (const ChoiceDelta& d : deltas) ex_->write(responses_->delta(d));
    return;
  }
  const Tokenizer& tok = *model_->context.tokenizer;
  for (const ChoiceDelta& in : deltas) {
    const size_t i = static_cast<size_t>(in.index);
    ChoiceDelta d = in;
    if (!tool_streams_.empty()) {
      // Text that may begin a tool call is held; at the end the calls go out as tool_calls.
      d.text = tool_streams_[i].feed(in.text);
      if (!in.finish_reason.empty()) {
        const ParsedToolCalls p = tool_streams_[i].finish();
        d.text += p.content;
        d.finish_reason.clear();
        if (!d.text.empty() || !d.reasoning.empty() || !d.logprobs.empty() || !started_[i]) {
          ex_->write(sse(chat_chunk(head_, tok, *request_, d, !started_[i])));
          started_[i] = true;
        }
        for (const auto& chunk : tool_call_chunks(head_, *request_, in.index, p.calls)) {
          ex_->write(sse(chunk));
        }
        ChoiceDelta last;
        last.index = in.index;
        last.finish_reason =
            !p.calls.empty() && in.finish_reason == "stop" ? "tool_calls" : in.finish_reason;
        ex_->write(sse(chat_chunk(head_, tok, *request_, last, false)));
        continue;
      }
      if (d.text.empty() && d.reasoning.empty() && d.logprobs.empty() && started_[i]) continue;
    }
    auto chunk = request_->endpoint == Endpoint::kChat
                     ? chat_chunk(head_, tok, *request_, d, !started_[i])
                     : completion_chunk(head_, tok, *request_, d, offsets_[i]);
    if (request_->echo && request_->logprobs && !started_[i]) {
      // The echo, its prompt's log-probabilities first, then this delta's.
      const size_t p = i / static_cast<size_t>(request_->n);
      const std::string& prompt = request_->prompt_texts[p];
      chunk["choices"][0]["text"] = prompt + d.text;
      chunk["choices"][0]["logprobs"] = echoed_logprobs(tok, request_->prompts[p],
                                                        g_->prompt_logprobs(p), d.logprobs,
                                                        prompt.size());
    }
    started_[i] = true;
    offsets_[i] += d.text.size();
    ex_->write(sse(chunk));
  }
}

void GenerationTask::complete() {
  ended_ = true;
  const Generation& g = *g_;
  server_.metrics_.record_generation(g.num_prompt_tokens(), g.num_completion_tokens(), g.ttft_s(),
                                     g.tpot_s(), g.e2e_s());
  // Counted under its adapter while the adapter keeps its name (an unloaded one's series end).
  if (const AdapterHold& a = request_->adapter_hold; a && model_->context.loras->find(a->name) == a) {
    server_.metrics_.record_adapter(a->name, g.num_prompt_tokens(), g.num_completion_tokens());
  }
  json note = {{"prompt_tokens", g.num_prompt_tokens()},
               {"output_tokens", g.num_completion_tokens()}};
  if (g.ttft_s() >= 0) note["ttft_s"] = std::round(g.ttft_s() * 1e4) / 1e4;
  ex_->annotate(dump(note));
  const Tokenizer& tok = *model_->context.tokenizer;
  if (messages_ && request_->stream) {
    ex_->write(messages_->finish(g));
    ex_->finish();
  } else if (messages_) {
    ex_->respond({200, "application/json", dump(messages_->response(g)), {}});
  } else if (responses_ && request_->stream) {
    const std::string last = responses_->finish(g);
    store_response();  // before the client can see the id and ask for it
    ex_->write(last);
    ex_->finish();
  } else if (responses_) {
    const std::string body = dump(responses_->response(g));
    store_response();
    ex_->respond({200, "application/json", body, {}});
  } else if (ollama_ && request_->stream) {
    ex_->write(ollama_->finish(g));
    ex_->finish();
  } else if (ollama_) {
    ex_->respond({200, "application/json", dump(ollama_->response(g)), {}});
  } else if (request_->stream) {
    if (request_->include_usage) ex_->write(sse(usage_chunk(head_, *request_, g)));
    ex_->write("data: [DONE]\n\n");
    ex_->finish();
  } else {
    const auto out = request_->endpoint == Endpoint::kChat
                         ? chat_response(head_, tok, *request_, g)
                         : completion_response(head_, tok, *request_, g);
    ex_->respond({200, "application/json", dump(out), {}});
  }
  release();
}

void GenerationTask::fail(const ApiError& e) {
  ended_ = true;
  g_->abort();
  if (request_->stream) {
    // The status line went out with the first byte of the stream: the error is an event.
    if (messages_) {
      ex_->write(MessagesWriter::error_event(e));
    } else if (responses_) {
      ex_->write(responses_->error_event(e));
    } else if (ollama_) {
      ex_->write(OllamaWriter::error_line(e));
    } else {
      ex_->write(sse(e.to_json()));
      ex_->write("data: [DONE]\n\n");
    }
    ex_->finish();
  } else {
    const json body = messages_ ? anthropic_error_json(e)
                      : ollama_ ? ollama_error_json(e)
                                : e.to_json();
    ex_->respond({e.status(), "application/json", dump(body), {}});
  }
  release();
}

void GenerationTask::client_left() {
  if (ended_) return;
  ended_ = true;
  g_->abort();  // frees its KV blocks now
  server_.metrics_.count_abort();
  release();
}

void GenerationTask::release() { server_.untrack(this, num_sequences_); }

void GenerationTask::store_response() {
  if (!request_->responses->store) return;
  server_.responses_.put(head_.id, {responses_->final_response(), responses_->conversation()});
}

}  // namespace pagoda::server
