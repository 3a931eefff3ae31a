// gpt-oss (llama.cpp's LLM_ARCH_OPENAI_MOE, GGUF architecture "gpt-oss"): Q/K/V and output
// projections with biases; attention sinks (a learned logit per head in every row's softmax
// denominator); sliding-window attention on the even layers, full attention on the odd ones,
// both with the same (YaRN-scaled) RoPE; an RMSNorm named post_attention_norm before a mixture
// of experts whose router and experts carry biases, routed top-k with a softmax over the chosen
// experts' logits, and gpt-oss's clamped SwiGLU (model/moe.h). The experts ship in MXFP4.
#include <cmath>

#include "core/error.h"
#include "model/architecture.h"
#include "model/attention.h"
#include "model/kv_storage.h"
#include "model/model.h"
#include "model/model_file.h"
#include "model/moe.h"
#include "model/weights.h"

namespace pagoda {
namespace {

struct GptOssLayer {
  AttentionWeights attn;           // with Q/K/V biases where the file has them
  std::vector<float> output_bias;  // [hidden], added after Wo
  std::vector<float> sinks;        // [heads]
  std::vector<float> ffn_norm;     // [hidden] (post_attention_norm in GGUF)
  MoeWeights moe;
  bool sliding = false;
};

class GptOssModel final : public Model {
 public:
  explicit GptOssModel(const ModelFile& file);
  void forward_local(Backend& backend, const ForwardBatch& batch, KvStorage& kv,
                     std::vector<float>& logits) override;

 private:
  WeightMatrix token_embd_;  // [vocab, hidden]
  std::vector<GptOssLayer> layers_;
  std::vector<float> output_norm_;
  WeightMatrix output_;
  RopeParams rope_;

  Activations act_;
  MoeScratch moe_scratch_;
};

GptOssModel::GptOssModel(const ModelFile& file) {
  config_ = file.config();
  ModelConfig& c = config_;
  c.validate(file.path());
  if (c.vocab_size == 0 || c.num_experts == 0 || c.num_experts_used == 0) {
    fail(file.path(), ": incomplete gpt-oss metadata (vocabulary size, expert_count and "
         "expert_used_count are required)");
  }
  // The router's softmax over the chosen experts' logits is a softmax over all of them,
  // renormalized over the chosen.
  c.expert_gating_sigmoid = false;
  c.expert_weights_norm = true;
  const Architecture& arch = architecture_of(c, file.path());
  TensorLookup w(file);
  const int64_t hidden = c.hidden_size, q_dim = int64_t{c.num_heads} * c.head_dim,
                kv_dim = int64_t{c.num_kv_heads} * c.head_dim;
  token_embd_ = w.matrix("token_embd.weight", c.vocab_size, hidden);
  for (uint32_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    GptOssLayer L;
    L.attn.norm = w.vector(p + "attn_norm.weight", hidden);
    L.attn.wq = w.matrix(p + "attn_q.weight", q_dim, hidden);
    L.attn.wk = w.matrix(p + "attn_k.weight", kv_dim, hidden);
    L.attn.wv = w.matrix(p + "attn_v.weight", kv_dim, hidden);
    if (w.has(p + "attn_q.bias")) {
      L.attn.bq = w.vector(p + "attn_q.bias", q_dim);
      L.attn.bk = w.vector(p + "attn_k.bias", kv_dim);
      L.attn.bv = w.vector(p + "attn_v.bias", kv_dim);
    }
    L.attn.wo = w.matrix(p + "attn_output.weight", hidden, q_dim);
    L.output_bias = w.vector(p + "attn_output.bias", hidden);
    L.sinks = w.vector(p + "attn_sinks.weight", c.num_heads);
    L.ffn_norm = w.vector(p + "post_attention_norm.weight", hidden);
    L.moe = load_moe(w, p, c);
    if (L.moe.router_bias.empty()) fail(file.path(), ": tensor ", p, "ffn_gate_inp.bias is missing");
    L.moe.glu = ExpertGlu::kClampedSwiglu;
    L.sliding = c.sliding_window != 0 && (l + 1) % arch.global_attention_every != 0;
    layers_.push_back(std::move(L));
  }
  output_norm_ = w.vector("output_norm.weight", hidden);
  c.tie_embeddings = !w.has("output.weight");
  output_ = c.tie_embeddings ? token_embd_ : w.matrix("output.weight", c.vocab_size, hidden);
  weight_bytes_ = w.bytes_used();
  matrices_ = w.matrices_except(c.tie_embeddings ? 0 : token_embd_.id);

  rope_.rotary_dim = static_cast<int32_t>(c.rotary_dim ? c.rotary_dim : c.head_dim);
  rope_.theta = c.rope_theta;
  rope_.split_half = true;  // llama.cpp's NEOX rotation
  if (c.rope_scaling_type == "llama3") {
    fail(file.path(), ": RoPE scaling 'llama3' is not supported for gpt-oss");
  }
  apply_rope_scaling(c, rope_);  // sliding and full layers alike
}

void GptOssModel::forward_local(Backend& be, const ForwardBatch& batch, KvStorage& kv,
                                std::vector<float>& logits) {
  const ModelConfig& c = config_;
  const int64_t n = batch.num_tokens(), hidden = c.hidden_size;
  act_.resize(be, n, c);
  AttentionParams ap = attention_params(c);
  const OutputRows out(batch);
  const LayerStep step{be, c, batch, out, kv, act_};

  be.embed(token_embd_, batch.token_ids.data(), n, act_.x.data());
  for (size_t l = 0; l < layers_.size(); ++l) {
    const GptOssLayer& L = layers_[l];
    ap.window = L.sliding ? static_cast<int32_t>(c.sliding_window) : 0;
    ap.sinks = L.sinks.data();
    const int64_t m = attention_block(step, L.attn, static_cast<int32_t>(l),
                                      l + 1 == layers_.size(), rope_, ap);
    be.add_bias(act_.h.data(), L.output_bias.data(), m, hidden);
    be.add(act_.x.data(), act_.h.data(), m * hidden);
    be.rms_norm(act_.x.data(), L.ffn_norm.data(), m, hidden, c.rms_norm_eps, act_.h.data());
    moe_ffn(be, L.moe, c, act_.h.data(), m, moe_scratch_, act_.x.data());
  }
  compute_logits(be, c, out, output_norm_, output_, act_, logits);
}

}  // namespace

std::unique_ptr<Model> load_gpt_oss(const ModelFile& file, Communicator* tp) {
  if (tp != nullptr) {
    fail(file.path(), ": tensor parallelism is not built for gpt-oss yet; run it as one process");
  }
  return std::make_unique<GptOssModel>(file);
}

}  // namespace pagoda
