// The host-memory tier under the block pool (issue 36, --kv-offload-gb): cached blocks the pool
// evicts are copied into host memory, bounded in bytes with the least recently used going first,
// and a prefix lookup that misses the pool finds them here and copies them back into fresh pool
// blocks. Above the disk tier when both are given (pool -> host -> disk): blocks the pool caches
// go on to the disk tier as they are completed (its write-behind), a lookup the host misses
// continues on disk, and a block the host evicts that the disk lacks is handed down to it.
//
// On the CPU backend the pool is host memory too, and this is a second, bigger tier; on a device
// backend (CUDA) it is where device blocks go, moved by the backend's download and upload.
// Copies out (evictions) run inside the step, since the block is about to be overwritten; copies
// in run on a thread of the tier's own where the pool's memory may be written from any thread
// (host memory), else at once on the caller's thread when the load starts (a device backend's
// copies go through its one stream).
//
// A block is found by its chain hash and PrefixDigest (lower_tier.h) and its own tokens, which
// are checked exactly on every load. The blocks a load is to read are pinned from start_load
// until it has landed (finish_load), and a block is pinned while it is copied out: the bound is
// kept by dropping the least recently used unpinned blocks, so the step's evictions never take
// a block from under a load in flight. Any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "kv/load_thread.h"
#include "kv/lower_tier.h"

namespace pagoda {

// How the tier reaches the pool's K/V memory: one block as `block_bytes` bytes.
struct PoolBlockBytes {
  uint64_t block_bytes = 0;
  std::function<void(BlockId, uint8_t*)> read;         // the pool block's K/V, out
  std::function<void(BlockId, const uint8_t*)> write;  // into the pool block
  bool any_thread = true;  // write may run on the tier's own thread
};

struct HostTierStats {
  bool enabled = false;
  uint64_t blocks = 0, bytes = 0, max_bytes = 0;  // held now, and the bound
  uint64_t stored_blocks = 0;   // blocks copied in from the pool's evictions
  uint64_t hit_blocks = 0;      // blocks copied back into the pool
  uint64_t evicted_blocks = 0;  // dropped past the bound
  uint64_t handed_down_blocks = 0;  // of those, kept by the tier below (the disk lacked them)
};

class HostTier final : public LowerTier {
 public:
  // `next`: the tier below (the disk tier), not owned, or null. Throws Error when max_bytes
  // holds no block.
  HostTier(PoolBlockBytes pool, uint64_t max_bytes, LowerTier* next = nullptr);
  ~HostTier() override;

  PrefixDigest chain(const PrefixDigest& parent, uint64_t extra,
                     std::span<const TokenId> tokens) const override;
  void store(BlockId block, BlockHash hash, const PrefixDigest& digest,
             std::span<const TokenId> tokens) override;
  bool contains(BlockHash hash, const PrefixDigest& digest) const override;
  bool in_memory(BlockHash hash, const PrefixDigest& digest) const override;
  void evict(BlockId block, BlockHash hash, const PrefixDigest& digest,
             std::span<const TokenId> tokens) override;
  bool keep(BlockHash hash, const PrefixDigest& digest, std::span<const TokenId> tokens,
            std::vector<uint8_t> payload) override;
  bool load(BlockId block, BlockHash hash, const PrefixDigest& digest,
            std::span<const TokenId> tokens) override;
  uint64_t start_load(std::vector<BlockLoad> loads) override;
  std::optional<int32_t> finish_load(uint64_t ticket) override;
  void wait_for_loads(std::chrono::milliseconds timeout) override;
  TierLoadStats load_stats() const override;

  HostTierStats stats() const;
  // The held blocks' hashes, most recently used first (tests).
  std::vector<BlockHash> hashes_by_recency() const;

 private:
  struct Key {
    BlockHash hash = 0;
    PrefixDigest digest;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return static_cast<size_t>(k.hash ^ k.digest.hi); }
  };
  struct Entry {
    Key key;
    std::vector<TokenId> tokens;
    std::vector<uint8_t> payload;
    int32_t pins = 0;  // loads in flight that read it, and copies under way: not dropped
  };
  uint64_t entry_bytes(const Entry& e) const;
  void insert(Entry entry);  // mutex_ held; evicts past the bound
  bool load_from_memory(BlockId block, const Key& key, std::span<const TokenId> tokens);
  void unpin(const std::vector<Key>& keys);  // mutex_ held

  PoolBlockBytes pool_;
  uint64_t max_bytes_;
  LowerTier* next_;
  uint64_t secret_lo_ = 0, secret_hi_ = 0;  // keys the digests without a tier below

  mutable std::mutex mutex_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<Key, std::list<Entry>::iterator, KeyHash> index_;
  HostTierStats stats_;
  std::unordered_map<uint64_t, std::vector<Key>> pinned_;  // by load ticket: what it pinned
  std::unique_ptr<LoadThread> loader_;  // with pool_.any_thread; last: goes first
};

}  // namespace pagoda
