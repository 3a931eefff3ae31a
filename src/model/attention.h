// The attention block every family's layer runs (llama.cc, gemma3.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/model.h"

namespace pagoda {

// One layer's attention weights, the same in every family; the biases and per-head norms are
// empty where the model has none.
struct AttentionWeights {
  std::vector<float> norm;            // [hidden] RMSNorm before the block
  WeightMatrix wq, wk, wv, wo;        // [heads*hd, hidden] ... [hidden, heads*hd]
  std::vector<float> bq, bk, bv;      // Qwen2: [heads*hd], [kv*hd], [kv*hd]
  std::vector<float> q_norm, k_norm;  // Qwen3, Gemma 3: [hd], each head's RMSNorm
};

// What every layer of one forward pass works on.
struct LayerStep {
  Backend& backend;
  const ModelConfig& config;
  const ForwardBatch& batch;
  const OutputRows& out;
  KvStorage& kv;
  Activations& act;
};

// The attention block of layer `layer`, shared by the families: act.h = rms_norm(act.x); Q, K,
// V = act.h · Wq, Wk, Wv (+ biases, then each head's RMSNorm, where the layer has them); RoPE on
// Q and K; K and V written to the cache; attention; act.h = attention · Wo. The residual add
// (and any norm before it) is the family's. On the last layer (`last`) only the rows whose
// logits are wanted go on past the K/V write (OutputRows gathers them to the front of act.q and
// act.x); returns how many rows act.h and act.x hold from here.
int64_t attention_block(const LayerStep& step, const AttentionWeights& w, int32_t layer,
                        bool last, const RopeParams& rope, const AttentionParams& ap);

}  // namespace pagoda
