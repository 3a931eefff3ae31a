#include "engine/embedder.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/kv_storage.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

void pool_embedding(const float* rows, int64_t n, int64_t dim, const std::string& pooling,
                    bool normalize, std::vector<float>& out) {
  out.assign(static_cast<size_t>(dim), 0.0f);
  if (n == 0) return;
  if (pooling == "mean") {
    std::vector<double> sum(static_cast<size_t>(dim), 0.0);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t d = 0; d < dim; ++d) sum[d] += rows[t * dim + d];
    }
    for (int64_t d = 0; d < dim; ++d) out[d] = static_cast<float>(sum[d] / static_cast<double>(n));
  } else {
    const float* row = rows + (pooling == "cls" ? 0 : (n - 1) * dim);
    out.assign(row, row + dim);
  }
  if (!normalize) return;
  double norm = 0;
  for (float v : out) norm += double{v} * v;
  norm = std::sqrt(norm);
  if (norm == 0) return;
  for (float& v : out) v = static_cast<float>(v / norm);
}

Embedder::Embedder(Model& model, Backend& backend, const Tokenizer& tokenizer,
                   EmbedderOptions o)
    : model_(model), backend_(backend), tokenizer_(tokenizer) {
  const ModelConfig& c = model.config();
  decoder_ = c.causal_attention;
  if (decoder_ && o.pooling.empty()) {
    fail("'", c.architecture, "' is a generative model: it embeds only with a pooling given "
         "(--pooling last or mean)");
  }
  pooling_ = o.pooling.empty() ? c.pooling : o.pooling;
  if (pooling_.empty() || pooling_ == "none") {
    fail("the model names no pooling (mean, cls or last); give one with --pooling");
  }
  if (pooling_ != "mean" && pooling_ != "cls" && pooling_ != "last") {
    fail("unknown pooling '", pooling_, "' (known: mean, cls, last)");
  }
  normalize_ = o.normalize || c.normalize_embeddings || decoder_;
  batch_tokens_ = std::max<int64_t>(1, o.batch_tokens);
  max_tokens_ = c.context_length;
  if (decoder_) {
    const int64_t trained = c.context_length ? c.context_length : 8192;
    max_tokens_ = o.max_tokens > 0 ? o.max_tokens : std::min<int64_t>(trained, 8192);
  }
  dimensions_ = c.hidden_size;
  const Vocab& v = tokenizer.vocab();
  if (v.add_eos) closing_ = v.eos;
}

Embedder::~Embedder() = default;

std::vector<TokenId> Embedder::tokenize(std::string_view text) const {
  EncodeOptions o;
  o.add_special = true;
  return tokenizer_.encode(text, o);
}

std::string Embedder::check_tokens(const std::vector<TokenId>& ids) const {
  const int64_t vocab = model_.config().vocab_size;
  for (TokenId id : ids) {
    if (id < 0 || id >= vocab) return str_cat("token id ", id, " is outside the vocabulary of ", vocab);
  }
  return "";
}

void Embedder::truncate(std::vector<TokenId>& ids, int64_t limit) const {
  if (static_cast<int64_t>(ids.size()) <= limit) return;
  const TokenId last = ids.back();
  ids.resize(static_cast<size_t>(limit));
  if (closing_ != kNoToken && last == closing_) ids.back() = last;
}

EmbeddingResult Embedder::embed(const std::vector<std::vector<TokenId>>& inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto n = static_cast<int64_t>(inputs[i].size());
    if (n == 0) fail("input ", i, " has no tokens");
    if (n > max_tokens_) {
      fail("input ", i, " has ", n, " tokens, more than the model's ", max_tokens_);
    }
    if (std::string bad = check_tokens(inputs[i]); !bad.empty()) fail("input ", i, ": ", bad);
  }
  EmbeddingResult result;
  result.vectors.resize(inputs.size());
  if (decoder_) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      run_decoder(inputs[i], result.vectors[i]);
      result.prompt_tokens += static_cast<int64_t>(inputs[i].size());
    }
    return result;
  }
  size_t first = 0;
  while (first < inputs.size()) {
    size_t last = first;
    int64_t tokens = 0;
    while (last < inputs.size() &&
           (last == first || tokens + static_cast<int64_t>(inputs[last].size()) <= batch_tokens_)) {
      tokens += static_cast<int64_t>(inputs[last++].size());
    }
    run_batch(inputs, first, last, result);
    first = last;
  }
  return result;
}

void Embedder::run_decoder(const std::vector<TokenId>& ids, std::vector<float>& out) {
  constexpr int32_t kBlock = 16;
  const auto n = static_cast<int32_t>(ids.size());
  if (kv_ == nullptr) {
    const auto blocks = static_cast<int32_t>((max_tokens_ + kBlock - 1) / kBlock);
    kv_ = std::make_unique<KvStorage>(model_.config(), blocks, kBlock, KvType::kF16, &backend_);
  }
  ForwardBatch batch;
  batch.token_ids = ids;
  batch.block_size = kBlock;
  batch.max_blocks_per_seq = kv_->num_blocks();
  for (int32_t p = 0; p < n; ++p) {
    batch.positions.push_back(p);
    batch.slot_mapping.push_back(p);  // block table 0, 1, 2, ...: slot = position
  }
  for (int32_t b = 0; b < kv_->num_blocks(); ++b) batch.block_table.push_back(b);
  batch.query_start = {0, n};
  if (pooling_ == "mean") {
    for (int32_t p = 0; p < n; ++p) batch.logit_rows.push_back(p);
  } else {
    batch.logit_rows.push_back(pooling_ == "cls" ? 0 : n - 1);
  }
  batch.hidden_states = true;
  model_.forward(backend_, batch, *kv_, hidden_);
  const int64_t rows = static_cast<int64_t>(batch.logit_rows.size());
  if (static_cast<int64_t>(hidden_.size()) != rows * dimensions_) {
    fail("architecture '", model_.config().architecture, "' gives no hidden states for embeddings");
  }
  pool_embedding(hidden_.data(), rows, dimensions_, "mean", normalize_, out);
}

void Embedder::run_batch(const std::vector<std::vector<TokenId>>& inputs, size_t first,
                         size_t last, EmbeddingResult& result) {
  ForwardBatch batch;
  batch.query_start.push_back(0);
  for (size_t i = first; i < last; ++i) {
    const auto& ids = inputs[i];
    batch.token_ids.insert(batch.token_ids.end(), ids.begin(), ids.end());
    for (size_t p = 0; p < ids.size(); ++p) batch.positions.push_back(static_cast<int32_t>(p));
    batch.query_start.push_back(batch.num_tokens());
  }
  model_.hidden_states(backend_, batch, hidden_);
  for (size_t i = first; i < last; ++i) {
    const int32_t start = batch.query_start[i - first];
    const int64_t n = batch.query_start[i - first + 1] - start;
    pool_embedding(hidden_.data() + int64_t{start} * dimensions_, n, dimensions_, pooling_,
                   normalize_, result.vectors[i]);
    result.prompt_tokens += n;
  }
}

}  // namespace pagoda
