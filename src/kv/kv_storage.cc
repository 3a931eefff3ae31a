#include "kv/kv_storage.h"

#include "core/error.h"

namespace pagoda {

KvStorage::KvStorage(const ModelConfig& config, int32_t num_blocks, int32_t block_size)
    : num_blocks_(num_blocks), block_size_(block_size) {
  if (num_blocks <= 0 || block_size <= 0) fail("KV cache needs at least one block of one token");
  const uint64_t per_layer = static_cast<uint64_t>(num_blocks) * block_size * config.num_kv_heads *
                             config.head_dim;
  k_.assign(config.num_layers, std::vector<float>(per_layer));
  v_.assign(config.num_layers, std::vector<float>(per_layer));
  bytes_ = 2 * per_layer * config.num_layers * sizeof(float);
}

}  // namespace pagoda
