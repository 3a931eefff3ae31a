// Per-sequence block tables over one BlockPool, with automatic prefix caching: the longest
// cached prefix of a new sequence's tokens is shared instead of recomputed, full blocks are
// hashed and cached as they are committed, and fork() shares a parent's full blocks with a
// child. Integers only; which K/V bytes a block holds is KvStorage's business.
//
// Invariants (check_invariants(), on top of BlockPool's):
//   - ref_count(b) == the number of block tables holding b, for every block;
//   - no table holds a block twice;
//   - a table has exactly ceil(num_slots / block_size) blocks, where num_slots is the number of
//     token slots allocated for the request (computed tokens + tokens scheduled this step);
//   - the first hashes.size() blocks of a table are full (hashes.size() * block_size <=
//     num_slots); when such a block is itself hashed in the pool, its pool hash and PrefixId are
//     the ones the table recorded (it is the cached copy of that content);
//   - only full blocks are shared or cached: a block held by two or more tables, or hashed in
//     the pool, lies within the first floor(num_slots / block_size) blocks of every table
//     holding it, so no one writes into a block another request or the cache can read;
//   - with a lower tier, a table keeps one PrefixDigest per hashed block, and a block it holds
//     that is hashed in the pool under the table's PrefixId has that digest recorded too (what
//     an eviction hands down);
//   - a lower-tier load in flight holds (one reference each) the pool's hits it continues,
//     which stay hashed under the PrefixIds it chains to, and the unhashed blocks it reads into;
//     these count as holders above.
//
// A lower tier (lower_tier.h, set_lower_tier()) extends the cache below the pool: each block the
// pool newly caches is handed to it (store), each cached block the pool evicts too (evict),
// and start_lower_tier_load() continues a prefix lookup there, reading off the caller's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/block_copy.h"
#include "kv/block_hash.h"
#include "kv/block_pool.h"
#include "kv/lower_tier.h"

namespace pagoda {

// One sequence of tokens with a block table of its own, keyed by this id: a scheduler Request
// (sched/request.h). The engine makes one sequence per sample or beam of a generation request,
// so one request (engine.h's RequestId) may hold several, forked from its first.
using SequenceId = int64_t;

struct KvCacheConfig {
  int32_t num_blocks = 0;
  int32_t block_size = kDefaultBlockSize;
  bool enable_prefix_caching = true;
  BlockHashFn hash_fn = hash_block;  // injectable so tests can force collisions
};

// The cached prefix of a sequence (get_computed_blocks()), full blocks only.
struct CachedPrefix {
  std::vector<BlockId> blocks;
  std::vector<BlockHash> hashes;     // [blocks.size()] chain hashes
  std::vector<PrefixId> prefix_ids;  // [blocks.size()]
  std::vector<PrefixDigest> digests;  // [blocks.size()] with a lower tier, else empty
  int32_t num_tokens = 0;            // blocks.size() * block_size
  int32_t num_lower_tier_tokens = 0;  // of those, loaded from the lower tier
  int32_t num_host_tier_tokens = 0;   // of those, from host memory (a host tier)
  int32_t num_queried_tokens = 0;    // the length of the sequence that was looked up
  uint64_t extra = 0;                // the extra key the hashes were made with
};

struct KvCacheStats {
  int32_t num_blocks = 0;
  int32_t num_used_blocks = 0;
  int32_t num_free_blocks = 0;
  int32_t num_cached_blocks = 0;   // free but still hashed
  int64_t num_queried_tokens = 0;  // tokens of admitted requests looked up in the prefix cache
  int64_t num_hit_tokens = 0;      // of those, found cached
  int64_t num_lower_tier_hit_tokens = 0;  // of those, loaded from the lower tier
  int64_t num_host_tier_hit_tokens = 0;   // of those, from host memory (a host tier)
  int64_t num_lower_tier_loaded_tokens = 0;  // read from the lower tier into the pool
  int32_t num_lower_tier_loads = 0;          // loads in flight
  double utilization() const { return num_blocks ? double(num_used_blocks) / num_blocks : 0.0; }
  double prefix_hit_rate() const {
    return num_queried_tokens ? double(num_hit_tokens) / double(num_queried_tokens) : 0.0;
  }
};

class KvCacheManager {
 public:
  explicit KvCacheManager(const KvCacheConfig& config);

  // The longest cached prefix of `tokens`, in full blocks, leaving at least one token to
  // compute so the step that finishes the prompt has logits: a fully cached sequence gives up
  // its last block. Changes nothing. Empty when prefix caching is off.
  CachedPrefix get_computed_blocks(const TokenSequence& tokens, uint64_t extra) const;

  // The lower tier below the pool (not owned; null: none). Set before any sequence is added.
  void set_lower_tier(LowerTier* tier);
  bool has_lower_tier() const { return lower_ != nullptr; }
  // Starts reading the blocks the lower tier holds after `prefix` (get_computed_blocks() of
  // `tokens`, within the same size - 1 tokens) into fresh pool blocks, off the caller's
  // thread: the load holds them, and the pool blocks of `prefix` (never evicted for it), until
  // it lands. Returns its ticket; nullopt when the tier has none of the blocks or no block is
  // free.
  std::optional<uint64_t> start_lower_tier_load(const CachedPrefix& prefix,
                                                const TokenSequence& tokens);
  // The loads that have landed since the last call, each with how many tokens it added to the
  // prefix cache: its blocks read are cached after the prefix (as free cached blocks, so a
  // lookup finds them and allocate_slots() revives them), up to the first that did not read
  // or whose content another block caches already; the rest go back empty.
  struct LandedLoad {
    uint64_t ticket = 0;
    int32_t num_tokens = 0;       // added to the prefix cache
    int32_t num_host_tokens = 0;  // of those, from host memory (LowerTier::in_memory)
  };
  std::vector<LandedLoad> finish_lower_tier_loads();
  int32_t num_lower_tier_loads() const { return static_cast<int32_t>(loads_.size()); }
  // Waits up to `timeout` for a load in flight to land; returns at once when none is.
  void wait_for_lower_tier_loads(std::chrono::milliseconds timeout);

  // Explicit save and restore of a prefix (engine/prefix_file.h), between steps.
  // The cached full blocks of `tokens`, all of them (the last token included), up to the
  // first block the pool lacks. Changes nothing; empty when prefix caching is off.
  CachedPrefix cached_full_blocks(const TokenSequence& tokens, uint64_t extra) const;
  // Caches every full block of `tokens` the pool lacks after the ones it has: each is taken
  // from the free list, filled by `fill(block index in tokens, pool block)`, cached as a free
  // cached block and handed to the lower tier. Stops when no block is free or a block's hash is
  // held by another; never evicts the prefix's own blocks. Returns the tokens of `tokens` now
  // cached from its start.
  using BlockFill = std::function<void(int32_t index, BlockId block)>;
  int32_t import_blocks(const TokenSequence& tokens, uint64_t extra, const BlockFill& fill);

  // Grows sequence `id`'s table to cover num_computed_tokens + (new_computed ? its tokens : 0) +
  // num_new_tokens slots and returns the newly allocated blocks, or nullopt when the pool has
  // too few free blocks (and then nothing changed). A sequence's first call passes its
  // get_computed_blocks() result as `new_computed` (possibly empty), which the table adopts;
  // later calls pass nullptr.
  std::optional<std::vector<BlockId>> allocate_slots(SequenceId id, int32_t num_computed_tokens,
                                                     int32_t num_new_tokens,
                                                     const CachedPrefix* new_computed = nullptr);

  // Hashes and caches the blocks of `id` that `num_computed_tokens` newly filled. `tokens` is
  // the sequence's tokens (at least num_computed_tokens long).
  void cache_full_blocks(SequenceId id, const TokenSequence& tokens, int32_t num_computed_tokens);

  // Releases the sequence's blocks, tail first: its last blocks enter the LRU list first and are
  // evicted first, so a prefix other sequences may share stays cached longest.
  void free(SequenceId id);

  // Gives back the slots of `id` past `num_slots` (speculative tokens the verifier rejected):
  // the table keeps ceil(num_slots / block_size) blocks and the rest return to the pool. Those
  // were allocated for the step that is ending, so nobody else holds or caches them.
  void truncate(SequenceId id, int32_t num_slots);

  // Gives `child` a table for the first num_computed_tokens tokens of `parent`: the full blocks
  // are shared, a partly filled tail gets a fresh block to be filled by the returned copy.
  // nullopt (nothing changed) when no block is free for the tail.
  std::optional<std::vector<BlockCopy>> fork(SequenceId parent, SequenceId child,
                                             int32_t num_computed_tokens);

  bool has(SequenceId id) const { return tables_.count(id) != 0; }
  const std::vector<BlockId>& block_table(SequenceId id) const { return entry(id).blocks; }
  int32_t num_slots(SequenceId id) const { return entry(id).num_slots; }
  int32_t num_hashed_blocks(SequenceId id) const {
    return static_cast<int32_t>(entry(id).hashes.size());
  }
  // The chain hash and PrefixId `id`'s table recorded for its hashed block `index`
  // (< num_hashed_blocks(id)).
  std::pair<BlockHash, PrefixId> hashed_block(SequenceId id, int32_t index) const {
    const Table& t = entry(id);
    return {t.hashes.at(static_cast<size_t>(index)), t.prefix_ids.at(static_cast<size_t>(index))};
  }
  int32_t num_blocks_for(int64_t num_tokens) const;  // ceil(num_tokens / block_size)

  int32_t block_size() const { return pool_.block_size(); }
  int32_t num_blocks() const { return pool_.num_blocks(); }
  bool prefix_caching() const { return prefix_caching_; }
  const BlockPool& pool() const { return pool_; }
  KvCacheStats stats() const;

  void check_invariants() const;

 private:
  struct Table {
    std::vector<BlockId> blocks;       // grows; shrinks only by truncate()
    std::vector<BlockHash> hashes;     // of the first full blocks, hashed in order
    std::vector<PrefixId> prefix_ids;  // [hashes.size()]
    std::vector<PrefixDigest> digests;  // [hashes.size()] with a lower tier
    int32_t num_slots = 0;             // token slots allocated
    uint64_t extra = 0;
  };

  const Table& entry(SequenceId id) const;
  // The blocks the lower tier holds after `prefix`, up to block `num_lookup`, as keys.
  struct LowerKey {
    BlockKey key;
    PrefixDigest digest;
    std::vector<TokenId> tokens;
    bool in_memory = false;  // in host memory when the load started
  };
  // The cached blocks of `tokens`, at most num_lookup, from its start.
  CachedPrefix lookup(const TokenSequence& tokens, uint64_t extra, int32_t num_lookup) const;
  // Caches held block `block` (filled with `tokens`' K/V, chain hash `hash`) as the next block
  // of `prefix`; false (nothing added) when the hash is held by another block.
  bool adopt(CachedPrefix& prefix, BlockId block, BlockHash hash, std::span<const TokenId> tokens,
             const PrefixDigest& digest);
  // Releases the blocks held while loading: `taken` and the rest of `prefix`.
  void release_adopted(const CachedPrefix& prefix, const std::vector<BlockId>& taken);
  std::vector<LowerKey> find_in_lower_tier(const CachedPrefix& prefix, const TokenSequence& tokens,
                                           int32_t num_lookup) const;

  struct PendingLoad {
    uint64_t ticket = 0;
    CachedPrefix prefix;         // the pool's hits it continues (held)
    std::vector<BlockId> taken;  // the blocks read into (held), one per key
    std::vector<LowerKey> keys;
  };

  BlockPool pool_;
  bool prefix_caching_;
  std::vector<PendingLoad> loads_;  // lower-tier loads in flight
  int64_t num_lower_tier_loaded_tokens_ = 0;
  std::unordered_map<SequenceId, Table> tables_;
  LowerTier* lower_ = nullptr;
  std::vector<PrefixDigest> block_digests_;  // [num_blocks] with a lower tier: of hashed blocks
  int64_t num_queried_tokens_ = 0;
  int64_t num_hit_tokens_ = 0;
  int64_t num_lower_tier_hit_tokens_ = 0;
  int64_t num_host_tier_hit_tokens_ = 0;
};

}  // namespace pagoda
