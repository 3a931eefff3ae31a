// The disk tier under the block pool: full KV blocks kept as files in a folder, found again by
// their block hash and prefix across evictions and restarts (issue 36's second tier; the engine's
// side, which moves K/V bytes in and out of it, is engine/kv_disk.h).
//
// One file per block, <folder>/<identity>/<hash>-<digest>.kvb:
//   header  magic "PGKVBLK1", format version, identity digest, block hash, prefix digest,
//           token count, payload bytes, checksum of everything after the header
//   tokens  the block's own token ids (int32), checked exactly on every read
//   payload the block's K/V bytes, opaque here
// A record is written to a temporary name and renamed, so a crash never leaves a half-written
// record under a real name (leftovers are deleted when the folder is opened). A record whose
// header, tokens or checksum does not agree is a miss and is deleted, never read as KV.
//
// What a block's KV means depends on everything before it, so a record is found by a digest of
// the whole prefix (PrefixDigest: 128 bits chained over every block's tokens and extra key,
// keyed by a random secret kept in the folder, so a client cannot craft prompts whose digests
// collide) besides its own tokens, and lives under the identity of the model and KV format
// that computed it (another model's server never reads it).
//
// Writes are queued and written by a thread of the tier's own (write-behind, bounded in bytes:
// past the bound a block is simply not kept); reads are synchronous. The folder is bounded in
// bytes; past the bound the least recently used records go. One process at a time: a second
// opening of the folder fails with one line (a lock). Any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/token.h"
#include "kv/block_hash.h"
#include "kv/lower_tier.h"

namespace pagoda {

struct DiskTierOptions {
  std::string folder;
  uint64_t max_bytes = 0;  // the records of this identity, headers included
  // What makes the same tokens' K/V the same bytes: the model file's identity and every setting
  // that changes K/V (KV type, RoPE, context, adapter). Hashed into the subfolder's name.
  std::string identity;
  uint64_t max_queued_bytes = uint64_t{256} << 20;  // write-behind bound
};

class DiskTier {
 public:
  // Opens (creating) the folder, takes its lock, reads or makes its secret key, and indexes the
  // records of this identity. Throws Error when the folder cannot be used or is in use.
  explicit DiskTier(DiskTierOptions options);
  ~DiskTier();  // writes what is queued
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  // The digest of the prefix through one more block, from its parent's (PrefixDigest{} for the
  // first block). Keyed by this folder's secret.
  PrefixDigest chain(const PrefixDigest& parent, uint64_t extra,
                     std::span<const TokenId> tokens) const;

  // Queues a full block for writing. False when it is not kept: already stored, or the queue is
  // over its byte bound.
  bool put(BlockHash hash, const PrefixDigest& digest, std::span<const TokenId> tokens,
           std::vector<uint8_t> payload);
  // Known to the index (queued or on disk); no disk access.
  bool contains(BlockHash hash, const PrefixDigest& digest) const;
  // The payload of the record, when its header, `tokens` and checksum agree; otherwise a miss
  // (a record that does not read is deleted).
  std::optional<std::vector<uint8_t>> get(BlockHash hash, const PrefixDigest& digest,
                                          std::span<const TokenId> tokens);
  // Waits until every queued block is written (or failed).
  void flush();
  // Keeps a record from going past the bound while a load is to read it: the least recently
  // used unpinned records go instead. Counted (pin and unpin pair up); a key not held yet may be pinned.
  // A pinned record that does not read back still goes.
  void pin(BlockHash hash, const PrefixDigest& digest);
  void unpin(BlockHash hash, const PrefixDigest& digest);

  struct Stats {
    uint64_t records = 0, bytes = 0;  // on disk
    uint64_t hits = 0, misses = 0, corrupt = 0;
    uint64_t written = 0, write_failures = 0, dropped = 0, evicted = 0;
    uint64_t bytes_written = 0, bytes_read = 0;  // whole records, headers included
  };
  Stats stats() const;
  const std::string& folder() const { return dir_; }  // this identity's subfolder

 private:
  struct Key {
    BlockHash hash = 0;
    PrefixDigest digest;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return static_cast<size_t>(k.hash ^ k.digest.lo); }
  };
  struct Pending {
    Key key;
    std::vector<TokenId> tokens;
    std::vector<uint8_t> payload;
  };
  struct Record {
    Key key;
    uint64_t bytes = 0;
  };

  void open_folder(const DiskTierOptions& o);
  void index_records();
  void write_loop();
  bool write_record(const Pending& p);                   // no lock held
  void add_record(const Key& key, uint64_t bytes);       // mutex_ held
  void drop_record(const Key& key, bool delete_file);    // mutex_ held
  void evict_past_bound();                               // mutex_ held
  std::string path_of(const Key& key) const;

  std::string root_, dir_;
  uint64_t max_bytes_, max_queued_bytes_;
  uint64_t identity_ = 0, secret_lo_ = 0, secret_hi_ = 0;
  int lock_fd_ = -1;

  mutable std::mutex mutex_;
  std::condition_variable work_, idle_;
  std::deque<Pending> queue_;
  uint64_t queued_bytes_ = 0;
  bool writing_ = false, stop_ = false;
  std::list<Record> lru_;  // most recently used first
  std::unordered_map<Key, std::list<Record>::iterator, KeyHash> index_;
  std::unordered_map<Key, int, KeyHash> queued_;  // keys in queue_
  std::unordered_map<Key, int, KeyHash> pins_;    // pinned keys: how many times
  Stats stats_;
  std::thread writer_;
};

}  // namespace pagoda
