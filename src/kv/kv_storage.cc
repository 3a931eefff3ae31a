#include "kv/kv_storage.h"

#include "core/error.h"

namespace pagoda {

uint64_t KvStorage::slot_bytes(const ModelConfig& config, DType type) {
  return uint64_t{config.num_kv_heads} * config.head_dim * (type == DType::kF16 ? 2 : 4);
}

KvStorage::KvStorage(const ModelConfig& config, int32_t num_blocks, int32_t block_size,
                     DType type)
    : num_blocks_(num_blocks), block_size_(block_size), type_(type) {
  if (num_blocks <= 0 || block_size <= 0) fail("KV cache needs at least one block of one token");
  if (type != DType::kF32 && type != DType::kF16) fail("the KV cache type must be f32 or f16");
  const uint64_t per_layer = static_cast<uint64_t>(num_blocks) * block_size *
                             slot_bytes(config, type);  // bytes, a multiple of 4: head_dim >= 2
  for (int64_t l = 0; l < config.num_layers; ++l) {
    k_.emplace_back(static_cast<size_t>(per_layer), "the KV cache");
    v_.emplace_back(static_cast<size_t>(per_layer), "the KV cache");
  }
  bytes_ = 2 * per_layer * config.num_layers;
}

float* KvStorage::k(int32_t layer) {
  if (type_ != DType::kF32) fail("KvStorage::k: the cache holds F16 values");
  return reinterpret_cast<float*>(k_[static_cast<size_t>(layer)].data());
}

float* KvStorage::v(int32_t layer) {
  if (type_ != DType::kF32) fail("KvStorage::v: the cache holds F16 values");
  return reinterpret_cast<float*>(v_[static_cast<size_t>(layer)].data());
}

DType parse_kv_cache_type(const std::string& name) {
  if (name == "f32") return DType::kF32;
  if (name == "f16") return DType::kF16;
  fail("unknown KV cache type '", name, "': use f32 or f16");
}

}  // namespace pagoda
