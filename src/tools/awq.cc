// Activation-aware scaling before quantization (see awq.h).
#include "tools/awq.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "tools/imatrix.h"
#include "model/model.h"
#include "tools/quantize.h"
#include "quant/reference.h"

namespace pagoda {

std::vector<float> AwqInput::mean_abs() const {
  std::vector<float> m(static_cast<size_t>(cols), 0.0f);
  if (rows_seen == 0) return m;
  for (int64_t c = 0; c < cols; ++c) {
    m[static_cast<size_t>(c)] = static_cast<float>(abs_sum[static_cast<size_t>(c)] / rows_seen);
  }
  return m;
}

void AwqStats::add(const std::string& key, const float* x, int64_t rows, int64_t cols) {
  AwqInput& in = inputs[key];
  if (in.cols == 0) {
    in.cols = cols;
    in.abs_sum.assign(static_cast<size_t>(cols), 0.0);
  }
  if (in.cols != cols) fail("awq: input ", key, " seen with ", cols, " columns, first with ", in.cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * cols;
    for (int64_t c = 0; c < cols; ++c) in.abs_sum[static_cast<size_t>(c)] += std::fabs(row[c]);
    if ((in.rows_seen + r) % sample_stride == 0 && in.sample_rows() < max_sample_rows) {
      in.sample.insert(in.sample.end(), row, row + cols);
    }
  }
  in.rows_seen += rows;
}

uint64_t AwqStats::bytes() const {
  uint64_t b = 0;
  for (const auto& [key, in] : inputs) b += in.sample.capacity() * sizeof(float) + in.abs_sum.size() * sizeof(double);
  return b;
}

namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// "blk.12.attn_q.weight" -> {"blk.12.", "attn_q"}; empty prefix for other names.
std::pair<std::string_view, std::string_view> split_layer_name(std::string_view name) {
  const std::string_view suffix = ".weight";
  if (!starts_with(name, "blk.") || name.size() <= suffix.size() ||
      name.substr(name.size() - suffix.size()) != suffix) {
    return {};
  }
  const size_t dot = name.find('.', 4);
  if (dot == std::string_view::npos) return {};
  return {name.substr(0, dot + 1), name.substr(dot + 1, name.size() - suffix.size() - dot - 1)};
}

}  // namespace

std::string awq_input_key(std::string_view tensor_name) {
  const auto [layer, what] = split_layer_name(tensor_name);
  if (layer.empty()) return {};
  std::string input;
  if (what == "attn_q" || what == "attn_k" || what == "attn_v" || what == "attn_qkv") {
    input = "attn_in";
  } else if (what == "ffn_gate" || what == "ffn_up") {
    input = "ffn_in";
  } else if (what == "ffn_down" || what == "attn_output") {
    input = std::string(what);
  } else {
    return {};
  }
  return std::string(layer) + input;
}

std::unique_ptr<Backend> make_awq_collector(Backend& inner, const ModelFile& file, AwqStats& stats) {
  // q, k and v (gate and up) are handed the same rows one after another: count them once.
  struct Last {
    std::string key;
    const float* x = nullptr;
    int64_t rows = 0;
  };
  auto last = std::make_shared<Last>();
  return make_matmul_observer(
      inner, file,
      [&stats, last](const std::string& name, int64_t, int64_t num_experts, const float* x, int64_t rows,
                     int64_t cols) {
        if (num_experts != 1) return;
        std::string key = awq_input_key(name);
        if (key.empty()) return;
        if (key == last->key && x == last->x && rows == last->rows) return;
        stats.add(key, x, rows, cols);
        *last = {std::move(key), x, rows};
      });
}

int64_t AwqGroup::num_scales() const {
  if (scale_index.empty()) return cols;
  return static_cast<int64_t>(*std::max_element(scale_index.begin(), scale_index.end())) + 1;
}

AwqPlan awq_plan(const GgufFile& file) {
  AwqPlan plan;
  const auto arch = file.try_string("general.architecture");
  if (!arch) return plan;
  const auto num_layers = file.try_u64(*arch + ".block_count").value_or(0);
  const auto heads = file.try_u64(*arch + ".attention.head_count").value_or(0);
  const auto kv_heads = file.try_u64(*arch + ".attention.head_count_kv").value_or(heads);
  auto matrix = [&](const std::string& name) -> const GgufTensorInfo* {
    const GgufTensorInfo* t = file.find_tensor(name);
    return t && t->shape.size() == 2 ? t : nullptr;
  };
  auto with_bias = [&](std::vector<std::string> divided, const std::string& prefix) {
    if (file.find_tensor(prefix + ".bias")) divided.push_back(prefix + ".bias");
    return divided;
  };
  for (uint64_t l = 0; l < num_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    // The matrices among `names` that read the output of the norm `norm` (q/k/v, gate/up).
    auto after_norm = [&](const std::string& input, const std::string& norm, std::initializer_list<const char*> names) {
      AwqGroup g{p + input, {}, with_bias({p + norm + ".weight"}, p + norm), 0, {}};
      for (const char* m : names) {
        if (const auto* t = matrix(p + m + ".weight")) {
          g.matrices.push_back(t->name);
          g.cols = static_cast<int64_t>(t->shape[0]);
        }
      }
      if (g.matrices.empty()) return;
      if (file.find_tensor(p + norm + ".weight")) {
        plan.groups.push_back(std::move(g));
      } else {
        plan.skipped.push_back(p + input + ": no " + norm + ".weight to fold the scales into");
      }
    };
    after_norm("attn_in", "attn_norm", {"attn_q", "attn_k", "attn_v", "attn_qkv"});
    // attn_output after attn_v: attention mixes positions, never value channels, so dividing
    // v's rows by s divides attention's output channels by s. With grouped-query attention one
    // value channel feeds a column of every head in its group, so those columns share a scale.
    if (const auto* o = matrix(p + "attn_output.weight")) {
      const auto* v = matrix(p + "attn_v.weight");
      const int64_t o_cols = static_cast<int64_t>(o->shape[0]);
      AwqGroup g{p + "attn_output", {o->name}, {}, o_cols, {}};
      if (!v) {
        plan.skipped.push_back(p + "attn_output: no separate attn_v.weight to divide (fused QKV)");
      } else if (const auto kv_dim = static_cast<int64_t>(v->shape[1]); kv_dim == o_cols) {
        g.divided = with_bias({v->name}, p + "attn_v");
        plan.groups.push_back(std::move(g));
      } else if (heads > 0 && kv_heads > 0 && heads % kv_heads == 0 && o_cols % static_cast<int64_t>(heads) == 0 &&
                 kv_dim == static_cast<int64_t>(kv_heads) * (o_cols / static_cast<int64_t>(heads))) {
        const int64_t head_dim = o_cols / static_cast<int64_t>(heads);
        const int64_t group = static_cast<int64_t>(heads / kv_heads);
        for (int64_t c = 0; c < o_cols; ++c) {
          g.scale_index.push_back(static_cast<int32_t>((c / head_dim / group) * head_dim + c % head_dim));
        }
        g.divided = with_bias({v->name}, p + "attn_v");
        plan.groups.push_back(std::move(g));
      } else {
        plan.skipped.push_back(str_cat(p, "attn_output: ", o_cols, " columns do not map onto attn_v's ", kv_dim,
                                       " rows with ", heads, " heads / ", kv_heads, " KV heads"));
      }
    }
    if (file.find_tensor(p + "ffn_gate_inp.weight")) {
      plan.skipped.push_back(p + "ffn: mixture of experts (expert tensors are not searched)");
      continue;
    }
    const auto* gate = matrix(p + "ffn_gate.weight");
    const auto* up = matrix(p + "ffn_up.weight");
    after_norm("ffn_in", "ffn_norm", {"ffn_gate", "ffn_up"});
    // ffn_down after ffn_up: its input is act(gate) * up, linear in up's rows.
    if (const auto* down = matrix(p + "ffn_down.weight")) {
      if (gate && up && up->shape[1] == down->shape[0]) {
        plan.groups.push_back({p + "ffn_down", {down->name}, with_bias({up->name}, p + "ffn_up"),
                               static_cast<int64_t>(down->shape[0]), {}});
      } else {
        plan.skipped.push_back(p + "ffn_down: no separate gate and up (the scales would pass through the activation)");
      }
    }
  }
  return plan;
}

namespace {

// s expanded to one value per column of the group's matrices.
std::vector<float> column_scales(const AwqGroup& g, std::span<const float> s) {
  if (g.scale_index.empty()) return {s.begin(), s.end()};
  std::vector<float> out(g.scale_index.size());
  for (size_t c = 0; c < out.size(); ++c) out[c] = s[static_cast<size_t>(g.scale_index[c])];
  return out;
}

void multiply_into(std::vector<float>& into, const std::vector<float>& by) {
  if (into.empty()) {
    into = by;
    return;
  }
  if (into.size() != by.size()) fail("awq: scales of ", by.size(), " values for ", into.size());
  for (size_t i = 0; i < into.size(); ++i) into[i] *= by[i];
}

}  // namespace

void fold_awq_scales(const AwqGroup& g, std::span<const float> s, const GgufFile& file, AwqScaling& scaling) {
  if (static_cast<int64_t>(s.size()) != g.num_scales()) {
    fail("awq: ", g.input, " takes ", g.num_scales(), " scales, not ", s.size());
  }
  const std::vector<float> cols = column_scales(g, s);
  for (const auto& m : g.matrices) multiply_into(scaling[m].col_mul, cols);
  std::vector<float> inverse(s.size());
  for (size_t i = 0; i < s.size(); ++i) inverse[i] = 1.0f / s[i];
  for (const auto& d : g.divided) {
    const GgufTensorInfo* t = file.find_tensor(d);
    if (!t) fail("awq: no tensor ", d);
    if (t->shape.size() == 1) {
      multiply_into(scaling[d].col_mul, inverse);
    } else {
      multiply_into(scaling[d].row_div, std::vector<float>(s.begin(), s.end()));
    }
  }
}

void apply_scaling(const TensorScaling& t, int64_t row, float* values, int64_t cols) {
  if (!t.col_mul.empty()) {
    for (int64_t c = 0; c < cols; ++c) values[c] *= t.col_mul[static_cast<size_t>(c)];
  }
  if (!t.row_div.empty()) {
    const float d = t.row_div[static_cast<size_t>(row)];
    for (int64_t c = 0; c < cols; ++c) values[c] /= d;
  }
}

namespace {

constexpr int kRowBlock = 4;  // error rows per pass over the sampled inputs

// sum over the n sampled rows x of (d_j · x)^2 for each of `k` rows d_j (k <= kRowBlock).
double output_error(const float* const* d, int k, const float* x, int64_t n, int64_t cols) {
  double err = 0;
  for (int64_t t = 0; t < n; ++t) {
    const float* xt = x + t * cols;
    float acc[kRowBlock] = {};
    for (int j = 0; j < k; ++j) {
      const float* dj = d[j];
      // Eight independent partial sums: the compiler vectorizes them without a pragma (clang
      // cannot honour `omp simd` under the sanitizers, and -Werror turns that into a failure).
      float part[8] = {};
      int64_t c = 0;
      for (; c + 8 <= cols; c += 8)
        for (int l = 0; l < 8; ++l) part[l] += dj[c + l] * xt[c + l];
      float a = 0;
      for (; c < cols; ++c) a += dj[c] * xt[c];
      for (float p : part) a += p;
      acc[j] = a;
    }
    for (int j = 0; j < k; ++j) err += static_cast<double>(acc[j]) * acc[j];
  }
  return err;
}

// The group's objective for column scales S (cols values).
// Only every row_step-th row of each matrix is scored (max_rows), to bound the search's time.
double scaled_error(std::span<const AwqMatrix> matrices, int64_t cols, const float* x, int64_t n,
                    const std::vector<float>& S, int64_t max_rows, int threads) {
  double total = 0;
  for (const AwqMatrix& m : matrices) {
    if (!is_quantized_type(m.type)) continue;
    std::vector<float> importance;
    if (m.importance) {
      importance.resize(static_cast<size_t>(cols));
      for (int64_t c = 0; c < cols; ++c) importance[c] = m.importance[c] / (S[c] * S[c]);
    }
    const size_t rb = row_bytes(m.type, cols);
    const int64_t step = max_rows > 0 ? (m.rows + max_rows - 1) / max_rows : 1;
    const int64_t scored = (m.rows + step - 1) / step;
    const int64_t blocks = (scored + kRowBlock - 1) / kRowBlock;
    double err = 0;
#pragma omp parallel num_threads(threads > 0 ? threads : omp_get_max_threads())
    {
      std::vector<float> scaled(static_cast<size_t>(cols)), back(static_cast<size_t>(cols));
      std::vector<float> diff(static_cast<size_t>(cols * kRowBlock));
      std::vector<uint8_t> q(rb);
#pragma omp for schedule(dynamic, 1) reduction(+ : err)
      for (int64_t b = 0; b < blocks; ++b) {
        const float* d[kRowBlock];
        int k = 0;
        for (int64_t i = b * kRowBlock; i < std::min(scored, (b + 1) * kRowBlock); ++i, ++k) {
          const float* w = m.w + i * step * cols;
          for (int64_t c = 0; c < cols; ++c) scaled[c] = w[c] * S[c];
          quantize_row_weighted(m.type, scaled.data(), q.data(), cols, importance.empty() ? nullptr : importance.data());
          dequantize_row(m.type, q.data(), back.data(), cols);
          float* dk = diff.data() + k * cols;
          for (int64_t c = 0; c < cols; ++c) dk[c] = w[c] - back[c] / S[c];
          d[k] = dk;
        }
        err += output_error(d, k, x, n, cols);
      }
    }
    total += err;
  }
  return total;
}

}  // namespace

AwqSearch awq_search(std::span<const AwqMatrix> matrices, int64_t cols, const float* x, int64_t n,
                     std::span<const float> mean_abs, std::span<const int32_t> scale_index, int grid,
                     int threads, int64_t max_rows) {
  if (grid < 1) fail("awq: a grid of ", grid, " points");
  const size_t num_scales = mean_abs.size();
  AwqSearch best;
  double best_error = 0;
  for (int i = 0; i < grid; ++i) {
    const double alpha = grid == 1 ? 0.0 : static_cast<double>(i) / (grid - 1);
    std::vector<float> s(num_scales, 1.0f);
    if (i > 0) {
      // AWQ's scales: mean|x|^alpha, kept off zero, then divided by the geometric mean of the
      // largest and smallest so they straddle 1 (the weights' range stays where F16 scales
      // and the norms are comfortable).
      float lo = INFINITY, hi = 0;
      for (size_t c = 0; c < num_scales; ++c) {
        s[c] = std::max(static_cast<float>(std::pow(std::max(mean_abs[c], 0.0f), alpha)), 1e-4f);
        lo = std::min(lo, s[c]);
        hi = std::max(hi, s[c]);
      }
      const float norm = std::sqrt(lo * hi);
      for (float& v : s) v /= norm;
    }
    std::vector<float> S(static_cast<size_t>(cols));
    for (int64_t c = 0; c < cols; ++c) {
      S[c] = s[scale_index.empty() ? static_cast<size_t>(c) : static_cast<size_t>(scale_index[c])];
    }
    const double err = scaled_error(matrices, cols, x, n, S, max_rows, threads);
    best.errors.push_back(err);
    if (i == 0 || err < best_error) {  // strictly better: ties keep the smaller alpha
      best_error = err;
      best.alpha = alpha;
      best.scales = std::move(s);
    }
  }
  return best;
}

namespace {

// The rows of a matrix tensor decoded to F32.
std::vector<float> decode(const GgufTensorInfo& t) {
  const int64_t cols = static_cast<int64_t>(t.shape[0]);
  const uint64_t rows = t.num_elements / t.shape[0];
  const size_t rb = row_bytes(t.type, cols);
  std::vector<float> out(t.num_elements);
  for (uint64_t r = 0; r < rows; ++r) dequantize_row(t.type, t.data + r * rb, out.data() + r * cols, cols);
  return out;
}

}  // namespace

AwqCalibration awq_calibrate(const std::string& model_path, const std::string& text_path,
                             int32_t ctx, int64_t max_chunks, int64_t sample_rows, int threads,
                             const char* ctx_flag,
                             const std::function<void(int64_t, int64_t)>& progress) {
  auto model_file = ModelFile::open(model_path);
  auto model = Model::load(*model_file);
  const auto chunks = calibration_chunks(*model_file, text_path, ctx, max_chunks, ctx_flag).chunks;
  AwqCalibration cal;
  cal.stats.max_sample_rows = sample_rows;
  cal.chunks = static_cast<int64_t>(chunks.size());
  cal.tokens = cal.chunks * ctx;
  cal.stats.sample_stride =
      std::max<int64_t>(1, (cal.tokens + sample_rows - 1) / std::max<int64_t>(sample_rows, 1));
  auto backend = make_cpu_backend(threads);
  auto collector = make_awq_collector(*backend, *model_file, cal.stats);
  run_imatrix_chunks(*model, *collector, chunks, [&](int64_t done) {
    if (progress) progress(done, cal.chunks);
    return true;
  });
  return cal;
}

AwqScaling awq_compute(const std::string& model_path, const GgufFile& file, const AwqOptions& o,
                       const std::function<DType(const std::string&)>& type_of,
                       const std::function<std::vector<float>(const std::string&)>& importance_of,
                       const std::function<void(const AwqProgress&)>& progress, AwqReport& report) {
  AwqPlan plan = awq_plan(file);
  for (const AwqGroup& g : plan.groups) {
    for (const auto* names : {&g.matrices, &g.divided}) {
      for (const auto& name : *names) {
        const GgufTensorInfo* t = file.find_tensor(name);
        if (t && is_quantized_type(t->type)) {
          fail(model_path, ": tensor ", name, " is ", dtype_traits(t->type).name,
               "; --awq rescales the original weights before rounding them, so it needs an F32, F16 or "
               "BF16 model (quantize that one)");
        }
      }
    }
  }
  report.skipped = plan.skipped;

  // Calibration: the imatrix chunks, every position through every layer.
  AwqProgress cp;
  AwqCalibration cal = awq_calibrate(model_path, o.text_path, o.ctx, o.chunks, o.sample_rows,
                                     o.threads, "--awq-ctx", [&](int64_t done, int64_t total) {
                                       cp.done = done;
                                       cp.total = total;
                                       if (progress) progress(cp);
                                     });
  const AwqStats& stats = cal.stats;
  report.chunks = cal.chunks;
  report.tokens = cal.tokens;
  report.stats_bytes = stats.bytes();

  AwqScaling scaling;
  AwqProgress p;
  p.searching = true;
  p.total = static_cast<int64_t>(plan.groups.size());
  for (const AwqGroup& g : plan.groups) {
    const auto in = stats.inputs.find(g.input);
    if (in == stats.inputs.end() || in->second.sample_rows() == 0 || in->second.cols != g.cols) {
      report.skipped.push_back(g.input + ": the calibration pass did not reach it");
    } else {
      std::vector<std::vector<float>> weights, importance;
      std::vector<AwqMatrix> matrices;
      for (const auto& name : g.matrices) {
        const GgufTensorInfo& t = *file.find_tensor(name);
        weights.push_back(decode(t));
        importance.push_back(importance_of ? importance_of(name) : std::vector<float>{});
      }
      for (size_t i = 0; i < g.matrices.size(); ++i) {
        const GgufTensorInfo& t = *file.find_tensor(g.matrices[i]);
        matrices.push_back({weights[i].data(), static_cast<int64_t>(t.shape[1]), type_of(t.name),
                            importance[i].empty() ? nullptr : importance[i].data()});
      }
      // One mean per scale: with grouped-query attention, over the heads that share it.
      const std::vector<float> col_mean = in->second.mean_abs();
      std::vector<float> mean(static_cast<size_t>(g.num_scales()), 0.0f);
      std::vector<int> count(mean.size(), 0);
      for (int64_t c = 0; c < g.cols; ++c) {
        const size_t i = g.scale_index.empty() ? static_cast<size_t>(c) : static_cast<size_t>(g.scale_index[c]);
        mean[i] += col_mean[static_cast<size_t>(c)];
        ++count[i];
      }
      for (size_t i = 0; i < mean.size(); ++i) mean[i] /= static_cast<float>(std::max(count[i], 1));
      const AwqSearch s = awq_search(matrices, g.cols, in->second.sample.data(), in->second.sample_rows(), mean,
                                     g.scale_index, o.grid, o.threads, o.matrix_rows);
      fold_awq_scales(g, s.scales, file, scaling);
      const double best = *std::min_element(s.errors.begin(), s.errors.end());
      report.groups.push_back({g.input, s.alpha, best, s.errors.front()});
      p.group = report.groups.back().input;
      p.alpha = s.alpha;
      p.error_ratio = s.errors.front() > 0 ? best / s.errors.front() : 1.0;
    }
    ++p.done;
    if (progress) progress(p);
  }
  return scaling;
}

}  // namespace pagoda
