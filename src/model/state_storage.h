// The recurrent state of a hybrid model's Gated DeltaNet layers (Qwen3.5), one fixed-size slot
// per sequence beside its KV blocks: each recurrent layer's conv1d window (the last
// conv_kernel - 1 inputs of every channel) and its delta-rule state (a value-by-key matrix per
// value head), in the memory of the backend that runs the model, zeroed. Which slot a sequence
// holds is the control plane's business (Scheduler: state slots); this class only holds the
// memory. The forward pass starts a sequence's state afresh at position 0.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"

namespace pagoda {

class StateStorage {
 public:
  // Throws Error for a model without recurrent layers, no slots, or a backend whose memory the
  // host cannot read (the DeltaNet layers run on the host: the CPU backend).
  StateStorage(const ModelConfig& config, int32_t num_slots, Backend* backend = nullptr);

  int32_t num_slots() const { return num_slots_; }
  uint64_t bytes() const { return bytes_; }
  // Floats of one layer's slot: conv window [conv channels, conv_kernel - 1], then the
  // delta-rule state [value heads, value dim, key dim].
  static uint64_t conv_floats(const ModelConfig& config);
  static uint64_t delta_floats(const ModelConfig& config);
  // Bytes of one slot over every recurrent layer.
  static uint64_t slot_bytes(const ModelConfig& config);
  // `want` slots, fewer where they would take more than `bytes`, at least 1.
  static int32_t slots_within(uint64_t bytes, uint64_t want, const ModelConfig& config);

  // The slot's conv window and delta state of model layer `layer` (a recurrent one).
  float* conv(uint32_t layer, int32_t slot);
  float* delta(uint32_t layer, int32_t slot);
  // Zeroes a slot in every layer (a sequence starting at position 0), or copies one (a fork).
  void clear(int32_t slot);
  void copy(int32_t from, int32_t to);

  // Snapshots, for speculative decoding's roll-back: spare slots beside the sequences' (none
  // until reserved, grown on demand, their contents kept only within a step). The forward pass
  // writes a verifying sequence's state after each token before a proposal into them
  // (ForwardBatch::state_snapshots); restore_snapshot copies one back into the sequence's slot
  // once the verifier has accepted that many proposals.
  // Throws Error past the bound set_max_snapshots gave (the memory the engine counted for them).
  void reserve_snapshots(int32_t count);
  void set_max_snapshots(int32_t count) { max_snapshots_ = count; }
  int32_t num_snapshots() const { return num_snapshots_; }
  float* snapshot_conv(uint32_t layer, int32_t i);
  float* snapshot_delta(uint32_t layer, int32_t i);
  void restore_snapshot(int32_t i, int32_t slot);
  void save_snapshot(int32_t slot, int32_t i);  // the other way: a slot's state into snapshot i

 private:
  float* slot_data(uint32_t layer, int32_t slot);

  int32_t num_slots_;
  uint64_t slot_floats_;  // per layer: conv window + delta state
  uint64_t conv_floats_;
  uint64_t bytes_ = 0;
  std::vector<std::unique_ptr<BackendBuffer>> layers_;  // [model layers]; null for attention ones
  Backend* backend_ = nullptr;
  int32_t num_snapshots_ = 0;
  int32_t max_snapshots_ = -1;  // -1: unbounded
  std::vector<std::unique_ptr<BackendBuffer>> snapshot_layers_;  // the same, for the snapshots
};

}  // namespace pagoda
