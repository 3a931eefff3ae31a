#include "model/state_storage.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace pagoda {

uint64_t StateStorage::conv_floats(const ModelConfig& c) {
  const uint64_t channels =
      2ull * c.ssm_group_count * c.ssm_state_size + uint64_t{c.ssm_inner_size};
  return channels * (c.ssm_conv_kernel > 0 ? c.ssm_conv_kernel - 1 : 0);
}

uint64_t StateStorage::delta_floats(const ModelConfig& c) {
  return uint64_t{c.ssm_inner_size} * c.ssm_state_size;  // value heads x value dim x key dim
}

uint64_t StateStorage::slot_bytes(const ModelConfig& c) {
  uint64_t layers = 0;
  for (uint32_t l = 0; l < c.num_layers; ++l) layers += c.layer_recurrent(l) ? 1 : 0;
  return layers * (conv_floats(c) + delta_floats(c)) * sizeof(float);
}

int32_t StateStorage::slots_within(uint64_t bytes, uint64_t want, const ModelConfig& c) {
  const uint64_t fit = bytes / std::max<uint64_t>(1, slot_bytes(c));
  return static_cast<int32_t>(std::max<uint64_t>(1, std::min({want, fit, uint64_t{1} << 30})));
}

StateStorage::StateStorage(const ModelConfig& c, int32_t num_slots, Backend* backend)
    : num_slots_(num_slots), slot_floats_(conv_floats(c) + delta_floats(c)),
      conv_floats_(conv_floats(c)), backend_(backend) {
  if (!c.hybrid()) fail("state slots: a ", c.architecture, " model has no recurrent layers");
  if (num_slots < 1) fail("state slots: at least one is needed, got ", num_slots);
  if (backend != nullptr && !backend->host_visible()) {
    fail("the ", backend->name(), " backend does not run hybrid models (", c.architecture,
         "'s Gated DeltaNet layers run on the CPU backend)");
  }
  const uint64_t per_layer = slot_floats_ * static_cast<uint64_t>(num_slots) * sizeof(float);
  for (uint32_t l = 0; l < c.num_layers; ++l) {
    if (!c.layer_recurrent(l)) {
      layers_.push_back(nullptr);
      continue;
    }
    layers_.push_back(backend != nullptr ? backend->allocate(per_layer, "the recurrent state")
                                         : allocate_host_buffer(per_layer, "the recurrent state"));
    std::memset(layers_.back()->data(), 0, per_layer);
    bytes_ += per_layer;
  }
}

float* StateStorage::slot_data(uint32_t layer, int32_t slot) {
  PAGODA_CHECK(layer < layers_.size() && layers_[layer] != nullptr && slot >= 0 &&
               slot < num_slots_);
  return static_cast<float*>(layers_[layer]->data()) + static_cast<uint64_t>(slot) * slot_floats_;
}

float* StateStorage::conv(uint32_t layer, int32_t slot) { return slot_data(layer, slot); }

float* StateStorage::delta(uint32_t layer, int32_t slot) {
  return slot_data(layer, slot) + conv_floats_;
}

void StateStorage::clear(int32_t slot) {
  for (uint32_t l = 0; l < layers_.size(); ++l) {
    if (layers_[l]) std::memset(slot_data(l, slot), 0, slot_floats_ * sizeof(float));
  }
}

void StateStorage::copy(int32_t from, int32_t to) {
  if (from == to) return;
  for (uint32_t l = 0; l < layers_.size(); ++l) {
    if (layers_[l]) std::memcpy(slot_data(l, to), slot_data(l, from), slot_floats_ * sizeof(float));
  }
}

void StateStorage::reserve_snapshots(int32_t count) {
  if (count <= num_snapshots_) return;
  if (max_snapshots_ >= 0 && count > max_snapshots_) {
    fail("state snapshots: a step asks for ", count, ", more than the ", max_snapshots_,
         " budgeted (SpeculativeConfig::max_proposals_per_step bounds a step's proposals)");
  }
  const uint64_t per_layer = slot_floats_ * static_cast<uint64_t>(count) * sizeof(float);
  snapshot_layers_.clear();
  snapshot_layers_.resize(layers_.size());
  for (uint32_t l = 0; l < layers_.size(); ++l) {
    if (!layers_[l]) continue;
    const char* what = "the recurrent state's snapshots (speculative decoding)";
    snapshot_layers_[l] = backend_ != nullptr ? backend_->allocate(per_layer, what)
                                              : allocate_host_buffer(per_layer, what);
  }
  num_snapshots_ = count;
}

float* StateStorage::snapshot_conv(uint32_t layer, int32_t i) {
  PAGODA_CHECK(layer < snapshot_layers_.size() && snapshot_layers_[layer] != nullptr && i >= 0 &&
               i < num_snapshots_);
  return static_cast<float*>(snapshot_layers_[layer]->data()) +
         static_cast<uint64_t>(i) * slot_floats_;
}

float* StateStorage::snapshot_delta(uint32_t layer, int32_t i) {
  return snapshot_conv(layer, i) + conv_floats_;
}

void StateStorage::restore_snapshot(int32_t i, int32_t slot) {
  for (uint32_t l = 0; l < layers_.size(); ++l) {
    if (layers_[l]) {
      std::memcpy(slot_data(l, slot), snapshot_conv(l, i), slot_floats_ * sizeof(float));
    }
  }
}

void StateStorage::save_snapshot(int32_t slot, int32_t i) {
  for (uint32_t l = 0; l < layers_.size(); ++l) {
    if (layers_[l]) {
      std::memcpy(snapshot_conv(l, i), slot_data(l, slot), slot_floats_ * sizeof(float));
    }
  }
}

}  // namespace pagoda
