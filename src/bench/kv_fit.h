// How many sequences a KV budget holds: paged blocks (each sequence takes the blocks its tokens
// need) against a contiguous allocation of max_model_len slots per sequence in the same memory.
// Shared by `pagoda bench memory` and bench/bench_kv_memory.
#pragma once

#include <cstdint>
#include <vector>

namespace pagoda::bench {

struct KvFit {
  int64_t seq_len = 0;
  int64_t contiguous = 0;  // sequences that fit reserving max_model_len slots each
  int64_t paged = 0;       // sequences that fit taking ceil(seq_len / block_size) blocks each
  double gain() const { return contiguous > 0 ? double(paged) / double(contiguous) : 0.0; }
};

// The budget is num_blocks blocks of block_size slots; kv_bytes_per_token sizes the memory the
// contiguous allocation divides (estimate.h's max_batch_that_fits, weights and overhead aside).
// Throws Error for non-positive sizes or seq_len > max_model_len.
KvFit kv_fit(int64_t num_blocks, int32_t block_size, uint64_t kv_bytes_per_token,
             int64_t max_model_len, int64_t seq_len);

// The lengths a fit table shows: 16, 64, 100, max/4, max/2, max and `extra` (when in
// [1, max]), sorted, without duplicates.
std::vector<int64_t> kv_fit_lengths(int64_t max_model_len, int64_t extra = 0);

}  // namespace pagoda::bench
