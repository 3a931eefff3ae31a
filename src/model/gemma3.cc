// Gemma 3: embeddings scaled by sqrt(hidden), RMSNorm before and after both the attention and
// the MLP, per-head Q/K RMSNorm, GeGLU (tanh GELU), and interleaved attention: five sliding-window
// layers with RoPE base 10000, then one global layer with the model's own base.
// GGUF files store every norm weight with Gemma's "+1" already added, so plain RMSNorm applies.
#include <cmath>

#include "core/error.h"
#include "kv/kv_storage.h"
#include "model/model.h"
#include "model/model_file.h"
#include "model/weights.h"

namespace pagoda {
namespace {

constexpr int kGlobalEvery = 6;             // layers 5, 11, 17, ... attend globally
constexpr float kLocalRopeBase = 10000.0f;  // RoPE base of the sliding-window layers

struct GemmaLayer {
  std::vector<float> attn_norm, post_attn_norm;  // [hidden]
  std::vector<float> q_norm, k_norm;             // [head_dim]
  WeightMatrix wq, wk, wv, wo;
  std::vector<float> ffn_norm, post_ffn_norm;    // [hidden]
  WeightMatrix w_gate, w_up, w_down;
  bool global = false;
};

class Gemma3Model final : public Model {
 public:
  explicit Gemma3Model(const ModelFile& file);
  void forward(Backend& backend, const ForwardBatch& batch, KvStorage& kv,
               std::vector<float>& logits) override;

 private:
  WeightMatrix token_embd_;  // [vocab, hidden]
  std::vector<GemmaLayer> layers_;
  std::vector<float> output_norm_;
  WeightMatrix output_;
  RopeParams rope_global_, rope_local_;

  std::vector<float> x_, h_, q_, k_, v_, attn_, gate_, up_, last_;  // as in llama.cc
};

Gemma3Model::Gemma3Model(const ModelFile& file) {
  if (file.gguf() == nullptr) {
    fail(file.path(), ": Gemma 3 is supported from GGUF files only (their norm weights carry +1)");
  }
  config_ = file.config();
  ModelConfig& c = config_;
  c.validate(file.path());
  if (c.vocab_size == 0 || c.intermediate_size == 0) fail(file.path(), ": incomplete Gemma 3 metadata");
  TensorLookup w(file);
  const int64_t hidden = c.hidden_size, q_dim = int64_t{c.num_heads} * c.head_dim,
                kv_dim = int64_t{c.num_kv_heads} * c.head_dim, ff = c.intermediate_size;
  token_embd_ = w.matrix("token_embd.weight", c.vocab_size, hidden);
  for (uint32_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    GemmaLayer L;
    L.attn_norm = w.vector(p + "attn_norm.weight", hidden);
    L.wq = w.matrix(p + "attn_q.weight", q_dim, hidden);
    L.wk = w.matrix(p + "attn_k.weight", kv_dim, hidden);
    L.wv = w.matrix(p + "attn_v.weight", kv_dim, hidden);
    L.q_norm = w.vector(p + "attn_q_norm.weight", c.head_dim);
    L.k_norm = w.vector(p + "attn_k_norm.weight", c.head_dim);
    L.wo = w.matrix(p + "attn_output.weight", hidden, q_dim);
    L.post_attn_norm = w.vector(p + "post_attention_norm.weight", hidden);
    L.ffn_norm = w.vector(p + "ffn_norm.weight", hidden);
    L.w_gate = w.matrix(p + "ffn_gate.weight", ff, hidden);
    L.w_up = w.matrix(p + "ffn_up.weight", ff, hidden);
    L.w_down = w.matrix(p + "ffn_down.weight", hidden, ff);
    L.post_ffn_norm = w.vector(p + "post_ffw_norm.weight", hidden);
    L.global = c.sliding_window == 0 || (l + 1) % kGlobalEvery == 0;
    layers_.push_back(std::move(L));
  }
  output_norm_ = w.vector("output_norm.weight", hidden);
  c.tie_embeddings = !w.has("output.weight");
  output_ = c.tie_embeddings ? token_embd_ : w.matrix("output.weight", c.vocab_size, hidden);
  weight_bytes_ = w.bytes_used();

  rope_global_.rotary_dim = static_cast<int32_t>(c.head_dim);
  rope_global_.theta = c.rope_theta;
  rope_global_.split_half = true;
  if (c.rope_scaling_type == "linear" && c.rope_scaling_factor > 0) {
    rope_global_.position_scale = 1.0f / c.rope_scaling_factor;  // global layers only
  }
  rope_local_ = rope_global_;
  rope_local_.theta = kLocalRopeBase;
  rope_local_.position_scale = 1.0f;
}

void Gemma3Model::forward(Backend& be, const ForwardBatch& batch, KvStorage& kv,
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

  be.embed(token_embd_, batch.token_ids.data(), n, x_.data());
  be.scale(x_.data(), std::sqrt(static_cast<float>(hidden)), n * hidden);
  for (size_t l = 0; l < layers_.size(); ++l) {
    const GemmaLayer& L = layers_[l];
    const RopeParams& rope = L.global ? rope_global_ : rope_local_;
    ap.window = L.global ? 0 : static_cast<int32_t>(c.sliding_window);

    be.rms_norm(x_.data(), L.attn_norm.data(), n, hidden, c.rms_norm_eps, h_.data());
    be.matmul(L.wq, h_.data(), n, q_.data());
    be.matmul(L.wk, h_.data(), n, k_.data());
    be.matmul(L.wv, h_.data(), n, v_.data());
    be.rms_norm(q_.data(), L.q_norm.data(), n * c.num_heads, hd, c.rms_norm_eps, q_.data());
    be.rms_norm(k_.data(), L.k_norm.data(), n * c.num_kv_heads, hd, c.rms_norm_eps, k_.data());
    be.rope(q_.data(), batch.positions.data(), n, c.num_heads, hd, rope);
    be.rope(k_.data(), batch.positions.data(), n, c.num_kv_heads, hd, rope);
    const auto layer = static_cast<int32_t>(l);
    be.write_kv(k_.data(), v_.data(), ab, ap, kv.k(layer), kv.v(layer));
    be.attention(q_.data(), kv.k(layer), kv.v(layer), ab, ap, attn_.data());
    be.matmul(L.wo, attn_.data(), n, h_.data());
    be.rms_norm(h_.data(), L.post_attn_norm.data(), n, hidden, c.rms_norm_eps, h_.data());
    be.add(x_.data(), h_.data(), n * hidden);

    be.rms_norm(x_.data(), L.ffn_norm.data(), n, hidden, c.rms_norm_eps, h_.data());
    be.matmul(L.w_gate, h_.data(), n, gate_.data());
    be.matmul(L.w_up, h_.data(), n, up_.data());
    be.gelu_mul(gate_.data(), up_.data(), n * ff, gate_.data());
    be.matmul(L.w_down, gate_.data(), n, h_.data());
    be.rms_norm(h_.data(), L.post_ffn_norm.data(), n, hidden, c.rms_norm_eps, h_.data());
    be.add(x_.data(), h_.data(), n * hidden);
  }

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

std::unique_ptr<Model> load_gemma3(const ModelFile& file) {
  return std::make_unique<Gemma3Model>(file);
}

}  // namespace pagoda
