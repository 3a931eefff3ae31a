// The engine's disk tier (issue 36, --kv-disk): the lower tier of the prefix cache
// (kv/lower_tier.h) over a DiskTier folder (kv/disk_tier.h). Full blocks the pool caches are
// copied out of the KV memory and queued to DiskTier's writer thread (write-behind: the step
// copies bytes, never waits on the disk; a full queue drops the block and counts it); a prefix
// lookup that misses the pool reads the blocks it finds back into fresh pool blocks.
//
// Reads run on a reader thread of KvDisk's own: a request whose blocks are on disk has them read
// when it is admitted (LowerTier::start_load, into pool blocks the load holds) while steps go
// on, and its prefill is scheduled once they have landed (Scheduler::land_lower_tier_loads).
//
// The folder keeps blocks of one model and K/V format apart from another's (KvDiskConfig's
// identity: a digest of the model file's header, metadata, tensor table and sampled data pages,
// with every setting that changes K/V), so a server started on another file never reads them.
// Host memory only (the CPU backend): the CUDA backend refuses --kv-disk.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/engine_stats.h"
#include "kv/disk_tier.h"
#include "kv/load_thread.h"
#include "kv/lower_tier.h"
#include "model/config.h"
#include "model/kv_storage.h"

namespace pagoda {

// One KV block as bytes (the disk tier's records and saved prefixes, engine/prefix_file.h): per
// layer that holds K/V, K's block then V's, each one contiguous range of the layer's memory, at
// that layer's width. Host memory only.
uint64_t kv_block_bytes(const KvStorage& kv);
void read_kv_block(KvStorage& kv, BlockId block, uint8_t* out);
void write_kv_block(KvStorage& kv, BlockId block, const uint8_t* in);

struct KvDiskConfig {
  std::string folder;      // empty: no disk tier
  uint64_t max_bytes = 0;  // records of this identity at most
  // The model file and every setting that changes its K/V (cli/kv_disk_options.h makes it).
  std::string identity;
};

class KvDisk final : public LowerTier {
 public:
  // Opens the folder (DiskTier: creates it, takes its lock, indexes this identity's records).
  // Throws Error when it cannot be used, is in use by another process, or `kv` is not in host
  // memory.
  KvDisk(KvStorage& kv, const ModelConfig& model, bool host_visible, const KvDiskConfig& config);
  ~KvDisk() override = default;  // finishes the reads queued (reader_ goes first)
  KvDisk(const KvDisk&) = delete;
  KvDisk& operator=(const KvDisk&) = delete;

  PrefixDigest chain(const PrefixDigest& parent, uint64_t extra,
                     std::span<const TokenId> tokens) const override;
  void store(BlockId block, BlockHash hash, const PrefixDigest& digest,
             std::span<const TokenId> tokens) override;
  bool contains(BlockHash hash, const PrefixDigest& digest) const override;
  // The reader thread's (or a caller's that holds the block): one block read.
  bool load(BlockId block, BlockHash hash, const PrefixDigest& digest,
            std::span<const TokenId> tokens) override;
  // Bytes evicted from the host tier above (kv_host.h) that the disk lacks: queued for writing.
  bool keep(BlockHash hash, const PrefixDigest& digest, std::span<const TokenId> tokens,
            std::vector<uint8_t> payload) override;
  // The records a load is to read are pinned (DiskTier::pin) until it has landed.
  uint64_t start_load(std::vector<BlockLoad> loads) override;
  std::optional<int32_t> finish_load(uint64_t ticket) override;
  void wait_for_loads(std::chrono::milliseconds timeout) override { reader_.wait(timeout); }
  TierLoadStats load_stats() const override { return reader_.stats(); }

  void flush() { tier_.flush(); }
  KvDiskStats stats() const;  // any thread

 private:
  KvStorage& kv_;
  uint64_t block_bytes_;
  uint64_t max_bytes_;

  DiskTier tier_;
  // Written by the reader thread, read by any.
  std::atomic<uint64_t> num_loads_ = 0, load_ns_ = 0, max_load_ns_ = 0;
  uint64_t corrupt_seen_ = 0;  // DiskTier's corrupt count already logged (reader thread)
  // By load ticket, the records it pinned (the caller's thread: start_load and finish_load).
  std::unordered_map<uint64_t, std::vector<BlockLoad>> pinned_;
  LoadThread reader_;  // last: starts once everything above is built
};

}  // namespace pagoda
