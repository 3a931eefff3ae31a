#include "model/model_file.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mapped_file.h"
#include "format/gguf_vocab.h"
#include "format/gguf.h"
#include "format/hf_tokenizer.h"
#include "format/safetensors.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string not_a_model(const std::string& path) {
  return str_cat(path, ": not a GGUF file, a .safetensors file or a Hugging Face model folder");
}

bool starts_with_gguf_magic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

// A JSON object from `path`, or nullopt when the file does not exist.
std::optional<json> read_json_object(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  json doc = parse_json(read_file(path.string()), path.string());
  if (!doc.is_object()) fail(path.string(), ": the top level is not a JSON object");
  return doc;
}

std::optional<json> read_json_object_or_array(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  return parse_json(read_file(path.string()), path.string());
}

// 1_Pooling/config.json's mode, as llama.cpp's converter reads it: mean, cls or last token.
std::string pooling_mode(const fs::path& path) {
  auto cfg = read_json_object(path);
  if (!cfg) fail(path.string(), ": missing (modules.json lists a Pooling module here)");
  auto on = [&](const char* key) {
    auto it = cfg->find(key);
    return it != cfg->end() && it->is_boolean() && it->get<bool>();
  };
  if (on("pooling_mode_mean_tokens")) return "mean";
  if (on("pooling_mode_cls_token")) return "cls";
  if (on("pooling_mode_lasttoken")) return "last";
  if (auto it = cfg->find("pooling_mode"); it != cfg->end() && it->is_string()) {
    const std::string mode = it->get<std::string>();
    if (mode == "mean" || mode == "cls") return mode;
    if (mode == "lasttoken") return "last";
  }
  fail(path.string(), ": no pooling mode pagoda computes (mean, cls or last token)");
}

// model.safetensors.index.json: {"weight_map": {"tensor name": "shard file name"}}. Returns
// the shard paths (sorted, each once) and the map, to check each shard holds what it should.
std::vector<std::string> shards_from_index(const fs::path& index_path,
                                           std::vector<std::pair<std::string, std::string>>& map) {
  const std::string source = index_path.string();
  json doc = *read_json_object(index_path);
  auto wm = doc.find("weight_map");
  if (wm == doc.end() || !wm->is_object())
    fail(source, ": key 'weight_map' is missing or not an object");
  std::vector<std::string> files;
  for (const auto& [tensor, file] : wm->items()) {
    if (!file.is_string()) fail(source, ": key 'weight_map.", tensor, "' is not a string");
    const std::string& f = file.get_ref<const std::string&>();
    // The index is untrusted: a shard is a file in this folder, never a path out of it.
    if (f.empty() || f == "." || f == ".." || f.find('/') != std::string::npos ||
        f.find('\\') != std::string::npos) {
      fail(source, ": key 'weight_map.", tensor, "': '", f, "' is not a plain file name");
    }
    map.emplace_back(tensor, f);
    files.push_back(f);
  }
  if (files.empty()) fail(source, ": 'weight_map' lists no tensors");
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  std::vector<std::string> paths;
  for (const auto& f : files) paths.push_back((index_path.parent_path() / f).string());
  return paths;
}

// A token given by text in tokenizer_config.json: "text" or {"content": "text", ...}.
std::optional<std::string> token_text(const json& cfg, const char* key, const std::string& source) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto c = it->find("content");
    if (c != it->end() && c->is_string()) return c->get<std::string>();
  }
  fail(source, ": key '", key, "' is neither a string nor an object with a string 'content'");
}

TokenId token_id(const json& v, const std::string& source, const char* key) {
  if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0) ||
      v.get<uint64_t>() > static_cast<uint64_t>(INT32_MAX)) {
    fail(source, ": key '", key, "' is not a valid token id");
  }
  return static_cast<TokenId>(v.get<int64_t>());
}

// The special ids tokenizer.json implies can be restated by the files beside it. Later files
// win: config.json, then generation_config.json (what generation stops on), then
// tokenizer_config.json (what the Hugging Face tokenizer itself uses). Returns the further
// end-of-generation ids that an eos_token_id list names.
std::vector<TokenId> apply_special_overrides(Vocab& v, const fs::path& folder) {
  std::vector<TokenId> extra_eog;
  for (const char* name : {"config.json", "generation_config.json"}) {
    const std::string source = (folder / name).string();
    auto cfg = read_json_object(folder / name);
    if (!cfg) continue;
    if (auto it = cfg->find("bos_token_id"); it != cfg->end() && !it->is_null()) {
      v.bos = token_id(it->is_array() && !it->empty() ? (*it)[0] : *it, source, "bos_token_id");
    }
    if (auto it = cfg->find("eos_token_id"); it != cfg->end() && !it->is_null()) {
      if (it->is_array()) {  // Llama-3 and Qwen stop on several ids
        for (size_t k = 0; k < it->size(); ++k) {
          TokenId id = token_id((*it)[k], source, "eos_token_id");
          if (k == 0) {
            v.eos = id;
          } else {
            extra_eog.push_back(id);
          }
        }
      } else {
        v.eos = token_id(*it, source, "eos_token_id");
      }
    }
  }

  // Newer transformers save the chat template as its own file, which then wins.
  std::error_code ec;
  const bool template_file = fs::exists(folder / "chat_template.jinja", ec);
  if (template_file) {
    v.chat_template = read_file((folder / "chat_template.jinja").string());
  }
  const fs::path tc_path = folder / "tokenizer_config.json";
  const std::string source = tc_path.string();
  auto tc = read_json_object(tc_path);
  if (!tc) return extra_eog;
  auto set = [&](const char* key, TokenId& field) {
    auto text = token_text(*tc, key, source);
    if (!text) return;
    TokenId id = v.find(*text);
    if (id == kNoToken) fail(source, ": key '", key, "' names '", *text, "', which is not a token");
    field = id;
  };
  set("bos_token", v.bos);
  set("eos_token", v.eos);
  set("unk_token", v.unk);
  set("pad_token", v.pad);
  for (auto [key, field] :
       {std::pair{"add_bos_token", &v.add_bos}, {"add_eos_token", &v.add_eos}}) {
    auto it = tc->find(key);
    if (it == tc->end() || it->is_null()) continue;
    if (!it->is_boolean()) fail(source, ": key '", key, "' is not a bool");
    *field = it->get<bool>();
  }
  if (auto it = tc->find("chat_template"); !template_file && it != tc->end() && !it->is_null()) {
    if (it->is_string()) {
      v.chat_template = it->get<std::string>();
    } else if (it->is_array()) {  // named templates: take "default", else the first
      bool first = true;
      for (const json& t : *it) {
        if (!t.is_object() || !t.contains("template") || !t["template"].is_string()) {
          fail(source, ": key 'chat_template' holds an entry without a string 'template'");
        }
        bool is_default = t.contains("name") && t["name"] == "default";
        if (first || is_default) v.chat_template = t["template"].get<std::string>();
        first = false;
        if (is_default) break;
      }
    } else {
      fail(source, ": key 'chat_template' is neither a string nor a list of templates");
    }
  }
  return extra_eog;
}

// A sentence-transformers folder: modules.json lists a Pooling module (its config.json says
// how) and maybe Normalize. Other modules (Dense projections, ...) would change the vectors, so
// a folder with one is refused rather than embedded wrong.
void read_sentence_transformers(const fs::path& folder, ModelConfig& c) {
  auto modules = read_json_object_or_array(folder / "modules.json");
  if (!modules) return;
  const std::string source = (folder / "modules.json").string();
  if (!modules->is_array()) fail(source, ": the top level is not a list of modules");
  for (const json& m : *modules) {
    const std::string type = m.is_object() && m.contains("type") && m["type"].is_string()
                                 ? m["type"].get<std::string>() : "";
    const std::string path = m.is_object() && m.contains("path") && m["path"].is_string()
                                 ? m["path"].get<std::string>() : "";
    auto ends = [&](std::string_view s) {
      return type.size() >= s.size() && type.compare(type.size() - s.size(), s.size(), s) == 0;
    };
    if (ends(".Transformer")) continue;
    if (ends(".Normalize")) {
      c.normalize_embeddings = true;
    } else if (ends(".Pooling")) {
      if (path.find("..") != std::string::npos || (!path.empty() && path[0] == '/')) {
        fail(source, ": module path '", path, "' leaves the folder");
      }
      c.pooling = pooling_mode(folder / path / "config.json");
    } else {
      fail(source, ": module '", type, "' is not supported (pagoda runs Transformer, Pooling and "
           "Normalize)");
    }
  }
}

}  // namespace

ModelFile::~ModelFile() = default;

std::unique_ptr<ModelFile> ModelFile::open(const std::string& path) {
  std::error_code ec;
  fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) fail(path, ": no such file or folder");
  std::unique_ptr<ModelFile> m(new ModelFile());
  m->path_ = path;
  const fs::path p(path);

  if (fs::is_directory(st)) {
    std::vector<std::pair<std::string, std::string>> weight_map;
    std::vector<std::string> shard_paths;
    if (fs::exists(p / "model.safetensors", ec)) {
      shard_paths.push_back((p / "model.safetensors").string());
    } else if (fs::exists(p / "model.safetensors.index.json", ec)) {
      shard_paths = shards_from_index(p / "model.safetensors.index.json", weight_map);
    } else if (fs::exists(p / "config.json", ec)) {
      fail(path,
           ": a Hugging Face model folder, but it has neither model.safetensors nor "
           "model.safetensors.index.json");
    } else {
      fail(not_a_model(path));
    }
    m->open_hf(path, shard_paths);
    for (const auto& [tensor, file] : weight_map) {
      const TensorRef* t = m->find_tensor(tensor);
      if (t == nullptr) {
        fail((p / "model.safetensors.index.json").string(), ": tensor '", tensor,
             "' is listed in '", file, "', which does not hold it");
      }
    }
    return m;
  }
  if (!fs::is_regular_file(st)) fail(not_a_model(path));
  if (p.extension() == ".gguf" || starts_with_gguf_magic(path)) {
    m->open_gguf(path);
  } else if (p.extension() == ".safetensors") {
    fs::path folder = p.parent_path();
    m->open_hf(folder.empty() ? "." : folder.string(), {path});
  } else {
    fail(not_a_model(path));
  }
  return m;
}

void ModelFile::open_gguf(const std::string& path) {
  gguf_ = GgufFile::open(path);
  format_ = str_cat("GGUF v", gguf_->version());
  config_ = config_from_gguf(*gguf_);
  tensors_.reserve(gguf_->tensors().size());
  for (const GgufTensorInfo& t : gguf_->tensors()) {
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back({t.name, t.type, t.shape, t.num_elements, t.num_bytes, t.data});
  }
  if (!gguf_->has("tokenizer.ggml.model")) {
    vocab_error_ = str_cat(path, ": the GGUF file has no tokenizer (no tokenizer.ggml.* keys)");
    return;
  }
  // A tokenizer pagoda cannot read must not stop `inspect` from showing the rest of the file.
  try {
    vocab_ = vocab_from_gguf(*gguf_);
  } catch (const Error& e) {
    vocab_error_ = e.what();
    vocab_unreadable_ = true;
  }
}

void ModelFile::open_hf(const std::string& folder, const std::vector<std::string>& shard_paths) {
  format_ = "safetensors";
  for (const std::string& sp : shard_paths) {
    shards_.push_back(SafetensorsFile::open(sp));
    add_tensors_from(*shards_.back());
  }
  const fs::path config_path = fs::path(folder) / "config.json";
  std::error_code ec;
  if (!fs::exists(config_path, ec)) {
    fail(folder, ": config.json is missing (safetensors weights need it beside them)");
  }
  config_ = config_from_hf_json(read_file(config_path.string()), config_path.string());
  // Tied models may leave lm_head out altogether; the loader then uses the embedding.
  if (find_tensor("lm_head.weight") == nullptr &&
      find_tensor("model.embed_tokens.weight") != nullptr) {
    config_.tie_embeddings = true;
  }
  read_sentence_transformers(folder, config_);
  read_hf_vocab(folder);
  if (config_.vocab_size == 0 && vocab_) config_.vocab_size = static_cast<uint32_t>(vocab_->size());
}

void ModelFile::add_tensors_from(const SafetensorsFile& shard) {
  for (const SafetensorsTensorInfo& t : shard.tensors()) {
    if (!tensor_index_.emplace(t.name, tensors_.size()).second) {
      fail(shard.name(), ": tensor '", t.name, "' also appears in another shard");
    }
    tensors_.push_back({t.name, t.type, t.shape, t.num_elements, t.num_bytes, t.data});
  }
}

void ModelFile::read_hf_vocab(const std::string& folder) {
  const fs::path tok_path = fs::path(folder) / "tokenizer.json";
  std::error_code ec;
  if (!fs::exists(tok_path, ec)) {
    vocab_error_ = str_cat(folder, ": no tokenizer.json beside the weights");
    return;
  }
  try {
    Vocab v = vocab_from_hf_tokenizer_json(read_file(tok_path.string()), tok_path.string());
    std::vector<TokenId> extra_eog = apply_special_overrides(v, folder);
    v.build_index(tok_path.string());  // re-checks the overridden ids and rebuilds eog
    for (TokenId id : extra_eog) {
      if (!v.valid(id)) {
        fail(folder, ": eos_token_id ", id, " is outside the vocabulary of ", v.size());
      }
      if (std::find(v.eog.begin(), v.eog.end(), id) == v.eog.end()) v.eog.push_back(id);
    }
    vocab_ = std::move(v);
  } catch (const Error& e) {
    vocab_error_ = e.what();
    vocab_unreadable_ = true;
  }
}

const Vocab& ModelFile::vocab() const {
  if (!vocab_) throw Error(vocab_error_);
  return *vocab_;
}

const TensorRef* ModelFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace pagoda
