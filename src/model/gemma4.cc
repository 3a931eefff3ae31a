// Gemma 4 (llama.cpp's "gemma4"), the dense layer; every norm is RMSNorm with the file's weight
// as it is (Gemma 4 stores no "+1"), epsilon attention.layer_norm_rms_epsilon.
//
//   x = embed(token) * sqrt(hidden)
//   per-layer inputs (E2B/E4B, when embedding_length_per_layer_input P > 0), for every layer l:
//     pl[l] = (rms_norm(x · per_layer_model_proj / sqrt(hidden), per_layer_proj_norm)[l]
//              + per_layer_token_embd(token)[l] * sqrt(P)) / sqrt(2)
//   each layer l (sliding-window or global by attention.sliding_window_pattern[l]):
//     h = rms_norm(x, attn_norm)
//     q = rms_norm_per_head(h · Wq, attn_q_norm), RoPE
//     when the layer holds K/V (l < block_count - attention.shared_kv_layers):
//       k = h · Wk; v = h · Wv, or k itself where the layer has no attn_v (taken before k's norm)
//       k = rms_norm_per_head(k, attn_k_norm), RoPE;  v = rms_norm_per_head(v) (no weight)
//       K/V written to this layer's cache
//     otherwise it reads the cache of the last layer of its kind below the shared ones (llama.cpp:
//     n_layer_kv_from_start - 2 for a sliding layer, - 1 for a global one) and writes nothing
//     attention with scale 1 (the norms replace 1/sqrt(d)), sliding layers within the window
//     x += rms_norm(attn · Wo, post_attention_norm)
//     x += rms_norm(down(gelu_tanh(rms_norm(x, ffn_norm) · Wgate) * (... · Wup)), post_ffw_norm)
//          (feed_forward_length may be an array: the shared layers' blocks are twice as wide)
//     with experts (26B-A4B), inside that outer norm: rms_norm(that block, post_ffw_norm_1) +
//          rms_norm(experts(rms_norm(x, pre_ffw_norm_2)), post_ffw_norm_2), the experts GeGLU,
//          routed by softmax over (rms_norm(x) * ffn_gate_inp.scale / sqrt(hidden)) · router,
//          top k, weights divided by their sum, each expert's output times ffn_down_exps.scale
//     with per-layer inputs: x += rms_norm(gelu_tanh(x · inp_gate) * pl[l] · proj, post_norm)
//     x *= layer_output_scale (a scalar per layer, when the file has it)
//   logits = cap * tanh(output · rms_norm(x, output_norm) / cap), cap final_logit_softcapping
// Sliding layers have their own head size (key_length_swa), KV head count (head_count_kv is an
// array), rotation (rope.dimension_count_swa) and RoPE base (rope.freq_base_swa); the global
// layers rotate the leading pairs of each head only: rope_freqs.weight divides the other pairs'
// frequencies by 1e30 (Hugging Face's "proportional" RoPE). RoPE pairs (i, i + d/2).
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/architecture.h"
#include "model/kv_storage.h"
#include "model/model.h"
#include "model/model_file.h"
#include "model/moe.h"
#include "model/weights.h"

namespace pagoda {
namespace {

struct Gemma4Layer {
  std::vector<float> attn_norm, q_norm, k_norm, post_attn_norm;
  WeightMatrix wq, wk, wv, wo;  // wk, wv unused where the layer reads another's K/V
  bool own_kv = false, has_v = false;
  std::vector<float> ffn_norm, post_ffn_norm;
  WeightMatrix gate, up, down;
  WeightMatrix inp_gate, proj;  // per-layer input: [P, hidden], [hidden, P]
  std::vector<float> post_norm;
  float out_scale = 1.0f;
  // Mixture of experts beside the dense block; router_norm is ffn_gate_inp.scale / sqrt(hidden).
  bool moe = false;
  MoeWeights experts;
  std::vector<float> router_norm, pre_moe_norm, post_mlp_norm, post_moe_norm;
  bool sliding = false;
  int32_t head_dim = 0, kv_heads = 0, kv_layer = 0;
  int64_t ffn = 0;
};

class Gemma4Model final : public Model {
 public:
  explicit Gemma4Model(const ModelFile& file);
  void forward_local(Backend& backend, const ForwardBatch& batch, KvStorage& kv,
                     std::vector<float>& logits) override;

 private:
  void load_layer(const TensorLookup& w, uint32_t l);
  void per_layer_inputs(Backend& be, const ForwardBatch& batch);
  int64_t attention(Backend& be, const ForwardBatch& batch, const OutputRows& out, KvStorage& kv,
                    uint32_t l);
  void feed_forward(Backend& be, const Gemma4Layer& L, int64_t m);
  void mixture(Backend& be, const Gemma4Layer& L, int64_t m);
  void add_per_layer_input(Backend& be, const Gemma4Layer& L, uint32_t l, int64_t m);
  void soft_cap(const ForwardBatch& batch, std::vector<float>& logits) const;

  WeightMatrix token_embd_, output_;
  WeightMatrix ple_table_, ple_proj_;  // [vocab, layers * P], [layers * P, hidden]
  std::vector<float> ple_proj_norm_, output_norm_, rope_freqs_, ones_;
  std::vector<Gemma4Layer> layers_;
  RopeParams rope_global_, rope_sliding_;
  ModelConfig act_shape_;  // the config with every layer's largest sizes, for Activations
  Activations act_;
  BackendArray ple_tok_, ple_all_, ple_layers_;  // [n, layers * P] twice, [layers, n, P]
  int64_t ple_rows_ = 0;  // rows of each layer's slice in ple_layers_ (the step's tokens)
  BackendArray moe_in_, moe_out_;  // [n, hidden]
  std::vector<float> router_logits_;
  MoeScratch moe_scratch_;
};

Gemma4Model::Gemma4Model(const ModelFile& file) {
  config_ = file.config();
  ModelConfig& c = config_;
  c.validate(file.path());
  if (c.vocab_size == 0 || c.intermediate_size == 0) fail(file.path(), ": incomplete Gemma 4 metadata");
  TensorLookup w(file);
  const int64_t hidden = c.hidden_size, ple = c.per_layer_input_dim;
  token_embd_ = w.matrix("token_embd.weight", c.vocab_size, hidden);
  if (ple != 0) {
    ple_table_ = w.matrix("per_layer_token_embd.weight", c.vocab_size, ple * c.num_layers);
    ple_proj_ = w.matrix("per_layer_model_proj.weight", ple * c.num_layers, hidden);
    ple_proj_norm_ = w.vector("per_layer_proj_norm.weight", ple);
  }
  rope_freqs_ = w.vector("rope_freqs.weight", c.head_dim / 2);
  act_shape_ = c;
  for (uint32_t l = 0; l < c.num_layers; ++l) load_layer(w, l);
  output_norm_ = w.vector("output_norm.weight", hidden);
  c.tie_embeddings = !w.has("output.weight");
  output_ = c.tie_embeddings ? token_embd_ : w.matrix("output.weight", c.vocab_size, hidden);
  weight_bytes_ = w.bytes_used();
  // The tables are only looked up (the token table is multiplied by when tied).
  for (const WeightMatrix& m : w.matrices_except(0)) {
    if (m.id == ple_table_.id || (!c.tie_embeddings && m.id == token_embd_.id)) continue;
    matrices_.push_back(m);
  }
  act_shape_.intermediate_size = std::max<uint32_t>(act_shape_.intermediate_size, c.per_layer_input_dim);
  ones_.assign(std::max(c.head_dim, c.head_dim_sliding), 1.0f);

  rope_global_.rotary_dim = static_cast<int32_t>(c.rotary_dim ? c.rotary_dim : c.head_dim);
  rope_global_.theta = c.rope_theta;
  rope_global_.split_half = true;
  rope_global_.freq_factors = rope_freqs_.data();
  if (!c.rope_scaling_type.empty() && c.rope_scaling_type != "none") {
    fail(file.path(), ": RoPE scaling '", c.rope_scaling_type, "' is not supported for gemma4");
  }
  rope_sliding_.rotary_dim = static_cast<int32_t>(
      c.rotary_dim_sliding ? c.rotary_dim_sliding : c.layer_head_dim(0));
  rope_sliding_.theta = c.rope_theta_sliding;
  rope_sliding_.split_half = true;
}

void Gemma4Model::load_layer(const TensorLookup& w, uint32_t l) {
  const ModelConfig& c = config_;
  const std::string p = "blk." + std::to_string(l) + ".";
  const int64_t hidden = c.hidden_size, hd = c.layer_head_dim(l), q_dim = int64_t{c.num_heads} * hd;
  const auto kv_dim = static_cast<int64_t>(c.kv_row_elements(l));
  Gemma4Layer L;
  L.sliding = c.layer_sliding(l);
  L.head_dim = static_cast<int32_t>(hd);
  L.kv_heads = static_cast<int32_t>(c.layer_kv_heads(l));
  L.kv_layer = static_cast<int32_t>(c.kv_source_layer(l));
  L.own_kv = l < c.kv_layer_count();
  L.ffn = c.layer_ffn_size(l);
  L.attn_norm = w.vector(p + "attn_norm.weight", hidden);
  L.wq = w.matrix(p + "attn_q.weight", q_dim, hidden);
  L.q_norm = w.vector(p + "attn_q_norm.weight", hd);
  if (L.own_kv) {
    L.wk = w.matrix(p + "attn_k.weight", kv_dim, hidden);
    L.k_norm = w.vector(p + "attn_k_norm.weight", hd);
    L.has_v = w.has(p + "attn_v.weight");
    L.wv = L.has_v ? w.matrix(p + "attn_v.weight", kv_dim, hidden) : L.wk;
  }
  L.wo = w.matrix(p + "attn_output.weight", hidden, q_dim);
  L.post_attn_norm = w.vector(p + "post_attention_norm.weight", hidden);
  L.ffn_norm = w.vector(p + "ffn_norm.weight", hidden);
  L.gate = w.matrix(p + "ffn_gate.weight", L.ffn, hidden);
  L.up = w.matrix(p + "ffn_up.weight", L.ffn, hidden);
  L.down = w.matrix(p + "ffn_down.weight", hidden, L.ffn);
  L.post_ffn_norm = w.vector(p + "post_ffw_norm.weight", hidden);
  if (c.per_layer_input_dim != 0) {
    const int64_t ple = c.per_layer_input_dim;
    L.inp_gate = w.matrix(p + "inp_gate.weight", ple, hidden);
    L.proj = w.matrix(p + "proj.weight", hidden, ple);
    L.post_norm = w.vector(p + "post_norm.weight", hidden);
  }
  if (w.has(p + "ffn_gate_inp.weight")) {
    L.moe = true;
    L.experts = load_moe(w, p, c);
    L.experts.glu = ExpertGlu::kGelu;
    L.router_norm = w.vector(p + "ffn_gate_inp.scale", hidden);
    for (float& v : L.router_norm) v /= std::sqrt(static_cast<float>(hidden));
    L.pre_moe_norm = w.vector(p + "pre_ffw_norm_2.weight", hidden);
    L.post_mlp_norm = w.vector(p + "post_ffw_norm_1.weight", hidden);
    L.post_moe_norm = w.vector(p + "post_ffw_norm_2.weight", hidden);
  }
  if (w.has(p + "layer_output_scale.weight")) {
    L.out_scale = w.vector(p + "layer_output_scale.weight", 1).front();
  }
  act_shape_.head_dim = std::max<uint32_t>(act_shape_.head_dim, static_cast<uint32_t>(hd));
  act_shape_.num_kv_heads = std::max<uint32_t>(act_shape_.num_kv_heads, static_cast<uint32_t>(L.kv_heads));
  act_shape_.intermediate_size = std::max<uint32_t>(act_shape_.intermediate_size, static_cast<uint32_t>(L.ffn));
  layers_.push_back(std::move(L));
}

void Gemma4Model::per_layer_inputs(Backend& be, const ForwardBatch& batch) {
  const ModelConfig& c = config_;
  const int64_t n = batch.num_tokens(), ple = c.per_layer_input_dim, layers = c.num_layers;
  const int64_t width = ple * layers;
  const char* what = "the per-layer inputs";
  ple_tok_.reserve(be, n * width, what);
  ple_all_.reserve(be, n * width, what);
  ple_layers_.reserve(be, n * width, what);
  be.embed(ple_table_, batch.token_ids.data(), n, ple_tok_.data());
  be.scale(ple_tok_.data(), std::sqrt(static_cast<float>(ple)), n * width);
  be.matmul(ple_proj_, act_.x.data(), n, ple_all_.data());  // act_.x: the scaled embeddings
  be.scale(ple_all_.data(), 1.0f / std::sqrt(static_cast<float>(c.hidden_size)), n * width);
  be.rms_norm(ple_all_.data(), ple_proj_norm_.data(), n * layers, ple, c.rms_norm_eps,
              ple_all_.data());
  be.add(ple_all_.data(), ple_tok_.data(), n * width);
  be.scale(ple_all_.data(), 1.0f / std::sqrt(2.0f), n * width);
  // [n, layers, P] -> [layers, n, P]: each layer's inputs contiguous.
  std::vector<int32_t> rows(static_cast<size_t>(n));
  for (int64_t l = 0; l < layers; ++l) {
    for (int64_t t = 0; t < n; ++t) rows[static_cast<size_t>(t)] = static_cast<int32_t>(t * layers + l);
    be.gather_rows(ple_all_.data(), rows, ple, ple_layers_.data() + l * n * ple);
  }
  ple_rows_ = n;
}

int64_t Gemma4Model::attention(Backend& be, const ForwardBatch& batch, const OutputRows& out,
                               KvStorage& kv, uint32_t l) {
  const ModelConfig& c = config_;
  const Gemma4Layer& L = layers_[l];
  const int64_t n = batch.num_tokens(), hidden = c.hidden_size, hd = L.head_dim;
  const int64_t heads = c.num_heads, q_dim = heads * hd;
  const RopeParams& rope = L.sliding ? rope_sliding_ : rope_global_;
  const float eps = c.rms_norm_eps;
  be.rms_norm(act_.x.data(), L.attn_norm.data(), n, hidden, eps, act_.h.data());
  if (L.own_kv) {
    // Without attn_v, V is K's projection before K's norm and RoPE.
    be.matmul_many({{&L.wq, act_.q.data()}, {&L.wk, act_.k.data()}, {&L.wv, act_.v.data()}},
                   act_.h.data(), n);
    be.rms_norm(act_.k.data(), L.k_norm.data(), n * L.kv_heads, hd, eps, act_.k.data());
    be.rms_norm(act_.v.data(), ones_.data(), n * L.kv_heads, hd, eps, act_.v.data());
    be.rope(act_.k.data(), batch.positions.data(), n, L.kv_heads, hd, rope);
  } else {
    be.matmul(L.wq, act_.h.data(), n, act_.q.data());
  }
  be.rms_norm(act_.q.data(), L.q_norm.data(), n * heads, hd, eps, act_.q.data());
  be.rope(act_.q.data(), batch.positions.data(), n, heads, hd, rope);

  AttentionParams ap;
  ap.num_heads = static_cast<int32_t>(heads);
  ap.num_kv_heads = L.kv_heads;
  ap.head_dim = L.head_dim;
  ap.scale = 1.0f;
  ap.window = L.sliding ? static_cast<int32_t>(c.sliding_window) : 0;
  const KvLayer cache = kv.layer(L.kv_layer);
  const AttentionBatch ab = batch.attention_batch();
  if (L.own_kv) be.write_kv(act_.k.data(), act_.v.data(), ab, ap, cache);
  const bool narrow = l + 1 == layers_.size() && out.gather_front(be, act_, q_dim, hidden);
  if (narrow && c.per_layer_input_dim != 0) {
    float* mine = ple_layers_.data() + int64_t{l} * ple_rows_ * c.per_layer_input_dim;
    be.gather_rows(mine, batch.logit_rows, c.per_layer_input_dim, mine);
  }
  const int64_t m = narrow ? out.count() : n;
  be.attention(act_.q.data(), cache, narrow ? out.attention_batch() : ab, ap, act_.attn.data());
  be.matmul(L.wo, act_.attn.data(), m, act_.h.data());
  return m;
}

void Gemma4Model::feed_forward(Backend& be, const Gemma4Layer& L, int64_t m) {
  const int64_t hidden = config_.hidden_size;
  const float eps = config_.rms_norm_eps;
  be.rms_norm(act_.x.data(), L.ffn_norm.data(), m, hidden, eps, act_.h.data());
  be.matmul_many({{&L.gate, act_.gate.data()}, {&L.up, act_.up.data()}}, act_.h.data(), m);
  be.gelu_mul(act_.gate.data(), act_.up.data(), m * L.ffn, act_.gate.data());
  be.matmul(L.down, act_.gate.data(), m, act_.h.data());
  if (L.moe) {
    be.rms_norm(act_.h.data(), L.post_mlp_norm.data(), m, hidden, eps, act_.h.data());
    mixture(be, L, m);
  }
  be.rms_norm(act_.h.data(), L.post_ffn_norm.data(), m, hidden, eps, act_.h.data());
  be.add(act_.x.data(), act_.h.data(), m * hidden);
}

void Gemma4Model::mixture(Backend& be, const Gemma4Layer& L, int64_t m) {
  const ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size;
  const float eps = c.rms_norm_eps;
  moe_in_.reserve(be, m * hidden, "the experts' input");
  moe_out_.reserve(be, m * hidden, "the experts' output");
  router_logits_.resize(static_cast<size_t>(m * c.num_experts));
  be.rms_norm(act_.x.data(), L.router_norm.data(), m, hidden, eps, moe_in_.data());
  be.matmul(L.experts.router, moe_in_.data(), m, router_logits_.data());
  be.rms_norm(act_.x.data(), L.pre_moe_norm.data(), m, hidden, eps, moe_in_.data());
  std::fill_n(moe_out_.data(), m * hidden, 0.0f);  // host memory: moe_experts runs on the host
  moe_experts(be, L.experts, c, moe_in_.data(), router_logits_.data(), m, moe_scratch_,
              moe_out_.data());
  be.rms_norm(moe_out_.data(), L.post_moe_norm.data(), m, hidden, eps, moe_out_.data());
  be.add(act_.h.data(), moe_out_.data(), m * hidden);
}

void Gemma4Model::add_per_layer_input(Backend& be, const Gemma4Layer& L, uint32_t l, int64_t m) {
  const int64_t hidden = config_.hidden_size, ple = config_.per_layer_input_dim;
  const float* mine = ple_layers_.data() + int64_t{l} * ple_rows_ * ple;
  be.matmul(L.inp_gate, act_.x.data(), m, act_.gate.data());
  be.gelu_mul(act_.gate.data(), mine, m * ple, act_.gate.data());
  be.matmul(L.proj, act_.gate.data(), m, act_.h.data());
  be.rms_norm(act_.h.data(), L.post_norm.data(), m, hidden, config_.rms_norm_eps, act_.h.data());
  be.add(act_.x.data(), act_.h.data(), m * hidden);
}

void Gemma4Model::soft_cap(const ForwardBatch& batch, std::vector<float>& logits) const {
  const float cap = config_.final_logit_softcap;
  if (cap <= 0 || batch.hidden_states) return;
  size_t rows = batch.logit_rows.size();
  for (uint8_t hidden : batch.hidden_row) rows -= hidden != 0 ? 1 : 0;  // their rows come after
  const size_t count = std::min(logits.size(), rows * size_t{config_.vocab_size});
  for (size_t i = 0; i < count; ++i) logits[i] = cap * std::tanh(logits[i] / cap);
}

void Gemma4Model::forward_local(Backend& be, const ForwardBatch& batch, KvStorage& kv,
                                std::vector<float>& logits) {
  const ModelConfig& c = config_;
  const int64_t n = batch.num_tokens(), hidden = c.hidden_size;
  if (!be.host_visible()) fail("gemma4 runs on the CPU backends only (not yet on CUDA)");
  act_.resize(be, n, act_shape_);
  const OutputRows out(batch);
  be.embed(token_embd_, batch.token_ids.data(), n, act_.x.data());
  be.scale(act_.x.data(), std::sqrt(static_cast<float>(hidden)), n * hidden);
  if (c.per_layer_input_dim != 0) per_layer_inputs(be, batch);
  for (uint32_t l = 0; l < layers_.size(); ++l) {
    const Gemma4Layer& L = layers_[l];
    const int64_t m = attention(be, batch, out, kv, l);
    be.rms_norm(act_.h.data(), L.post_attn_norm.data(), m, hidden, c.rms_norm_eps, act_.h.data());
    be.add(act_.x.data(), act_.h.data(), m * hidden);
    feed_forward(be, L, m);
    if (c.per_layer_input_dim != 0) add_per_layer_input(be, L, l, m);
    if (L.out_scale != 1.0f) be.scale(act_.x.data(), L.out_scale, m * hidden);
  }
  compute_logits(be, c, out, output_norm_, output_, act_, logits);
  soft_cap(batch, logits);
}

}  // namespace

std::unique_ptr<Model> load_gemma4(const ModelFile& file, Communicator* tp) {
  if (tp != nullptr) {
    fail(file.path(), ": tensor parallelism is not built for Gemma 4 yet; run it as one process");
  }
  return std::make_unique<Gemma4Model>(file);
}

}  // namespace pagoda
