// Requantizing a GGUF model (see quantize.h).
#include "model/quantize.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "core/error.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "model/synth.h"
#include "quant/reference.h"

namespace pagoda {
namespace {

struct TypeRule {
  std::string name;
  DType base;          // most matrices
  DType more;          // the output matrix, and attn_v / ffn_down of some layers in K mixes
  bool kquant_mix;     // whether attn_v / ffn_down get `more` in the layers llama.cpp picks
  uint32_t file_type;  // general.file_type (llama_ftype)
};

const std::vector<TypeRule>& type_rules() {
  static const std::vector<TypeRule> rules = {
      {"f32", DType::kF32, DType::kF32, false, 0},
      {"f16", DType::kF16, DType::kF16, false, 1},
      {"bf16", DType::kBF16, DType::kBF16, false, 32},
      {"q4_0", DType::kQ4_0, DType::kQ6_K, false, 2},
      {"q4_1", DType::kQ4_1, DType::kQ6_K, false, 3},
      {"q5_0", DType::kQ5_0, DType::kQ6_K, false, 8},
      {"q5_1", DType::kQ5_1, DType::kQ6_K, false, 9},
      {"q8_0", DType::kQ8_0, DType::kQ8_0, false, 7},
      {"q4_k", DType::kQ4_K, DType::kQ6_K, false, 14},
      {"q4_k_m", DType::kQ4_K, DType::kQ6_K, true, 15},
      {"q5_k_m", DType::kQ5_K, DType::kQ6_K, true, 17},
      {"q6_k", DType::kQ6_K, DType::kQ6_K, false, 18},
  };
  return rules;
}

const TypeRule& find_rule(const std::string& name) {
  for (const auto& r : type_rules()) {
    if (r.name == name) return r;
  }
  std::string known;
  for (const auto& r : type_rules()) known += " " + r.name;
  fail("quantize: unknown type '", name, "' (known:", known, ")");
}

// The layer of "blk.N.<rest>", or -1.
int64_t layer_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  const size_t dot = name.find('.', 4);
  if (dot == std::string::npos || dot == 4) return -1;
  int64_t layer = 0;
  for (size_t i = 4; i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    layer = layer * 10 + (name[i] - '0');
  }
  return layer;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The type a tensor gets; its own type when it is copied as it is.
DType target_type(const GgufTensorInfo& t, const TypeRule& rule, bool has_output,
                  uint32_t num_layers) {
  if (t.shape.size() < 2 || !ends_with(t.name, ".weight")) return t.type;
  DType type = rule.base;
  const bool is_output =
      t.name == "output.weight" || (!has_output && t.name == "token_embd.weight");
  if (is_output) type = rule.more;
  const int64_t layer = layer_of(t.name);
  if (rule.kquant_mix && layer >= 0 && num_layers > 0 &&
      (ends_with(t.name, ".attn_v.weight") || ends_with(t.name, ".ffn_down.weight")) &&
      kquant_mix_more_bits(static_cast<uint32_t>(layer), num_layers)) {
    type = rule.more;
  }
  // Applied until the row fits: a K type falls back to Q8_0, which may not fit either.
  while (t.shape[0] % dtype_traits(type).block_size != 0) {
    type = quant_fallback_type(type, t.shape[0]);
  }
  return type;
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

Plan make_plan(const GgufFile& in, const QuantizeOptions& o, const TypeRule& rule) {
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

// Writes `t` encoded as `type` to `sink` in chunks, calling wrote(bytes) after each; returns
// the round trip's relative error against the values decoded from `t`.
double convert_tensor(const GgufTensorInfo& t, DType type, int threads, GgufWriter::Sink& sink,
                      const std::function<void(uint64_t)>& wrote) {
  const int64_t cols = static_cast<int64_t>(t.shape[0]);
  const uint64_t rows = t.num_elements / t.shape[0];
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
        uint8_t* dst = out.data() + r * out_rb;
        quantize_row(type, row.data(), dst, cols);
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

}  // namespace

const std::vector<std::string>& quantize_type_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& r : type_rules()) n.push_back(r.name);
    return n;
  }();
  return names;
}

bool is_quantized_type(DType type) {
  return type != DType::kF32 && type != DType::kF16 && type != DType::kBF16;
}

Requantization find_requantization(const QuantizeOptions& o) {
  const TypeRule& rule = find_rule(o.type);
  auto in = GgufFile::open(o.input_path);
  return make_plan(*in, o, rule).requantization;
}

QuantizeSummary quantize_model(const QuantizeOptions& o,
                               const std::function<void(const QuantizeProgress&)>& progress) {
  const TypeRule& rule = find_rule(o.type);
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

  QuantizeSummary summary;
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
    w.add_tensor(
        t.name, type, t.shape,
        [&t, type, threads, p, &written, &summary, &progress](GgufWriter::Sink& sink) mutable {
          p.name = t.name;
          auto wrote = [&](uint64_t bytes) {
            written += bytes;
            p.bytes_done = written;
            if (progress) progress(p);
          };
          if (type == t.type) {
            sink.write(t.data, t.num_bytes);
            wrote(t.num_bytes);
          } else {
            p.error = convert_tensor(t, type, threads, sink, wrote);
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
