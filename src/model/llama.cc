// The Llama family: Llama 2/3, Mistral, TinyLlama, SmolLM, stories (llama), Qwen2 (Q/K/V
// biases) and Qwen3 (per-head Q/K RMSNorm). Optional tensors switch those parts on; the step
// is one straight line over named buffers.
#include <cmath>

#include "core/error.h"
#include "kv/kv_storage.h"
#include "model/model.h"
#include "model/model_file.h"
#include "model/weights.h"

namespace pagoda {
namespace {

struct LayerWeights {
  std::vector<float> attn_norm;                 // [hidden]
  WeightMatrix wq, wk, wv, wo;                  // [heads*hd, hidden] ... [hidden, heads*hd]
  std::vector<float> bq, bk, bv;                // Qwen2: [heads*hd], [kv*hd], [kv*hd]; else empty
  std::vector<float> q_norm, k_norm;            // Qwen3: [hd]; else empty
  std::vector<float> ffn_norm;                  // [hidden]
  WeightMatrix w_gate, w_up, w_down;            // [ff, hidden], [ff, hidden], [hidden, ff]
};

class LlamaModel final : public Model {
 public:
  explicit LlamaModel(const ModelFile& file);
  void forward(Backend& backend, const ForwardBatch& batch, KvStorage& kv,
               std::vector<float>& logits) override;

 private:
  WeightMatrix token_embd_;          // [vocab, hidden]
  std::vector<LayerWeights> layers_;
  std::vector<float> output_norm_;   // [hidden]
  WeightMatrix output_;              // [vocab, hidden] (the embedding table when tied)
  RopeParams rope_;
  std::vector<float> rope_freq_factors_;

  // Activations, grown to the largest batch seen.
  std::vector<float> x_;     // [num_tokens, hidden] residual stream
  std::vector<float> h_;     // [num_tokens, hidden] normed input of a block
  std::vector<float> q_;     // [num_tokens, heads * hd]
  std::vector<float> k_;     // [num_tokens, kv_heads * hd]
  std::vector<float> v_;     // [num_tokens, kv_heads * hd]
  std::vector<float> attn_;  // [num_tokens, heads * hd]
  std::vector<float> gate_;  // [num_tokens, ff]
  std::vector<float> up_;    // [num_tokens, ff]
  std::vector<float> last_;  // [num_logit_rows, hidden]
};

LlamaModel::LlamaModel(const ModelFile& file) {
  config_ = file.config();
  ModelConfig& c = config_;
  c.validate(file.path());
  TensorLookup w(file);
  const int64_t hidden = c.hidden_size, q_dim = int64_t{c.num_heads} * c.head_dim,
                kv_dim = int64_t{c.num_kv_heads} * c.head_dim;
  if (c.vocab_size == 0) {
    fail(file.path(), ": the model does not set its vocabulary size");
  }
  if (c.intermediate_size == 0) fail(file.path(), ": the model does not set its FFN size");
  token_embd_ = w.matrix("token_embd.weight", c.vocab_size, hidden);
  for (uint32_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights L;
    L.attn_norm = w.vector(p + "attn_norm.weight", hidden);
    L.wq = w.matrix(p + "attn_q.weight", q_dim, hidden);
    L.wk = w.matrix(p + "attn_k.weight", kv_dim, hidden);
    L.wv = w.matrix(p + "attn_v.weight", kv_dim, hidden);
    L.wo = w.matrix(p + "attn_output.weight", hidden, q_dim);
    if (w.has(p + "attn_q.bias")) {
      L.bq = w.vector(p + "attn_q.bias", q_dim);
      L.bk = w.vector(p + "attn_k.bias", kv_dim);
      L.bv = w.vector(p + "attn_v.bias", kv_dim);
    }
    if (w.has(p + "attn_q_norm.weight")) {
      L.q_norm = w.vector(p + "attn_q_norm.weight", c.head_dim);
      L.k_norm = w.vector(p + "attn_k_norm.weight", c.head_dim);
    }
    L.ffn_norm = w.vector(p + "ffn_norm.weight", hidden);
    L.w_gate = w.matrix(p + "ffn_gate.weight", c.intermediate_size, hidden);
    L.w_up = w.matrix(p + "ffn_up.weight", c.intermediate_size, hidden);
    L.w_down = w.matrix(p + "ffn_down.weight", hidden, c.intermediate_size);
    layers_.push_back(std::move(L));
  }
  output_norm_ = w.vector("output_norm.weight", hidden);
  c.tie_embeddings = !w.has("output.weight");
  output_ = c.tie_embeddings ? token_embd_ : w.matrix("output.weight", c.vocab_size, hidden);
  weight_bytes_ = w.bytes_used();

  rope_.rotary_dim = static_cast<int32_t>(c.rotary_dim ? c.rotary_dim : c.head_dim);
  rope_.theta = c.rope_theta;
  // GGUF converters permute Llama's Q/K rows so that rotated pairs are adjacent; Qwen files and
  // Hugging Face checkpoints keep the split-half (GPT-NeoX) layout.
  rope_.split_half = !(file.gguf() != nullptr && c.architecture == "llama");
  if (c.rope_scaling_type == "linear" && c.rope_scaling_factor > 0) {
    rope_.position_scale = 1.0f / c.rope_scaling_factor;
  }
  // Llama 3 style scaling ships its per-frequency divisors as a tensor.
  if (w.has("rope_freqs.weight")) {
    rope_freq_factors_ = w.vector("rope_freqs.weight", rope_.rotary_dim / 2);
  }
  if (!rope_freq_factors_.empty()) rope_.freq_factors = rope_freq_factors_.data();
}

void LlamaModel::forward(Backend& be, const ForwardBatch& batch, KvStorage& kv,
                         std::vector<float>& logits) {
  const ModelConfig& c = config_;
  const int64_t n = batch.num_tokens(), hidden = c.hidden_size, hd = c.head_dim;
  const int64_t q_dim = int64_t{c.num_heads} * hd, kv_dim = int64_t{c.num_kv_heads} * hd;
  const int64_t ff = c.intermediate_size;
  x_.resize(n * hidden);
  h_.resize(n * hidden);
  q_.resize(n * q_dim);
  k_.resize(n * kv_dim);
  v_.resize(n * kv_dim);
  attn_.resize(n * q_dim);
  gate_.resize(n * ff);
  up_.resize(n * ff);

  const AttentionBatch ab = batch.attention_batch();
  AttentionParams ap;
  ap.num_heads = static_cast<int32_t>(c.num_heads);
  ap.num_kv_heads = static_cast<int32_t>(c.num_kv_heads);
  ap.head_dim = static_cast<int32_t>(hd);
  ap.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  ap.window = static_cast<int32_t>(c.sliding_window);

  be.embed(token_embd_, batch.token_ids.data(), n, x_.data());
  for (size_t l = 0; l < layers_.size(); ++l) {
    const LayerWeights& L = layers_[l];
    be.rms_norm(x_.data(), L.attn_norm.data(), n, hidden, c.rms_norm_eps, h_.data());
    be.matmul(L.wq, h_.data(), n, q_.data());
    be.matmul(L.wk, h_.data(), n, k_.data());
    be.matmul(L.wv, h_.data(), n, v_.data());
    if (!L.bq.empty()) {
      be.add_bias(q_.data(), L.bq.data(), n, q_dim);
      be.add_bias(k_.data(), L.bk.data(), n, kv_dim);
      be.add_bias(v_.data(), L.bv.data(), n, kv_dim);
    }
    if (!L.q_norm.empty()) {
      be.rms_norm(q_.data(), L.q_norm.data(), n * c.num_heads, hd, c.rms_norm_eps, q_.data());
      be.rms_norm(k_.data(), L.k_norm.data(), n * c.num_kv_heads, hd, c.rms_norm_eps, k_.data());
    }
    be.rope(q_.data(), batch.positions.data(), n, c.num_heads, hd, rope_);
    be.rope(k_.data(), batch.positions.data(), n, c.num_kv_heads, hd, rope_);
    const auto layer = static_cast<int32_t>(l);
    be.write_kv(k_.data(), v_.data(), ab, ap, kv.k(layer), kv.v(layer));
    be.attention(q_.data(), kv.k(layer), kv.v(layer), ab, ap, attn_.data());
    be.matmul(L.wo, attn_.data(), n, h_.data());
    be.add(x_.data(), h_.data(), n * hidden);

    be.rms_norm(x_.data(), L.ffn_norm.data(), n, hidden, c.rms_norm_eps, h_.data());
    be.matmul(L.w_gate, h_.data(), n, gate_.data());
    be.matmul(L.w_up, h_.data(), n, up_.data());
    be.silu_mul(gate_.data(), up_.data(), n * ff, gate_.data());
    be.matmul(L.w_down, gate_.data(), n, h_.data());
    be.add(x_.data(), h_.data(), n * hidden);
  }

  // Only the rows whose logits are wanted go through the final norm and the vocabulary matrix.
  const auto m = static_cast<int64_t>(batch.logit_rows.size());
  last_.resize(m * hidden);
  for (int64_t r = 0; r < m; ++r) {
    const int64_t t = batch.logit_rows[r];
    std::copy(x_.begin() + t * hidden, x_.begin() + (t + 1) * hidden, last_.begin() + r * hidden);
  }
  be.rms_norm(last_.data(), output_norm_.data(), m, hidden, c.rms_norm_eps, last_.data());
  logits.resize(m * c.vocab_size);
  be.matmul(output_, last_.data(), m, logits.data());
}

}  // namespace

std::unique_ptr<Model> load_llama(const ModelFile& file) {
  return std::make_unique<LlamaModel>(file);
}

}  // namespace pagoda
