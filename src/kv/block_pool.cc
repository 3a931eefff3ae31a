#include "kv/block_pool.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace pagoda {

BlockPool::BlockPool(int32_t num_blocks, int32_t block_size, BlockHashFn hash_fn)
    : block_size_(block_size), hash_fn_(hash_fn) {
  if (num_blocks < 1) fail("KV cache: need at least one block, got ", num_blocks);
  if (block_size < 1) fail("KV cache: block size must be positive, got ", block_size);
  PAGODA_CHECK(hash_fn != nullptr);
  blocks_.resize(static_cast<size_t>(num_blocks));
  tokens_.resize(static_cast<size_t>(num_blocks) * static_cast<size_t>(block_size));
  for (BlockId b = 0; b < num_blocks; ++b) push_back(b);  // allocation order 0, 1, 2, ...
}

int32_t BlockPool::num_blocks_for_budget(uint64_t budget_bytes, uint64_t kv_bytes_per_token,
                                         int32_t block_size) {
  if (block_size < 1) fail("KV cache: block size must be positive, got ", block_size);
  if (kv_bytes_per_token == 0) fail("KV cache: bytes per token must be positive");
  const uint64_t per_token_limit = std::numeric_limits<uint64_t>::max() / uint64_t(block_size);
  if (kv_bytes_per_token > per_token_limit) fail("KV cache: a block would not fit in memory");
  const uint64_t block_bytes = kv_bytes_per_token * static_cast<uint64_t>(block_size);
  const uint64_t n = budget_bytes / block_bytes;
  if (n == 0) {
    fail("KV cache: a memory budget of ", budget_bytes, " bytes holds no block of ", block_bytes,
         " bytes");
  }
  return static_cast<int32_t>(std::min<uint64_t>(n, std::numeric_limits<int32_t>::max()));
}

const BlockPool::Block& BlockPool::at(BlockId block) const {
  PAGODA_CHECK(block >= 0 && block < num_blocks());
  return blocks_[static_cast<size_t>(block)];
}

std::span<const TokenId> BlockPool::stored_tokens(BlockId block) const {
  return {tokens_.data() + static_cast<size_t>(block) * static_cast<size_t>(block_size_),
          static_cast<size_t>(block_size_)};
}

std::vector<BlockId> BlockPool::allocate(int32_t num_blocks) {
  PAGODA_CHECK(num_blocks >= 0 && num_blocks <= num_free_);
  std::vector<BlockId> out;
  out.reserve(static_cast<size_t>(num_blocks));
  for (int32_t i = 0; i < num_blocks; ++i) {
    const BlockId b = head_;
    unlink(b);
    at(b).ref_count = 1;
    if (at(b).hashed) {  // eviction
      if (evict_hook_) evict_hook_(b);
      unhash(b);
    }
    out.push_back(b);
  }
  return out;
}

void BlockPool::acquire(BlockId block) {
  Block& b = at(block);
  if (b.ref_count == 0) {
    PAGODA_CHECK(b.hashed);  // only a cache hit revives a free block
    unlink(block);
  }
  ++b.ref_count;
}

void BlockPool::release(BlockId block) {
  Block& b = at(block);
  PAGODA_CHECK(b.ref_count > 0);
  if (--b.ref_count > 0) return;
  if (b.hashed) {
    push_back(block);
  } else {
    push_front(block);
  }
}

bool BlockPool::matches(BlockId block, const BlockKey& key, std::span<const TokenId> tokens) const {
  const Block& b = at(block);
  if (!b.hashed || b.key.hash != key.hash || b.key.extra != key.extra) return false;
  // The prefix identity, not the parent hash: two different prefixes may share a hash.
  if (b.key.parent_prefix_id != key.parent_prefix_id) return false;
  const std::span<const TokenId> stored = stored_tokens(block);
  return std::equal(stored.begin(), stored.end(), tokens.begin(), tokens.end());
}

std::optional<BlockPool::Match> BlockPool::find(const BlockKey& key,
                                                std::span<const TokenId> tokens) const {
  auto it = map_.find(key.hash);
  if (it == map_.end() || !matches(it->second, key, tokens)) return std::nullopt;
  return Match{it->second, at(it->second).prefix_id};
}

bool BlockPool::caches(BlockHash hash, PrefixId prefix_id) const {
  auto it = map_.find(hash);
  return it != map_.end() && at(it->second).prefix_id == prefix_id;
}

PrefixId BlockPool::cache(BlockId block, const BlockKey& key, std::span<const TokenId> tokens) {
  PAGODA_CHECK(static_cast<int32_t>(tokens.size()) == block_size_);
  Block& b = at(block);
  PAGODA_CHECK(b.ref_count > 0 && !b.hashed);
  auto it = map_.find(key.hash);
  if (it != map_.end()) {
    const BlockId other = it->second;
    if (matches(other, key, tokens)) return at(other).prefix_id;  // a duplicate of it
    // A collision, or a stale block whose prefix was evicted. Keep a block someone holds.
    if (at(other).ref_count > 0) return next_prefix_id_++;
    unhash(other);
  }
  b.hashed = true;
  b.key = key;
  b.prefix_id = next_prefix_id_++;
  std::copy(tokens.begin(), tokens.end(),
            tokens_.begin() + static_cast<ptrdiff_t>(block) * block_size_);
  map_.emplace(key.hash, block);
  return b.prefix_id;
}

void BlockPool::unhash(BlockId block) {
  Block& b = at(block);
  PAGODA_CHECK(b.hashed);
  map_.erase(b.key.hash);
  ++num_unhashed_;
  b.hashed = false;
  b.key = BlockKey{};
  b.prefix_id = kRootPrefixId;
  if (b.ref_count == 0) {
    --num_cached_;
    // It now holds nothing worth keeping: reuse it before any cached block.
    unlink(block);
    push_front(block);
  }
}

void BlockPool::push_front(BlockId block) {
  Block& b = at(block);
  b.prev = kNoBlock;
  b.next = head_;
  if (head_ != kNoBlock) at(head_).prev = block;
  head_ = block;
  if (tail_ == kNoBlock) tail_ = block;
  ++num_free_;
  if (b.hashed) ++num_cached_;
}

void BlockPool::push_back(BlockId block) {
  Block& b = at(block);
  b.next = kNoBlock;
  b.prev = tail_;
  if (tail_ != kNoBlock) at(tail_).next = block;
  tail_ = block;
  if (head_ == kNoBlock) head_ = block;
  ++num_free_;
  if (b.hashed) ++num_cached_;
}

void BlockPool::unlink(BlockId block) {
  Block& b = at(block);
  if (b.prev != kNoBlock) {
    at(b.prev).next = b.next;
  } else {
    head_ = b.next;
  }
  if (b.next != kNoBlock) {
    at(b.next).prev = b.prev;
  } else {
    tail_ = b.prev;
  }
  b.prev = b.next = kNoBlock;
  --num_free_;
  if (b.hashed) --num_cached_;
}

std::vector<BlockId> BlockPool::free_blocks_in_eviction_order() const {
  std::vector<BlockId> out;
  for (BlockId b = head_; b != kNoBlock && out.size() <= blocks_.size(); b = at(b).next) {
    out.push_back(b);
  }
  return out;
}

void BlockPool::check_invariants() const {
  // Walk the free list: links agree both ways, every member is free, no cycle.
  int32_t num_listed = 0;
  int32_t num_listed_hashed = 0;
  std::vector<char> listed(blocks_.size(), 0);
  BlockId prev = kNoBlock;
  for (BlockId b = head_; b != kNoBlock; b = at(b).next) {
    PAGODA_CHECK(num_listed < num_blocks());
    PAGODA_CHECK(!listed[static_cast<size_t>(b)]);
    listed[static_cast<size_t>(b)] = 1;
    PAGODA_CHECK(at(b).prev == prev);
    PAGODA_CHECK(at(b).ref_count == 0);
    ++num_listed;
    if (at(b).hashed) ++num_listed_hashed;
    prev = b;
  }
  PAGODA_CHECK(prev == tail_);
  PAGODA_CHECK(num_listed == num_free_);
  PAGODA_CHECK(num_listed_hashed == num_cached_);

  int32_t num_hashed = 0;
  for (BlockId b = 0; b < num_blocks(); ++b) {
    const Block& block = at(b);
    PAGODA_CHECK(block.ref_count >= 0);
    PAGODA_CHECK((block.ref_count == 0) == static_cast<bool>(listed[static_cast<size_t>(b)]));
    if (!block.hashed) continue;
    ++num_hashed;
    auto it = map_.find(block.key.hash);
    PAGODA_CHECK(it != map_.end() && it->second == b);
    PAGODA_CHECK(block.prefix_id != kRootPrefixId && block.prefix_id < next_prefix_id_);
    PAGODA_CHECK(block.key.parent_prefix_id < block.prefix_id);
  }
  PAGODA_CHECK(static_cast<size_t>(num_hashed) == map_.size());
  for (const auto& [hash, b] : map_) {
    PAGODA_CHECK(at(b).hashed && at(b).key.hash == hash);
    // The stored tokens are the ones the hash was computed from.
    PAGODA_CHECK(hash_fn_(at(b).key.parent_hash, at(b).key.extra, stored_tokens(b)) == hash);
  }
}

}  // namespace pagoda
