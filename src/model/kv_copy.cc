#include "model/kv_copy.h"

#include "core/error.h"

namespace pagoda {

void copy_kv_blocks(Backend& backend, KvStorage& kv, const ModelConfig& config,
                    std::span<const BlockCopy> copies) {
  if (copies.empty()) return;
  // One block of one layer, in bytes.
  const uint64_t block_bytes = uint64_t(kv.block_size()) * KvStorage::slot_bytes(config, kv.type());
  const uint64_t expected_bytes = 2ull * config.num_layers * uint64_t(kv.num_blocks()) * block_bytes;
  if (kv.bytes() != expected_bytes) fail("copy_kv_blocks: the KV storage is not this model's");
  for (const BlockCopy& c : copies) {
    if (c.src < 0 || c.src >= kv.num_blocks() || c.dst < 0 || c.dst >= kv.num_blocks()) {
      fail("copy_kv_blocks: block copy ", c.src, " -> ", c.dst, " outside ", kv.num_blocks(),
           " blocks");
    }
  }
  for (int32_t layer = 0; layer < static_cast<int32_t>(config.num_layers); ++layer) {
    backend.copy_blocks(kv.layer(layer), block_bytes, copies);
  }
}

}  // namespace pagoda
