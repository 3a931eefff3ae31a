// Embeddings over HTTP: OpenAI's POST /v1/embeddings and Ollama's POST /api/embed (and its older
// /api/embeddings). A request's inputs are tokenized on the server's work thread that handles it.
// An encoder model (BERT), which has no generation to share the engine with, then runs them on
// that thread under a lock, one request at a time. A generative model's embeddings (serve
// --pooling) run on the engine thread between its steps, one input per task, so generation goes
// on between them; they are not scheduled by its token budget and keep no KV blocks.
#pragma once

#include <chrono>
#include <cstdint>
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
  // Runs the inputs: an encoder's one request at a time, a generative model's one input per
  // engine task.
  EmbeddingResult embed(const std::vector<std::vector<TokenId>>& inputs);
  // How long the service had been loading before it served (Ollama's load_duration); set once.
  std::chrono::nanoseconds load_duration{0};

 private:
  std::mutex mutex_;
  std::unique_ptr<Embedder> embedder_;
  EngineThread* engine_ = nullptr;
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
