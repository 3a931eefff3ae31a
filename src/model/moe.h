// A mixture-of-experts feed-forward block (Mixtral, Qwen3-MoE, gpt-oss): a router scores every
// expert for each token, the token goes through its top-k experts' SwiGLU blocks, and their
// outputs are summed with the router's weights. In a batch each expert multiplies only the tokens routed to
// it, gathered into one product, so its weights are read once per step.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"

namespace pagoda {

class TensorLookup;

// The gated activation of the experts: SiLU(gate) * up, gpt-oss's variant,
// min(gate, 7) * sigmoid(1.702 min(gate, 7)) * (clamp(up, -7, 7) + 1), or Gemma 4's
// GELU(gate) * up (tanh approximation).
enum class ExpertGlu { kSilu, kClampedSwiglu, kGelu };

struct MoeWeights {
  WeightMatrix router;                       // [experts, hidden]
  std::vector<WeightMatrix> gate, up, down;  // per expert: [ff, hidden], [ff, hidden], [hidden, ff]
  // gpt-oss's biases (empty where the model has none): the router's [experts], and per expert
  // the gate's and up's [ff] and down's [hidden].
  std::vector<float> router_bias;
  std::vector<std::vector<float>> gate_bias, up_bias, down_bias;
  // Gemma 4: each expert's output multiplied by its own scale (ffn_down_exps.scale), [experts].
  std::vector<float> down_scale;
  ExpertGlu glu = ExpertGlu::kSilu;
};

// Layer `prefix`'s router (ffn_gate_inp) and stacked expert tensors (ffn_{gate,up,down}_exps),
// each expert a view of its rows; their biases (".bias" beside each ".weight") where the file has
// the router's.
MoeWeights load_moe(const TensorLookup& w, const std::string& prefix, const ModelConfig& c);

// The expert choice of each token: `used` experts and their weights, row after row.
struct Routing {
  std::vector<int32_t> experts;  // [tokens, used]
  std::vector<float> weights;    // [tokens, used]
};

// From router logits [tokens, experts]: softmax (or sigmoid) scores, the `used` best (ties to the
// lower index), their scores as weights, divided by their sum when the model normalizes them.
Routing route(const float* logits, int64_t tokens, const ModelConfig& c);

// out = gpt-oss's clamped SwiGLU of gate and up (ExpertGlu::kClampedSwiglu), over n values.
void clamped_swiglu(const float* gate, const float* up, int64_t n, float* out);

// Buffers moe_ffn grows to the largest batch it has seen: the activations in the backend's
// memory, the router's logits also on the host (the routing runs there).
struct MoeScratch {
  BackendArray logits, x, gate, up, y;
  std::vector<float> host_logits;
};

// Adds the block's output for x[tokens, hidden] to residual[tokens, hidden] (both in the
// backend's memory). Every backend op but the routing: the router's logits go to the host
// (one download a layer where the backend's memory is not the host's), and each expert's
// tokens are gathered, multiplied and added back by the backend.
void moe_ffn(Backend& be, const MoeWeights& w, const ModelConfig& c, const float* x,
             int64_t tokens, MoeScratch& s, float* residual);
// The same with the router's logits [tokens, experts] computed by the caller, in the backend's
// memory (Gemma 4 routes on another input than the experts read).
void moe_experts(Backend& be, const MoeWeights& w, const ModelConfig& c, const float* x,
                 const float* logits, int64_t tokens, MoeScratch& s, float* residual);

}  // namespace pagoda
