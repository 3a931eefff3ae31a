// Gemma 3: embeddings scaled by sqrt(hidden), RMSNorm before and after both the attention and
// the MLP, per-head Q/K RMSNorm, GeGLU (tanh GELU), and interleaved attention: five sliding-window
// layers with RoPE base 10000, then one global layer with the model's own base.
// GGUF files store every norm weight with Gemma's "+1" already added, so plain RMSNorm applies;
// TensorLookup adds it to a Hugging Face checkpoint's norms (the table's hf_norm_offset).
#include <cmath>

#include "core/error.h"
#include "model/kv_storage.h"
#include "model/architecture.h"
#include "model/attention.h"
#include "model/model.h"
#include "model/model_file.h"
#include "model/weights.h"

namespace pagoda {
namespace {

struct GemmaLayer {
  AttentionWeights attn;                         // with per-head Q/K norms, no biases
  std::vector<float> post_attn_norm;             // [hidden]
  std::vector<float> ffn_norm, post_ffn_norm;    // [hidden]
  WeightMatrix w_gate, w_up, w_down;
  bool global = false;
};

class Gemma3Model final : public Model {
 public:
  explicit Gemma3Model(const ModelFile& file);
  void forward_local(Backend& backend, const ForwardBatch& batch, KvStorage& kv,
                     std::vector<float>& logits) override;

 private:
  WeightMatrix token_embd_;  // [vocab, hidden]
  std::vector<GemmaLayer> layers_;
  std::vector<float> output_norm_;
  WeightMatrix output_;
  RopeParams rope_global_, rope_local_;

  Activations act_;
};

Gemma3Model::Gemma3Model(const ModelFile& file) {
  config_ = file.config();
  ModelConfig& c = config_;
  c.validate(file.path());
  if (c.vocab_size == 0 || c.intermediate_size == 0) fail(file.path(), ": incomplete Gemma 3 metadata");
  const Architecture& arch = architecture_of(c, file.path());
  TensorLookup w(file);
  const int64_t hidden = c.hidden_size, q_dim = int64_t{c.num_heads} * c.head_dim,
                kv_dim = int64_t{c.num_kv_heads} * c.head_dim, ff = c.intermediate_size;
  token_embd_ = w.matrix("token_embd.weight", c.vocab_size, hidden);
  for (uint32_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    GemmaLayer L;
    L.attn.norm = w.vector(p + "attn_norm.weight", hidden);
    L.attn.wq = w.matrix(p + "attn_q.weight", q_dim, hidden);
    L.attn.wk = w.matrix(p + "attn_k.weight", kv_dim, hidden);
    L.attn.wv = w.matrix(p + "attn_v.weight", kv_dim, hidden);
    L.attn.q_norm = w.vector(p + "attn_q_norm.weight", c.head_dim);
    L.attn.k_norm = w.vector(p + "attn_k_norm.weight", c.head_dim);
    L.attn.wo = w.matrix(p + "attn_output.weight", hidden, q_dim);
    L.post_attn_norm = w.vector(p + "post_attention_norm.weight", hidden);
    L.ffn_norm = w.vector(p + "ffn_norm.weight", hidden);
    L.w_gate = w.matrix(p + "ffn_gate.weight", ff, hidden);
    L.w_up = w.matrix(p + "ffn_up.weight", ff, hidden);
    L.w_down = w.matrix(p + "ffn_down.weight", hidden, ff);
    L.post_ffn_norm = w.vector(p + "post_ffw_norm.weight", hidden);
    L.global = c.sliding_window == 0 || (l + 1) % arch.global_attention_every == 0;
    layers_.push_back(std::move(L));
  }
  output_norm_ = w.vector("output_norm.weight", hidden);
  c.tie_embeddings = !w.has("output.weight");
  output_ = c.tie_embeddings ? token_embd_ : w.matrix("output.weight", c.vocab_size, hidden);
  weight_bytes_ = w.bytes_used();
  // Untied, the embedding table is only looked up, never multiplied by: nothing to prepare.
  matrices_ = w.matrices_except(c.tie_embeddings ? 0 : token_embd_.id);

  rope_global_.rotary_dim = static_cast<int32_t>(c.head_dim);
  rope_global_.theta = c.rope_theta;
  rope_global_.split_half = true;
  if (c.rope_scaling_type == "llama3") {
    fail(file.path(), ": RoPE scaling 'llama3' is not supported for gemma3");
  }
  rope_local_ = rope_global_;
  rope_local_.theta = arch.local_rope_base;
  apply_rope_scaling(c, rope_global_);  // global layers only
}

void Gemma3Model::forward_local(Backend& be, const ForwardBatch& batch, KvStorage& kv,
                          std::vector<float>& logits) {
  const ModelConfig& c = config_;
  const int64_t n = batch.num_tokens(), hidden = c.hidden_size, ff = c.intermediate_size;
  act_.resize(be, n, c);

  AttentionParams ap = attention_params(c);
  const OutputRows out(batch);
  const LayerStep step{be, c, batch, out, kv, act_};

  be.embed(token_embd_, batch.token_ids.data(), n, act_.x.data());
  be.scale(act_.x.data(), std::sqrt(static_cast<float>(hidden)), n * hidden);
  for (size_t l = 0; l < layers_.size(); ++l) {
    const GemmaLayer& L = layers_[l];
    const RopeParams& rope = L.global ? rope_global_ : rope_local_;
    ap.window = L.global ? 0 : static_cast<int32_t>(c.sliding_window);

    const int64_t m = attention_block(step, L.attn, static_cast<int32_t>(l),
                                      l + 1 == layers_.size(), rope, ap);
    be.rms_norm(act_.h.data(), L.post_attn_norm.data(), m, hidden, c.rms_norm_eps, act_.h.data());
    be.add(act_.x.data(), act_.h.data(), m * hidden);

    be.rms_norm(act_.x.data(), L.ffn_norm.data(), m, hidden, c.rms_norm_eps, act_.h.data());
    be.matmul_many({{&L.w_gate, act_.gate.data()}, {&L.w_up, act_.up.data()}}, act_.h.data(), m);
    be.gelu_mul(act_.gate.data(), act_.up.data(), m * ff, act_.gate.data());
    be.matmul(L.w_down, act_.gate.data(), m, act_.h.data());
    be.rms_norm(act_.h.data(), L.post_ffn_norm.data(), m, hidden, c.rms_norm_eps, act_.h.data());
    be.add(act_.x.data(), act_.h.data(), m * hidden);
  }

  compute_logits(be, c, out, output_norm_, output_, act_, logits);
}

}  // namespace

std::unique_ptr<Model> load_gemma3(const ModelFile& file, Communicator* tp) {
  if (tp != nullptr) {
    fail(file.path(), ": tensor parallelism is not built for Gemma 3 yet (it is for the Llama "
         "family: Llama, Qwen2, Qwen3); run it as one process");
  }
  return std::make_unique<Gemma3Model>(file);
}

}  // namespace pagoda
