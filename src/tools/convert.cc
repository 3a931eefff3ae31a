#include "tools/convert.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>

#include "core/error.h"
#include "format/gguf_writer.h"
#include "model/architecture.h"
#include "model/gemma4_plan.h"
#include "model/qwen35_plan.h"
#include "model/model.h"
#include "model/model_file.h"
#include "model/weights.h"
#include "quant/reference.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;

struct OutType {
  const char* name;
  DType type;
  uint32_t file_type;  // general.file_type as llama.cpp numbers it (LLAMA_FTYPE_*)
};

constexpr OutType kOutTypes[] = {
    {"f32", DType::kF32, 0},
    {"f16", DType::kF16, 1},
    {"bf16", DType::kBF16, 32},
};

const OutType& out_type(const std::string& name) {
  for (const OutType& t : kOutTypes) {
    if (name == t.name) return t;
  }
  fail("convert: unknown --type '", name, "' (known: f32 f16 bf16)");
}

// Families whose Hugging Face layout convert maps completely. Phi-3 (partial rotary dims,
// LongRoPE factors) and the mixture-of-experts families (experts stacked into one tensor in
// GGUF) need more than a name mapping and are refused rather than written wrong.
bool convert_handles(const Architecture& arch) {
  return arch.name == "llama" || arch.name == "qwen2" || arch.name == "qwen3" ||
         arch.name == "gemma3" || arch.name == "bert";
}

// Where a tensor goes in the file: the embedding, the layers in numeric order, then the rest,
// the output norm and output last (the order llama.cpp's converter writes; safetensors lists
// names alphabetically, "blk.10" before "blk.2").
struct SortKey {
  int group;
  uint64_t layer;
  std::string name;
  bool operator<(const SortKey& o) const {
    if (group != o.group) return group < o.group;
    if (layer != o.layer) return layer < o.layer;
    return name < o.name;
  }
};

SortKey sort_key(const std::string& gguf_name) {
  if (gguf_name == "token_embd.weight") return {0, 0, gguf_name};
  if (gguf_name.rfind("blk.", 0) == 0) {
    uint64_t layer = 0;
    for (size_t i = 4; i < gguf_name.size() && gguf_name[i] >= '0' && gguf_name[i] <= '9'; ++i) {
      layer = layer * 10 + static_cast<uint64_t>(gguf_name[i] - '0');
    }
    return {1, layer, gguf_name};
  }
  if (gguf_name == "output_norm.weight") return {3, 0, gguf_name};
  if (gguf_name == "output.weight") return {4, 0, gguf_name};
  return {2, 0, gguf_name};
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Q and K of a family whose GGUF files pair rotated dimensions adjacently (Llama): HF rotates
// the two halves of each head, so their rows (and biases) are reordered. K has its own head
// count under grouped-query attention.
uint32_t permute_heads(const Architecture& arch, const ModelConfig& c, const std::string& name) {
  if (!arch.gguf_rope_adjacent_pairs) return 0;
  if (ends_with(name, ".attn_q.weight") || ends_with(name, ".attn_q.bias")) return c.num_heads;
  if (ends_with(name, ".attn_k.weight") || ends_with(name, ".attn_k.bias")) return c.num_kv_heads;
  return 0;
}

// The tokenizer under tokenizer.ggml.*, padded to `n_rows` tokens (the embedding's rows; some
// checkpoints pad the table past the tokenizer, and llama.cpp wants one token per row).
void write_tokenizer(const Vocab& v, uint64_t n_rows, GgufWriter& w, const std::string& source) {
  if (v.size() > n_rows) {
    fail(source, ": the tokenizer has ", v.size(), " tokens, the embedding only ", n_rows, " rows");
  }
  const bool spm = v.kind == TokenizerKind::kSpm;
  w.add_string("tokenizer.ggml.model", v.model);
  // llama.cpp picks its pre-tokenizer regexes by this name for byte-level BPE; SentencePiece
  // vocabularies split on nothing.
  if (!spm) w.add_string("tokenizer.ggml.pre", v.pre);

  std::vector<std::string> tokens = v.tokens;
  std::vector<int32_t> types;
  types.reserve(n_rows);
  for (TokenType t : v.types) types.push_back(static_cast<int32_t>(t));
  for (uint64_t i = v.size(); i < n_rows; ++i) {  // rows no token names, as llama.cpp pads them
    tokens.push_back("[PAD" + std::to_string(i) + "]");
    types.push_back(static_cast<int32_t>(TokenType::kUnused));
  }
  w.add_string_array("tokenizer.ggml.tokens", tokens);

  if (spm) {
    // A tokenizer.json of this style is BPE with merges, while a "llama" GGUF vocabulary merges
    // by score: the adjacent pair whose concatenation scores highest first. Scoring each token by
    // minus the rank of the first merge that makes it gives the merges' order; tokens no merge
    // makes (characters, bytes, specials) score below every merge. pagoda also reads the merges
    // themselves (below), and then follows the ranks exactly, as the HF tokenizer does.
    const float never = -static_cast<float>(v.merges.size() + 1);
    std::vector<float> scores(tokens.size(), never);
    for (size_t rank = 0; rank < v.merges.size(); ++rank) {
      const TokenId id = v.find(v.merges[rank].first + v.merges[rank].second);
      if (id != kNoToken && scores[static_cast<size_t>(id)] == never) {
        scores[static_cast<size_t>(id)] = -static_cast<float>(rank + 1);
      }
    }
    w.add_f32_array("tokenizer.ggml.scores", scores);
  }
  w.add_i32_array("tokenizer.ggml.token_type", types);
  if (!v.merges.empty()) {
    std::vector<std::string> merges;
    merges.reserve(v.merges.size());
    for (const auto& [a, b] : v.merges) merges.push_back(a + " " + b);
    w.add_string_array("tokenizer.ggml.merges", merges);
  }
  auto id = [&](const char* key, TokenId t) {
    if (t != kNoToken) w.add_u32(key, static_cast<uint32_t>(t));
  };
  id("tokenizer.ggml.bos_token_id", v.bos);
  id("tokenizer.ggml.eos_token_id", v.eos);
  id("tokenizer.ggml.eot_token_id", v.eot);
  id("tokenizer.ggml.unknown_token_id", v.unk);
  id("tokenizer.ggml.padding_token_id", v.pad);
  if (v.kind == TokenizerKind::kWordPiece) {  // llama.cpp's spelling: "seperator"
    id("tokenizer.ggml.seperator_token_id", v.sep);
    id("tokenizer.ggml.cls_token_id", v.cls);
    id("tokenizer.ggml.mask_token_id", v.mask);
  }
  w.add_bool("tokenizer.ggml.add_bos_token", v.add_bos);
  w.add_bool("tokenizer.ggml.add_eos_token", v.add_eos);
  if (spm) w.add_bool("tokenizer.ggml.add_space_prefix", v.add_space_prefix);
  if (!v.chat_template.empty()) w.add_string("tokenizer.chat_template", v.chat_template);
}

std::string folder_name(const std::string& path) {
  fs::path p(path);
  if (!p.has_filename()) p = p.parent_path();  // "folder/"
  return p.filename().string();
}

// The rope.scaling.* keys, as llama.cpp's converter writes them (llama3's factors travel as the
// rope_freqs tensor instead, added with the tensors).
void write_rope_scaling(GgufWriter& w, const std::string& a, const ModelConfig& c,
                        const std::string& source) {
  const std::string& type = c.rope_scaling_type;
  // LongRoPE (a synthetic shape of model/shapes.cc, or a folder's config.json), written as
  // llama.cpp's Phi-3 converter writes the 128K models: no type, the factors as tensors
  // (model/recipe.cc for synth, convert's rope tensors for a folder).
  if (type == "longrope") {
    w.add_f32(a + "rope.scaling.attn_factor", c.rope_attn_factor);
    w.add_u32(a + "rope.scaling.original_context_length", c.rope_original_context);
    return;
  }
  if (type.empty() || type == "none" || type == "llama3") return;
  if (type != "linear" && type != "yarn") {
    fail(source, ": RoPE scaling '", type, "' is not supported by convert yet");
  }
  w.add_string(a + "rope.scaling.type", type);
  w.add_f32(a + "rope.scaling.factor", c.rope_scaling_factor);
  if (c.rope_attn_factor != 1.0f) w.add_f32(a + "rope.scaling.attn_factor", c.rope_attn_factor);
  if (type != "yarn") return;
  w.add_u32(a + "rope.scaling.original_context_length", c.rope_original_context);
  if (c.rope_yarn_attn_factor != 0.0f) {
    w.add_f32(a + "rope.scaling.yarn_attn_factor", c.rope_yarn_attn_factor);
  }
  const ModelConfig defaults;
  if (c.rope_yarn_beta_fast != defaults.rope_yarn_beta_fast) {
    w.add_f32(a + "rope.scaling.yarn_beta_fast", c.rope_yarn_beta_fast);
  }
  if (c.rope_yarn_beta_slow != defaults.rope_yarn_beta_slow) {
    w.add_f32(a + "rope.scaling.yarn_beta_slow", c.rope_yarn_beta_slow);
  }
}

}  // namespace

// An encoder's keys, as llama.cpp's BertModel converter writes them: LayerNorm's epsilon, no
// RoPE, bidirectional attention, the pooling mode (1 mean, 2 cls, 3 last) and the token types.
void write_encoder_hyper_parameters(const ModelConfig& c, GgufWriter& w, const std::string& a) {
  if (c.context_length) w.add_u32(a + "context_length", c.context_length);
  w.add_u32(a + "embedding_length", c.hidden_size);
  w.add_u32(a + "block_count", c.num_layers);
  w.add_u32(a + "feed_forward_length", c.intermediate_size);
  w.add_u32(a + "attention.head_count", c.num_heads);
  w.add_f32(a + "attention.layer_norm_epsilon", c.rms_norm_eps);
  w.add_bool(a + "attention.causal", false);
  if (c.vocab_size) w.add_u32(a + "vocab_size", c.vocab_size);
  const std::string& p = c.pooling;
  if (p == "mean" || p == "cls" || p == "last") {
    w.add_u32(a + "pooling_type", p == "mean" ? 1 : p == "cls" ? 2 : 3);
  }
  w.add_u32("tokenizer.ggml.token_type_count", c.token_type_count ? c.token_type_count : 1);
}

void write_gguf_hyper_parameters(const ModelConfig& c, GgufWriter& w, const std::string& source) {
  const Architecture& arch = architecture_of(c, source);
  const std::string a = std::string(arch.name) + ".";
  if (arch.encoder) return write_encoder_hyper_parameters(c, w, a);
  if (c.context_length) w.add_u32(a + "context_length", c.context_length);
  w.add_u32(a + "embedding_length", c.hidden_size);
  w.add_u32(a + "block_count", c.num_layers);
  if (c.intermediate_per_layer.empty()) {
    w.add_u32(a + "feed_forward_length", c.intermediate_size);
  } else {
    w.add_u32_array(a + "feed_forward_length", c.intermediate_per_layer);
  }
  w.add_u32(a + "attention.head_count", c.num_heads);
  if (c.num_kv_heads_per_layer.empty()) {
    w.add_u32(a + "attention.head_count_kv", c.num_kv_heads);
  } else {
    w.add_u32_array(a + "attention.head_count_kv", c.num_kv_heads_per_layer);
  }
  w.add_u32(a + "attention.key_length", c.head_dim);
  w.add_u32(a + "attention.value_length", c.head_dim);
  w.add_u32(a + "rope.dimension_count", c.rotary_dim ? c.rotary_dim : c.head_dim);
  w.add_f32(a + "rope.freq_base", c.rope_theta);
  w.add_f32(a + "attention.layer_norm_rms_epsilon", c.rms_norm_eps);
  if (c.vocab_size) w.add_u32(a + "vocab_size", c.vocab_size);
  if (c.sliding_window && arch.uses_sliding_window) {
    w.add_u32(a + "attention.sliding_window", c.sliding_window);
  }
  write_rope_scaling(w, a, c, source);
  if (!c.sliding_layers.empty()) write_layer_layout(c, w, a);
  if (c.hybrid()) write_hybrid_layout(c, w, a);
}


const std::vector<std::string>& convert_type_names() {
  static const std::vector<std::string> names = {"f32", "f16", "bf16"};
  return names;
}

uint64_t rope_pair_source_row(uint64_t row, uint64_t head_dim) {
  const uint64_t half = head_dim / 2, head = row / head_dim, r = row % head_dim;
  return head * head_dim + (r % 2) * half + r / 2;
}

ConvertSummary convert_hf_model(const ConvertOptions& o,
                                const std::function<void(const ConvertProgress&)>& progress) {
  const OutType& out = out_type(o.type);  // before any file is opened: a typo fails at once
  const std::string& in = o.input_path;
  std::error_code ec;
  if (!fs::exists(in, ec)) fail(in, ": no such folder");
  if (!fs::is_directory(in, ec)) {
    fail(in, ": not a folder; convert takes a Hugging Face model folder (config.json, "
         "safetensors, tokenizer.json)");
  }
  if (!fs::exists(fs::path(in) / "config.json", ec)) {
    fail(in, ": config.json is missing; not a Hugging Face model folder");
  }
  const std::unique_ptr<ModelFile> file = ModelFile::open(in);
  const ModelConfig& c = file->config();
  const Architecture* arch = find_architecture(c.architecture);
  if (arch == nullptr || !convert_handles(*arch)) {
    fail(in, ": architecture '", c.architecture,
         "' is not supported by convert (supported: llama, mistral, qwen2, qwen3, gemma3, bert)");
  }
  c.validate(in);
  if (!file->has_vocab() && !file->vocab_unreadable()) {
    fail(in, ": tokenizer.json is missing; convert writes the tokenizer into the GGUF file");
  }
  const Vocab& vocab = file->vocab();  // throws the reason it could not be read

  // The tensors in GGUF names and file order.
  struct Item {
    SortKey key;
    const TensorRef* ref;
  };
  std::vector<Item> items;
  for (const TensorRef& t : file->tensors()) {
    // Old checkpoints store RoPE's inverse frequencies, which GGUF recomputes from freq_base.
    if (ends_with(t.name, ".rotary_emb.inv_freq")) continue;
    const std::string name = gguf_tensor_name(t.name, arch);
    if (name.empty()) continue;  // not the text model's (a vision tower)
    if (name == t.name) fail(in, ": tensor '", t.name, "' has no GGUF name convert knows");
    if (!can_dequantize(t.type) ||
        (t.type != DType::kF32 && t.type != DType::kF16 && t.type != DType::kBF16)) {
      fail(in, ": tensor '", t.name, "' is ", dtype_traits(t.type).name,
           "; convert reads F32, F16 and BF16 weights");
    }
    items.push_back({sort_key(name), &t});
  }
  const auto named = [&](const char* gguf_name) -> const TensorRef* {
    for (const Item& it : items) {
      if (it.key.name == gguf_name) return it.ref;
    }
    return nullptr;
  };
  const TensorRef* embd = named("token_embd.weight");
  if (embd == nullptr || embd->shape.size() != 2) {
    fail(in, ": the token embedding (model.embed_tokens.weight) is missing or not a matrix");
  }
  // Tied: transformers multiplies by the embedding whatever lm_head holds, and a GGUF file
  // without output.weight is read as tied by pagoda and llama.cpp alike.
  if (c.tie_embeddings) {
    items.erase(std::remove_if(items.begin(), items.end(),
                               [](const Item& it) { return it.key.name == "output.weight"; }),
                items.end());
  }
  std::sort(items.begin(), items.end(),
            [](const Item& a, const Item& b) { return a.key < b.key; });

  GgufWriter w;
  const std::string a = std::string(arch->name) + ".";
  w.add_string("general.architecture", std::string(arch->name));
  w.add_string("general.name", folder_name(in));
  w.add_u32("general.file_type", out.file_type);
  w.add_u32("general.quantization_version", 2);
  write_gguf_hyper_parameters(c, w, in);
  write_tokenizer(vocab, embd->shape[1], w, in);

  ConvertSummary s;
  s.architecture = std::string(arch->name);
  s.tokenizer_model = vocab.model;
  s.num_tokens = static_cast<size_t>(embd->shape[1]);

  // RoPE divisors a folder's config.json gives or implies, written as the tensors llama.cpp's
  // files carry them in: Llama 3 scaling's (computed), LongRoPE's two lists.
  std::vector<std::pair<std::string, std::vector<float>>> rope_tensors;
  if (c.rope_scaling_type == "llama3") {
    rope_tensors.emplace_back("rope_freqs.weight",
                              llama3_rope_freq_factors(
                                  c, static_cast<int32_t>(c.rotary_dim ? c.rotary_dim : c.head_dim)));
  }
  if (!c.rope_long_factors.empty()) {
    rope_tensors.emplace_back("rope_factors_long.weight", c.rope_long_factors);
    rope_tensors.emplace_back("rope_factors_short.weight", c.rope_short_factors);
  }

  struct Job {
    std::string name;
    const TensorRef* ref;
    DType type;
    uint32_t heads;  // Q/K heads to permute, 0 for none
    float offset;    // added to every value (Gemma's norm weights)
  };
  std::vector<Job> jobs;
  uint64_t total = 0;
  for (const Item& it : items) {
    const TensorRef& t = *it.ref;
    // Vectors, and the position and token-type tables (llama.cpp's converter keeps those F32).
    const bool vector = t.shape.size() <= 1 || it.key.name == "position_embd.weight" ||
                        it.key.name == "token_types.weight";
    Job j{it.key.name, &t, vector ? DType::kF32 : out.type, permute_heads(*arch, c, it.key.name),
          vector && ends_with(it.key.name, "norm.weight") ? arch->hf_norm_offset : 0.0f};
    if (j.heads) {
      const uint64_t rows = t.shape.size() == 1 ? t.shape[0] : t.num_elements / t.shape[0];
      if (rows != uint64_t{j.heads} * c.head_dim || c.head_dim % 2 != 0) {
        fail(in, ": tensor '", t.name, "' has ", rows, " rows, expected ", j.heads, " heads of ",
             c.head_dim);
      }
      ++s.num_permuted;
    }
    total += row_bytes(j.type, static_cast<int64_t>(t.num_elements));
    s.bytes_in += t.num_bytes;
    jobs.push_back(std::move(j));
  }
  s.num_tensors = jobs.size() + rope_tensors.size();
  s.bytes_out = total;

  uint64_t done = 0;
  for (size_t ti = 0; ti < jobs.size(); ++ti) {
    const Job& j = jobs[ti];
    const TensorRef& t = *j.ref;
    const uint64_t cols = t.shape[0];
    const uint64_t rows = t.num_elements / cols;
    w.add_tensor(j.name, j.type, t.shape, [&, ti, cols, rows](GgufWriter::Sink& sink) {
      const uint64_t in_row = t.num_bytes / rows;
      const uint64_t out_row = row_bytes(j.type, static_cast<int64_t>(cols));
      std::vector<float> values(static_cast<size_t>(cols));
      if (j.heads && rows == 1) {  // a Q/K bias: its elements are the rows to reorder
        std::vector<float> permuted(values.size());
        dequantize_row(t.type, t.data, values.data(), static_cast<int64_t>(cols));
        for (uint64_t r = 0; r < cols; ++r) permuted[r] = values[rope_pair_source_row(r, c.head_dim)];
        sink.write(permuted.data(), permuted.size() * sizeof(float));
        done += out_row;
        if (progress) progress({ti, jobs.size(), j.name, done, total});
        return;
      }
      // About 8 MiB of output at a time: bounded memory whatever the tensor's size.
      const uint64_t chunk_rows = std::max<uint64_t>(1, (8u << 20) / std::max<uint64_t>(out_row, 1));
      std::vector<uint8_t> buf;
      for (uint64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
        const uint64_t n = std::min(chunk_rows, rows - r0);
        buf.resize(n * out_row);
        for (uint64_t r = 0; r < n; ++r) {
          const uint64_t src_row = j.heads ? rope_pair_source_row(r0 + r, c.head_dim) : r0 + r;
          const uint8_t* src = t.data + src_row * in_row;
          uint8_t* dst = buf.data() + r * out_row;
          if (t.type == j.type && j.offset == 0) {
            std::memcpy(dst, src, out_row);
          } else {
            dequantize_row(t.type, src, values.data(), static_cast<int64_t>(cols));
            for (float& x : values) x += j.offset;
            quantize_row(j.type, values.data(), dst, static_cast<int64_t>(cols));
          }
        }
        sink.write(buf.data(), buf.size());
        done += buf.size();
        if (progress) progress({ti, jobs.size(), j.name, done, total});
      }
    });
  }
  for (const auto& [name, values] : rope_tensors) {
    std::vector<uint8_t> bytes(values.size() * sizeof(float));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    w.add_tensor(name, DType::kF32, {values.size()}, std::move(bytes));
    s.bytes_out += values.size() * sizeof(float);
  }
  w.write(o.output_path);
  return s;
}

}  // namespace pagoda
