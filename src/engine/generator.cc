#include "engine/generator.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "core/error.h"

namespace pagoda {
namespace {

constexpr int32_t kBlockSize = 16;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Generator::Generator(Model& model, Backend& backend, int32_t max_context)
    : model_(model),
      backend_(backend),
      max_context_(max_context),
      kv_(model.config(), (max_context + kBlockSize - 1) / kBlockSize, kBlockSize),
      block_table_(static_cast<size_t>(kv_.num_blocks())) {
  std::iota(block_table_.begin(), block_table_.end(), 0);
  model.prepare(backend);
}

void Generator::step(const TokenId* ids, int32_t count, int32_t start,
                     std::vector<int32_t> logit_rows, std::vector<float>& logits) {
  ForwardBatch b;
  b.token_ids.assign(ids, ids + count);
  b.positions.resize(count);
  b.slot_mapping.resize(count);
  for (int32_t i = 0; i < count; ++i) {
    b.positions[i] = start + i;
    b.slot_mapping[i] = start + i;  // block i/16 is block i/16: slot = position
  }
  b.query_start = {0, count};
  b.block_table = block_table_;
  b.max_blocks_per_seq = kv_.num_blocks();
  b.block_size = kBlockSize;
  b.logit_rows = std::move(logit_rows);
  model_.forward(backend_, b, kv_, logits);
}

GenerateStats Generator::generate(const std::vector<TokenId>& prompt,
                                  const GenerateOptions& options, const std::vector<TokenId>& eog,
                                  const std::function<bool(TokenId)>& on_token) {
  if (prompt.empty()) fail("the prompt is empty (no tokens)");
  const auto num_prompt = static_cast<int32_t>(prompt.size());
  if (num_prompt >= max_context_) {
    fail("the prompt has ", num_prompt, " tokens; the context holds ", max_context_);
  }
  const int32_t vocab = static_cast<int32_t>(model_.config().vocab_size);
  Sampler sampler(options.sampling, prompt, vocab);
  GenerateStats stats;
  stats.num_prompt_tokens = num_prompt;
  std::vector<float> logits;

  auto t0 = std::chrono::steady_clock::now();
  const int32_t chunk = std::max<int32_t>(1, options.prefill_chunk);
  for (int32_t start = 0; start < num_prompt; start += chunk) {
    int32_t count = std::min(chunk, num_prompt - start);
    bool last = start + count == num_prompt;
    step(prompt.data() + start, count, start, last ? std::vector<int32_t>{count - 1} : std::vector<int32_t>{},
         logits);
  }
  stats.prefill_seconds = seconds_since(t0);

  auto t1 = std::chrono::steady_clock::now();
  int32_t pos = num_prompt;
  for (int32_t k = 0; k < options.max_new_tokens && pos < max_context_; ++k) {
    TokenId next = sampler.sample(std::span<const float>(logits.data(), static_cast<size_t>(vocab))).token;
    if (options.stop_at_eog && std::find(eog.begin(), eog.end(), next) != eog.end()) break;
    sampler.accept(next);
    ++stats.num_generated;
    if (!on_token(next)) break;
    if (k + 1 == options.max_new_tokens || pos + 1 >= max_context_) break;
    step(&next, 1, pos, {0}, logits);
    ++stats.num_decode_steps;
    ++pos;
  }
  stats.decode_seconds = seconds_since(t1);
  return stats;
}

std::vector<float> Generator::prompt_logits(const std::vector<TokenId>& prompt) {
  const auto n = static_cast<int32_t>(prompt.size());
  if (n > max_context_) fail("the text has ", n, " tokens; the context holds ", max_context_);
  std::vector<int32_t> rows(static_cast<size_t>(n));
  std::iota(rows.begin(), rows.end(), 0);
  std::vector<float> logits;
  step(prompt.data(), n, 0, rows, logits);
  return logits;
}

}  // namespace pagoda
