// Embeddings over HTTP: OpenAI's POST /v1/embeddings and Ollama's POST /api/embed (and its older
// /api/embeddings). A request's inputs are tokenized on the server's work thread that handles it.
// A generative model's embeddings (serve --pooling) are engine requests: each input a
// prompt-only sequence that the scheduler runs beside generation under the same token budget
// (GenerationRequest::embedding), all of a request's inputs submitted at once. An encoder model
// (BERT) has no engine: the requests that arrive while one forward pass runs wait, and the next
// pass runs all their inputs together (EncoderBatcher).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "engine/embedder.h"
#include "engine/engine_thread.h"
#include "server/http_transport.h"
#include "server/openai_request.h"

namespace pagoda::server {

// What one embeddings request may ask for at most (HTTP 400 above): OpenAI's own input count,
// and a token total that bounds the time a request holds the embedder.
constexpr size_t kMaxEmbeddingInputs = 2048;
constexpr int64_t kMaxEmbeddingTokens = 1 << 18;

class EmbeddingService {
 public:
  // `engine` runs a generative model's embeddings (it must outlive the service); null for an
  // encoder.
  explicit EmbeddingService(std::unique_ptr<Embedder> embedder, EngineThread* engine = nullptr)
      : embedder_(std::move(embedder)), engine_(engine) {}

  // A text's tokens as the model sees them; thread-safe.
  std::vector<TokenId> tokenize(std::string_view text) const { return embedder_->tokenize(text); }
  int64_t max_tokens() const { return embedder_->max_tokens(); }
  int64_t dimensions() const { return embedder_->dimensions(); }
  std::string check_tokens(const std::vector<TokenId>& ids) const {
    return embedder_->check_tokens(ids);
  }
  void truncate(std::vector<TokenId>& ids, int64_t limit) const { embedder_->truncate(ids, limit); }
  // Runs the inputs (see the top of this file); throws Error when the engine fails or stops.
  EmbeddingResult embed(const std::vector<std::vector<TokenId>>& inputs);
  // How long the service had been loading before it served (Ollama's load_duration); set once.
  std::chrono::nanoseconds load_duration{0};

 private:
  EmbeddingResult embed_in_engine(const std::vector<std::vector<TokenId>>& inputs);
  EmbeddingResult embed_in_batches(const std::vector<std::vector<TokenId>>& inputs);

  std::unique_ptr<Embedder> embedder_;
  EngineThread* engine_ = nullptr;
  // The encoder's requests: whoever finds no pass running runs one over every waiting request
  // (up to the embedder's batch of tokens, at least one request), then hands the results out.
  struct Job {
    const std::vector<std::vector<TokenId>>* inputs = nullptr;
    EmbeddingResult result;
    std::string error;
    bool done = false;
  };
  std::mutex mutex_;  // guards what follows
  std::condition_variable job_done_;
  std::deque<Job*> jobs_;
  bool running_ = false;
};

// POST /v1/embeddings: {"object": "list", "data": [{"object": "embedding", "index", "embedding"}],
// "model", "usage": {"prompt_tokens", "total_tokens"}}; errors are ApiErrors in OpenAI's shape.
HttpResponse openai_embeddings(const std::string& body, const ModelContext& model,
                               const RequestLimits& limits);
// POST /api/embed ({"embeddings": [...]}) and /api/embeddings ({"embedding": [...]}).
HttpResponse ollama_embed(const std::string& path, const std::string& body,
                          const ModelContext& model, const RequestLimits& limits);

// Float32 little-endian bytes of `v` in standard base64: OpenAI's encoding_format "base64".
std::string base64_floats(const std::vector<float>& v);

}  // namespace pagoda::server
