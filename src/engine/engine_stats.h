// A snapshot of the engine for the server's metrics and the benchmarks: plain numbers, cheap to
// copy across threads.
#pragma once

#include <cstdint>

#include "engine/speculator.h"
#include "kv/host_tier.h"
#include "sched/scheduler.h"

namespace pagoda {

// The disk tier under the prefix cache (--kv-disk, engine/kv_disk.h); zero without one.
struct KvDiskStats {
  bool enabled = false;
  uint64_t records = 0, bytes = 0;  // on disk now, this model's
  uint64_t max_bytes = 0;           // the bound (--kv-disk-gb)
  uint64_t hit_blocks = 0;          // blocks read back into the KV cache
  uint64_t corrupt_records = 0;     // unreadable records found (a miss, deleted)
  uint64_t written_blocks = 0, bytes_written = 0, bytes_read = 0;
  uint64_t dropped_writes = 0;   // blocks not written: the write-behind queue was full
  uint64_t write_failures = 0;   // writes the disk refused (full, read-only, gone)
  uint64_t evicted_blocks = 0;   // records deleted past --kv-disk-gb
  uint64_t num_loads = 0;        // block reads
  double load_seconds = 0, max_load_seconds = 0;  // their time in all, and the longest
};

struct EngineStats {
  // Running / waiting sequences, KV blocks used / free / cached, KV utilization, prefix-cache
  // hit rate in tokens, preemptions, tokens of the last step, steps so far.
  SchedulerStats scheduler;
  int32_t num_requests = 0;           // live requests (a request with n samples counts once)
  int64_t num_finished_requests = 0;  // every sample done (stopped, length, aborted or error)
  int64_t num_computed_tokens = 0;    // token rows run through the model, every step
  int64_t num_generated_tokens = 0;   // tokens sampled, stop tokens included
  int64_t num_block_copies = 0;       // copy-on-write block copies for forked samples
  uint64_t kv_cache_bytes = 0;        // the K/V memory (a draft model's included)
  int32_t block_size = 0;
  SpeculativeStats speculative;       // proposals made and accepted
  KvDiskStats kv_disk;
  HostTierStats kv_host;  // the host-memory tier (--kv-offload-gb); zero without one
  TierLoadStats kv_loads;  // loads from the tiers under the pool (the top one's); zero without
};

}  // namespace pagoda
