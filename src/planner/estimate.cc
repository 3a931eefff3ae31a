#include "planner/estimate.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>

#include "core/checked.h"
#include "core/error.h"
#include "model/architecture.h"
#include "model/model_file.h"
#include "model/recipe.h"
#include "model/shapes.h"
#include "model/state_storage.h"

namespace pagoda {
namespace {

// How a type stores the layers' matrices: GGUF blocks, or one of the GPU checkpoint formats.
enum class Packing { kGguf, kAwq4, kFp8, kInt8 };

// The GPU checkpoint formats, beside the GGUF recipes (model/recipe.h): the layers' matrices
// packed so, the token table and output matrix in F16.
struct GpuPacking {
  std::string_view name;
  Packing packing;
};
constexpr GpuPacking kGpuPackings[] = {
    {"awq-4bit", Packing::kAwq4}, {"fp8", Packing::kFp8}, {"int8", Packing::kInt8}};

const char* packing_name(Packing p) {
  switch (p) {
    case Packing::kAwq4:
      return "AWQ-4bit";
    case Packing::kFp8:
      return "FP8";
    case Packing::kInt8:
      return "INT8";
    case Packing::kGguf:
      break;
  }
  return "";
}

std::string join(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : " ") + n;
  return s;
}

uint64_t mul(uint64_t a, uint64_t b) {
  auto r = checked_mul(a, b);
  if (!r) fail("estimate: size overflows 64 bits (", a, " x ", b, ")");
  return *r;
}

uint64_t add(uint64_t a, uint64_t b) {
  auto r = checked_add(a, b);
  if (!r) fail("estimate: size overflows 64 bits (", a, " + ", b, ")");
  return *r;
}

// Bytes of `num_rows` rows of `num_cols` elements; num_cols must be whole blocks.
uint64_t rows_bytes(DType type, uint64_t num_rows, uint64_t num_cols, const char* what) {
  const auto& t = dtype_traits(type);
  if (num_cols % t.block_size != 0) {
    fail("estimate: ", what, " rows of ", num_cols, " elements are no whole number of ", t.name,
         " blocks of ", t.block_size);
  }
  return mul(num_rows, num_cols / t.block_size * t.type_size);
}

// Bytes of a layer matrix in one of the GPU checkpoint formats.
uint64_t packed_bytes(Packing packing, uint64_t num_rows, uint64_t num_cols) {
  if (packing == Packing::kAwq4) {
    // Per row, each group of 128 inputs: 64 bytes of 4-bit weights, an F16 scale and a 4-bit
    // zero point: 133 bytes per two groups.
    const uint64_t groups = (num_cols + 127) / 128;
    return (mul(mul(num_rows, groups), 133) + 1) / 2;
  }
  return mul(num_rows, add(num_cols, 4));  // FP8 / INT8: a byte each and an F32 scale per row
}

enum class TensorKind { kEmbedding, kOutput, kLayer, kTail, kVector };

// Sums tensors by type so the table can say what the mixture is, and by kind for the speed
// model.
struct Tally {
  std::map<std::string, uint64_t> bytes_by_type;
  std::map<std::string, uint64_t> layer_bytes_by_type;
  WeightEstimate w;
  void add_tensor(TensorKind kind, const std::string& type, uint64_t num_elements,
                  uint64_t num_bytes_of_tensor) {
    w.num_parameters = add(w.num_parameters, num_elements);
    w.num_bytes = add(w.num_bytes, num_bytes_of_tensor);
    bytes_by_type[type] += num_bytes_of_tensor;
    switch (kind) {
      case TensorKind::kEmbedding:
        w.embedding_parameters += num_elements;
        w.embedding_bytes += num_bytes_of_tensor;
        break;
      case TensorKind::kOutput:
        w.output_parameters += num_elements;
        w.output_bytes += num_bytes_of_tensor;
        break;
      case TensorKind::kTail:
        w.tail_parameters += num_elements;
        [[fallthrough]];
      case TensorKind::kLayer:
        w.layer_parameters += num_elements;
        w.layer_bytes += num_bytes_of_tensor;
        layer_bytes_by_type[type] += num_bytes_of_tensor;
        break;
      case TensorKind::kVector:
        break;
    }
  }
  static std::vector<std::string> by_falling_bytes(const std::map<std::string, uint64_t>& m) {
    std::vector<std::pair<uint64_t, std::string>> order;
    for (const auto& [type, bytes] : m) order.emplace_back(bytes, type);
    std::sort(order.rbegin(), order.rend());
    std::vector<std::string> names;
    for (const auto& [bytes, type] : order) names.push_back(type);
    return names;
  }
  // Types by falling share of the bytes: "Q4_K + Q6_K + F32".
  std::string types() const {
    std::string s;
    for (const auto& t : by_falling_bytes(bytes_by_type)) s += (s.empty() ? "" : " + ") + t;
    return s;
  }
  WeightEstimate finish(std::string type) {
    if (w.output_parameters == 0) {  // tied: the output product reads the token table
      w.tied = true;
      w.output_parameters = w.embedding_parameters;
      w.output_bytes = w.embedding_bytes;
    }
    const auto layer_types = by_falling_bytes(layer_bytes_by_type);
    w.compute_type = layer_types.empty() ? "F32" : layer_types.front();
    w.type = std::move(type);
    return w;
  }
};

}  // namespace

const ModelShape& find_estimate_preset(const std::string& name) {
  if (const ModelShape* shape = find_model_shape(name)) return *shape;
  std::vector<std::string> names;
  for (const auto& p : model_shapes()) names.push_back(p.name);
  fail("estimate: unknown preset '", name, "' (known: ", join(names), ")");
}

const std::vector<std::string>& estimate_weight_types() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const WeightRecipe& r : weight_recipes()) n.emplace_back(r.name);
    // "fp8" is both a recipe (pagoda's FP8_E4M3 blocks) and a GPU packing: listed once.
    for (const GpuPacking& p : kGpuPackings) {
      if (std::find(n.begin(), n.end(), p.name) == n.end()) n.emplace_back(p.name);
    }
    return n;
  }();
  return names;
}

const std::vector<std::string>& estimate_kv_types() {
  static const std::vector<std::string> names = {"f32",  "f16",  "bf16", "q8_0",   "q5_1",
                                                 "q5_0", "q4_1", "q4_0", "iq4_nl", "fp8"};
  return names;
}

namespace {

// "blk.7.ffn_up.weight" / "model.layers.7.mlp.up_proj.weight" -> 7; -1 for other names.
int64_t layer_of(const std::string& name) {
  for (const char* prefix : {"blk.", "model.layers.", "layers."}) {
    const size_t n = std::strlen(prefix);
    if (name.compare(0, n, prefix) != 0) continue;
    int64_t layer = 0;
    size_t i = n;
    for (; i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])); ++i) {
      layer = layer * 10 + (name[i] - '0');
      if (layer > (int64_t{1} << 30)) return -1;
    }
    return i > n && i < name.size() && name[i] == '.' ? layer : -1;
  }
  return -1;
}

// Which part of the model a tensor is, by its GGUF or Hugging Face name.
TensorKind kind_of(const std::string& name, size_t num_dims, uint32_t num_layers) {
  if (name == "token_embd.weight" || name == "model.embed_tokens.weight") return TensorKind::kEmbedding;
  if (name == "output.weight" || name == "lm_head.weight") return TensorKind::kOutput;
  if (num_dims < 2) return TensorKind::kVector;
  const int64_t layer = layer_of(name);
  if (num_layers > 0 && layer == int64_t{num_layers} - 1) {
    for (const char* part : {"attn_output", "o_proj", "ffn_", "mlp."}) {
      if (name.find(part) != std::string::npos) return TensorKind::kTail;
    }
  }
  return TensorKind::kLayer;
}

}  // namespace

WeightEstimate estimate_weights(const ModelConfig& c, const std::string& weights_type) {
  const WeightRecipe* recipe = find_weight_recipe(weights_type);
  Packing packing = Packing::kGguf;
  for (const GpuPacking& p : kGpuPackings) {
    if (p.name == weights_type) {
      recipe = find_weight_recipe("f16");
      packing = p.packing;
    }
  }
  if (!recipe) {
    fail("estimate: unknown weights type '", weights_type,
         "' (known: ", join(estimate_weight_types()), ")");
  }
  if (c.num_layers == 0) fail("estimate: the model has no layers");
  // A family pagoda does not run is counted as plain Llama-style layers.
  ModelConfig shape = c;
  if (!find_architecture(c.architecture)) shape.architecture = "llama";
  Tally tally;
  // The tensors pagoda synth writes for this shape (model/recipe.h).
  for (const PlannedTensor& t : plan_model_tensors(shape, *recipe)) {
    uint64_t rows = 1;
    for (size_t d = 1; d < t.shape.size(); ++d) rows = mul(rows, t.shape[d]);
    const uint64_t cols = t.shape[0];
    const TensorKind kind = kind_of(t.name, t.shape.size(), c.num_layers);
    const bool layer = kind == TensorKind::kLayer || kind == TensorKind::kTail;
    if (packing != Packing::kGguf && t.from_recipe && layer) {
      tally.add_tensor(kind, packing_name(packing), mul(rows, cols), packed_bytes(packing, rows, cols));
    } else {
      tally.add_tensor(kind, std::string(dtype_traits(t.type).name), mul(rows, cols),
                       rows_bytes(t.type, rows, cols, "weight"));
    }
  }
  return tally.finish(weights_type);
}


WeightEstimate file_weights(const ModelFile& file) {
  Tally tally;
  for (const auto& t : file.tensors()) {
    tally.add_tensor(kind_of(t.name, t.shape.size(), file.config().num_layers), std::string(dtype_traits(t.type).name),
                     t.num_elements, t.num_bytes);
  }
  return tally.finish(tally.types());
}

DType parse_estimate_kv_type(const std::string& name) {
  for (const auto& known : estimate_kv_types()) {
    if (known == name && name != "fp8") return *dtype_from_name(name);
  }
  fail("estimate: unknown KV cache type '", name, "' (known: ", join(estimate_kv_types()), ")");
}

std::string kv_type_label(const std::string& name) {
  if (name == "fp8") return "FP8";
  return std::string(dtype_traits(parse_estimate_kv_type(name)).name);
}

namespace {
uint64_t kv_row_bytes(const std::string& kv_type, uint64_t num_elements, const char* what) {
  if (kv_type == "fp8") return num_elements;  // one byte each, one scale per tensor
  return rows_bytes(parse_estimate_kv_type(kv_type), 1, num_elements, what);
}
}  // namespace

// Each layer that holds K/V counts its own KV heads and head size (Gemma 4's differ by layer,
// and its last layers read an earlier layer's).
uint64_t kv_bytes_per_token(const ModelConfig& c, const std::string& kv_type) {
  uint64_t bytes = 0;
  for (uint32_t l = 0; l < c.kv_layer_count(); ++l) {
    bytes = add(bytes, mul(2, kv_row_bytes(kv_type, c.kv_row_elements(l), "KV")));
  }
  return bytes;
}

namespace {
uint64_t attention_layers(const ModelConfig& c) {
  uint64_t n = 0;
  for (uint32_t l = 0; l < c.num_layers; ++l) n += c.layer_recurrent(l) ? 0 : 1;
  return n;
}
}  // namespace

uint64_t kv_bytes_per_token_without_gqa(const ModelConfig& c, const std::string& kv_type) {
  return mul(2 * attention_layers(c), kv_row_bytes(kv_type, c.hidden_size, "hidden"));
}

uint64_t kv_bytes_per_token(const ModelConfig& c, DType kv_type) {
  uint64_t bytes = 0;
  for (uint32_t l = 0; l < c.kv_layer_count(); ++l) {
    bytes = add(bytes, mul(2, rows_bytes(kv_type, 1, c.kv_row_elements(l), "KV")));
  }
  return bytes;
}

uint64_t kv_bytes_per_token_without_gqa(const ModelConfig& c, DType kv_type) {
  return mul(2 * attention_layers(c), rows_bytes(kv_type, 1, c.hidden_size, "hidden"));
}

uint64_t state_bytes_per_sequence(const ModelConfig& c) {
  return c.hybrid() ? StateStorage::slot_bytes(c) : 0;
}

uint64_t default_overhead_bytes(const ModelConfig& c) {
  const uint64_t q_dim = uint64_t{c.num_heads} * c.head_dim;
  const uint64_t kv_dim = uint64_t{c.num_kv_heads} * c.head_dim;
  const uint64_t floats_per_token =
      2 * uint64_t{c.hidden_size} + 2 * q_dim + 2 * kv_dim + 2 * uint64_t{c.intermediate_size};
  return add(mul(mul(kStepTokens, floats_per_token), 4), mul(mul(kLogitRows, c.vocab_size), 4));
}

uint64_t max_batch_that_fits(uint64_t memory_bytes, uint64_t weight_bytes, uint64_t overhead_bytes,
                             uint64_t kv_bytes_per_token, uint64_t context,
                             uint64_t state_bytes) {
  const uint64_t fixed = add(weight_bytes, overhead_bytes);
  if (memory_bytes <= fixed) return 0;
  const uint64_t per_sequence = add(mul(kv_bytes_per_token, context), state_bytes);
  if (per_sequence == 0) fail("estimate: a sequence needs no KV cache (0 layers or context 0)");
  return (memory_bytes - fixed) / per_sequence;
}

Estimate estimate_memory(const ModelConfig& config, const WeightEstimate& weights,
                         const EstimateOptions& o) {
  if (config.num_layers == 0 || config.num_kv_heads == 0 || config.head_dim == 0) {
    fail("estimate: the model has no attention layers (a vocabulary-only file?)");
  }
  Estimate e;
  e.config = config;
  e.weights = weights;
  e.kv_type = kv_type_label(o.kv_type);
  e.context = o.context ? o.context : config.context_length;
  if (e.context == 0) fail("estimate: the model sets no context length; give --context");
  if (o.batch == 0) fail("estimate: batch must be at least 1");
  e.batch = o.batch;
  e.kv_bytes_per_token = kv_bytes_per_token(config, o.kv_type);
  e.kv_bytes_per_token_without_gqa = kv_bytes_per_token_without_gqa(config, o.kv_type);
  e.kv_bytes_per_sequence = mul(e.kv_bytes_per_token, e.context);
  e.kv_bytes_total = mul(e.kv_bytes_per_sequence, e.batch);
  e.state_bytes_per_sequence = state_bytes_per_sequence(config);
  e.state_bytes_total = mul(e.state_bytes_per_sequence, e.batch);
  e.overhead_bytes = o.overhead_bytes ? *o.overhead_bytes : default_overhead_bytes(config);
  e.total_bytes =
      add(add(add(weights.num_bytes, e.kv_bytes_total), e.state_bytes_total), e.overhead_bytes);
  if (o.memory_bytes) {
    e.memory_bytes = o.memory_bytes;
    e.fits = e.total_bytes <= *o.memory_bytes;
    e.max_batch = max_batch_that_fits(*o.memory_bytes, weights.num_bytes, e.overhead_bytes,
                                      e.kv_bytes_per_token, e.context, e.state_bytes_per_sequence);
  }
  return e;
}

}  // namespace pagoda
