#include "model/kv_copy.h"

#include "core/error.h"

namespace pagoda {

void copy_kv_blocks(Backend& backend, KvStorage& kv, const ModelConfig& config,
                    std::span<const BlockCopy> copies) {
  if (copies.empty()) return;
  if (kv.num_layers() != static_cast<int32_t>(config.kv_layer_count()) ||
      kv.bytes() != KvStorage::token_bytes(config, kv.type()) * uint64_t(kv.num_blocks()) *
                         uint64_t(kv.block_size())) {
    fail("copy_kv_blocks: the KV storage is not this model's");
  }
  for (const BlockCopy& c : copies) {
    if (c.src < 0 || c.src >= kv.num_blocks() || c.dst < 0 || c.dst >= kv.num_blocks()) {
      fail("copy_kv_blocks: block copy ", c.src, " -> ", c.dst, " outside ", kv.num_blocks(),
           " blocks");
    }
  }
  for (int32_t layer = 0; layer < kv.num_layers(); ++layer) {
    if (kv.layer_block_bytes(layer) == 0) continue;  // a recurrent layer holds no K/V
    backend.copy_blocks(kv.layer(layer), kv.layer_block_bytes(layer), copies);
  }
}

}  // namespace pagoda
