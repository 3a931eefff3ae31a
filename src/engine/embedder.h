// Embeddings: texts (or token ids) through a model to one vector each. An encoder (BERT) runs
// its sequences whole and bidirectionally, a batch of them per forward pass; the token vectors
// are pooled (mean, the first token "cls", or the last) and L2-normalised where the model says
// so. A generative model (llama.cpp's --embeddings --pooling) runs one input per forward pass,
// causally, into a K/V cache of the embedder's own that nothing keeps; its final-norm hidden
// states are pooled by the pooling asked for and always L2-normalised (the server runs a
// generative model's inputs through the engine's scheduler instead: GenerationRequest::embedding;
// this path is `pagoda embed`'s and the tests' reference). One Embedder is used by one thread at
// a time (the caller serialises).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/token.h"

namespace pagoda {

class Backend;
class KvStorage;
class Model;
class Tokenizer;

struct EmbedderOptions {
  std::string pooling;     // "mean", "cls", "last"; "" takes the model's own
  bool normalize = false;  // L2-normalise even where the model does not say so
  int64_t batch_tokens = 4096;  // tokens per forward pass (a longer input runs alone)
  int64_t max_tokens = 0;       // a generative model's longest input (0: its context, <= 8192)
};

struct EmbeddingResult {
  std::vector<std::vector<float>> vectors;  // one per input, in order
  int64_t prompt_tokens = 0;                // tokens run, special ones included
};

class Embedder {
 public:
  // Throws Error when the model cannot embed: a generative model without a pooling given, or
  // an encoder without a pooling mode and none given.
  Embedder(Model& model, Backend& backend, const Tokenizer& tokenizer, EmbedderOptions options);
  ~Embedder();
  // Whether the model is generative (its forward pass is the engine's to schedule).
  bool generative() const { return decoder_; }

  // A text's tokens as the model sees them (BERT: [CLS] ... [SEP]).
  std::vector<TokenId> tokenize(std::string_view text) const;
  // The most tokens one input may have (the model's positions).
  int64_t max_tokens() const { return max_tokens_; }
  int64_t dimensions() const { return dimensions_; }
  const std::string& pooling() const { return pooling_; }
  int64_t batch_tokens() const { return batch_tokens_; }
  bool normalizes() const { return normalize_; }
  // A token id outside the vocabulary, as a one-line error naming it; "" when all are valid.
  std::string check_tokens(const std::vector<TokenId>& ids) const;

  // Cuts `ids` to `limit` tokens (limit >= 2), keeping a closing special token (BERT's [SEP])
  // at the end as a truncating Hugging Face tokenizer does.
  void truncate(std::vector<TokenId>& ids, int64_t limit) const;

  // One vector per input; throws Error for an empty input, an input past max_tokens() or an
  // unknown token id.
  EmbeddingResult embed(const std::vector<std::vector<TokenId>>& inputs);

 private:
  void run_decoder(const std::vector<TokenId>& ids, std::vector<float>& out);
  void run_batch(const std::vector<std::vector<TokenId>>& inputs, size_t first, size_t last,
                 EmbeddingResult& result);

  Model& model_;
  Backend& backend_;
  const Tokenizer& tokenizer_;
  std::string pooling_;
  bool normalize_ = false;
  int64_t batch_tokens_ = 0;
  int64_t max_tokens_ = 0;
  int64_t dimensions_ = 0;
  TokenId closing_ = kNoToken;  // the token add_special ends a text with, if any
  std::vector<float> hidden_;
  bool decoder_ = false;
  std::unique_ptr<KvStorage> kv_;  // a generative model's, allocated on first use
};

// Pools `num_tokens` rows of `dim` floats into `out` (mean, cls: the first row, last), then
// L2-normalises it when `normalize`.
void pool_embedding(const float* rows, int64_t num_tokens, int64_t dim, const std::string& pooling,
                    bool normalize, std::vector<float>& out);

}  // namespace pagoda
