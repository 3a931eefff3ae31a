// Explicit prefix save and restore (issue 36): the K/V bytes of a prompt's cached blocks out of
// the KV memory, and saved blocks back into it as prefix-cache entries (engine.h).
#include "core/error.h"
#include "engine/engine.h"

namespace pagoda {

void Engine::check_prefix_transfer(const char* what) const {
  if (!backend_.host_visible()) {
    fail(what, ": the KV cache is not in host memory (the CPU backend only)");
  }
  if (model_.config().hybrid()) {
    fail(what, ": not with a hybrid model (its recurrent state is not saved with the blocks)");
  }
  if (!config_.enable_prefix_caching) fail(what, ": the prefix cache is off");
  if (config_.speculative.draft_model != nullptr) {
    fail(what, ": not with a draft model (the draft's K/V is not saved)");
  }
}

uint64_t Engine::kv_block_bytes() const { return pagoda::kv_block_bytes(*kv_); }

PrefixBlocks Engine::export_prefix(std::span<const TokenId> prompt, uint64_t cache_key) {
  check_prefix_transfer("saving a prefix");
  const CachedPrefix found =
      scheduler_.kv_between_steps().cached_full_blocks(TokenSequence{prompt, {}}, cache_key);
  PrefixBlocks out;
  out.extra = cache_key;
  out.block_size = config_.block_size;
  out.block_bytes = kv_block_bytes();
  out.tokens.assign(prompt.begin(), prompt.begin() + found.num_tokens);
  out.payload.resize(found.blocks.size() * out.block_bytes);
  for (size_t i = 0; i < found.blocks.size(); ++i) {
    read_kv_block(*kv_, found.blocks[i], out.payload.data() + i * out.block_bytes);
  }
  return out;
}

int32_t Engine::import_prefix(const PrefixBlocks& blocks) {
  check_prefix_transfer("restoring a prefix");
  PAGODA_CHECK(blocks.block_size == config_.block_size && blocks.block_bytes == kv_block_bytes() &&
               blocks.payload.size() == size_t(blocks.num_blocks()) * blocks.block_bytes);
  for (TokenId id : blocks.tokens) {
    if (id < 0 || id >= vocab_size_) {
      fail("restoring a prefix: token id ", id, " is outside the vocabulary [0, ", vocab_size_, ")");
    }
  }
  return scheduler_.kv_between_steps().import_blocks(
      TokenSequence{blocks.tokens, {}}, blocks.extra, [&](int32_t i, BlockId b) {
        write_kv_block(*kv_, b, blocks.payload.data() + size_t(i) * blocks.block_bytes);
      });
}

}  // namespace pagoda
