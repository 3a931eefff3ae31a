#include "bench/estimate.h"

#include <algorithm>
#include <map>

#include "core/checked.h"
#include "core/error.h"
#include "model/model_file.h"
#include "model/synth.h"

namespace pagoda {
namespace {

ModelConfig shape(const char* arch, uint32_t layers, uint32_t hidden, uint32_t ffn, uint32_t heads,
                  uint32_t kv_heads, uint32_t head_dim, uint32_t vocab, uint32_t context,
                  float theta) {
  ModelConfig c;
  c.architecture = arch;
  c.num_layers = layers;
  c.hidden_size = hidden;
  c.intermediate_size = ffn;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.vocab_size = vocab;
  c.context_length = context;
  c.rope_theta = theta;
  return c;
}

std::vector<EstimatePreset> make_presets() {
  std::vector<EstimatePreset> presets;
  for (const auto& p : synth_presets()) presets.push_back({p.name, p.config});
  // From each model's published config.json; none ties its embeddings. Qwen2's context is the
  // instruct models' max_position_embeddings (32K native; longer only with YaRN).
  presets.push_back(
      {"llama-2-13b", shape("llama", 40, 5120, 13824, 40, 40, 128, 32000, 4096, 1e4f)});
  presets.push_back(
      {"llama-2-70b", shape("llama", 80, 8192, 28672, 64, 8, 128, 32000, 4096, 1e4f)});
  presets.push_back(
      {"llama-3-8b", shape("llama", 32, 4096, 14336, 32, 8, 128, 128256, 8192, 5e5f)});
  presets.push_back(
      {"llama-3-70b", shape("llama", 80, 8192, 28672, 64, 8, 128, 128256, 8192, 5e5f)});
  presets.push_back({"qwen2-7b", shape("qwen2", 28, 3584, 18944, 28, 4, 128, 152064, 32768, 1e6f)});
  presets.push_back(
      {"qwen2-72b", shape("qwen2", 80, 8192, 29568, 64, 8, 128, 152064, 32768, 1e6f)});
  return presets;
}

struct TypeRule {
  std::string name;
  DType base;  // most matrices
  DType more;  // output.weight (and attn_v / ffn_down of some layers when k_mix)
  bool k_mix;
};

const std::vector<TypeRule>& type_rules() {
  static const std::vector<TypeRule> rules = {
      {"f32", DType::kF32, DType::kF32, false},     {"f16", DType::kF16, DType::kF16, false},
      {"bf16", DType::kBF16, DType::kBF16, false},  {"q8_0", DType::kQ8_0, DType::kQ8_0, false},
      {"q4_0", DType::kQ4_0, DType::kQ6_K, false},  {"q4_1", DType::kQ4_1, DType::kQ6_K, false},
      {"q5_0", DType::kQ5_0, DType::kQ6_K, false},  {"q5_1", DType::kQ5_1, DType::kQ6_K, false},
      {"q4_k", DType::kQ4_K, DType::kQ4_K, false},  {"q4_k_m", DType::kQ4_K, DType::kQ6_K, true},
      {"q5_k_m", DType::kQ5_K, DType::kQ6_K, true}, {"q6_k", DType::kQ6_K, DType::kQ6_K, false},
  };
  return rules;
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

// Sums tensors by type so the table can say what the mixture is.
struct Tally {
  std::map<DType, uint64_t> bytes_by_type;
  uint64_t num_parameters = 0;
  uint64_t num_bytes = 0;
  void add_tensor(DType type, uint64_t num_elements, uint64_t num_bytes_of_tensor) {
    num_parameters = add(num_parameters, num_elements);
    num_bytes = add(num_bytes, num_bytes_of_tensor);
    bytes_by_type[type] += num_bytes_of_tensor;
  }
  // Types by falling share of the bytes: "Q4_K + Q6_K + F32".
  std::string types() const {
    std::vector<std::pair<uint64_t, DType>> order;
    for (const auto& [type, bytes] : bytes_by_type) order.emplace_back(bytes, type);
    std::sort(order.rbegin(), order.rend());
    std::string s;
    for (const auto& [bytes, type] : order)
      s += (s.empty() ? "" : " + ") + std::string(dtype_traits(type).name);
    return s;
  }
};

}  // namespace

const std::vector<EstimatePreset>& estimate_presets() {
  static const std::vector<EstimatePreset> presets = make_presets();
  return presets;
}

const EstimatePreset& find_estimate_preset(const std::string& name) {
  std::vector<std::string> names;
  for (const auto& p : estimate_presets()) {
    if (p.name == name) return p;
    names.push_back(p.name);
  }
  fail("estimate: unknown preset '", name, "' (known: ", join(names), ")");
}

const std::vector<std::string>& estimate_weight_types() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& r : type_rules()) n.push_back(r.name);
    return n;
  }();
  return names;
}

const std::vector<std::string>& estimate_kv_types() {
  static const std::vector<std::string> names = {"f32",  "f16",  "bf16", "q8_0",  "q5_1",
                                                 "q5_0", "q4_1", "q4_0", "iq4_nl"};
  return names;
}

WeightEstimate estimate_weights(const ModelConfig& c, const std::string& weights_type) {
  const TypeRule* rule = nullptr;
  for (const auto& r : type_rules()) {
    if (r.name == weights_type) rule = &r;
  }
  if (!rule) {
    fail("estimate: unknown weights type '", weights_type,
         "' (known: ", join(estimate_weight_types()), ")");
  }
  if (c.num_layers == 0) fail("estimate: the model has no layers");
  const uint64_t hidden = c.hidden_size, ffn = c.intermediate_size, vocab = c.vocab_size;
  const uint64_t q_dim = uint64_t{c.num_heads} * c.head_dim;
  const uint64_t kv_dim = uint64_t{c.num_kv_heads} * c.head_dim;
  Tally tally;
  auto matrix = [&](DType type, uint64_t rows, uint64_t cols) {
    const DType fitted = quant_fallback_type(type, cols);
    tally.add_tensor(fitted, mul(rows, cols), rows_bytes(fitted, rows, cols, "weight"));
  };
  auto vec = [&](uint64_t n) { tally.add_tensor(DType::kF32, n, mul(n, 4)); };
  // The same tensor list pagoda synth writes (model/synth.cc); the tests hold the two together.
  matrix(rule->base, vocab, hidden);  // token_embd
  for (uint32_t l = 0; l < c.num_layers; ++l) {
    const DType mixed = rule->k_mix && kquant_mix_more_bits(l, c.num_layers) ? rule->more : rule->base;
    vec(hidden);                         // attn_norm
    matrix(rule->base, q_dim, hidden);   // attn_q
    matrix(rule->base, kv_dim, hidden);  // attn_k
    matrix(mixed, kv_dim, hidden);       // attn_v
    matrix(rule->base, hidden, q_dim);   // attn_output
    if (c.architecture == "qwen2") {
      vec(q_dim);  // q, k, v biases
      vec(kv_dim);
      vec(kv_dim);
    }
    if (c.architecture == "qwen3" || c.architecture == "gemma3") {
      vec(c.head_dim);  // q_norm, k_norm
      vec(c.head_dim);
    }
    if (c.architecture == "gemma3") vec(hidden);  // post_attention_norm
    vec(hidden);                                  // ffn_norm
    matrix(rule->base, ffn, hidden);              // ffn_gate
    matrix(rule->base, ffn, hidden);              // ffn_up
    matrix(mixed, hidden, ffn);                   // ffn_down
    if (c.architecture == "gemma3") vec(hidden);  // post_ffw_norm
  }
  vec(hidden);  // output_norm
  if (!c.tie_embeddings) matrix(rule->more, vocab, hidden);
  return {tally.num_parameters, tally.num_bytes, weights_type};
}

WeightEstimate file_weights(const ModelFile& file) {
  Tally tally;
  for (const auto& t : file.tensors()) tally.add_tensor(t.type, t.num_elements, t.num_bytes);
  return {tally.num_parameters, tally.num_bytes, tally.types()};
}

DType parse_kv_type(const std::string& name) {
  for (const auto& known : estimate_kv_types()) {
    if (known == name) return *dtype_from_name(name);
  }
  fail("estimate: unknown KV cache type '", name, "' (known: ", join(estimate_kv_types()), ")");
}

uint64_t kv_bytes_per_token(const ModelConfig& c, DType kv_type) {
  const uint64_t row = uint64_t{c.num_kv_heads} * c.head_dim;  // one layer's K (or V) of a token
  return mul(2 * uint64_t{c.num_layers}, rows_bytes(kv_type, 1, row, "KV"));
}

uint64_t kv_bytes_per_token_without_gqa(const ModelConfig& c, DType kv_type) {
  return mul(2 * uint64_t{c.num_layers}, rows_bytes(kv_type, 1, c.hidden_size, "hidden"));
}

uint64_t default_overhead_bytes(const ModelConfig& c) {
  const uint64_t q_dim = uint64_t{c.num_heads} * c.head_dim;
  const uint64_t kv_dim = uint64_t{c.num_kv_heads} * c.head_dim;
  const uint64_t floats_per_token =
      2 * uint64_t{c.hidden_size} + 2 * q_dim + 2 * kv_dim + 2 * uint64_t{c.intermediate_size};
  return add(mul(mul(kStepTokens, floats_per_token), 4), mul(mul(kLogitRows, c.vocab_size), 4));
}

uint64_t max_batch_that_fits(uint64_t memory_bytes, uint64_t weight_bytes, uint64_t overhead_bytes,
                             uint64_t kv_bytes_per_token, uint64_t context) {
  const uint64_t fixed = add(weight_bytes, overhead_bytes);
  if (memory_bytes <= fixed) return 0;
  const uint64_t per_sequence = mul(kv_bytes_per_token, context);
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
  const DType kv_type = parse_kv_type(o.kv_type);
  e.kv_type = std::string(dtype_traits(kv_type).name);
  e.context = o.context ? o.context : config.context_length;
  if (e.context == 0) fail("estimate: the model sets no context length; give --context");
  if (o.batch == 0) fail("estimate: batch must be at least 1");
  e.batch = o.batch;
  e.kv_bytes_per_token = kv_bytes_per_token(config, kv_type);
  e.kv_bytes_per_token_without_gqa = kv_bytes_per_token_without_gqa(config, kv_type);
  e.kv_bytes_per_sequence = mul(e.kv_bytes_per_token, e.context);
  e.kv_bytes_total = mul(e.kv_bytes_per_sequence, e.batch);
  e.overhead_bytes = o.overhead_bytes ? *o.overhead_bytes : default_overhead_bytes(config);
  e.total_bytes = add(add(weights.num_bytes, e.kv_bytes_total), e.overhead_bytes);
  if (o.memory_bytes) {
    e.memory_bytes = o.memory_bytes;
    e.fits = e.total_bytes <= *o.memory_bytes;
    e.max_batch = max_batch_that_fits(*o.memory_bytes, weights.num_bytes, e.overhead_bytes,
                                      e.kv_bytes_per_token, e.context);
  }
  return e;
}

}  // namespace pagoda
