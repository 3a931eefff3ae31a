// The Llama family: Llama 2/3, Mistral, Mixtral, TinyLlama, SmolLM, stories (llama), Qwen2 (Q/K/V
// biases), Qwen3 (per-head Q/K RMSNorm), Qwen3-MoE and Phi-3 (fused Q/K/V and gate/up). Optional
// tensors and the architecture table switch those parts on; the step
// is one straight line over named buffers.
#include <cmath>

#include "core/error.h"
#include "comm/communicator.h"
#include "model/kv_storage.h"
#include "model/architecture.h"
#include "model/attention.h"
#include "model/model.h"
#include "model/model_file.h"
#include "model/moe.h"
#include "model/tensor_parallel.h"
#include "model/weights.h"

namespace pagoda {
namespace {

struct LayerWeights {
  AttentionWeights attn;                        // Qwen2's biases, Qwen3's per-head norms
  std::vector<float> ffn_norm;                  // [hidden]
  WeightMatrix w_gate, w_up, w_down;            // [ff, hidden], [ff, hidden], [hidden, ff]
  MoeWeights moe;                               // mixture of experts instead: Mixtral, Qwen3-MoE
};

// A 1-D tensor's elements [first, first + count) (a bias of this rank's heads).
std::vector<float> part(std::vector<float> v, int64_t first, int64_t count) {
  return {v.begin() + first, v.begin() + first + count};
}

class LlamaModel final : public Model {
 public:
  LlamaModel(const ModelFile& file, Communicator* tp);
  void forward_local(Backend& backend, const ForwardBatch& batch, KvStorage& kv,
                     std::vector<float>& logits) override;

 private:
  // Tensor parallel: the sum across ranks of a row-parallel product (a no-op when whole).
  void sum_ranks(float* x, int64_t count) {
    if (tp_ != nullptr) tp_->all_reduce_sum(x, static_cast<size_t>(count));
  }

  TensorSlices slices_;                     // this rank's part (everything when whole)
  std::vector<std::vector<uint8_t>> owned_; // column slices copied out of the file
  std::vector<float> local_logits_;
  WeightMatrix token_embd_;          // [vocab, hidden]
  std::vector<LayerWeights> layers_;
  std::vector<float> output_norm_;   // [hidden]
  WeightMatrix output_;              // [vocab, hidden] (the embedding table when tied)
  RopeParams rope_;
  std::vector<float> rope_freq_factors_;
  std::vector<float> rope_long_, rope_short_;  // LongRoPE's divisors (Phi-3 128K), or empty

  Activations act_;
  MoeScratch moe_scratch_;
};

LlamaModel::LlamaModel(const ModelFile& file, Communicator* tp) {
  tp_ = tp;
  config_ = file.config();
  ModelConfig& c = config_;
  c.validate(file.path());
  const Architecture& arch = architecture_of(c, file.path());
  if (!arch.uses_sliding_window) c.sliding_window = 0;
  TensorLookup w(file);
  const int64_t hidden = c.hidden_size, hd = c.head_dim, q_dim = int64_t{c.num_heads} * hd,
                kv_dim = int64_t{c.num_kv_heads} * hd;
  if (c.vocab_size == 0) {
    fail(file.path(), ": the model does not set its vocabulary size");
  }
  if (c.intermediate_size == 0) fail(file.path(), ": the model does not set its FFN size");
  const int64_t ff = c.intermediate_size;
  if (tp != nullptr) {
    if (c.num_experts) {
      fail(file.path(), ": tensor parallelism is not built for mixture-of-experts models yet");
    }
    const std::string down = w.has("blk.0.ffn_down.weight") ? "blk.0.ffn_down.weight" : "";
    const int64_t block = down.empty() ? 1 : dtype_traits(w.type(down)).block_size;
    slices_ = tensor_slices(c, block, file.path(), tp->rank(), tp->size());
  } else {
    slices_ = {{0, c.num_kv_heads}, {0, c.num_heads}, {0, ff}, {0, c.vocab_size}};
  }
  // This rank's rows of Q, K, V (whole heads), gate and up (its feed-forward columns).
  const int64_t q_first = slices_.heads.first * hd, q_rows = slices_.heads.count * hd;
  const int64_t kv_first = slices_.kv_heads.first * hd, kv_rows = slices_.kv_heads.count * hd;
  const int64_t ff_first = slices_.ffn.first, ff_rows = slices_.ffn.count;
  // Its columns of the attention output and down projections: copies unless it has them all.
  auto columns = [&](const std::string& name, int64_t rows, int64_t cols, int64_t first,
                     int64_t count) {
    if (tp == nullptr) return w.matrix(name, rows, cols);
    return w.matrix_cols(name, rows, cols, first, count, owned_.emplace_back());
  };
  token_embd_ = w.matrix_rows("token_embd.weight", slices_.vocab.first, slices_.vocab.count,
                              c.vocab_size, hidden);
  for (uint32_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights L;
    L.attn.norm = w.vector(p + "attn_norm.weight", hidden);
    if (w.has(p + "attn_qkv.weight")) {  // fused, Q then K then V (Phi-3)
      const std::string qkv = p + "attn_qkv.weight";
      const int64_t rows = q_dim + 2 * kv_dim;
      L.attn.wq = w.matrix_rows(qkv, q_first, q_rows, rows, hidden);
      L.attn.wk = w.matrix_rows(qkv, q_dim + kv_first, kv_rows, rows, hidden);
      L.attn.wv = w.matrix_rows(qkv, q_dim + kv_dim + kv_first, kv_rows, rows, hidden);
    } else {
      L.attn.wq = w.matrix_rows(p + "attn_q.weight", q_first, q_rows, q_dim, hidden);
      L.attn.wk = w.matrix_rows(p + "attn_k.weight", kv_first, kv_rows, kv_dim, hidden);
      L.attn.wv = w.matrix_rows(p + "attn_v.weight", kv_first, kv_rows, kv_dim, hidden);
    }
    L.attn.wo = columns(p + "attn_output.weight", hidden, q_dim, q_first, q_rows);
    if (w.has(p + "attn_q.bias")) {
      L.attn.bq = part(w.vector(p + "attn_q.bias", q_dim), q_first, q_rows);
      L.attn.bk = part(w.vector(p + "attn_k.bias", kv_dim), kv_first, kv_rows);
      L.attn.bv = part(w.vector(p + "attn_v.bias", kv_dim), kv_first, kv_rows);
    }
    if (w.has(p + "attn_q_norm.weight")) {
      L.attn.q_norm = w.vector(p + "attn_q_norm.weight", c.head_dim);
      L.attn.k_norm = w.vector(p + "attn_k_norm.weight", c.head_dim);
    }
    L.ffn_norm = w.vector(p + "ffn_norm.weight", hidden);
    if (c.num_experts) {
      L.moe = load_moe(w, p, c);
    } else {
      if (arch.fused_gate_up) {  // ffn_up holds the gate's rows, then the up projection's
        L.w_gate = w.matrix_rows(p + "ffn_up.weight", ff_first, ff_rows, 2 * ff, hidden);
        L.w_up = w.matrix_rows(p + "ffn_up.weight", ff + ff_first, ff_rows, 2 * ff, hidden);
      } else {
        L.w_gate = w.matrix_rows(p + "ffn_gate.weight", ff_first, ff_rows, ff, hidden);
        L.w_up = w.matrix_rows(p + "ffn_up.weight", ff_first, ff_rows, ff, hidden);
      }
      L.w_down = columns(p + "ffn_down.weight", hidden, ff, ff_first, ff_rows);
    }
    layers_.push_back(std::move(L));
  }
  output_norm_ = w.vector("output_norm.weight", hidden);
  c.tie_embeddings = !w.has("output.weight");
  output_ = c.tie_embeddings ? token_embd_
                             : w.matrix_rows("output.weight", slices_.vocab.first,
                                             slices_.vocab.count, c.vocab_size, hidden);
  weight_bytes_ = w.bytes_used();
  // From here on the shape is this rank's: its heads and KV heads (its KV cache holds only
  // those), its feed-forward columns. The vocabulary stays whole: rank 0 gathers the logits.
  c.num_heads = static_cast<uint32_t>(slices_.heads.count);
  c.num_kv_heads = static_cast<uint32_t>(slices_.kv_heads.count);
  c.intermediate_size = static_cast<uint32_t>(ff_rows);
  // Untied, the embedding table is only looked up, never multiplied by: nothing to prepare.
  matrices_ = w.matrices_except(c.tie_embeddings ? 0 : token_embd_.id);

  rope_.rotary_dim = static_cast<int32_t>(c.rotary_dim ? c.rotary_dim : c.head_dim);
  rope_.theta = c.rope_theta;
  rope_.split_half = !(file.gguf() != nullptr && arch.gguf_rope_adjacent_pairs);
  if (w.has("rope_factors_long.weight")) {
    if (!c.rope_scaling_type.empty() && c.rope_scaling_type != "none") {
      fail(file.path(), ": LongRoPE factors beside RoPE scaling '", c.rope_scaling_type, "'");
    }
    rope_long_ = w.vector("rope_factors_long.weight", rope_.rotary_dim / 2);
    rope_short_ = w.vector("rope_factors_short.weight", rope_.rotary_dim / 2);
  } else if (!c.rope_long_factors.empty()) {  // a config.json's rope_scaling
    const size_t pairs = static_cast<size_t>(rope_.rotary_dim / 2);
    if (c.rope_long_factors.size() != pairs || c.rope_short_factors.size() != pairs) {
      fail(file.path(), ": LongRoPE has ", c.rope_long_factors.size(), " long and ",
           c.rope_short_factors.size(), " short factors for ", pairs, " rotary pairs");
    }
    rope_long_ = c.rope_long_factors;
    rope_short_ = c.rope_short_factors;
  }
  apply_rope_scaling(c, rope_);
  // Llama 3 style scaling ships its per-frequency divisors as a tensor.
  if (w.has("rope_freqs.weight")) {
    rope_freq_factors_ = w.vector("rope_freqs.weight", rope_.rotary_dim / 2);
  } else if (c.rope_scaling_type == "llama3") {
    rope_freq_factors_ = llama3_rope_freq_factors(c, rope_.rotary_dim);  // HF checkpoints
  }
  if (!rope_freq_factors_.empty()) rope_.freq_factors = rope_freq_factors_.data();
}

void LlamaModel::forward_local(Backend& be, const ForwardBatch& batch, KvStorage& kv,
                               std::vector<float>& logits) {
  const ModelConfig& c = config_;
  const int64_t n = batch.num_tokens(), hidden = c.hidden_size, ff = c.intermediate_size;
  // The sums across ranks read and write the activations on the host.
  if (tp_ != nullptr && !be.host_visible()) fail("tensor parallelism runs on the cpu backend only");
  act_.resize(be, n, c);

  AttentionParams ap = attention_params(c);
  ap.window = static_cast<int32_t>(c.sliding_window);
  // LongRoPE: the long divisors where the cache holds more than the original context, as
  // llama.cpp chooses by its context size.
  RopeParams rope = rope_;
  if (!rope_long_.empty()) {
    const int64_t capacity = int64_t{kv.num_blocks()} * kv.block_size();
    rope.freq_factors = capacity > c.rope_original_context ? rope_long_.data() : rope_short_.data();
  }
  const OutputRows out(batch);
  const LayerStep step{be, c, batch, out, kv, act_};

  if (tp_ == nullptr) {
    be.embed(token_embd_, batch.token_ids.data(), n, act_.x.data());
  } else {
    embed_slice(be, token_embd_, slices_.vocab, batch.token_ids.data(), n, hidden, act_.x.data());
    sum_ranks(act_.x.data(), n * hidden);
  }
  for (size_t l = 0; l < layers_.size(); ++l) {
    const LayerWeights& L = layers_[l];
    const int64_t m = attention_block(step, L.attn, static_cast<int32_t>(l),
                                      l + 1 == layers_.size(), rope, ap);
    sum_ranks(act_.h.data(), m * hidden);
    be.add(act_.x.data(), act_.h.data(), m * hidden);

    be.rms_norm(act_.x.data(), L.ffn_norm.data(), m, hidden, c.rms_norm_eps, act_.h.data());
    if (c.num_experts) {
      moe_ffn(be, L.moe, c, act_.h.data(), m, moe_scratch_, act_.x.data());
      continue;
    }
    be.matmul_many({{&L.w_gate, act_.gate.data()}, {&L.w_up, act_.up.data()}}, act_.h.data(), m);
    be.silu_mul(act_.gate.data(), act_.up.data(), m * ff, act_.gate.data());
    be.matmul(L.w_down, act_.gate.data(), m, act_.h.data());
    sum_ranks(act_.h.data(), m * hidden);
    be.add(act_.x.data(), act_.h.data(), m * hidden);
  }

  if (tp_ == nullptr) {
    compute_logits(be, c, out, output_norm_, output_, act_, logits);
    return;
  }
  compute_logits(be, c, out.logit_rows(), output_norm_, output_, act_, local_logits_);
  gather_logits(*tp_, c, local_logits_, static_cast<int64_t>(out.logit_rows().size()), logits);
}

}  // namespace

std::unique_ptr<Model> load_llama(const ModelFile& file, Communicator* tp) {
  return std::make_unique<LlamaModel>(file, tp);
}

}  // namespace pagoda
