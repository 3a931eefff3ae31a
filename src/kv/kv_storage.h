// The K/V tensors of every layer, in blocks of `block_size` token slots:
// k, v per layer: [num_blocks, block_size, num_kv_heads, head_dim] float.
// Which blocks a sequence owns is the control plane's business (block tables); this class only
// holds the memory.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace pagoda {

class KvStorage {
 public:
  KvStorage(const ModelConfig& config, int32_t num_blocks, int32_t block_size);

  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return block_size_; }
  float* k(int32_t layer) { return k_[static_cast<size_t>(layer)].data(); }
  float* v(int32_t layer) { return v_[static_cast<size_t>(layer)].data(); }
  uint64_t bytes() const { return bytes_; }

 private:
  int32_t num_blocks_;
  int32_t block_size_;
  uint64_t bytes_ = 0;
  std::vector<std::vector<float>> k_;  // [num_layers][num_blocks * block_size * kv_heads * head_dim]
  std::vector<std::vector<float>> v_;
};

}  // namespace pagoda
