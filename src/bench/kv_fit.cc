// Paged against contiguous KV fit (see kv_fit.h).
#include "bench/kv_fit.h"

#include <algorithm>

#include "planner/estimate.h"
#include "core/error.h"

namespace pagoda::bench {

KvFit kv_fit(int64_t num_blocks, int32_t block_size, uint64_t kv_bytes_per_token,
             int64_t max_model_len, int64_t seq_len) {
  if (num_blocks <= 0 || block_size <= 0 || kv_bytes_per_token == 0) {
    fail("KV fit: the budget must hold at least one block");
  }
  if (max_model_len <= 0) fail("KV fit: max model length ", max_model_len, " is not positive");
  if (seq_len <= 0 || seq_len > max_model_len) {
    fail("KV fit: sequence length ", seq_len, " is outside [1, ", max_model_len, "]");
  }
  const uint64_t budget_bytes =
      static_cast<uint64_t>(num_blocks) * static_cast<uint64_t>(block_size) * kv_bytes_per_token;
  KvFit fit;
  fit.seq_len = seq_len;
  fit.contiguous = static_cast<int64_t>(max_batch_that_fits(budget_bytes, 0, 0, kv_bytes_per_token,
                                                            static_cast<uint64_t>(max_model_len)));
  fit.paged = num_blocks / ((seq_len + block_size - 1) / block_size);
  return fit;
}

std::vector<int64_t> kv_fit_lengths(int64_t max_model_len, int64_t extra) {
  std::vector<int64_t> lengths = {
      16, 64, 100, max_model_len / 4, max_model_len / 2, max_model_len, extra};
  std::erase_if(lengths, [&](int64_t len) { return len < 1 || len > max_model_len; });
  std::sort(lengths.begin(), lengths.end());
  lengths.erase(std::unique(lengths.begin(), lengths.end()), lengths.end());
  return lengths;
}

}  // namespace pagoda::bench
