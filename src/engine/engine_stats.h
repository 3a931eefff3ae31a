// A snapshot of the engine for the server's metrics and the benchmarks: plain numbers, cheap to
// copy across threads.
#pragma once

#include <cstdint>

#include "engine/speculator.h"
#include "sched/scheduler.h"

namespace pagoda {

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
};

}  // namespace pagoda
