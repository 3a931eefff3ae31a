// Requantizing a GGUF model (see quantize.h).
#include "model/quantize.h"

#include <omp.h>

#include <algorithm>
#include <memory>

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

}  // namespace

const std::vector<std::string>& quantize_type_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& r : type_rules()) n.push_back(r.name);
    return n;
  }();
  return names;
}

void quantize_model(const QuantizeOptions& o,
                    const std::function<void(uint64_t, uint64_t)>& progress) {
  const TypeRule& rule = find_rule(o.type);
  if (o.output_path.empty()) fail("quantize: give -o OUT.gguf");
  auto in = GgufFile::open(o.input_path);
  const auto arch = in->try_string("general.architecture");
  const uint32_t num_layers =
      arch ? static_cast<uint32_t>(in->try_u64(*arch + ".block_count").value_or(0)) : 0;
  const bool has_output = in->find_tensor("output.weight") != nullptr;

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

  uint64_t total = 0;
  std::vector<DType> types;
  for (const auto& t : in->tensors()) {
    const DType type = target_type(t, rule, has_output, num_layers);
    if (type != t.type && !can_dequantize(t.type)) {
      fail(o.input_path, ": tensor ", t.name, ": cannot decode its type ",
           dtype_traits(t.type).name);
    }
    if (type != t.type && !can_quantize(type)) {
      fail("quantize: cannot encode ", dtype_traits(type).name, " (tensor ", t.name, ")");
    }
    types.push_back(type);
    const uint64_t rows = t.num_elements / t.shape[0];
    total += type == t.type ? t.num_bytes
                            : row_bytes(type, static_cast<int64_t>(t.shape[0])) * rows;
  }

  auto written = std::make_shared<uint64_t>(0);
  const int threads = o.num_threads > 0 ? o.num_threads : omp_get_num_procs();
  for (size_t ti = 0; ti < in->tensors().size(); ++ti) {
    const GgufTensorInfo& t = in->tensors()[ti];
    const DType type = types[ti];
    if (type == t.type) {
      w.add_tensor(t.name, t.type, t.shape, [&t, written, total, &progress](GgufWriter::Sink& s) {
        s.write(t.data, t.num_bytes);
        *written += t.num_bytes;
        if (progress) progress(*written, total);
      });
      continue;
    }
    const int64_t cols = static_cast<int64_t>(t.shape[0]);
    const uint64_t rows = t.num_elements / t.shape[0];
    const uint64_t in_rb = row_bytes(t.type, cols), out_rb = row_bytes(type, cols);
    w.add_tensor(t.name, type, t.shape, [=, &t, &progress](GgufWriter::Sink& sink) {
      const uint64_t chunk_rows = std::max<uint64_t>(1, (8u << 20) / std::max<uint64_t>(out_rb, 1));
      std::vector<uint8_t> out;
      for (uint64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
        const uint64_t n = std::min(chunk_rows, rows - r0);
        out.resize(n * out_rb);
#pragma omp parallel num_threads(threads)
        {
          std::vector<float> row(static_cast<size_t>(cols));
#pragma omp for schedule(static)
          for (int64_t r = 0; r < static_cast<int64_t>(n); ++r) {
            dequantize_row(t.type, t.data + (r0 + r) * in_rb, row.data(), cols);
            quantize_row(type, row.data(), out.data() + r * out_rb, cols);
          }
        }
        sink.write(out.data(), out.size());
        *written += out.size();
        if (progress) progress(*written, total);
      }
    });
  }
  w.write(o.output_path);
}

}  // namespace pagoda
