#include "engine/kv_copy.h"

#include <algorithm>

#include "core/error.h"

namespace pagoda {

void copy_kv_blocks(KvStorage& kv, const ModelConfig& config, std::span<const BlockCopy> copies) {
  if (copies.empty()) return;
  const int64_t block_floats =
      int64_t{kv.block_size()} * config.num_kv_heads * config.head_dim;  // one block, one layer
  const uint64_t expected_bytes = 2ull * config.num_layers *
                                  static_cast<uint64_t>(kv.num_blocks()) *
                                  static_cast<uint64_t>(block_floats) * sizeof(float);
  if (kv.bytes() != expected_bytes) fail("copy_kv_blocks: the KV storage is not this model's");
  for (const BlockCopy& c : copies) {
    if (c.src < 0 || c.src >= kv.num_blocks() || c.dst < 0 || c.dst >= kv.num_blocks()) {
      fail("copy_kv_blocks: block copy ", c.src, " -> ", c.dst, " outside ", kv.num_blocks(),
           " blocks");
    }
    if (c.src == c.dst) continue;
    for (int32_t layer = 0; layer < static_cast<int32_t>(config.num_layers); ++layer) {
      for (float* base : {kv.k(layer), kv.v(layer)}) {
        std::copy_n(base + c.src * block_floats, block_floats, base + c.dst * block_floats);
      }
    }
  }
}

}  // namespace pagoda
