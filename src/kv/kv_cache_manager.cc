#include "kv/kv_cache_manager.h"

#include <algorithm>

#include "core/error.h"

namespace pagoda {

KvCacheManager::KvCacheManager(const KvCacheConfig& config)
    : pool_(config.num_blocks, config.block_size, config.hash_fn),
      prefix_caching_(config.enable_prefix_caching) {}

const KvCacheManager::Table& KvCacheManager::entry(SequenceId id) const {
  auto it = tables_.find(id);
  if (it == tables_.end()) fail("KV cache: request ", id, " has no block table");
  return it->second;
}

int32_t KvCacheManager::num_blocks_for(int64_t num_tokens) const {
  PAGODA_CHECK(num_tokens >= 0);
  const int64_t n = (num_tokens + block_size() - 1) / block_size();
  return static_cast<int32_t>(std::min<int64_t>(n, INT32_MAX));
}

CachedPrefix KvCacheManager::get_computed_blocks(const TokenSequence& tokens,
                                                 uint64_t extra) const {
  if (!prefix_caching_ || tokens.size() == 0) {
    CachedPrefix prefix;
    prefix.extra = extra;
    prefix.num_queried_tokens = tokens.size();
    return prefix;
  }
  // Full blocks within the first size - 1 tokens: the last token is always computed.
  return lookup(tokens, extra, (tokens.size() - 1) / block_size());
}

CachedPrefix KvCacheManager::cached_full_blocks(const TokenSequence& tokens,
                                                uint64_t extra) const {
  return lookup(tokens, extra, prefix_caching_ ? tokens.size() / block_size() : 0);
}

CachedPrefix KvCacheManager::lookup(const TokenSequence& tokens, uint64_t extra,
                                    int32_t num_lookup) const {
  CachedPrefix prefix;
  prefix.extra = extra;
  prefix.num_queried_tokens = tokens.size();
  const int32_t bs = block_size();
  std::vector<TokenId> buf(static_cast<size_t>(bs));
  BlockKey key;
  key.extra = extra;
  for (int32_t i = 0; i < num_lookup; ++i) {
    tokens.copy(i * bs, bs, buf.data());
    key.hash = pool_.hash_fn()(key.parent_hash, extra, buf);
    const std::optional<BlockPool::Match> hit = pool_.find(key, buf);
    if (!hit) break;
    prefix.blocks.push_back(hit->block);
    prefix.hashes.push_back(key.hash);
    prefix.prefix_ids.push_back(hit->prefix_id);
    if (lower_ != nullptr) {
      const PrefixDigest parent = prefix.digests.empty() ? PrefixDigest{} : prefix.digests.back();
      prefix.digests.push_back(lower_->chain(parent, extra, buf));
    }
    key.parent_hash = key.hash;
    key.parent_prefix_id = hit->prefix_id;
  }
  prefix.num_tokens = static_cast<int32_t>(prefix.blocks.size()) * bs;
  return prefix;
}

bool KvCacheManager::adopt(CachedPrefix& prefix, BlockId block, BlockHash hash,
                           std::span<const TokenId> tokens, const PrefixDigest& digest) {
  BlockKey key;
  key.hash = hash;
  key.extra = prefix.extra;
  key.parent_hash = prefix.hashes.empty() ? kRootBlockHash : prefix.hashes.back();
  key.parent_prefix_id = prefix.prefix_ids.empty() ? kRootPrefixId : prefix.prefix_ids.back();
  const PrefixId id = pool_.cache(block, key, tokens);
  if (!pool_.is_hashed(block) || pool_.prefix_id(block) != id) return false;  // held by another
  if (lower_ != nullptr) block_digests_[static_cast<size_t>(block)] = digest;
  prefix.blocks.push_back(block);
  prefix.hashes.push_back(hash);
  prefix.prefix_ids.push_back(id);
  if (lower_ != nullptr) prefix.digests.push_back(digest);
  prefix.num_tokens += block_size();
  return true;
}

void KvCacheManager::release_adopted(const CachedPrefix& prefix,
                                     const std::vector<BlockId>& taken) {
  // Last block first, as free() does: the prefix's first blocks are evicted last. The adopted
  // ones stay cached (free); the rest go back empty.
  for (auto b = taken.rbegin(); b != taken.rend(); ++b) pool_.release(*b);
  for (auto b = prefix.blocks.rbegin(); b != prefix.blocks.rend(); ++b) {
    if (std::find(taken.begin(), taken.end(), *b) == taken.end()) pool_.release(*b);
  }
}

int32_t KvCacheManager::import_blocks(const TokenSequence& tokens, uint64_t extra,
                                      const BlockFill& fill) {
  CachedPrefix prefix = cached_full_blocks(tokens, extra);
  if (!prefix_caching_) return 0;
  const int32_t bs = block_size();
  const int32_t num_full = tokens.size() / bs;
  // Hold the pool's hits while blocks are taken, so that taking them cannot evict one.
  for (BlockId b : prefix.blocks) pool_.acquire(b);
  std::vector<BlockId> taken;
  std::vector<TokenId> buf(static_cast<size_t>(bs));
  for (auto i = static_cast<int32_t>(prefix.blocks.size()); i < num_full && pool_.num_free() > 0;
       ++i) {
    tokens.copy(i * bs, bs, buf.data());
    const BlockHash parent = prefix.hashes.empty() ? kRootBlockHash : prefix.hashes.back();
    const BlockHash hash = pool_.hash_fn()(parent, extra, buf);
    PrefixDigest digest;
    if (lower_ != nullptr) {
      digest = lower_->chain(prefix.digests.empty() ? PrefixDigest{} : prefix.digests.back(),
                             extra, buf);
    }
    const BlockId b = pool_.allocate(1)[0];
    taken.push_back(b);
    fill(i, b);
    if (!adopt(prefix, b, hash, buf, digest)) break;
    if (lower_ != nullptr) lower_->store(b, hash, digest, buf);
  }
  release_adopted(prefix, taken);
  return prefix.num_tokens;
}

void KvCacheManager::set_lower_tier(LowerTier* tier) {
  PAGODA_CHECK(tables_.empty() && pool_.num_cached() == 0);
  lower_ = tier;
  block_digests_.assign(lower_ != nullptr ? static_cast<size_t>(pool_.num_blocks()) : 0, {});
  if (lower_ == nullptr) {
    pool_.set_evict_hook(nullptr);
    return;
  }
  pool_.set_evict_hook([this](BlockId b) {
    lower_->evict(b, pool_.hash(b), block_digests_[static_cast<size_t>(b)], pool_.tokens(b));
  });
}

std::vector<KvCacheManager::LowerKey> KvCacheManager::find_in_lower_tier(
    const CachedPrefix& prefix, const TokenSequence& tokens, int32_t num_lookup) const {
  const int32_t bs = block_size();
  std::vector<LowerKey> found;
  BlockKey key;
  key.extra = prefix.extra;
  key.parent_hash = prefix.hashes.empty() ? kRootBlockHash : prefix.hashes.back();
  key.parent_prefix_id = prefix.prefix_ids.empty() ? kRootPrefixId : prefix.prefix_ids.back();
  PrefixDigest digest = prefix.digests.empty() ? PrefixDigest{} : prefix.digests.back();
  for (auto i = static_cast<int32_t>(prefix.blocks.size()); i < num_lookup; ++i) {
    std::vector<TokenId> buf(static_cast<size_t>(bs));
    tokens.copy(i * bs, bs, buf.data());
    key.hash = pool_.hash_fn()(key.parent_hash, key.extra, buf);
    digest = lower_->chain(digest, key.extra, buf);
    if (!lower_->contains(key.hash, digest)) break;
    found.push_back({key, digest, std::move(buf)});
    key.parent_hash = key.hash;
  }
  return found;
}

std::optional<uint64_t> KvCacheManager::start_lower_tier_load(const CachedPrefix& prefix,
                                                              const TokenSequence& tokens) {
  if (lower_ == nullptr || !prefix_caching_ || tokens.size() == 0) return std::nullopt;
  PAGODA_CHECK(prefix.digests.size() == prefix.blocks.size());
  const int32_t num_lookup = (tokens.size() - 1) / block_size();
  std::vector<LowerKey> found = find_in_lower_tier(prefix, tokens, num_lookup);
  // Hold the pool's hits while blocks are taken, so that taking them cannot evict one.
  for (BlockId b : prefix.blocks) pool_.acquire(b);
  const auto num_taken = std::min(static_cast<int32_t>(found.size()), pool_.num_free());
  if (num_taken == 0) {
    for (auto b = prefix.blocks.rbegin(); b != prefix.blocks.rend(); ++b) pool_.release(*b);
    return std::nullopt;
  }
  found.resize(static_cast<size_t>(num_taken));
  PendingLoad load{0, prefix, pool_.allocate(num_taken), std::move(found)};
  std::vector<LowerTier::BlockLoad> reads;
  for (size_t i = 0; i < load.taken.size(); ++i) {
    LowerKey& f = load.keys[i];
    // Where it is once the allocation's evictions went down (for the accounting only: a host
    // block dropped before it is read comes from the disk, or not at all).
    f.in_memory = lower_->in_memory(f.key.hash, f.digest);
    reads.push_back({load.taken[i], f.key.hash, f.digest, f.tokens});
  }
  load.ticket = lower_->start_load(std::move(reads));
  const uint64_t ticket = load.ticket;
  loads_.push_back(std::move(load));
  return ticket;
}

std::vector<KvCacheManager::LandedLoad> KvCacheManager::finish_lower_tier_loads() {
  std::vector<LandedLoad> landed;
  for (auto it = loads_.begin(); it != loads_.end();) {
    const std::optional<int32_t> num_read = lower_->finish_load(it->ticket);
    if (!num_read) {
      ++it;
      continue;
    }
    int32_t num_cached = 0, num_host = 0;
    for (; num_cached < *num_read; ++num_cached) {
      const LowerKey& f = it->keys[static_cast<size_t>(num_cached)];
      if (!adopt(it->prefix, it->taken[static_cast<size_t>(num_cached)], f.key.hash, f.tokens,
                 f.digest)) {
        break;
      }
      num_host += f.in_memory ? 1 : 0;
    }
    release_adopted(it->prefix, it->taken);
    landed.push_back({it->ticket, num_cached * block_size(), num_host * block_size()});
    num_lower_tier_loaded_tokens_ += num_cached * block_size();
    it = loads_.erase(it);
  }
  return landed;
}

void KvCacheManager::wait_for_lower_tier_loads(std::chrono::milliseconds timeout) {
  if (!loads_.empty()) lower_->wait_for_loads(timeout);
}

std::optional<std::vector<BlockId>> KvCacheManager::allocate_slots(
    SequenceId id, int32_t num_computed_tokens, int32_t num_new_tokens,
    const CachedPrefix* new_computed) {
  PAGODA_CHECK(num_computed_tokens >= 0 && num_new_tokens >= 0);
  auto it = tables_.find(id);
  const bool is_new = it == tables_.end();
  PAGODA_CHECK(is_new == (new_computed != nullptr));
  const int32_t num_prefix_tokens = new_computed ? new_computed->num_tokens : 0;
  const int32_t num_prefix_blocks = new_computed ? int32_t(new_computed->blocks.size()) : 0;
  const int64_t num_slots = int64_t(num_computed_tokens) + num_prefix_tokens + num_new_tokens;
  const int32_t num_have = is_new ? 0 : static_cast<int32_t>(it->second.blocks.size());
  const int32_t num_needed = num_blocks_for(num_slots);
  const int32_t num_alloc = std::max(0, num_needed - num_have - num_prefix_blocks);

  // A cached prefix block that is free now leaves the free list when adopted.
  int32_t num_revived = 0;
  if (new_computed) {
    PAGODA_CHECK(num_computed_tokens == 0);
    PAGODA_CHECK(new_computed->hashes.size() == new_computed->blocks.size() &&
                 new_computed->prefix_ids.size() == new_computed->blocks.size() &&
                 num_prefix_tokens == num_prefix_blocks * block_size());
    for (size_t i = 0; i < new_computed->blocks.size(); ++i) {
      const BlockId b = new_computed->blocks[i];
      // Still the block get_computed_blocks() found: nothing evicted it since.
      PAGODA_CHECK(pool_.is_hashed(b) && pool_.hash(b) == new_computed->hashes[i] &&
                   pool_.prefix_id(b) == new_computed->prefix_ids[i]);
      if (pool_.ref_count(b) == 0) ++num_revived;
    }
  }
  if (num_alloc + num_revived > pool_.num_free()) return std::nullopt;

  Table& table = is_new ? tables_[id] : it->second;
  if (new_computed) {
    // Revive the hits before allocating, so allocation cannot evict one of them.
    for (BlockId b : new_computed->blocks) pool_.acquire(b);
    table.blocks = new_computed->blocks;
    table.hashes = new_computed->hashes;
    table.prefix_ids = new_computed->prefix_ids;
    table.digests = new_computed->digests;
    table.extra = new_computed->extra;
    num_queried_tokens_ += new_computed->num_queried_tokens;
    num_hit_tokens_ += new_computed->num_tokens;
    num_lower_tier_hit_tokens_ += new_computed->num_lower_tier_tokens;
    num_host_tier_hit_tokens_ += new_computed->num_host_tier_tokens;
  }
  std::vector<BlockId> fresh = pool_.allocate(num_alloc);
  table.blocks.insert(table.blocks.end(), fresh.begin(), fresh.end());
  table.num_slots = std::max<int32_t>(table.num_slots, static_cast<int32_t>(num_slots));
  return fresh;
}

void KvCacheManager::cache_full_blocks(SequenceId id, const TokenSequence& tokens,
                                       int32_t num_computed_tokens) {
  auto it = tables_.find(id);
  PAGODA_CHECK(it != tables_.end());
  Table& table = it->second;
  PAGODA_CHECK(num_computed_tokens <= table.num_slots && num_computed_tokens <= tokens.size());
  if (!prefix_caching_) return;
  const int32_t bs = block_size();
  const auto num_full = static_cast<size_t>(num_computed_tokens / bs);
  std::vector<TokenId> buf(static_cast<size_t>(bs));
  for (size_t i = table.hashes.size(); i < num_full; ++i) {
    tokens.copy(static_cast<int32_t>(i) * bs, bs, buf.data());
    BlockKey key;
    key.extra = table.extra;
    key.parent_hash = i ? table.hashes[i - 1] : kRootBlockHash;
    key.parent_prefix_id = i ? table.prefix_ids[i - 1] : kRootPrefixId;
    key.hash = pool_.hash_fn()(key.parent_hash, key.extra, buf);
    const BlockId b = table.blocks[i];
    PrefixId prefix_id;
    bool newly_cached = false;
    if (pool_.is_hashed(b)) {
      // Shared through a fork and already cached by the other holder: the same content.
      PAGODA_CHECK(pool_.hash(b) == key.hash);
      prefix_id = pool_.prefix_id(b);
    } else {
      prefix_id = pool_.cache(b, key, buf);
      newly_cached = pool_.is_hashed(b);
    }
    table.hashes.push_back(key.hash);
    table.prefix_ids.push_back(prefix_id);
    if (lower_ != nullptr) {
      const PrefixDigest parent = i ? table.digests[i - 1] : PrefixDigest{};
      table.digests.push_back(lower_->chain(parent, key.extra, buf));
      if (newly_cached) {
        block_digests_[static_cast<size_t>(b)] = table.digests.back();
        lower_->store(b, key.hash, table.digests.back(), buf);
      }
    }
  }
}

void KvCacheManager::free(SequenceId id) {
  auto it = tables_.find(id);
  if (it == tables_.end()) return;
  const std::vector<BlockId>& blocks = it->second.blocks;
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) pool_.release(*b);
  tables_.erase(it);
}

void KvCacheManager::truncate(SequenceId id, int32_t num_slots) {
  auto it = tables_.find(id);
  PAGODA_CHECK(it != tables_.end());
  Table& t = it->second;
  PAGODA_CHECK(num_slots >= 0 && num_slots <= t.num_slots);
  PAGODA_CHECK(static_cast<int64_t>(t.hashes.size()) * block_size() <= num_slots);
  const auto num_kept = static_cast<size_t>(num_blocks_for(num_slots));
  while (t.blocks.size() > num_kept) {
    const BlockId b = t.blocks.back();
    PAGODA_CHECK(pool_.ref_count(b) == 1 && !pool_.is_hashed(b));
    pool_.release(b);
    t.blocks.pop_back();
  }
  t.num_slots = num_slots;
}

std::optional<std::vector<BlockCopy>> KvCacheManager::fork(SequenceId parent, SequenceId child,
                                                           int32_t num_computed_tokens) {
  const Table& from = entry(parent);
  PAGODA_CHECK(!has(child));
  PAGODA_CHECK(num_computed_tokens >= 0 && num_computed_tokens <= from.num_slots);
  const int32_t bs = block_size();
  const auto num_full = static_cast<size_t>(num_computed_tokens / bs);
  const bool has_tail = num_computed_tokens % bs != 0;
  if (has_tail && pool_.num_free() < 1) return std::nullopt;

  Table to;
  to.blocks.assign(from.blocks.begin(), from.blocks.begin() + static_cast<ptrdiff_t>(num_full));
  for (BlockId b : to.blocks) pool_.acquire(b);
  const size_t num_hashed = std::min(num_full, from.hashes.size());
  to.hashes.assign(from.hashes.begin(), from.hashes.begin() + static_cast<ptrdiff_t>(num_hashed));
  to.prefix_ids.assign(from.prefix_ids.begin(),
                       from.prefix_ids.begin() + static_cast<ptrdiff_t>(num_hashed));
  if (lower_ != nullptr) {
    to.digests.assign(from.digests.begin(),
                      from.digests.begin() + static_cast<ptrdiff_t>(num_hashed));
  }
  to.extra = from.extra;
  to.num_slots = num_computed_tokens;
  std::vector<BlockCopy> copies;
  if (has_tail) {
    const BlockId dst = pool_.allocate(1)[0];
    copies.push_back({from.blocks[num_full], dst});
    to.blocks.push_back(dst);
  }
  tables_.emplace(child, std::move(to));
  return copies;
}

KvCacheStats KvCacheManager::stats() const {
  KvCacheStats s;
  s.num_blocks = pool_.num_blocks();
  s.num_used_blocks = pool_.num_used();
  s.num_free_blocks = pool_.num_free();
  s.num_cached_blocks = pool_.num_cached();
  s.num_queried_tokens = num_queried_tokens_;
  s.num_hit_tokens = num_hit_tokens_;
  s.num_lower_tier_hit_tokens = num_lower_tier_hit_tokens_;
  s.num_host_tier_hit_tokens = num_host_tier_hit_tokens_;
  s.num_lower_tier_loaded_tokens = num_lower_tier_loaded_tokens_;
  s.num_lower_tier_loads = static_cast<int32_t>(loads_.size());
  return s;
}

void KvCacheManager::check_invariants() const {
  pool_.check_invariants();
  const int32_t bs = block_size();
  std::vector<int32_t> num_holders(static_cast<size_t>(pool_.num_blocks()), 0);
  std::vector<int32_t> num_full_holders(num_holders.size(), 0);
  for (const auto& [id, table] : tables_) {
    PAGODA_CHECK(table.num_slots >= 0);
    PAGODA_CHECK(static_cast<int32_t>(table.blocks.size()) == num_blocks_for(table.num_slots));
    PAGODA_CHECK(table.hashes.size() == table.prefix_ids.size());
    PAGODA_CHECK(table.digests.size() == (lower_ != nullptr ? table.hashes.size() : 0));
    PAGODA_CHECK(static_cast<int64_t>(table.hashes.size()) * bs <= table.num_slots);
    const auto num_full = static_cast<size_t>(table.num_slots / bs);
    for (size_t i = 0; i < table.blocks.size(); ++i) {
      const BlockId b = table.blocks[i];
      PAGODA_CHECK(b >= 0 && b < pool_.num_blocks());
      ++num_holders[static_cast<size_t>(b)];
      if (i < num_full) ++num_full_holders[static_cast<size_t>(b)];
      if (i < table.hashes.size() && pool_.is_hashed(b)) {
        PAGODA_CHECK(pool_.hash(b) == table.hashes[i]);
        PAGODA_CHECK(pool_.prefix_id(b) == table.prefix_ids[i]);
        PAGODA_CHECK(lower_ == nullptr ||
                     block_digests_[static_cast<size_t>(b)] == table.digests[i]);
      }
    }
    std::vector<BlockId> sorted = table.blocks;
    std::sort(sorted.begin(), sorted.end());
    PAGODA_CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
  }
  // A load in flight holds the pool's hits it continues and the blocks it reads into, all full.
  for (const PendingLoad& load : loads_) {
    PAGODA_CHECK(lower_ != nullptr && load.taken.size() == load.keys.size());
    for (const auto* blocks : {&load.prefix.blocks, &load.taken}) {
      for (BlockId b : *blocks) {
        ++num_holders[static_cast<size_t>(b)];
        ++num_full_holders[static_cast<size_t>(b)];
      }
    }
    for (BlockId b : load.taken) PAGODA_CHECK(!pool_.is_hashed(b));
    for (size_t i = 0; i < load.prefix.blocks.size(); ++i) {
      PAGODA_CHECK(pool_.is_hashed(load.prefix.blocks[i]) &&
                   pool_.prefix_id(load.prefix.blocks[i]) == load.prefix.prefix_ids[i]);
    }
  }
  for (BlockId b = 0; b < pool_.num_blocks(); ++b) {
    const auto n = num_holders[static_cast<size_t>(b)];
    PAGODA_CHECK(pool_.ref_count(b) == n);
    if (n > 1 || pool_.is_hashed(b)) PAGODA_CHECK(num_full_holders[static_cast<size_t>(b)] == n);
  }
}

}  // namespace pagoda
