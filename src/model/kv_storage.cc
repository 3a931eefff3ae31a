#include "model/kv_storage.h"

#include "core/error.h"

namespace pagoda {

uint64_t KvStorage::slot_bytes(const ModelConfig& config, KvType type, uint32_t layer) {
  return uint64_t{config.layer_kv_heads(layer)} *
         static_cast<uint64_t>(kv_head_bytes(type, config.layer_head_dim(layer)));
}

uint64_t KvStorage::slot_bytes(const ModelConfig& config, KvType type) {
  const uint64_t first = slot_bytes(config, type, 0);
  for (uint32_t l = 1; l < config.num_layers; ++l) {
    if (slot_bytes(config, type, l) != first || config.kv_layer_count() != config.num_layers) {
      fail("the layers of this ", config.architecture, " model hold K/V of different widths "
           "(or none of their own); the K/V disk tier (--kv-disk), which stores every layer's "
           "block at one size, does not handle such models yet");
    }
  }
  return first;
}

uint64_t KvStorage::token_bytes(const ModelConfig& config, KvType type) {
  uint64_t bytes = 0;
  for (uint32_t l = 0; l < config.kv_layer_count(); ++l) bytes += 2 * slot_bytes(config, type, l);
  return bytes;
}

KvStorage::KvStorage(const ModelConfig& config, int32_t num_blocks, int32_t block_size,
                     KvType type, Backend* backend)
    : num_blocks_(num_blocks), block_size_(block_size), type_(type) {
  if (num_blocks <= 0 || block_size <= 0) fail("KV cache needs at least one block of one token");
  host_ = backend == nullptr || backend->host_visible();
  for (uint32_t l = 0; l < config.kv_layer_count(); ++l) {
    slot_bytes_.push_back(slot_bytes(config, type, l));
    const uint64_t per_layer = static_cast<uint64_t>(num_blocks) * block_size * slot_bytes_.back();
    for (auto* side : {&k_, &v_}) {
      if (per_layer == 0) {  // a recurrent layer: no K/V
        side->push_back(nullptr);
        continue;
      }
      side->push_back(backend != nullptr ? backend->allocate(per_layer, "the KV cache")
                                         : allocate_host_buffer(per_layer, "the KV cache"));
    }
    bytes_ += 2 * per_layer;
  }
}

float* KvStorage::k(int32_t layer) {
  if (type_ != KvType::kF32 || !host_) fail("KvStorage::k: the cache holds no F32 values in host memory");
  return static_cast<float*>(k_[static_cast<size_t>(layer)]->data());
}

float* KvStorage::v(int32_t layer) {
  if (type_ != KvType::kF32 || !host_) fail("KvStorage::v: the cache holds no F32 values in host memory");
  return static_cast<float*>(v_[static_cast<size_t>(layer)]->data());
}

}  // namespace pagoda
