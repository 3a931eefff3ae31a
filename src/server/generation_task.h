// One generation request in flight on the server (POST /v1/completions, /v1/chat/completions,
// /v1/messages, /v1/responses, /api/chat, /api/generate):
// its Generation, the exchange it answers through, and the pump that turns engine events into
// the answer. The engine thread's events only post the pump to the connection's strand, so the
// request costs no thread while it waits; the status line goes out once the engine has
// answered (a non-streaming request that fails is a 500, never a 200 with an error inside).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <vector>

#include "server/anthropic_messages.h"
#include "server/api_error.h"
#include "server/generation.h"
#include "server/http_server.h"
#include "server/ollama_api.h"
#include "server/responses.h"
#include "server/responses_api.h"

namespace pagoda::server {

class GenerationTask : public std::enable_shared_from_this<GenerationTask> {
 public:
  GenerationTask(HttpServer& server, ModelLease model, std::shared_ptr<Exchange> ex,
                 std::shared_ptr<ApiRequest> request, std::unique_ptr<Generation> g,
                 ResponseHead head, int32_t num_sequences);

  // Sends the stream's head (and echo), then lets events drive the rest.
  void start();
  // Ends the generation now (shutdown): each open choice gets finish_reason "abort". Any thread.
  void abort();
  // Ends it with `e` (a stream gets it as its last event, others as the response). Any thread.
  void fail_now(ApiError e);

 private:
  void notify();
  void pump();
  void send(const std::vector<ChoiceDelta>& deltas);
  void complete();
  void fail(const ApiError& e);
  void client_left();
  void release();
  // kResponses with store: keeps the finished Response for GET and previous_response_id.
  void store_response();

  HttpServer& server_;
  // Its model stays loaded until the task ends. Declared before g_ so that g_ goes first.
  const ModelLease model_;
  const std::shared_ptr<Exchange> ex_;
  const std::shared_ptr<ApiRequest> request_;
  std::unique_ptr<Generation> g_;
  const ResponseHead head_;
  const int32_t num_sequences_;
  std::atomic<bool> pump_posted_{false};
  bool ended_ = false;  // strand only: the answer is complete (or the client left)
  std::vector<bool> started_;
  std::vector<size_t> offsets_;
  std::vector<ToolCallStream> tool_streams_;  // chat streams with tools: one per choice
  std::unique_ptr<MessagesWriter> messages_;  // the Messages API's answer (kMessages)
  std::unique_ptr<OllamaWriter> ollama_;      // Ollama's answer (kOllamaChat, kOllamaGenerate)
  std::unique_ptr<ResponsesWriter> responses_;  // the Responses API's answer (kResponses)
};

}  // namespace pagoda::server
