#include "model/attention.h"

#include "model/kv_storage.h"

namespace pagoda {

int64_t attention_block(const LayerStep& s, const AttentionWeights& w, int32_t layer, bool last,
                        const RopeParams& rope, const AttentionParams& ap) {
  Backend& be = s.backend;
  const ModelConfig& c = s.config;
  Activations& act = s.act;
  const int64_t n = s.batch.num_tokens(), hidden = c.hidden_size, hd = c.head_dim;
  const int64_t q_dim = int64_t{c.num_heads} * hd, kv_dim = int64_t{c.num_kv_heads} * hd;
  be.rms_norm(act.x.data(), w.norm.data(), n, hidden, c.rms_norm_eps, act.h.data());
  be.matmul_many({{&w.wq, act.q.data()}, {&w.wk, act.k.data()}, {&w.wv, act.v.data()}},
                 act.h.data(), n);
  if (!w.bq.empty()) {
    be.add_bias(act.q.data(), w.bq.data(), n, q_dim);
    be.add_bias(act.k.data(), w.bk.data(), n, kv_dim);
    be.add_bias(act.v.data(), w.bv.data(), n, kv_dim);
  }
  if (!w.q_norm.empty()) {
    be.rms_norm(act.q.data(), w.q_norm.data(), n * c.num_heads, hd, c.rms_norm_eps, act.q.data());
    be.rms_norm(act.k.data(), w.k_norm.data(), n * c.num_kv_heads, hd, c.rms_norm_eps,
                act.k.data());
  }
  be.rope(act.q.data(), s.batch.positions.data(), n, c.num_heads, hd, rope);
  be.rope(act.k.data(), s.batch.positions.data(), n, c.num_kv_heads, hd, rope);
  const AttentionBatch ab = s.batch.attention_batch();
  be.write_kv(act.k.data(), act.v.data(), ab, ap, s.kv.layer(layer));
  const bool narrow = last && s.out.gather_front(be, act, q_dim, hidden);
  const int64_t m = narrow ? s.out.count() : n;
  be.attention(act.q.data(), s.kv.layer(layer), narrow ? s.out.attention_batch() : ab, ap,
               act.attn.data());
  be.matmul(w.wo, act.attn.data(), m, act.h.data());
  return m;
}

}  // namespace pagoda
