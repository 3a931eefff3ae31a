#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "model/weights.h"

namespace pagoda {

MoeWeights load_moe(const TensorLookup& w, const std::string& p, const ModelConfig& c) {
  const int64_t experts = c.num_experts, hidden = c.hidden_size, ff = c.expert_ffn_size();
  MoeWeights m;
  m.router = w.matrix(p + "ffn_gate_inp.weight", experts, hidden);
  for (int64_t e = 0; e < experts; ++e) {
    m.gate.push_back(w.matrix_rows(p + "ffn_gate_exps.weight", e * ff, ff, experts * ff, hidden));
    m.up.push_back(w.matrix_rows(p + "ffn_up_exps.weight", e * ff, ff, experts * ff, hidden));
    m.down.push_back(w.matrix_rows(p + "ffn_down_exps.weight", e * hidden, hidden, experts * hidden, ff));
  }
  if (w.has(p + "ffn_down_exps.scale")) m.down_scale = w.vector(p + "ffn_down_exps.scale", experts);
  if (!w.has(p + "ffn_gate_inp.bias")) return m;
  m.router_bias = w.vector(p + "ffn_gate_inp.bias", experts);
  // Each stacked bias is one row per expert.
  auto rows = [&](const std::string& name, int64_t width) {
    const std::vector<float> all = w.vector(name, experts * width);
    std::vector<std::vector<float>> out;
    for (int64_t e = 0; e < experts; ++e) out.emplace_back(all.begin() + e * width, all.begin() + (e + 1) * width);
    return out;
  };
  m.gate_bias = rows(p + "ffn_gate_exps.bias", ff);
  m.up_bias = rows(p + "ffn_up_exps.bias", ff);
  m.down_bias = rows(p + "ffn_down_exps.bias", hidden);
  return m;
}

void clamped_swiglu(const float* gate, const float* up, int64_t n, float* out) {
  constexpr float kAlpha = 1.702f, kLimit = 7.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = std::min(gate[i], kLimit);
    const float y = std::clamp(up[i], -kLimit, kLimit);
    out[i] = x / (1.0f + std::exp(-kAlpha * x)) * (y + 1.0f);
  }
}

Routing route(const float* logits, int64_t tokens, const ModelConfig& c) {
  const int64_t experts = c.num_experts, used = c.num_experts_used;
  Routing r;
  r.experts.resize(static_cast<size_t>(tokens * used));
  r.weights.resize(r.experts.size());
  std::vector<float> score(static_cast<size_t>(experts));
  std::vector<int32_t> order(static_cast<size_t>(experts));
  for (int64_t t = 0; t < tokens; ++t) {
    const float* l = logits + t * experts;
    if (c.expert_gating_sigmoid) {
      for (int64_t e = 0; e < experts; ++e) score[e] = 1.0f / (1.0f + std::exp(-l[e]));
    } else {
      const float top = *std::max_element(l, l + experts);
      float sum = 0;
      for (int64_t e = 0; e < experts; ++e) sum += score[e] = std::exp(l[e] - top);
      for (int64_t e = 0; e < experts; ++e) score[e] /= sum;
    }
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + used, order.end(), [&](int32_t a, int32_t b) {
      return score[a] != score[b] ? score[a] > score[b] : a < b;
    });
    float total = 0;
    for (int64_t k = 0; k < used; ++k) total += score[order[k]];
    for (int64_t k = 0; k < used; ++k) {
      r.experts[t * used + k] = order[k];
      r.weights[t * used + k] = c.expert_weights_norm ? score[order[k]] / total : score[order[k]];
    }
  }
  return r;
}

void moe_ffn(Backend& be, const MoeWeights& w, const ModelConfig& c, const float* x,
             int64_t tokens, MoeScratch& s, float* residual) {
  const int64_t experts = c.num_experts;
  s.logits.reserve(be, tokens * experts, "the router's logits");
  be.matmul(w.router, x, tokens, s.logits.data());
  if (!w.router_bias.empty()) be.add_bias(s.logits.data(), w.router_bias.data(), tokens, experts);
  moe_experts(be, w, c, x, s.logits.data(), tokens, s, residual);
}

void moe_experts(Backend& be, const MoeWeights& w, const ModelConfig& c, const float* x,
                 const float* logits, int64_t tokens, MoeScratch& s, float* residual) {
  const int64_t experts = c.num_experts, used = c.num_experts_used;
  const int64_t hidden = c.hidden_size, ff = c.expert_ffn_size();
  if (w.glu == ExpertGlu::kClampedSwiglu && !be.host_visible()) {
    fail("gpt-oss's experts (the clamped SwiGLU) run on the cpu and ref backends only");
  }
  const float* host_logits = logits;
  if (!be.host_visible()) {
    s.host_logits.resize(static_cast<size_t>(tokens * experts));
    be.download(logits, s.host_logits.size() * sizeof(float), s.host_logits.data());
    host_logits = s.host_logits.data();
  }
  const Routing r = route(host_logits, tokens, c);

  // Each expert's tokens (rows of x, ascending) and their weights (times the expert's output
  // scale), in one pass over the routing.
  std::vector<std::vector<int32_t>> rows_of(static_cast<size_t>(experts));
  std::vector<std::vector<float>> weights_of(static_cast<size_t>(experts));
  for (int64_t i = 0; i < tokens * used; ++i) {
    const int32_t e = r.experts[i];
    const float scale = w.down_scale.empty() ? 1.0f : w.down_scale[static_cast<size_t>(e)];
    rows_of[e].push_back(static_cast<int32_t>(i / used));
    weights_of[e].push_back(r.weights[i] * scale);
  }
  for (int64_t e = 0; e < experts; ++e) {
    const std::vector<int32_t>& rows = rows_of[e];
    const auto n = static_cast<int64_t>(rows.size());
    if (n == 0) continue;
    s.x.reserve(be, n * hidden, "an expert's rows");
    s.gate.reserve(be, n * ff, "an expert's gate");
    s.up.reserve(be, n * ff, "an expert's up");
    s.y.reserve(be, n * hidden, "an expert's output");
    be.gather_rows(x, rows, hidden, s.x.data());
    be.matmul_many({{&w.gate[e], s.gate.data()}, {&w.up[e], s.up.data()}}, s.x.data(), n);
    if (!w.gate_bias.empty()) {
      be.add_bias(s.gate.data(), w.gate_bias[e].data(), n, ff);
      be.add_bias(s.up.data(), w.up_bias[e].data(), n, ff);
    }
    if (w.glu == ExpertGlu::kClampedSwiglu) {
      clamped_swiglu(s.gate.data(), s.up.data(), n * ff, s.gate.data());
    } else if (w.glu == ExpertGlu::kGelu) {
      be.gelu_mul(s.gate.data(), s.up.data(), n * ff, s.gate.data());
    } else {
      be.silu_mul(s.gate.data(), s.up.data(), n * ff, s.gate.data());
    }
    be.matmul(w.down[e], s.gate.data(), n, s.y.data());
    if (!w.down_bias.empty()) be.add_bias(s.y.data(), w.down_bias[e].data(), n, hidden);
    be.add_scaled_rows(s.y.data(), rows, weights_of[e], hidden, residual);
  }
}

}  // namespace pagoda
