// BERT, the encoder of sentence-transformers' models (all-MiniLM, bge): token, absolute position
// and token-type embeddings summed and layer-normed; each layer attends both ways within its
// sequence, then adds and layer-norms after attention and after the GELU (erf) feed-forward
// block. No cache, no logits: the output is every token's last hidden state, which the
// embedder pools. Tensor names are llama.cpp's ("bert" in src/llama-arch.cpp); a Hugging Face
// folder's are mapped to them by the architecture table. Token types are all 0 ("sentence A"),
// as llama.cpp's are.
#include "core/error.h"
#include "model/model.h"
#include "model/model_file.h"
#include "model/weights.h"

namespace pagoda {
namespace {

struct Norm {
  std::vector<float> weight, bias;
};

struct BertLayer {
  WeightMatrix wq, wk, wv, wo, up, down;
  std::vector<float> bq, bk, bv, bo, b_up, b_down;
  Norm attn_out_norm, out_norm;
};

class BertModel final : public Model {
 public:
  explicit BertModel(const ModelFile& file);
  void forward_local(Backend&, const ForwardBatch&, KvStorage&, std::vector<float>&) override {
    fail("bert is an embedding model: it has no logits (use pagoda embed or /v1/embeddings)");
  }
  void hidden_states(Backend& backend, const ForwardBatch& batch, std::vector<float>& out) override;

 private:
  Norm norm(const TensorLookup& w, const std::string& name) const {
    const int64_t hidden = config_.hidden_size;
    return {w.vector(name + ".weight", hidden), w.vector(name + ".bias", hidden)};
  }
  void layer(Backend& be, const BertLayer& L, const ForwardBatch& batch);

  WeightMatrix token_embd_, position_embd_, token_types_;
  Norm embd_norm_;
  std::vector<BertLayer> layers_;
  Activations act_;
  std::vector<int32_t> zeros_;  // token type ids
};

BertModel::BertModel(const ModelFile& file) {
  config_ = file.config();
  ModelConfig& c = config_;
  c.validate(file.path());
  if (c.vocab_size == 0 || c.intermediate_size == 0 || c.context_length == 0) {
    fail(file.path(), ": incomplete BERT hyper-parameters (vocabulary, feed-forward or context size)");
  }
  if (c.num_kv_heads != c.num_heads) fail(file.path(), ": BERT has as many KV heads as heads");
  TensorLookup w(file);
  const int64_t hidden = c.hidden_size, dim = int64_t{c.num_heads} * c.head_dim,
                ff = c.intermediate_size;
  token_embd_ = w.matrix("token_embd.weight", c.vocab_size, hidden);
  position_embd_ = w.matrix("position_embd.weight", c.context_length, hidden);
  if (w.has("token_types.weight")) {
    const int64_t types = c.token_type_count ? c.token_type_count : 2;
    token_types_ = w.matrix("token_types.weight", types, hidden);
  }
  embd_norm_ = norm(w, "token_embd_norm");
  for (uint32_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    BertLayer L;
    L.wq = w.matrix(p + "attn_q.weight", dim, hidden);
    L.wk = w.matrix(p + "attn_k.weight", dim, hidden);
    L.wv = w.matrix(p + "attn_v.weight", dim, hidden);
    L.wo = w.matrix(p + "attn_output.weight", hidden, dim);
    L.up = w.matrix(p + "ffn_up.weight", ff, hidden);
    L.down = w.matrix(p + "ffn_down.weight", hidden, ff);
    L.bq = w.vector(p + "attn_q.bias", dim);
    L.bk = w.vector(p + "attn_k.bias", dim);
    L.bv = w.vector(p + "attn_v.bias", dim);
    L.bo = w.vector(p + "attn_output.bias", hidden);
    L.b_up = w.vector(p + "ffn_up.bias", ff);
    L.b_down = w.vector(p + "ffn_down.bias", hidden);
    L.attn_out_norm = norm(w, p + "attn_output_norm");
    L.out_norm = norm(w, p + "layer_output_norm");
    layers_.push_back(std::move(L));
  }
  weight_bytes_ = w.bytes_used();
  // The three embedding tables are only looked up, never multiplied by.
  for (const WeightMatrix& m : w.matrices_except(token_embd_.id)) {
    if (m.id != position_embd_.id && m.id != token_types_.id) matrices_.push_back(m);
  }
}

void BertModel::layer(Backend& be, const BertLayer& L, const ForwardBatch& batch) {
  const ModelConfig& c = config_;
  const int64_t n = batch.num_tokens(), hidden = c.hidden_size, ff = c.intermediate_size,
                dim = int64_t{c.num_heads} * c.head_dim;
  float *x = act_.x.data(), *h = act_.h.data();
  be.matmul_many({{&L.wq, act_.q.data()}, {&L.wk, act_.k.data()}, {&L.wv, act_.v.data()}}, x, n);
  be.add_bias(act_.q.data(), L.bq.data(), n, dim);
  be.add_bias(act_.k.data(), L.bk.data(), n, dim);
  be.add_bias(act_.v.data(), L.bv.data(), n, dim);
  be.encoder_attention(act_.q.data(), act_.k.data(), act_.v.data(), batch.query_start.data(),
                       batch.num_seqs(), attention_params(c), act_.attn.data());
  be.matmul(L.wo, act_.attn.data(), n, h);
  be.add_bias(h, L.bo.data(), n, hidden);
  be.add(h, x, n * hidden);
  be.layer_norm(h, L.attn_out_norm.weight.data(), L.attn_out_norm.bias.data(), n, hidden,
                c.rms_norm_eps, x);
  be.matmul(L.up, x, n, act_.gate.data());
  be.add_bias(act_.gate.data(), L.b_up.data(), n, ff);
  be.gelu_erf(act_.gate.data(), n * ff);
  be.matmul(L.down, act_.gate.data(), n, h);
  be.add_bias(h, L.b_down.data(), n, hidden);
  be.add(h, x, n * hidden);
  be.layer_norm(h, L.out_norm.weight.data(), L.out_norm.bias.data(), n, hidden, c.rms_norm_eps, x);
}

void BertModel::hidden_states(Backend& be, const ForwardBatch& batch, std::vector<float>& out) {
  const ModelConfig& c = config_;
  const int64_t n = batch.num_tokens(), hidden = c.hidden_size;
  for (int32_t p : batch.positions) {
    if (p < 0 || static_cast<uint32_t>(p) >= c.context_length) {
      fail("bert: position ", p, " is past the model's ", c.context_length, " positions");
    }
  }
  act_.resize(be, n, c);
  float *x = act_.x.data(), *h = act_.h.data();
  be.embed(token_embd_, batch.token_ids.data(), n, x);
  be.embed(position_embd_, batch.positions.data(), n, h);
  be.add(x, h, n * hidden);
  if (token_types_.data != nullptr) {
    zeros_.assign(static_cast<size_t>(n), 0);
    be.embed(token_types_, zeros_.data(), n, h);
    be.add(x, h, n * hidden);
  }
  be.layer_norm(x, embd_norm_.weight.data(), embd_norm_.bias.data(), n, hidden, c.rms_norm_eps, x);
  for (const BertLayer& L : layers_) layer(be, L, batch);
  out.resize(static_cast<size_t>(n * hidden));
  be.download(x, out.size() * sizeof(float), out.data());
}

}  // namespace

std::unique_ptr<Model> load_bert(const ModelFile& file, Communicator* tp) {
  if (tp != nullptr) fail(file.path(), ": tensor parallelism is not built for BERT; run it as one process");
  return std::make_unique<BertModel>(file);
}

}  // namespace pagoda
