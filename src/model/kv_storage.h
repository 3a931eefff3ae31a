// The K/V tensors of every layer that holds its own (ModelConfig::kv_layer_count), each as wide
// as that layer's KV heads times its head size, in blocks of `block_size` token slots, values of one KvType
// (F32, F16, or 8-bit codes with scales; layout in backend/kv_format.h: the backends convert on
// write and read), in the memory of the backend that runs the model. A block is one contiguous
// range of each, so copying a block copies its bytes.
// Which blocks a sequence owns is the control plane's business (block tables); this class only
// holds the memory.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/state_storage.h"

namespace pagoda {

class KvStorage {
 public:
  // Memory from `backend` (device memory on a GPU), or host memory when it is null. Throws
  // Error for an empty cache or memory that cannot be had.
  KvStorage(const ModelConfig& config, int32_t num_blocks, int32_t block_size,
            KvType type = KvType::kF32, Backend* backend = nullptr);

  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return block_size_; }
  int32_t num_layers() const { return static_cast<int32_t>(k_.size()); }
  KvType type() const { return type_; }
  // A layer without K/V of its own (a hybrid model's recurrent layer) has null pointers.
  KvLayer layer(int32_t l) {
    const auto& k = k_[static_cast<size_t>(l)];
    const auto& v = v_[static_cast<size_t>(l)];
    return {k ? k->data() : nullptr, v ? v->data() : nullptr, type_};
  }
  // F32 storage in host memory only (tests that look at values): throws Error otherwise.
  float* k(int32_t layer);
  float* v(int32_t layer);
  uint64_t bytes() const { return bytes_; }

  // A hybrid model's recurrent state slots beside the blocks (null until set; the engine sets
  // them with as many slots as it runs sequences).
  void set_state(std::unique_ptr<StateStorage> state) { state_ = std::move(state); }
  StateStorage* state() const { return state_.get(); }

  // Bytes of one block of layer `l`, for one of K or V.
  uint64_t layer_block_bytes(int32_t l) const {
    return slot_bytes_[static_cast<size_t>(l)] * static_cast<uint64_t>(block_size_);
  }

  // Bytes per token slot of layer `layer` for one of K or V.
  static uint64_t slot_bytes(const ModelConfig& config, KvType type, uint32_t layer);
  // The same for a model whose layers are all alike; throws Error for one whose layers differ
  // (Gemma 4), for callers that copy every layer's block as one size.
  static uint64_t slot_bytes(const ModelConfig& config, KvType type);
  // One token's K and V in every layer that holds them.
  static uint64_t token_bytes(const ModelConfig& config, KvType type);

 private:
  int32_t num_blocks_;
  int32_t block_size_;
  KvType type_;
  uint64_t bytes_ = 0;
  bool host_ = true;  // whether the host may read the memory
  // [layers][num_blocks * block_size * slot bytes of the layer], zeroed; in host memory, huge pages
  // where the system gives them, since attention reads blocks scattered over all of it
  std::vector<std::unique_ptr<BackendBuffer>> k_;
  std::vector<std::unique_ptr<BackendBuffer>> v_;
  std::vector<uint64_t> slot_bytes_;  // [layers]
  std::unique_ptr<StateStorage> state_;
};

}  // namespace pagoda
