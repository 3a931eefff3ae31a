// Requantizing a GGUF model (see quantize.h).
#include "tools/quantize.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <span>
#include <optional>

#include "core/error.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "model/lora.h"
#include "model/model_file.h"
#include "tools/imatrix.h"
#include "tools/peft_lora.h"
#include "model/recipe.h"
#include "quant/gptq.h"
#include "quant/reference.h"

namespace pagoda {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The type a tensor gets; its own type when it is copied as it is (vectors, and the MoE router,
// which llama.cpp leaves in its type too).
DType target_type(const GgufTensorInfo& t, const WeightRecipe& recipe, bool has_output,
                  uint32_t num_layers) {
  if (t.shape.size() < 2 || !ends_with(t.name, ".weight") || ends_with(t.name, "ffn_gate_inp.weight")) {
    return t.type;
  }
  return recipe_type(recipe, t.name, t.shape[0], has_output, num_layers);
}

// A tensor already quantized that is written in another type; decoding to F32 is exact.
bool requantizes(DType from, DType to) {
  return from != to && is_quantized_type(from) && to != DType::kF32;
}

// Each tensor's output type, the byte totals, and what would be requantized.
struct Plan {
  std::vector<DType> types;
  uint64_t bytes_in = 0, bytes_out = 0;
  Requantization requantization;
};

Plan make_plan(const GgufFile& in, const QuantizeOptions& o, const WeightRecipe& rule) {
  const auto arch = in.try_string("general.architecture");
  const uint32_t num_layers =
      arch ? static_cast<uint32_t>(in.try_u64(*arch + ".block_count").value_or(0)) : 0;
  const bool has_output = in.find_tensor("output.weight") != nullptr;
  Plan plan;
  for (const auto& t : in.tensors()) {
    const DType type = target_type(t, rule, has_output, num_layers);
    if (type != t.type && !can_dequantize(t.type)) {
      fail(o.input_path, ": tensor ", t.name, ": cannot decode its type ",
           dtype_traits(t.type).name);
    }
    if (type != t.type && !can_quantize(type)) {
      fail("quantize: cannot encode ", dtype_traits(type).name, " (tensor ", t.name, ")");
    }
    if (requantizes(t.type, type)) {
      Requantization& r = plan.requantization;
      if (r.count++ == 0) {
        r.first = t.name;
        r.from = t.type;
        r.to = type;
      }
    }
    plan.types.push_back(type);
    const uint64_t rows = t.num_elements / t.shape[0];
    plan.bytes_in += t.num_bytes;
    plan.bytes_out +=
        type == t.type ? t.num_bytes : row_bytes(type, static_cast<int64_t>(t.shape[0])) * rows;
  }
  return plan;
}

// ‖w − ŵ‖ / ‖w‖ from the two sums of squares.
double relative_error(double diff2, double ref2) {
  if (ref2 > 0) return std::sqrt(diff2 / ref2);
  return diff2 > 0 ? std::numeric_limits<double>::infinity() : 0.0;
}

// An adapter pair decoded to floats, to add to a matrix's rows.
struct MergedLora {
  std::vector<float> a, b;  // [rank, cols], [rows, rank]
  int64_t rank = 0;
  float scale = 0;
  // row += scale * B[r, :] A.
  void add(int64_t r, float* row, int64_t cols) const {
    for (int64_t k = 0; k < rank; ++k) {
      const float f = scale * b[static_cast<size_t>(r * rank + k)];
      const float* ak = a.data() + k * cols;
      for (int64_t c = 0; c < cols; ++c) row[c] += f * ak[c];
    }
  }
};

MergedLora decode_lora(const LoraWeight& w) {
  MergedLora m;
  m.rank = w.a.rows;
  m.scale = w.scale;
  auto decode = [](const WeightMatrix& x, std::vector<float>& out) {
    out.resize(static_cast<size_t>(x.rows * x.cols));
    for (int64_t r = 0; r < x.rows; ++r) {
      dequantize_row(x.type, x.data + static_cast<uint64_t>(r) * x.row_bytes,
                     out.data() + r * x.cols, x.cols);
    }
  };
  decode(w.a, m.a);
  decode(w.b, m.b);
  return m;
}

// Writes `t` encoded as `type` to `sink` in chunks, calling wrote(bytes) after each; returns
// the round trip's relative error against the values decoded from `t`.
// `importance`: per expert (one for a 2-D matrix), the columns' weights, or empty for none.
// `scaling` (may be null): AWQ's scales, applied to each decoded row before it is encoded.
// `lora` (may be null): an adapter's pair, added to each decoded row (W + scale B A).
double convert_tensor(const GgufTensorInfo& t, DType type, int threads,
                      const std::vector<std::vector<float>>& importance, const TensorScaling* scaling,
                      const LoraWeight* lora, GgufWriter::Sink& sink,
                      const std::function<void(uint64_t)>& wrote) {
  const MergedLora merge = lora ? decode_lora(*lora) : MergedLora{};
  const int64_t cols = static_cast<int64_t>(t.shape[0]);
  const uint64_t rows = t.num_elements / t.shape[0];
  const uint64_t rows_per_expert = importance.empty() ? rows : rows / importance.size();
  const uint64_t in_rb = row_bytes(t.type, cols), out_rb = row_bytes(type, cols);
  const uint64_t chunk_rows = std::max<uint64_t>(1, (8u << 20) / std::max<uint64_t>(out_rb, 1));
  std::vector<uint8_t> out;
  double diff2 = 0, ref2 = 0;
  for (uint64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
    const uint64_t n = std::min(chunk_rows, rows - r0);
    out.resize(n * out_rb);
#pragma omp parallel num_threads(threads)
    {
      std::vector<float> row(static_cast<size_t>(cols)), back(static_cast<size_t>(cols));
#pragma omp for schedule(static) reduction(+ : diff2, ref2)
      for (int64_t r = 0; r < static_cast<int64_t>(n); ++r) {
        dequantize_row(t.type, t.data + (r0 + r) * in_rb, row.data(), cols);
        if (scaling) apply_scaling(*scaling, static_cast<int64_t>(r0 + r), row.data(), cols);
        if (lora) merge.add(static_cast<int64_t>(r0 + r), row.data(), cols);
        uint8_t* dst = out.data() + r * out_rb;
        const uint64_t expert = importance.empty() ? 0 : (r0 + r) / rows_per_expert;
        quantize_row_weighted(type, row.data(), dst, cols,
                              importance.empty() || importance[expert].empty() ? nullptr
                                                                               : importance[expert].data());
        dequantize_row(type, dst, back.data(), cols);
        for (int64_t c = 0; c < cols; ++c) {
          const double x = row[c], d = x - back[c];
          diff2 += d * d;
          ref2 += x * x;
        }
      }
    }
    sink.write(out.data(), out.size());
    wrote(out.size());
  }
  return relative_error(diff2, ref2);
}

// GPTQ's factor of each input, computed once for the matrices that read it (q/k/v, gate/up).
// Only one layer's inputs are kept: the factor of a 1536-column input is 18 MiB.
// With AWQ, every matrix that reads an input is scaled by its group's s (W·diag(s)) and reads
// x / s: `col_mul` is that s (empty: unscaled), the same for every reader of one input.
class GptqFactors {
 public:
  GptqFactors(const AwqStats& stats, double damp) : stats_(stats), damp_(damp) {}

  const std::vector<double>& get(const std::string& input, std::span<const float> col_mul) {
    const std::string layer = input.substr(0, input.find('.', input.find('.') + 1));
    std::erase_if(by_input_, [&](const auto& e) { return e.first.rfind(layer + ".", 0) != 0; });
    auto it = by_input_.find(input);
    if (it == by_input_.end()) {
      const AwqInput& x = stats_.inputs.at(input);
      it = by_input_
               .emplace(input, gptq_factor(gptq_gram(x.sample.data(), x.sample_rows(), x.cols,
                                                     col_mul),
                                           x.cols, damp_))
               .first;
    }
    return it->second;
  }

 private:
  const AwqStats& stats_;
  double damp_;
  std::map<std::string, std::vector<double>> by_input_;
};

// `t` (scaled by AWQ's `scaling` when given) rounded by GPTQ into `type` with the factor `u` of
// its input, to `sink`; returns the round trip's relative error against the scaled values.
double gptq_tensor(const GgufTensorInfo& t, DType type, std::span<const double> u, int threads,
                   const float* importance, const TensorScaling* scaling, GgufWriter::Sink& sink,
                   const std::function<void(uint64_t)>& wrote) {
  const int64_t cols = static_cast<int64_t>(t.shape[0]);
  const int64_t rows = static_cast<int64_t>(t.num_elements / t.shape[0]);
  const uint64_t in_rb = row_bytes(t.type, cols), out_rb = row_bytes(type, cols);
  std::vector<float> w(t.num_elements), original;
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(t.type, t.data + r * in_rb, w.data() + r * cols, cols);
    if (scaling) apply_scaling(*scaling, r, w.data() + r * cols, cols);
  }
  original = w;
  std::vector<uint8_t> out(out_rb * static_cast<size_t>(rows));
  gptq_quantize(type, w.data(), rows, cols, u, importance, out.data(), threads);
  double diff2 = 0, ref2 = 0;
  std::vector<float> back(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(type, out.data() + r * out_rb, back.data(), cols);
    for (int64_t c = 0; c < cols; ++c) {
      const double v = original[r * cols + c], d = v - back[c];
      diff2 += d * d;
      ref2 += v * v;
    }
  }
  sink.write(out.data(), out.size());
  wrote(out.size());
  return relative_error(diff2, ref2);
}

// The imatrix's weights for each expert of `t` (one for a 2-D matrix); empty when it has no
// entry for `t`. An entry of another shape is an error: the imatrix is of another model.
std::vector<std::vector<float>> tensor_importance(const Imatrix& imatrix, const GgufTensorInfo& t,
                                                  const std::string& path) {
  const auto it = imatrix.entries.find(t.name);
  if (it == imatrix.entries.end()) return {};
  const int64_t experts = t.shape.size() > 2 ? static_cast<int64_t>(t.shape[2]) : 1;
  if (it->second.cols != static_cast<int64_t>(t.shape[0]) || it->second.num_experts() != experts) {
    fail(path, ": the entry for ", t.name, " is ", it->second.num_experts(), " x ", it->second.cols,
         " but the tensor has ", experts, " x ", t.shape[0], ": an importance matrix of another model?");
  }
  std::vector<std::vector<float>> importance;
  for (int64_t e = 0; e < experts; ++e) importance.push_back(imatrix.mean(t.name, e));
  return importance;
}

}  // namespace

const std::vector<std::string>& quantize_type_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& r : weight_recipes()) n.emplace_back(r.name);
    return n;
  }();
  return names;
}

bool is_quantized_type(DType type) {
  return type != DType::kF32 && type != DType::kF16 && type != DType::kBF16;
}

Requantization find_requantization(const QuantizeOptions& o) {
  const WeightRecipe& rule = weight_recipe(o.type, "quantize");
  auto in = GgufFile::open(o.input_path);
  return make_plan(*in, o, rule).requantization;
}

QuantizeSummary quantize_model(const QuantizeOptions& o,
                               const std::function<void(const QuantizeProgress&)>& progress) {
  const WeightRecipe& rule = weight_recipe(o.type, "quantize");
  if (o.output_path.empty()) fail("quantize: give -o OUT.gguf");
  auto in = GgufFile::open(o.input_path);
  const Plan plan = make_plan(*in, o, rule);
  if (const Requantization& r = plan.requantization; r.count > 0 && !o.allow_requantize) {
    const std::string others =
        r.count > 1 ? str_cat(" (and ", r.count - 1, " more tensor", r.count > 2 ? "s" : "", ")")
                    : "";
    fail(o.input_path, ": tensor ", r.first, " is already quantized (", dtype_traits(r.from).name,
         "); --type ", o.type, " would requantize it to ", dtype_traits(r.to).name, others,
         ", which loses quality as the errors compound: quantize the F32, F16 or BF16 original, "
         "or pass --allow-requantize");
  }

  GgufWriter w;
  for (const auto& [key, value] : in->metadata()) {
    if (key == "general.alignment") {
      w.set_alignment(in->alignment());  // the writer keeps it as uint32
    } else {
      w.add_value(key, value);
    }
  }
  w.set_value("general.file_type", GgufWriter::make_uint(GgufType::kUint32, rule.file_type));
  w.set_value("general.quantization_version", GgufWriter::make_uint(GgufType::kUint32, 2));
  Imatrix imatrix;
  const bool searching = !o.awq.text_path.empty();
  if (!o.imatrix_path.empty()) {
    imatrix = Imatrix::read(o.imatrix_path);
    // The keys llama-quantize writes, so either tool's files say how they were made.
    w.set_value("quantize.imatrix.file", GgufWriter::make_string(o.imatrix_path));
    if (!imatrix.datasets.empty()) {
      w.set_value("quantize.imatrix.dataset", GgufWriter::make_string(imatrix.datasets.front()));
    }
    w.set_value("quantize.imatrix.entries_count",
                GgufWriter::make_uint(GgufType::kUint32, imatrix.entries.size()));
    w.set_value("quantize.imatrix.chunks_count", GgufWriter::make_uint(GgufType::kUint32, imatrix.chunk_count));
  }

  QuantizeSummary summary;
  AwqScaling searched;
  if (searching) {
    std::map<std::string, DType> types;
    for (size_t ti = 0; ti < in->tensors().size(); ++ti) types[in->tensors()[ti].name] = plan.types[ti];
    searched = awq_compute(
        o.input_path, *in, o.awq, [&](const std::string& name) { return types.at(name); },
        [&](const std::string& name) {
          std::vector<float> m;
          if (!o.imatrix_path.empty()) m = imatrix.mean(name, 0);
          return m;
        },
        o.awq_progress, summary.awq);
    w.set_value("quantize.awq.dataset", GgufWriter::make_string(o.awq.text_path));
    w.set_value("quantize.awq.chunks_count", GgufWriter::make_uint(GgufType::kUint32, summary.awq.chunks));
    w.set_value("quantize.awq.groups_count", GgufWriter::make_uint(GgufType::kUint32, summary.awq.groups.size()));
  }
  const AwqScaling* scaling = searching ? &searched : o.awq_scaling;
  // --merge-lora: the adapter's pairs by the weight they change.
  std::unique_ptr<ModelFile> base;
  std::unique_ptr<LoraAdapter> adapter;
  std::map<std::string, const LoraWeight*> merges;
  if (!o.merge_lora.empty()) {
    if (searching || scaling || !o.gptq.text_path.empty()) {
      fail("--merge-lora: not with --awq or --gptq (merge into an F32/F16 file first, then "
           "quantize that)");
    }
    base = ModelFile::open(o.input_path);
    adapter = open_lora_adapter(o.merge_lora, *base, o.lora_scale);
    for (const LoraWeight& lw : adapter->weights()) merges[lw.target] = &lw;
    for (size_t ti = 0; ti < in->tensors().size(); ++ti) {
      const GgufTensorInfo& t = in->tensors()[ti];
      if (merges.count(t.name) && is_quantized_type(t.type) && is_quantized_type(plan.types[ti]) &&
          !o.allow_requantize) {
        fail("--merge-lora: ", t.name, " is ", dtype_traits(t.type).name, " and merging writes it "
             "again as ", dtype_traits(plan.types[ti]).name, ", which compounds the rounding: "
             "merge into the F32, F16 or BF16 original, or pass --allow-requantize");
      }
    }
    w.set_value("quantize.lora.merged", GgufWriter::make_string(o.merge_lora));
  }
  AwqCalibration gptq_cal;
  std::optional<GptqFactors> gptq_factors;
  const bool gptq = !o.gptq.text_path.empty();
  if (gptq) {
    gptq_cal = awq_calibrate(o.input_path, o.gptq.text_path, o.gptq.ctx, o.gptq.chunks,
                             o.gptq.sample_rows, o.gptq.threads, "--gptq-ctx", o.gptq_progress);
    summary.gptq_chunks = gptq_cal.chunks;
    summary.gptq_tokens = gptq_cal.tokens;
    gptq_factors.emplace(gptq_cal.stats, o.gptq.damp);
    w.set_value("quantize.gptq.dataset", GgufWriter::make_string(o.gptq.text_path));
    w.set_value("quantize.gptq.chunks_count", GgufWriter::make_uint(GgufType::kUint32, gptq_cal.chunks));
  }

  summary.num_tensors = in->tensors().size();
  summary.bytes_in = plan.bytes_in;
  summary.bytes_out = plan.bytes_out;
  summary.num_requantized = plan.requantization.count;
  uint64_t written = 0;
  const int threads = o.num_threads > 0 ? o.num_threads : omp_get_num_procs();
  // The producers run inside w.write() below, while these locals live.
  for (size_t ti = 0; ti < in->tensors().size(); ++ti) {
    const GgufTensorInfo& t = in->tensors()[ti];
    const DType type = plan.types[ti];
    const int64_t cols = static_cast<int64_t>(t.shape[0]);
    QuantizeProgress p;
    p.tensor = ti;
    p.num_tensors = in->tensors().size();
    p.from = t.type;
    p.to = type;
    p.requantized = requantizes(t.type, type);
    p.tensor_bytes_in = t.num_bytes;
    p.tensor_bytes_out =
        type == t.type ? t.num_bytes : row_bytes(type, cols) * (t.num_elements / t.shape[0]);
    p.bytes_total = plan.bytes_out;
    if (type != t.type) ++summary.num_converted;
    const auto merge_it = merges.find(t.name);
    const LoraWeight* lora = merge_it == merges.end() ? nullptr : merge_it->second;
    if (lora) ++summary.num_merged;
    const TensorScaling* scaled = nullptr;
    if (scaling) {
      const auto it = scaling->find(t.name);
      if (it != scaling->end()) scaled = &it->second;
    }
    std::vector<std::vector<float>> importance;
    if (!o.imatrix_path.empty() && type != t.type && is_quantized_type(type)) {
      importance = tensor_importance(imatrix, t, o.imatrix_path);
      if (importance.empty()) {
        summary.without_importance.push_back(t.name);
      } else {
        ++summary.num_weighted;
        // The scaled matrix reads x / s: its columns' mean square is the measured one / s^2.
        if (scaled && !scaled->col_mul.empty() && !importance[0].empty()) {
          for (int64_t c = 0; c < cols; ++c) {
            importance[0][static_cast<size_t>(c)] /= scaled->col_mul[c] * scaled->col_mul[c];
          }
        }
      }
    }
    // GPTQ's input for this matrix, when it is rounded that way.
    std::string gptq_input;
    if (gptq && type != t.type && gptq_supports(type) && t.shape.size() == 2) {
      const std::string key = awq_input_key(t.name);
      const auto it = gptq_cal.stats.inputs.find(key);
      if (it != gptq_cal.stats.inputs.end() && it->second.cols == cols &&
          it->second.sample_rows() > 0) {
        gptq_input = key;
        ++summary.num_gptq;
      }
    }
    w.add_tensor(
        t.name, type, t.shape,
        [&t, type, threads, p, &written, &summary, &progress, scaled, lora, gptq_input,
         &gptq_factors, importance = std::move(importance)](GgufWriter::Sink& sink) mutable {
          p.name = t.name;
          auto wrote = [&](uint64_t bytes) {
            written += bytes;
            p.bytes_done = written;
            if (progress) progress(p);
          };
          if (type == t.type && !scaled && !lora) {
            sink.write(t.data, t.num_bytes);
            wrote(t.num_bytes);
          } else {
            p.error = !gptq_input.empty()
                          ? gptq_tensor(t, type,
                                        gptq_factors->get(gptq_input,
                                                          scaled ? std::span<const float>(scaled->col_mul)
                                                                 : std::span<const float>()),
                                        threads,
                                        importance.empty() || importance[0].empty()
                                            ? nullptr
                                            : importance[0].data(),
                                        scaled, sink, wrote)
                          : convert_tensor(t, type, threads, importance, scaled, lora, sink,
                                           wrote);
            // A NaN error (a NaN weight) counts as the worst.
            const double worst = summary.worst_error;
            if (summary.worst_name.empty() || (!std::isnan(worst) && !(p.error <= worst))) {
              summary.worst_name = t.name;
              summary.worst_from = t.type;
              summary.worst_to = type;
              summary.worst_error = p.error;
            }
          }
          p.tensor_done = true;
          if (progress) progress(p);
        });
  }
  w.write(o.output_path);
  return summary;
}

}  // namespace pagoda
