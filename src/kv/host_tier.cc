// The host-memory tier's index, LRU bound and copies (see host_tier.h).
#include "kv/host_tier.h"

#include <algorithm>
#include <cstring>
#include <random>

#include "core/error.h"

namespace pagoda {

HostTier::HostTier(PoolBlockBytes pool, uint64_t max_bytes, LowerTier* next)
    : pool_(std::move(pool)), max_bytes_(max_bytes), next_(next) {
  PAGODA_CHECK(pool_.read && pool_.write && pool_.block_bytes > 0);
  if (max_bytes_ < pool_.block_bytes) {
    fail("--kv-offload-gb: ", max_bytes_, " bytes hold no KV block of ", pool_.block_bytes,
         " bytes");
  }
  std::random_device rd;
  secret_lo_ = (uint64_t{rd()} << 32) | rd();
  secret_hi_ = (uint64_t{rd()} << 32) | rd();
  stats_.enabled = true;
  stats_.max_bytes = max_bytes_;
  if (pool_.any_thread) {
    loader_ = std::make_unique<LoadThread>(
        [this](const BlockLoad& l) { return load(l.block, l.hash, l.digest, l.tokens); });
  }
}

HostTier::~HostTier() { loader_.reset(); }  // its loads write into pool blocks: done first

PrefixDigest HostTier::chain(const PrefixDigest& parent, uint64_t extra,
                             std::span<const TokenId> tokens) const {
  // With a disk tier the digests must be its own (its records are found by them).
  if (next_ != nullptr) return next_->chain(parent, extra, tokens);
  return chain_digest(secret_lo_, secret_hi_, parent, extra, tokens);
}

void HostTier::store(BlockId block, BlockHash hash, const PrefixDigest& digest,
                     std::span<const TokenId> tokens) {
  // A block just cached stays in the pool: it comes here when it is evicted, to the disk now.
  if (next_ != nullptr) next_->store(block, hash, digest, tokens);
}

bool HostTier::contains(BlockHash hash, const PrefixDigest& digest) const {
  return in_memory(hash, digest) || (next_ != nullptr && next_->contains(hash, digest));
}

bool HostTier::in_memory(BlockHash hash, const PrefixDigest& digest) const {
  std::lock_guard lock(mutex_);
  return index_.count(Key{hash, digest}) > 0;
}

void HostTier::evict(BlockId block, BlockHash hash, const PrefixDigest& digest,
                     std::span<const TokenId> tokens) {
  const Key key{hash, digest};
  {
    std::lock_guard lock(mutex_);
    if (auto it = index_.find(key); it != index_.end()) {  // held already: now the newest
      lru_.splice(lru_.begin(), lru_, it->second);
      return;
    }
  }
  Entry e{key, std::vector<TokenId>(tokens.begin(), tokens.end()),
          std::vector<uint8_t>(pool_.block_bytes)};
  pool_.read(block, e.payload.data());
  std::lock_guard lock(mutex_);
  insert(std::move(e));
  ++stats_.stored_blocks;
}

bool HostTier::keep(BlockHash hash, const PrefixDigest& digest, std::span<const TokenId> tokens,
                    std::vector<uint8_t> payload) {
  if (payload.size() != pool_.block_bytes) return false;
  std::lock_guard lock(mutex_);
  if (index_.count(Key{hash, digest}) > 0) return false;
  insert(Entry{Key{hash, digest}, std::vector<TokenId>(tokens.begin(), tokens.end()),
               std::move(payload)});
  ++stats_.stored_blocks;
  return true;
}

uint64_t HostTier::entry_bytes(const Entry& e) const {
  return e.payload.size() + e.tokens.size() * sizeof(TokenId);
}

void HostTier::insert(Entry entry) {
  stats_.bytes += entry_bytes(entry);
  const Key key = entry.key;
  lru_.push_front(std::move(entry));
  index_[key] = lru_.begin();
  // The least recently used unpinned blocks go, the new one last. Pinned blocks were all held at
  // once within the bound, so what is left unpinned always makes room.
  auto it = lru_.end();
  while (stats_.bytes > max_bytes_ && it != lru_.begin()) {
    --it;
    Entry& old = *it;
    if (old.pins > 0) continue;
    stats_.bytes -= entry_bytes(old);
    ++stats_.evicted_blocks;
    // Down a tier, unless the disk has it already (written when it was cached).
    if (next_ != nullptr && !next_->contains(old.key.hash, old.key.digest) &&
        next_->keep(old.key.hash, old.key.digest, old.tokens, std::move(old.payload))) {
      ++stats_.handed_down_blocks;
    }
    index_.erase(old.key);
    it = lru_.erase(it);
  }
}

bool HostTier::load_from_memory(BlockId block, const Key& key, std::span<const TokenId> tokens) {
  std::unique_lock lock(mutex_);
  auto found = index_.find(key);
  if (found == index_.end()) return false;
  // The list's iterator, which stays valid while the index changes (an insert may rehash it).
  const auto it = found->second;
  Entry& e = *it;
  if (!std::equal(tokens.begin(), tokens.end(), e.tokens.begin(), e.tokens.end())) return false;
  // Copied without the lock (the step's evictions go on meanwhile); pinned, so it stays.
  ++e.pins;
  lock.unlock();
  pool_.write(block, e.payload.data());
  lock.lock();
  --e.pins;
  lru_.splice(lru_.begin(), lru_, it);
  ++stats_.hit_blocks;
  return true;
}

void HostTier::unpin(const std::vector<Key>& keys) {
  for (const Key& key : keys) {
    auto it = index_.find(key);
    PAGODA_CHECK(it != index_.end() && it->second->pins > 0);
    --it->second->pins;
  }
}

bool HostTier::load(BlockId block, BlockHash hash, const PrefixDigest& digest,
                    std::span<const TokenId> tokens) {
  if (load_from_memory(block, Key{hash, digest}, tokens)) return true;
  return next_ != nullptr && next_->load(block, hash, digest, tokens);
}

uint64_t HostTier::start_load(std::vector<BlockLoad> loads) {
  // Without a thread of its own the blocks are read at once: nothing can drop them meanwhile.
  if (!loader_) return LowerTier::start_load(std::move(loads));
  std::vector<Key> pins;
  {
    std::lock_guard lock(mutex_);
    for (const BlockLoad& l : loads) {
      auto it = index_.find(Key{l.hash, l.digest});
      if (it == index_.end()) continue;  // below, or nowhere
      ++it->second->pins;
      pins.push_back(it->first);
    }
  }
  const uint64_t ticket = loader_->start(std::move(loads));
  std::lock_guard lock(mutex_);
  pinned_[ticket] = std::move(pins);
  return ticket;
}

std::optional<int32_t> HostTier::finish_load(uint64_t ticket) {
  if (!loader_) return LowerTier::finish_load(ticket);
  const std::optional<int32_t> n = loader_->finish(ticket);
  if (n) {
    std::lock_guard lock(mutex_);
    auto it = pinned_.find(ticket);
    PAGODA_CHECK(it != pinned_.end());
    unpin(it->second);
    pinned_.erase(it);
  }
  return n;
}

void HostTier::wait_for_loads(std::chrono::milliseconds timeout) {
  if (loader_) loader_->wait(timeout);
}

TierLoadStats HostTier::load_stats() const {
  return loader_ ? loader_->stats() : LowerTier::load_stats();
}

HostTierStats HostTier::stats() const {
  std::lock_guard lock(mutex_);
  HostTierStats s = stats_;
  s.blocks = index_.size();
  return s;
}

std::vector<BlockHash> HostTier::hashes_by_recency() const {
  std::lock_guard lock(mutex_);
  std::vector<BlockHash> out;
  for (const Entry& e : lru_) out.push_back(e.key.hash);
  return out;
}

}  // namespace pagoda
