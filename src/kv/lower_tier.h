// A tier of KV blocks below the block pool (issue 36): full blocks the pool caches are handed
// down to it as they are completed, and a prefix lookup that misses the pool continues there,
// loading the blocks it finds into fresh pool blocks. The K/V bytes are the implementation's
// business (the engine's disk tier, engine/kv_disk.h); KvCacheManager only names blocks.
//
// Below the pool a block is found by its chain hash and a PrefixDigest: 128 bits chained over
// every block's tokens and extra key from the sequence's start, made by the tier (keyed by a
// secret of its own), since a 64-bit hash alone could be made to collide across restarts,
// where no PrefixId verifies the prefix.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "core/token.h"
#include "kv/block_hash.h"

namespace pagoda {

using BlockId = int32_t;

struct PrefixDigest {
  uint64_t lo = 0, hi = 0;
  bool operator==(const PrefixDigest&) const = default;
};

// The digest of the prefix through one more block, from its parent's, keyed by a secret
// (key_lo, key_hi) so that nobody who lacks it can make two prefixes' digests collide.
PrefixDigest chain_digest(uint64_t key_lo, uint64_t key_hi, const PrefixDigest& parent,
                          uint64_t extra, std::span<const TokenId> tokens);

// A tier's loads (start_load to landing: the wait in the queue and every block's read), for
// /stats' load latency.
struct TierLoadStats {
  uint64_t loads = 0;   // landed
  uint64_t blocks = 0;  // read by them
  double seconds = 0, last_seconds = 0, max_seconds = 0;  // their time in all, the last, the longest
  void add(int32_t num_blocks, double s) {
    ++loads;
    blocks += static_cast<uint64_t>(num_blocks);
    seconds += s;
    last_seconds = s;
    max_seconds = s > max_seconds ? s : max_seconds;
  }
};

class LowerTier {
 public:
  virtual ~LowerTier() = default;
  // The digest of the prefix through one more block, from its parent's (PrefixDigest{} for a
  // sequence's first block).
  virtual PrefixDigest chain(const PrefixDigest& parent, uint64_t extra,
                             std::span<const TokenId> tokens) const = 0;
  // Pool block `block`, whose K/V is computed, was just cached under `hash` and `digest`: keep
  // a copy. Must not wait on the disk (it runs inside the engine's step).
  virtual void store(BlockId block, BlockHash hash, const PrefixDigest& digest,
                     std::span<const TokenId> tokens) = 0;
  // Whether a block is held (an index lookup, no I/O).
  virtual bool contains(BlockHash hash, const PrefixDigest& digest) const = 0;
  // Whether a block held is in host memory (a host tier), not only further down; for the
  // accounting of where prefix tokens came from.
  virtual bool in_memory(BlockHash hash, const PrefixDigest& digest) const {
    (void)hash, (void)digest;
    return false;
  }
  // Pool block `block`, cached under `hash` and `digest`, is being evicted: its K/V is still
  // there, about to be overwritten. A tier that keeps evicted blocks copies it now (the step
  // waits for it). Default: nothing (a tier that stores every block as it is cached has it).
  virtual void evict(BlockId block, BlockHash hash, const PrefixDigest& digest,
                     std::span<const TokenId> tokens) {
    (void)block, (void)hash, (void)digest, (void)tokens;
  }
  // A block's K/V as bytes (kv_block_bytes' layout), evicted from a tier above: keep it if
  // there is room. False when it is not kept. Must not wait on the disk.
  virtual bool keep(BlockHash hash, const PrefixDigest& digest, std::span<const TokenId> tokens,
                    std::vector<uint8_t> payload) {
    (void)hash, (void)digest, (void)tokens, (void)payload;
    return false;
  }
  // Fills pool block `block` with the K/V of the record; false on a miss (nothing was read
  // into the block then, or what was is to be ignored).
  virtual bool load(BlockId block, BlockHash hash, const PrefixDigest& digest,
                    std::span<const TokenId> tokens) = 0;

  // Reads off the caller's thread (a request's blocks, read while steps go on). The pool
  // blocks are held for the load and written by nobody else until it has landed.
  struct BlockLoad {
    BlockId block = 0;
    BlockHash hash = 0;
    PrefixDigest digest;
    std::vector<TokenId> tokens;
  };
  // Starts loading `loads` in order (as load() would, one after the other, stopping at the
  // first that fails); returns the load's ticket. This default loads them at once. A tier that
  // reads later keeps the blocks it holds for the load until it has landed (HostTier pins
  // them); a block gone before it is read is a miss, and the rest of the prompt is computed.
  virtual uint64_t start_load(std::vector<BlockLoad> loads) {
    const auto start = std::chrono::steady_clock::now();
    int32_t n = 0;
    while (n < static_cast<int32_t>(loads.size())) {
      const BlockLoad& l = loads[static_cast<size_t>(n)];
      if (!load(l.block, l.hash, l.digest, l.tokens)) break;
      ++n;
    }
    load_stats_.add(n, std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
                           .count());
    const uint64_t ticket = next_ticket_++;
    landed_.push_back({ticket, n});
    return ticket;
  }
  // nullopt while the ticket's reads are in flight; then, once, how many of its blocks (from
  // the first) were read.
  virtual std::optional<int32_t> finish_load(uint64_t ticket) {
    for (auto it = landed_.begin(); it != landed_.end(); ++it) {
      if (it->first != ticket) continue;
      const int32_t n = it->second;
      landed_.erase(it);
      return n;
    }
    return std::nullopt;
  }
  // Waits up to `timeout` until some load in flight may have landed (for an engine that has
  // nothing else to do meanwhile).
  virtual void wait_for_loads(std::chrono::milliseconds timeout) { (void)timeout; }
  // The loads that have landed so far (start_load's caller's thread, or this default's).
  virtual TierLoadStats load_stats() const { return load_stats_; }

 private:
  TierLoadStats load_stats_;
  uint64_t next_ticket_ = 1;
  std::vector<std::pair<uint64_t, int32_t>> landed_;
};

}  // namespace pagoda
