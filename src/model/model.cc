#include "model/model.h"

#include "model/architecture.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "comm/communicator.h"
#include "model/kv_copy.h"
#include "model/model_file.h"
#include "model/tensor_parallel.h"

namespace pagoda {

AttentionBatch ForwardBatch::attention_batch() const {
  AttentionBatch b;
  b.num_tokens = num_tokens();
  b.positions = positions.data();
  b.slot_mapping = slot_mapping.data();
  b.num_seqs = num_seqs();
  b.query_start = query_start.data();
  b.block_table = block_table.data();
  b.max_blocks_per_seq = max_blocks_per_seq;
  b.block_size = block_size;
  return b;
}

void Activations::resize(Backend& be, int64_t n, const ModelConfig& c) {
  const int64_t hidden = c.hidden_size, q_dim = int64_t{c.num_heads} * c.head_dim;
  const int64_t kv_dim = int64_t{c.num_kv_heads} * c.head_dim, ff = c.intermediate_size;
  const char* what = "the activations";
  x.reserve(be, n * hidden, what);
  h.reserve(be, n * hidden, what);
  q.reserve(be, n * q_dim, what);
  k.reserve(be, n * kv_dim, what);
  v.reserve(be, n * kv_dim, what);
  attn.reserve(be, n * q_dim, what);
  gate.reserve(be, n * ff, what);
  up.reserve(be, n * ff, what);
}

AttentionParams attention_params(const ModelConfig& c) {
  AttentionParams ap;
  ap.num_heads = static_cast<int32_t>(c.num_heads);
  ap.num_kv_heads = static_cast<int32_t>(c.num_kv_heads);
  ap.head_dim = static_cast<int32_t>(c.head_dim);
  ap.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  return ap;
}

void compute_logits(Backend& be, const ModelConfig& c, std::span<const int32_t> rows,
                    const std::vector<float>& output_norm, const WeightMatrix& output,
                    Activations& act, std::vector<float>& logits) {
  const int64_t hidden = c.hidden_size;
  const auto m = static_cast<int64_t>(rows.size());
  act.last.reserve(be, m * hidden, "the activations");
  be.gather_rows(act.x.data(), rows, hidden, act.last.data());
  be.rms_norm(act.last.data(), output_norm.data(), m, hidden, c.rms_norm_eps, act.last.data());
  logits.resize(m * output.rows);  // the vocabulary, or this rank's slice of it
  if (be.host_visible()) {  // straight into the host's array: no copy on the CPU
    be.matmul(output, act.last.data(), m, logits.data());
    return;
  }
  act.logits.reserve(be, m * output.rows, "the logits");
  be.matmul(output, act.last.data(), m, act.logits.data());
  be.download(act.logits.data(), logits.size() * sizeof(float), logits.data());
}

namespace {

// Logit rows and hidden-state rows in one batch (ForwardBatch::hidden_row): every row through
// the final norm; the hidden rows' results go to the host after the logits, the others through
// the vocabulary matrix.
void compute_logits_and_hidden(Backend& be, const ModelConfig& c, const OutputRows& out,
                               const std::vector<float>& output_norm, const WeightMatrix& output,
                               Activations& act, std::vector<float>& logits) {
  const std::vector<uint8_t>& is_hidden = out.batch.hidden_row;
  const int64_t hidden = c.hidden_size;
  const std::span<const int32_t> rows = out.logit_rows();
  PAGODA_CHECK(is_hidden.size() == rows.size());
  const auto m = static_cast<int64_t>(rows.size());
  std::vector<int32_t> logit_rows, hidden_rows;  // into the normed rows, ascending
  for (int32_t i = 0; i < static_cast<int32_t>(m); ++i) {
    (is_hidden[static_cast<size_t>(i)] ? hidden_rows : logit_rows).push_back(i);
  }
  act.last.reserve(be, m * hidden, "the activations");
  be.gather_rows(act.x.data(), rows, hidden, act.last.data());
  be.rms_norm(act.last.data(), output_norm.data(), m, hidden, c.rms_norm_eps, act.last.data());
  const auto num_logits = static_cast<int64_t>(logit_rows.size());
  const auto num_hidden = static_cast<int64_t>(hidden_rows.size());
  logits.resize(static_cast<size_t>(num_logits * output.rows + num_hidden * hidden));
  // act.x is free once its rows are gathered: the hidden rows wait there for the download.
  be.gather_rows(act.last.data(), hidden_rows, hidden, act.x.data());
  be.download(act.x.data(), static_cast<size_t>(num_hidden * hidden) * sizeof(float),
              logits.data() + num_logits * output.rows);
  if (num_logits == 0) return;
  be.gather_rows(act.last.data(), logit_rows, hidden, act.last.data());  // in place: ascending
  if (be.host_visible()) {
    be.matmul(output, act.last.data(), num_logits, logits.data());
    return;
  }
  act.logits.reserve(be, num_logits * output.rows, "the logits");
  be.matmul(output, act.last.data(), num_logits, act.logits.data());
  be.download(act.logits.data(), static_cast<size_t>(num_logits * output.rows) * sizeof(float),
              logits.data());
}

}  // namespace

void compute_logits(Backend& be, const ModelConfig& c, const OutputRows& out,
                    const std::vector<float>& output_norm, const WeightMatrix& output,
                    Activations& act, std::vector<float>& logits) {
  if (!out.batch.hidden_row.empty()) {
    return compute_logits_and_hidden(be, c, out, output_norm, output, act, logits);
  }
  if (!out.batch.hidden_states) {
    return compute_logits(be, c, out.logit_rows(), output_norm, output, act, logits);
  }
  const int64_t hidden = c.hidden_size;
  const std::span<const int32_t> rows = out.logit_rows();
  const auto m = static_cast<int64_t>(rows.size());
  act.last.reserve(be, m * hidden, "the activations");
  be.gather_rows(act.x.data(), rows, hidden, act.last.data());
  be.rms_norm(act.last.data(), output_norm.data(), m, hidden, c.rms_norm_eps, act.last.data());
  logits.resize(static_cast<size_t>(m * hidden));
  be.download(act.last.data(), logits.size() * sizeof(float), logits.data());
}

OutputRows::OutputRows(const ForwardBatch& b) : batch(b) {
  const auto m = static_cast<int32_t>(b.logit_rows.size());
  if (m >= b.num_tokens()) return;
  query_start.assign(1, 0);
  int32_t next = 0;  // the next logit row to place
  for (int32_t s = 0; s < b.num_seqs(); ++s) {
    while (next < m && b.logit_rows[next] < b.query_start[s + 1]) {
      const int32_t row = b.logit_rows[next];
      const bool ordered = row >= b.query_start[s] && (next == 0 || row > b.logit_rows[next - 1]);
      if (!ordered) return;
      positions.push_back(b.positions[row]);
      slot_mapping.push_back(b.slot_mapping[row]);
      front.push_back(next++);
    }
    query_start.push_back(next);
  }
  narrows = next == m;
}

AttentionBatch OutputRows::attention_batch() const {
  AttentionBatch a = batch.attention_batch();
  a.num_tokens = static_cast<int32_t>(count());
  a.positions = positions.data();
  a.slot_mapping = slot_mapping.data();
  a.query_start = query_start.data();
  return a;
}

bool OutputRows::gather_front(Backend& be, Activations& act, int64_t q_dim,
                              int64_t hidden) const {
  if (!narrows) return false;
  // In place: the rows ascend, so row logit_rows[i] >= i.
  be.gather_rows(act.q.data(), batch.logit_rows, q_dim, act.q.data());
  be.gather_rows(act.x.data(), batch.logit_rows, hidden, act.x.data());
  return true;
}

std::span<const int32_t> OutputRows::logit_rows() const {
  return narrows ? std::span<const int32_t>(front) : std::span<const int32_t>(batch.logit_rows);
}

std::unique_ptr<Model> Model::load(const ModelFile& file, Communicator* tp) {
  if (tp != nullptr && tp->size() < 2) tp = nullptr;
  return architecture_of(file.config(), file.path()).load(file, tp);
}

void Model::forward(Backend& backend, const ForwardBatch& batch, KvStorage& kv,
                    std::vector<float>& logits) {
  if (tp_ != nullptr && (batch.hidden_states || !batch.hidden_row.empty())) {
    fail("embeddings from a model split by tensor parallelism are not supported");
  }
  if (tp_ != nullptr) send_forward(*tp_, batch, kv);
  forward_local(backend, batch, kv, logits);
}

void Model::hidden_states(Backend&, const ForwardBatch&, std::vector<float>&) {
  fail("architecture '", config_.architecture, "' gives no embeddings by itself");
}

void Model::copy_kv_blocks(Backend& backend, KvStorage& kv, std::span<const BlockCopy> copies) {
  if (copies.empty()) return;
  if (tp_ != nullptr) send_block_copies(*tp_, copies, kv);
  pagoda::copy_kv_blocks(backend, kv, config_, copies);
}

void apply_rope_scaling(const ModelConfig& c, RopeParams& p) {
  const std::string& type = c.rope_scaling_type;
  const double factor = c.rope_scaling_factor;
  p.mscale = c.rope_attn_factor;
  if ((type == "linear" || type == "yarn") && factor > 0) {
    p.position_scale = static_cast<float>(1.0 / factor);
  }
  if (type != "yarn") return;
  // ggml_rope_yarn_corr_dims: the pair whose wavelength fits `beta` times in the original context.
  const double pi = 3.14159265358979323846;
  auto corr_dim = [&](double beta) {
    return p.rotary_dim * std::log(c.rope_original_context / (beta * 2 * pi)) /
           (2 * std::log(static_cast<double>(p.theta)));
  };
  p.yarn = true;
  p.yarn_low = static_cast<float>(std::max(0.0, std::floor(corr_dim(c.rope_yarn_beta_fast))));
  p.yarn_high = static_cast<float>(
      std::min(static_cast<double>(p.rotary_dim - 1), std::ceil(corr_dim(c.rope_yarn_beta_slow))));
  double attn = c.rope_yarn_attn_factor;
  if (attn == 0) attn = factor > 1 ? 0.1 * std::log(factor) + 1.0 : 1.0;
  p.mscale = static_cast<float>(p.mscale * attn);
}

std::vector<float> llama3_rope_freq_factors(const ModelConfig& c, int32_t rotary_dim) {
  const double pi = 3.14159265358979323846;
  const double old_context = c.rope_original_context;
  const double low = c.rope_low_freq_factor, high = c.rope_high_freq_factor;
  const double factor = c.rope_scaling_factor > 0 ? c.rope_scaling_factor : 1.0;
  if (!(high > low)) fail("llama3 rope scaling: high_freq_factor must exceed low_freq_factor");
  std::vector<float> divisors(static_cast<size_t>(rotary_dim / 2));
  for (size_t i = 0; i < divisors.size(); ++i) {
    const double freq = std::pow(double(c.rope_theta), -2.0 * double(i) / rotary_dim);
    const double wavelength = 2.0 * pi / freq;
    double d = 1.0;
    if (wavelength > old_context / low) {
      d = factor;
    } else if (wavelength >= old_context / high) {
      const double smooth = (old_context / wavelength - low) / (high - low);
      d = 1.0 / ((1.0 - smooth) / factor + smooth);
    }
    divisors[i] = static_cast<float>(d);
  }
  return divisors;
}

}  // namespace pagoda
