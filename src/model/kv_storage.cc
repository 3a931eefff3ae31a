#include "model/kv_storage.h"

#include "core/error.h"

namespace pagoda {

uint64_t KvStorage::slot_bytes(const ModelConfig& config, KvType type) {
  return uint64_t{config.num_kv_heads} * static_cast<uint64_t>(kv_head_bytes(type, config.head_dim));
}

KvStorage::KvStorage(const ModelConfig& config, int32_t num_blocks, int32_t block_size,
                     KvType type, Backend* backend)
    : num_blocks_(num_blocks), block_size_(block_size), type_(type) {
  if (num_blocks <= 0 || block_size <= 0) fail("KV cache needs at least one block of one token");
  const uint64_t per_layer = static_cast<uint64_t>(num_blocks) * block_size *
                             slot_bytes(config, type);
  host_ = backend == nullptr || backend->host_visible();
  auto allocate = [&] {
    return backend != nullptr ? backend->allocate(per_layer, "the KV cache")
                              : allocate_host_buffer(per_layer, "the KV cache");
  };
  for (int64_t l = 0; l < config.num_layers; ++l) {
    k_.push_back(allocate());
    v_.push_back(allocate());
  }
  bytes_ = 2 * per_layer * config.num_layers;
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
