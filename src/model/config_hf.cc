// ModelConfig from a Hugging Face config.json.
#include <nlohmann/json.hpp>
#include <cmath>
#include <optional>

#include "core/error.h"
#include "format/hf_tokenizer.h"
#include "model/architecture.h"
#include "model/config.h"

namespace pagoda {
namespace {

using nlohmann::json;

const char* json_kind(const json& v) {
  if (v.is_boolean()) return "a bool";
  if (v.is_number_float()) return "a float";
  if (v.is_number_unsigned()) return "an integer";
  if (v.is_number_integer()) return v.get<int64_t>() < 0 ? "a negative integer" : "an integer";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return v.is_object() ? "an object" : "null";
}

// Typed reads from one object. null counts as absent: transformers writes null for "not set"
// (head_dim, sliding_window, rope_scaling). Errors name the key's full path.
class Reader {
 public:
  Reader(const json& obj, std::string prefix, const std::string& source)
      : obj_(&obj), prefix_(std::move(prefix)), source_(&source) {}

  const json* get(const char* key) const {
    auto it = obj_->find(key);
    return it == obj_->end() || it->is_null() ? nullptr : &*it;
  }
  std::optional<uint32_t> u32(const char* key) const {
    const json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number_integer() || (!v->is_number_unsigned() && v->get<int64_t>() < 0)) {
      wrong(key, *v, "a non-negative integer");
    }
    uint64_t x = v->get<uint64_t>();
    if (x > UINT32_MAX) fail(*source_, ": key '", path(key), "' value ", x, " is too large");
    return static_cast<uint32_t>(x);
  }
  std::optional<double> number(const char* key) const {
    const json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number()) wrong(key, *v, "a number");
    return v->get<double>();
  }
  std::optional<bool> boolean(const char* key) const {
    const json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean()) wrong(key, *v, "a bool");
    return v->get<bool>();
  }
  std::optional<std::string> str(const char* key) const {
    const json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) wrong(key, *v, "a string");
    return v->get<std::string>();
  }
  std::optional<std::vector<float>> numbers(const char* key) const {
    const json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_array()) wrong(key, *v, "an array of numbers");
    std::vector<float> out;
    for (const json& x : *v) {
      if (!x.is_number()) wrong(key, *v, "an array of numbers");
      out.push_back(x.get<float>());
    }
    return out;
  }
  // nullopt when absent; an Error when present and not an object.
  std::optional<Reader> obj(const char* key) const {
    const json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_object()) wrong(key, *v, "an object");
    return Reader(*v, path(key) + ".", *source_);
  }

  std::string path(const char* key) const { return prefix_ + key; }
  const std::string& source() const { return *source_; }

 private:
  [[noreturn]] void wrong(const char* key, const json& v, const char* want) const {
    fail(*source_, ": key '", path(key), "' is ", json_kind(v), ", expected ", want);
  }

  const json* obj_;  // pointers, not references, so a Reader can be assigned
  std::string prefix_;
  const std::string* source_;
};

// transformers' get_mscale: the attention factor of YaRN scaling by `factor`.
double yarn_mscale(double factor, double mscale) {
  return factor <= 1 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

// YaRN's keys of rope_scaling, as transformers' _compute_yarn_parameters reads them.
void read_yarn(const Reader& rs, ModelConfig& c) {
  if (auto v = rs.number("beta_fast")) c.rope_yarn_beta_fast = static_cast<float>(*v);
  if (auto v = rs.number("beta_slow")) c.rope_yarn_beta_slow = static_cast<float>(*v);
  if (!rs.boolean("truncate").value_or(true)) {
    fail(rs.source(), ": key '", rs.path("truncate"), "' is false: pagoda's YaRN rounds the correction range as "
         "llama.cpp does");
  }
  const double factor = c.rope_scaling_factor;
  auto mscale = rs.number("mscale"), mscale_all_dim = rs.number("mscale_all_dim");
  if (auto v = rs.number("attention_factor")) {
    c.rope_yarn_attn_factor = static_cast<float>(*v);
  } else if (mscale && mscale_all_dim && *mscale != 0 && *mscale_all_dim != 0) {
    c.rope_yarn_attn_factor =
        static_cast<float>(yarn_mscale(factor, *mscale) / yarn_mscale(factor, *mscale_all_dim));
  }
}

// LongRoPE (Phi-3's 128K models; "su" in older files), as transformers'
// _compute_longrope_parameters: divisors per pair for contexts past the original one and within
// it, and an attention factor from how far the context was stretched (max_position_embeddings
// over a top-level original_max_position_embeddings, else rope_scaling's factor).
void read_longrope(const Reader& r, const Reader& rs, ModelConfig& c) {
  c.rope_scaling_type = "longrope";
  auto long_factors = rs.numbers("long_factor"), short_factors = rs.numbers("short_factor");
  if (!long_factors || !short_factors) {
    fail(rs.source(), ": LongRoPE needs '", rs.path("long_factor"), "' and '",
         rs.path("short_factor"), "'");
  }
  c.rope_long_factors = std::move(*long_factors);
  c.rope_short_factors = std::move(*short_factors);
  double factor = rs.number("factor").value_or(1.0);
  c.rope_original_context = c.context_length;
  if (auto original = r.u32("original_max_position_embeddings"); original && *original > 0) {
    c.rope_original_context = *original;
    factor = static_cast<double>(c.context_length) / *original;
  }
  double attention = 1.0;
  if (auto v = rs.number("attention_factor")) {
    attention = *v;
  } else if (factor > 1 && c.rope_original_context > 1) {
    attention = std::sqrt(1 + std::log(factor) / std::log(double(c.rope_original_context)));
  }
  c.rope_attn_factor = static_cast<float>(attention);
}

void read_rope_scaling(const Reader& r, ModelConfig& c) {
  // Newer transformers write rope_parameters (theta inside); older ones rope_scaling.
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    auto rs = r.obj(key);
    if (!rs) continue;
    // Per layer type (Gemma 3 in transformers 4.57+): the global layers' RoPE is the model's;
    // the sliding layers' base is checked against the family's in check_fixed_choices.
    if (auto full = rs->obj("full_attention")) rs = full;
    if (auto theta = rs->number("rope_theta")) c.rope_theta = static_cast<float>(*theta);
    std::string type = rs->str("rope_type").value_or(rs->str("type").value_or(""));
    if (type.empty() || type == "default") continue;  // plain RoPE
    c.rope_scaling_type = type;
    c.rope_scaling_factor = static_cast<float>(rs->number("factor").value_or(0.0));
    if (auto v = rs->number("low_freq_factor")) c.rope_low_freq_factor = static_cast<float>(*v);
    if (auto v = rs->number("high_freq_factor")) c.rope_high_freq_factor = static_cast<float>(*v);
    if (auto v = rs->number("original_max_position_embeddings")) {
      c.rope_original_context = static_cast<uint32_t>(*v);
    } else if (type == "yarn" && c.context_length != 0) {
      c.rope_original_context = c.context_length;
    }
    if (type == "yarn") read_yarn(*rs, c);
    if (type == "longrope" || type == "su") read_longrope(r, *rs, c);
  }
}

// What pagoda computes but a config.json may set otherwise: refused, not run wrong.
void check_fixed_choices(const Reader& r, const Architecture* arch, const ModelConfig& c,
                         const std::string& source) {
  for (const char* key : {"final_logit_softcapping", "attn_logit_softcapping"}) {
    if (r.number(key)) fail(source, ": key '", key, "' is set; pagoda does not soft-cap logits");
  }
  if (auto scalar = r.number("query_pre_attn_scalar"); scalar && *scalar != c.head_dim) {
    fail(source, ": query_pre_attn_scalar ", *scalar, " differs from head_dim ", c.head_dim,
         "; pagoda scales attention by 1/sqrt(head_dim)");
  }
  if (arch != nullptr && !c.rope_long_factors.empty() && !arch->longrope) {
    fail(source, ": RoPE scaling 'longrope' is not supported for ", arch->name,
         " (pagoda applies it to the Llama-like families and Phi-3)");
  }
  if (arch == nullptr || arch->global_attention_every == 0) return;
  const uint32_t every = arch->global_attention_every;
  for (const char* key : {"sliding_window_pattern", "_sliding_window_pattern"}) {
    if (auto n = r.u32(key); n && *n != every) {
      fail(source, ": ", key, " ", *n, "; ", arch->name, " attends globally every ", every,
           " layers");
    }
  }
  if (const json* types = r.get("layer_types"); types != nullptr && c.sliding_window != 0) {
    if (!types->is_array() || types->size() != c.num_layers) {
      fail(source, ": key 'layer_types' is not an array of ", c.num_layers, " names");
    }
    for (size_t l = 0; l < types->size(); ++l) {
      const bool global = (l + 1) % every == 0;
      const json& t = (*types)[l];
      if (!t.is_string() || t.get<std::string>() != (global ? "full_attention" : "sliding_attention")) {
        fail(source, ": layer_types[", l, "] is ", t.dump(), "; ", arch->name,
             " attends globally every ", every, " layers");
      }
    }
  }
  std::optional<double> local_base = r.number("rope_local_base_freq");
  if (auto rp = r.obj("rope_parameters")) {
    if (auto sliding = rp->obj("sliding_attention")) {
      if (auto theta = sliding->number("rope_theta")) local_base = theta;
    }
  }
  if (auto base = local_base; base && *base != arch->local_rope_base) {
    fail(source, ": rope_local_base_freq ", *base, "; ", arch->name,
         "'s sliding-window layers use RoPE base ", arch->local_rope_base);
  }
}

// BERT's keys: its LayerNorm epsilon and token types; what it computes otherwise is refused.
void read_encoder(const Reader& r, ModelConfig& c) {
  c.causal_attention = false;
  c.rms_norm_eps = static_cast<float>(r.number("layer_norm_eps").value_or(1e-12));
  if (auto n = r.u32("type_vocab_size")) c.token_type_count = *n;
  const std::string act = r.str("hidden_act").value_or("gelu");
  if (act != "gelu") {
    fail(r.source(), ": key 'hidden_act' is '", act, "'; pagoda's BERT computes 'gelu' (erf)");
  }
  const std::string pos = r.str("position_embedding_type").value_or("absolute");
  if (pos != "absolute") {
    fail(r.source(), ": key 'position_embedding_type' is '", pos,
         "'; pagoda's BERT adds absolute position embeddings");
  }
}

}  // namespace

ModelConfig config_from_hf_json(const std::string& json_text, const std::string& source) {
  const json doc = parse_json(json_text, source);
  if (!doc.is_object()) fail(source, ": the top level is ", json_kind(doc), ", expected an object");
  Reader top(doc, "", source);
  auto model_type = top.str("model_type");
  if (!model_type) fail(source, ": key 'model_type' is missing");

  ModelConfig c;
  // Families that share a forward pass share an architecture name; unknown ones keep their
  // model_type so the loader can name what it does not support.
  const Architecture* arch = find_hf_architecture(*model_type);
  c.architecture = arch ? std::string(arch->name) : *model_type;
  c.name = top.str("_name_or_path").value_or("");

  if (arch && arch->hf_defaults) arch->hf_defaults(c);
  std::optional<Reader> text_config;
  if (arch && arch->hf_text_config) text_config = top.obj(arch->hf_text_config);
  const Reader& r = text_config ? *text_config : top;

  auto set = [](uint32_t& field, std::optional<uint32_t> v) {
    if (v) field = *v;
  };
  set(c.num_layers, r.u32("num_hidden_layers"));
  set(c.hidden_size, r.u32("hidden_size"));
  set(c.intermediate_size, r.u32("intermediate_size"));
  set(c.num_heads, r.u32("num_attention_heads"));
  set(c.num_kv_heads, r.u32("num_key_value_heads"));
  if (c.num_kv_heads == 0) c.num_kv_heads = c.num_heads;  // absent means plain multi-head
  set(c.head_dim, r.u32("head_dim"));
  if (c.head_dim == 0 && c.num_heads != 0) c.head_dim = c.hidden_size / c.num_heads;
  set(c.vocab_size, r.u32("vocab_size"));
  set(c.context_length, r.u32("max_position_embeddings"));
  if (auto eps = r.number("rms_norm_eps")) c.rms_norm_eps = static_cast<float>(*eps);
  if (auto theta = r.number("rope_theta")) c.rope_theta = static_cast<float>(*theta);
  read_rope_scaling(r, c);
  for (const char* key : {"num_local_experts", "num_experts"}) {
    if (r.u32(key).value_or(0) > 1) {
      fail(source, ": a mixture-of-experts checkpoint (", key, " = ", *r.u32(key),
           "): run it from a GGUF file, whose experts are stacked");
    }
  }
  set(c.sliding_window, r.u32("sliding_window"));
  // Qwen2/3 write a window size but only use it when this flag is set.
  if (!r.boolean("use_sliding_window").value_or(true)) c.sliding_window = 0;
  // The wrapper of a multimodal model may hold the flag instead of its text_config.
  if (auto tie = top.boolean("tie_word_embeddings")) c.tie_embeddings = *tie;
  if (auto tie = r.boolean("tie_word_embeddings")) c.tie_embeddings = *tie;
  if (arch && arch->encoder) read_encoder(r, c);
  check_fixed_choices(r, arch, c, source);
  return c;
}

}  // namespace pagoda
