// The KV blocks as integers: a fixed number of blocks of `block_size` token slots, their
// reference counts, the LRU list of free blocks and the prefix-cache map from block hash to
// block. The K/V memory itself is KvStorage's; a BlockId indexes both.
//
// A block is in one of three states:
//   used    ref_count > 0: held by that many block tables; never on the free list.
//   cached  ref_count == 0 and hashed: on the free list, still findable by its hash until it is
//           evicted (reused for something else).
//   empty   ref_count == 0, not hashed: on the free list, holds nothing worth keeping.
// Allocation takes the LRU head. Empty blocks are put at the head and cached blocks at the
// tail, so an empty block is always reused before any cached block is evicted.
//
// Invariants (check_invariants()):
//   - ref_count >= 0 for every block; a block is on the free list iff its ref_count is 0;
//   - the free list is a well-linked doubly-linked list holding exactly num_free() blocks;
//   - every map entry hash -> b names a block marked hashed whose stored hash is `hash` and
//     whose stored tokens, extra key and parent hash hash to `hash` again; every hashed block
//     has its map entry; hashed blocks are full by construction (block_size stored tokens);
//   - num_cached() == number of free hashed blocks; num_free() + num_used() == num_blocks().
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kv/block_hash.h"

namespace pagoda {

using BlockId = int32_t;
constexpr BlockId kNoBlock = -1;
constexpr int32_t kDefaultBlockSize = 16;

// How a full block is named in the prefix cache: its chain hash plus what verifies a hit.
struct BlockKey {
  BlockHash hash = 0;                         // hash_fn(parent_hash, extra, tokens)
  BlockHash parent_hash = kRootBlockHash;     // the previous block's hash
  PrefixId parent_prefix_id = kRootPrefixId;  // the verified identity of the previous blocks
  uint64_t extra = 0;
};

class BlockPool {
 public:
  BlockPool(int32_t num_blocks, int32_t block_size = kDefaultBlockSize,
            BlockHashFn hash_fn = hash_block);

  // Blocks that fit in `budget_bytes` when one token's K and V take `kv_bytes_per_token` bytes
  // (all layers). Throws Error when a block would not fit at all or the sizes are not positive.
  static int32_t num_blocks_for_budget(uint64_t budget_bytes, uint64_t kv_bytes_per_token,
                                       int32_t block_size = kDefaultBlockSize);

  int32_t num_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  int32_t block_size() const { return block_size_; }
  int32_t num_free() const { return num_free_; }
  int32_t num_used() const { return num_blocks() - num_free_; }
  int32_t num_cached() const { return num_cached_; }  // free but still hashed
  BlockHashFn hash_fn() const { return hash_fn_; }

  // Told of each cached block allocate() evicts, before its hash is dropped (its K/V is still
  // there): a lower tier that keeps evicted blocks copies it then.
  using EvictHook = std::function<void(BlockId)>;
  void set_evict_hook(EvictHook hook) { evict_hook_ = std::move(hook); }

  int32_t ref_count(BlockId block) const { return at(block).ref_count; }
  bool is_hashed(BlockId block) const { return at(block).hashed; }
  BlockHash hash(BlockId block) const { return at(block).key.hash; }
  PrefixId prefix_id(BlockId block) const { return at(block).prefix_id; }
  std::span<const TokenId> tokens(BlockId block) const { return stored_tokens(block); }  // hashed

  // Takes `num_blocks` blocks from the LRU head (dropping their hashes: eviction), each with
  // ref_count 1. The caller checks num_free() first; asking for more is a bug.
  std::vector<BlockId> allocate(int32_t num_blocks);
  // One more holder. A free block may only be taken this way when it is hashed (a cache hit);
  // it leaves the free list in O(1).
  void acquire(BlockId block);
  // One fewer holder; at zero the block goes back to the free list.
  void release(BlockId block);

  struct Match {
    BlockId block = kNoBlock;
    PrefixId prefix_id = kRootPrefixId;
  };
  // The cached block with this key and exactly these tokens, if any. A block whose hash matches
  // but whose tokens, extra key or prefix differ is not a match.
  std::optional<Match> find(const BlockKey& key, std::span<const TokenId> tokens) const;
  // Whether the block hashed under `hash` is the cached content `prefix_id` names (what keeps
  // a hybrid model's state checkpoint of that prefix usable).
  bool caches(BlockHash hash, PrefixId prefix_id) const;
  // Hashes dropped so far (evictions, and stale entries a new block took over): while this
  // count stands still, every cached PrefixId stays cached.
  uint64_t num_unhashed() const { return num_unhashed_; }

  // Records that held block `block` is now full of `tokens` (block_size of them) under `key`, and
  // returns the PrefixId of its content. When an equal block is already cached, `block` stays
  // unhashed (a duplicate) and the existing block's PrefixId is returned. When the hash is taken
  // by a different content, the entry goes to `block` if the other block is free, otherwise
  // `block` stays unhashed with a fresh PrefixId.
  PrefixId cache(BlockId block, const BlockKey& key, std::span<const TokenId> tokens);

  // The free list from head (next to be allocated) to tail. For tests and debugging.
  std::vector<BlockId> free_blocks_in_eviction_order() const;

  void check_invariants() const;

 private:
  struct Block {
    int32_t ref_count = 0;
    BlockId prev = kNoBlock;  // free-list links, meaningful while ref_count == 0
    BlockId next = kNoBlock;
    bool hashed = false;  // in map_; key, prefix_id and the stored tokens are valid
    BlockKey key;
    PrefixId prefix_id = kRootPrefixId;
  };

  const Block& at(BlockId block) const;
  Block& at(BlockId block) { return const_cast<Block&>(std::as_const(*this).at(block)); }
  std::span<const TokenId> stored_tokens(BlockId block) const;
  bool matches(BlockId block, const BlockKey& key, std::span<const TokenId> tokens) const;
  void unhash(BlockId block);
  void push_front(BlockId block);
  void push_back(BlockId block);
  void unlink(BlockId block);

  int32_t block_size_;
  BlockHashFn hash_fn_;
  std::vector<Block> blocks_;    // [num_blocks]
  std::vector<TokenId> tokens_;  // [num_blocks * block_size] stored tokens of hashed blocks
  std::unordered_map<BlockHash, BlockId> map_;
  BlockId head_ = kNoBlock;  // LRU order: head is evicted first
  BlockId tail_ = kNoBlock;
  int32_t num_free_ = 0;
  int32_t num_cached_ = 0;
  PrefixId next_prefix_id_ = kRootPrefixId + 1;
  uint64_t num_unhashed_ = 0;
  EvictHook evict_hook_;
};

}  // namespace pagoda
