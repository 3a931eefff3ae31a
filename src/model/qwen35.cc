// Qwen3.5 (llama.cpp's LLM_ARCH_QWEN35, GGUF architecture "qwen35"): a hybrid of Gated DeltaNet
// layers and full-attention layers, every full_attention_interval-th layer attending fully.
// Each layer: x += mixer(rms_norm(x)); x += swiglu_ffn(rms_norm(x)) (post_attention_norm).
//   - Full attention: one Q projection holding each head's query and then its output gate; per
//     head RMSNorm of Q and K; NEOX RoPE on the leading rotary_dim dimensions (llama.cpp's
//     multi-axis IMRoPE, whose axes all carry the text position); attention through the paged
//     K/V cache; the output multiplied by sigmoid(gate) before Wo.
//   - Gated DeltaNet: Q, K, V from one projection (attn_qkv) through a causal conv1d + SiLU
//     continuing from the sequence's conv window; the gated delta rule (model/delta_net.h) from
//     its state, with decay = softplus(alpha + dt_bias) * A (ssm_a holds A = -exp(A_log)) and
//     beta = sigmoid(beta projection); RMSNorm of each value head (ssm_norm) times silu(z)
//     (attn_gate), then ssm_out. The conv window and state live in a slot per sequence
//     (model/state_storage.h), chosen by the batch's state_slots; a sequence whose first token
//     of the step sits at position 0 starts from zeros. A sequence verifying proposals runs its
//     recurrence in pieces (its known tokens, then each proposal) and keeps the state between
//     pieces in the storage's snapshots (ForwardBatch::state_snapshots), which the engine copies
//     back when it rejects proposals: the same arithmetic as one piece, token by token.
// Qwen3.5-MoE (GGUF "qwen35moe") has the same layers with a mixture-of-experts block instead of
// the SwiGLU one: routed experts (softmax over the router, top-k weights normalized; model/moe.h)
// plus a shared expert whose SwiGLU output is scaled by sigmoid(ffn_gate_inp_shexp · input).
#include <algorithm>
#include <cmath>
#include <span>

#include "core/error.h"
#include "model/architecture.h"
#include "model/delta_net.h"
#include "model/kv_storage.h"
#include "model/model.h"
#include "model/model_file.h"
#include "model/moe.h"
#include "model/qwen35_plan.h"
#include "model/state_storage.h"
#include "model/weights.h"

namespace pagoda {
namespace {

struct Qwen35Layer {
  bool recurrent = false;
  std::vector<float> norm, post_norm;  // attn_norm, post_attention_norm
  // Full attention.
  WeightMatrix wq_gate, wk, wv, wo;    // wq_gate: [heads * 2 * head_dim, hidden]
  std::vector<float> q_norm, k_norm;
  // Gated DeltaNet.
  WeightMatrix w_qkv, w_z, w_beta, w_alpha, w_out;
  std::vector<float> conv, dt_bias, a, ssm_norm;  // conv: [channels, taps]
  WeightMatrix ffn_gate, ffn_up, ffn_down;
  // Qwen3.5-MoE: routed experts, the shared expert and its gate vector [hidden].
  MoeWeights moe;
  WeightMatrix shared_gate, shared_up, shared_down;
  std::vector<float> shared_router;
};

// Buffers of the hybrid layers beside Activations, host memory (the CPU backend's).
struct HybridScratch {
  BackendArray q_gate, gate, mix, conv, z, o, beta, decay;
  BackendArray shared_gate, shared_up, shared_out;  // the shared expert's
};

class Qwen35Model final : public Model {
 public:
  explicit Qwen35Model(const ModelFile& file);
  void forward_local(Backend& backend, const ForwardBatch& batch, KvStorage& kv,
                     std::vector<float>& logits) override;

 private:
  void attention_layer(Backend& be, const ForwardBatch& batch, KvStorage& kv,
                       const Qwen35Layer& L, int32_t layer);
  void delta_net_layer(Backend& be, const ForwardBatch& batch, std::span<const int32_t> slots,
                       StateStorage& state, const Qwen35Layer& L, uint32_t layer);
  // The snapshot index of each sequence's first snapshot (ForwardBatch::state_snapshots), and
  // the storage grown to hold them all; empty when the batch keeps none.
  std::vector<int32_t> snapshot_bases(const ForwardBatch& batch, StateStorage& state) const;
  void feed_forward(Backend& be, const Qwen35Layer& L, int64_t n);
  // The MoE block's output added to act_.x, from act_.h (the normed input).
  void experts(Backend& be, const Qwen35Layer& L, int64_t n);
  void load_experts(const TensorLookup& w, const std::string& p, Qwen35Layer& L) const;
  int64_t shared_ffn_size() const { return shared_expert_ffn_size(config_); }
  // The state slots the batch names, or this model's own (slot = the sequence's index) for
  // callers that run one sequence outside an engine (Generator); sequences at position 0 are
  // cleared.
  StateStorage& state_for(Backend& be, const ForwardBatch& batch, KvStorage& kv,
                          std::vector<int32_t>& slots);

  WeightMatrix token_embd_;
  std::vector<Qwen35Layer> layers_;
  std::vector<float> output_norm_;
  WeightMatrix output_;
  RopeParams rope_;
  DeltaNetShape shape_;

  Activations act_;
  HybridScratch scratch_;
  MoeScratch moe_scratch_;
  std::unique_ptr<StateStorage> own_state_;
};

Qwen35Model::Qwen35Model(const ModelFile& file) {
  config_ = file.config();
  ModelConfig& c = config_;
  c.validate(file.path());
  shape_ = {c.ssm_group_count, c.ssm_time_step_rank, c.ssm_state_size, c.ssm_conv_kernel};
  if (c.vocab_size == 0 || shape_.key_heads == 0 || shape_.head_dim == 0 ||
      shape_.value_heads % shape_.key_heads != 0 || c.ssm_inner_size != shape_.value_dim() ||
      shape_.conv_kernel < 1 || shape_.conv_kernel > 17 ||
      (c.num_experts != 0) != (c.architecture == "qwen35moe")) {
    fail(file.path(), ": ", c.architecture, " metadata pagoda does not run (ssm.group_count ",
         c.ssm_group_count, ", ssm.time_step_rank ", c.ssm_time_step_rank, ", ssm.state_size ",
         c.ssm_state_size, ", ssm.inner_size ", c.ssm_inner_size, ", ssm.conv_kernel ",
         c.ssm_conv_kernel, ", expert_count ", c.num_experts, ")");
  }
  if (!c.rope_scaling_type.empty() && c.rope_scaling_type != "none") {
    fail(file.path(), ": RoPE scaling '", c.rope_scaling_type, "' is not supported for ",
         c.architecture);
  }
  TensorLookup w(file);
  const int64_t hidden = c.hidden_size, hd = c.head_dim, ff = c.intermediate_size;
  const int64_t q_dim = int64_t{c.num_heads} * hd, kv_dim = int64_t{c.num_kv_heads} * hd;
  const int64_t channels = shape_.channels(), vd = shape_.value_dim(), hv = shape_.value_heads;
  token_embd_ = w.matrix("token_embd.weight", c.vocab_size, hidden);
  for (uint32_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    Qwen35Layer L;
    L.recurrent = c.layer_recurrent(l);
    L.norm = w.vector(p + "attn_norm.weight", hidden);
    L.post_norm = w.vector(p + "post_attention_norm.weight", hidden);
    if (L.recurrent) {
      L.w_qkv = w.matrix(p + "attn_qkv.weight", channels, hidden);
      L.w_z = w.matrix(p + "attn_gate.weight", vd, hidden);
      L.w_beta = w.matrix(p + "ssm_beta.weight", hv, hidden);
      L.w_alpha = w.matrix(p + "ssm_alpha.weight", hv, hidden);
      L.w_out = w.matrix(p + "ssm_out.weight", hidden, vd);
      L.conv = w.vector(p + "ssm_conv1d.weight", channels * shape_.conv_kernel);
      L.dt_bias = w.vector(p + "ssm_dt.bias", hv);
      L.a = w.vector(p + "ssm_a", hv);
      L.ssm_norm = w.vector(p + "ssm_norm.weight", shape_.head_dim);
    } else {
      L.wq_gate = w.matrix(p + "attn_q.weight", 2 * q_dim, hidden);
      L.wk = w.matrix(p + "attn_k.weight", kv_dim, hidden);
      L.wv = w.matrix(p + "attn_v.weight", kv_dim, hidden);
      L.wo = w.matrix(p + "attn_output.weight", hidden, q_dim);
      L.q_norm = w.vector(p + "attn_q_norm.weight", hd);
      L.k_norm = w.vector(p + "attn_k_norm.weight", hd);
    }
    if (c.num_experts != 0) {
      load_experts(w, p, L);
    } else {
      L.ffn_gate = w.matrix(p + "ffn_gate.weight", ff, hidden);
      L.ffn_up = w.matrix(p + "ffn_up.weight", ff, hidden);
      L.ffn_down = w.matrix(p + "ffn_down.weight", hidden, ff);
    }
    layers_.push_back(std::move(L));
    // Only the full-attention layers hold K/V (KvStorage sizes each layer by its KV heads).
    c.num_kv_heads_per_layer.push_back(c.layer_recurrent(l) ? 0 : c.num_kv_heads);
  }
  output_norm_ = w.vector("output_norm.weight", hidden);
  c.tie_embeddings = !w.has("output.weight");
  output_ = c.tie_embeddings ? token_embd_ : w.matrix("output.weight", c.vocab_size, hidden);
  weight_bytes_ = w.bytes_used();
  matrices_ = w.matrices_except(c.tie_embeddings ? 0 : token_embd_.id);
  rope_.rotary_dim = static_cast<int32_t>(c.rotary_dim ? c.rotary_dim : c.head_dim);
  rope_.theta = c.rope_theta;
  rope_.split_half = true;  // NEOX pairs (i, i + rotary_dim / 2)
}

void Qwen35Model::load_experts(const TensorLookup& w, const std::string& p,
                               Qwen35Layer& L) const {
  const int64_t hidden = config_.hidden_size, sff = shared_ffn_size();
  L.moe = load_moe(w, p, config_);
  L.shared_gate = w.matrix(p + "ffn_gate_shexp.weight", sff, hidden);
  L.shared_up = w.matrix(p + "ffn_up_shexp.weight", sff, hidden);
  L.shared_down = w.matrix(p + "ffn_down_shexp.weight", hidden, sff);
  L.shared_router = w.vector(p + "ffn_gate_inp_shexp.weight", hidden);
}

StateStorage& Qwen35Model::state_for(Backend& be, const ForwardBatch& batch, KvStorage& kv,
                                     std::vector<int32_t>& slots) {
  const int32_t num_seqs = batch.num_seqs();
  StateStorage* state = kv.state();
  if (!batch.state_slots.empty()) {
    if (state == nullptr) fail("qwen35: the batch names state slots but the cache holds none");
    if (static_cast<int32_t>(batch.state_slots.size()) != num_seqs) {
      fail("qwen35: ", batch.state_slots.size(), " state slots for ", num_seqs, " sequences");
    }
    slots = batch.state_slots;
  } else {
    if (own_state_ == nullptr || own_state_->num_slots() < num_seqs) {
      own_state_ = std::make_unique<StateStorage>(config_, std::max(num_seqs, 1), &be);
    }
    state = own_state_.get();
    slots.resize(static_cast<size_t>(num_seqs));
    for (int32_t s = 0; s < num_seqs; ++s) slots[static_cast<size_t>(s)] = s;
  }
  for (int32_t s = 0; s < num_seqs; ++s) {
    const int32_t slot = slots[static_cast<size_t>(s)];
    if (slot < 0 || slot >= state->num_slots()) {
      fail("qwen35: state slot ", slot, " of ", state->num_slots());
    }
    if (batch.query_start[s + 1] > batch.query_start[s] &&
        batch.positions[static_cast<size_t>(batch.query_start[s])] == 0) {
      state->clear(slot);
    }
  }
  return *state;
}

std::vector<int32_t> Qwen35Model::snapshot_bases(const ForwardBatch& batch,
                                                 StateStorage& state) const {
  const int32_t num_seqs = batch.num_seqs();
  if (batch.state_snapshots.empty()) return {};
  if (static_cast<int32_t>(batch.state_snapshots.size()) != num_seqs) {
    fail("qwen35: ", batch.state_snapshots.size(), " snapshot counts for ", num_seqs, " sequences");
  }
  std::vector<int32_t> bases;
  int32_t total = 0;
  for (int32_t s = 0; s < num_seqs; ++s) {
    const int32_t count = batch.state_snapshots[static_cast<size_t>(s)];
    // The proposals follow at least one known token.
    if (count < 0 || count >= batch.query_start[s + 1] - batch.query_start[s]) {
      fail("qwen35: ", count, " snapshots for a sequence of ",
           batch.query_start[s + 1] - batch.query_start[s], " tokens");
    }
    bases.push_back(total);
    total += count;
  }
  state.reserve_snapshots(total);
  return bases;
}

void Qwen35Model::forward_local(Backend& be, const ForwardBatch& batch, KvStorage& kv,
                                std::vector<float>& logits) {
  if (!be.host_visible()) {
    fail("the ", be.name(), " backend does not run hybrid models (qwen35's Gated DeltaNet "
         "layers run on the CPU backend)");
  }
  const ModelConfig& c = config_;
  const int64_t n = batch.num_tokens(), hidden = c.hidden_size;
  act_.resize(be, n, c);
  const char* what = "the Gated DeltaNet activations";
  const int64_t q_dim = int64_t{c.num_heads} * c.head_dim;
  scratch_.q_gate.reserve(be, n * 2 * q_dim, what);
  scratch_.gate.reserve(be, n * q_dim, what);
  scratch_.mix.reserve(be, n * shape_.channels(), what);
  scratch_.conv.reserve(be, n * shape_.channels(), what);
  scratch_.z.reserve(be, n * shape_.value_dim(), what);
  scratch_.o.reserve(be, n * shape_.value_dim(), what);
  scratch_.beta.reserve(be, n * shape_.value_heads, what);
  scratch_.decay.reserve(be, n * shape_.value_heads, what);
  std::vector<int32_t> slots;
  StateStorage& state = state_for(be, batch, kv, slots);

  be.embed(token_embd_, batch.token_ids.data(), n, act_.x.data());
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Qwen35Layer& L = layers_[l];
    be.rms_norm(act_.x.data(), L.norm.data(), n, hidden, c.rms_norm_eps, act_.h.data());
    if (L.recurrent) {
      delta_net_layer(be, batch, slots, state, L, static_cast<uint32_t>(l));
    } else {
      attention_layer(be, batch, kv, L, static_cast<int32_t>(l));
    }
    be.add(act_.x.data(), act_.h.data(), n * hidden);
    feed_forward(be, L, n);
  }
  const OutputRows out(batch);
  out.gather_front(be, act_, q_dim, hidden);
  compute_logits(be, c, out, output_norm_, output_, act_, logits);
}

void Qwen35Model::attention_layer(Backend& be, const ForwardBatch& batch, KvStorage& kv,
                                  const Qwen35Layer& L, int32_t layer) {
  const ModelConfig& c = config_;
  const int64_t n = batch.num_tokens(), hd = c.head_dim, heads = c.num_heads;
  float* q_gate = scratch_.q_gate.data();
  float* q = act_.q.data();
  float* gate = scratch_.gate.data();
  be.matmul_many({{&L.wq_gate, q_gate}, {&L.wk, act_.k.data()}, {&L.wv, act_.v.data()}},
                 act_.h.data(), n);
  for (int64_t t = 0; t < n; ++t) {  // [heads, query | gate] -> Q and the gate apart
    for (int64_t h = 0; h < heads; ++h) {
      const float* src = q_gate + (t * heads + h) * 2 * hd;
      std::copy(src, src + hd, q + (t * heads + h) * hd);
      std::copy(src + hd, src + 2 * hd, gate + (t * heads + h) * hd);
    }
  }
  be.rms_norm(q, L.q_norm.data(), n * heads, hd, c.rms_norm_eps, q);
  be.rms_norm(act_.k.data(), L.k_norm.data(), n * c.num_kv_heads, hd, c.rms_norm_eps,
              act_.k.data());
  be.rope(q, batch.positions.data(), n, heads, hd, rope_);
  be.rope(act_.k.data(), batch.positions.data(), n, c.num_kv_heads, hd, rope_);
  const AttentionBatch ab = batch.attention_batch();
  const AttentionParams ap = attention_params(c);
  be.write_kv(act_.k.data(), act_.v.data(), ab, ap, kv.layer(layer));
  be.attention(q, kv.layer(layer), ab, ap, act_.attn.data());
  float* attn = act_.attn.data();
  for (int64_t i = 0; i < n * heads * hd; ++i) attn[i] *= 1.0f / (1.0f + std::exp(-gate[i]));
  be.matmul(L.wo, attn, n, act_.h.data());
}

void Qwen35Model::delta_net_layer(Backend& be, const ForwardBatch& batch,
                                  std::span<const int32_t> slots, StateStorage& state,
                                  const Qwen35Layer& L, uint32_t layer) {
  const ModelConfig& c = config_;
  const int64_t n = batch.num_tokens(), hv = shape_.value_heads, d = shape_.head_dim;
  const int64_t channels = shape_.channels(), vd = shape_.value_dim();
  float* mix = scratch_.mix.data();
  float* conv = scratch_.conv.data();
  float* beta = scratch_.beta.data();
  float* decay = scratch_.decay.data();
  float* o = scratch_.o.data();
  be.matmul_many({{&L.w_qkv, mix}, {&L.w_z, scratch_.z.data()}, {&L.w_beta, beta},
                  {&L.w_alpha, decay}},
                 act_.h.data(), n);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < hv; ++h) {
      float& b = beta[t * hv + h];
      b = 1.0f / (1.0f + std::exp(-b));
      float& g = decay[t * hv + h];
      const float x = g + L.dt_bias[static_cast<size_t>(h)];
      g = (x > 20.0f ? x : std::log1p(std::exp(x))) * L.a[static_cast<size_t>(h)];
    }
  }
  const int32_t num_seqs = batch.num_seqs();
  const std::vector<int32_t> bases = snapshot_bases(batch, state);
  // Sequence s's tokens in pieces: [0, len - count), then one per proposal; snapshot j (from
  // base j) is the state after piece j, for all pieces but the last.
  auto num_snapshots = [&](int64_t s) {
    return bases.empty() ? 0 : int64_t{batch.state_snapshots[static_cast<size_t>(s)]};
  };
  const int64_t conv_floats = shape_.channels() * (shape_.conv_kernel - 1);
  be.parallel_for(num_seqs, [&](int64_t s) {
    const int64_t first = batch.query_start[s], len = batch.query_start[s + 1] - first;
    float* window = state.conv(layer, slots[static_cast<size_t>(s)]);
    const int64_t count = num_snapshots(s);
    for (int64_t piece = 0, t = 0; piece <= count; ++piece) {
      const int64_t n_piece = piece == 0 ? len - count : 1;
      causal_conv1d_silu(shape_, mix + (first + t) * channels, n_piece, L.conv.data(), window,
                         conv + (first + t) * channels);
      t += n_piece;
      if (piece < count) {
        const auto snap = static_cast<int32_t>(bases[static_cast<size_t>(s)] + piece);
        std::copy(window, window + conv_floats, state.snapshot_conv(layer, snap));
      }
    }
    normalize_qk(shape_, conv + first * channels, len, c.rms_norm_eps);
  });
  // Each (sequence, value head) runs its recurrence alone.
  be.parallel_for(int64_t{num_seqs} * hv, [&](int64_t job) {
    const int64_t s = job / hv, h = job % hv, first = batch.query_start[s];
    const int64_t len = batch.query_start[s + 1] - first;
    float* head_state = state.delta(layer, slots[static_cast<size_t>(s)]) + h * d * d;
    const int64_t count = num_snapshots(s);
    for (int64_t piece = 0, t = 0; piece <= count; ++piece) {
      const int64_t n_piece = piece == 0 ? len - count : 1, at = first + t;
      gated_delta_rule_head(shape_, conv + at * channels, n_piece, h, decay + at * hv,
                            beta + at * hv, head_state, o + at * vd);
      t += n_piece;
      if (piece < count) {
        const auto snap = static_cast<int32_t>(bases[static_cast<size_t>(s)] + piece);
        std::copy(head_state, head_state + d * d, state.snapshot_delta(layer, snap) + h * d * d);
      }
    }
  });
  be.rms_norm(o, L.ssm_norm.data(), n * hv, d, c.rms_norm_eps, o);
  be.silu_mul(scratch_.z.data(), o, n * vd, o);
  be.matmul(L.w_out, o, n, act_.h.data());
}

void Qwen35Model::feed_forward(Backend& be, const Qwen35Layer& L, int64_t n) {
  const ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size, ff = c.intermediate_size;
  be.rms_norm(act_.x.data(), L.post_norm.data(), n, hidden, c.rms_norm_eps, act_.h.data());
  if (c.num_experts != 0) return experts(be, L, n);
  be.matmul_many({{&L.ffn_gate, act_.gate.data()}, {&L.ffn_up, act_.up.data()}}, act_.h.data(), n);
  be.silu_mul(act_.gate.data(), act_.up.data(), n * ff, act_.gate.data());
  be.matmul(L.ffn_down, act_.gate.data(), n, act_.h.data());
  be.add(act_.x.data(), act_.h.data(), n * hidden);
}

void Qwen35Model::experts(Backend& be, const Qwen35Layer& L, int64_t n) {
  const ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size, sff = shared_ffn_size();
  const char* what = "the shared expert's activations";
  scratch_.shared_gate.reserve(be, n * sff, what);
  scratch_.shared_up.reserve(be, n * sff, what);
  scratch_.shared_out.reserve(be, n * hidden, what);
  const float* h = act_.h.data();
  float* gate = scratch_.shared_gate.data();
  float* out = scratch_.shared_out.data();
  be.matmul_many({{&L.shared_gate, gate}, {&L.shared_up, scratch_.shared_up.data()}}, h, n);
  be.silu_mul(gate, scratch_.shared_up.data(), n * sff, gate);
  be.matmul(L.shared_down, gate, n, out);
  be.parallel_for(n, [&](int64_t t) {
    const float* x = h + t * hidden;
    float dot = 0;
    for (int64_t i = 0; i < hidden; ++i) dot += L.shared_router[static_cast<size_t>(i)] * x[i];
    const float scale = 1.0f / (1.0f + std::exp(-dot));
    for (int64_t i = 0; i < hidden; ++i) out[t * hidden + i] *= scale;
  });
  moe_ffn(be, L.moe, c, h, n, moe_scratch_, act_.x.data());
  be.add(act_.x.data(), out, n * hidden);
}

}  // namespace

std::unique_ptr<Model> load_qwen35(const ModelFile& file, Communicator* tp) {
  if (tp != nullptr) {
    fail(file.path(), ": tensor parallelism is not built for ", file.config().architecture,
         "; run it as one process");
  }
  return std::make_unique<Qwen35Model>(file);
}

}  // namespace pagoda
