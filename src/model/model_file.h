// One entry point for every way a model arrives: a GGUF file, a .safetensors file (its folder
// holds config.json and tokenizer.json), or a Hugging Face model folder (model.safetensors or a
// sharded model.safetensors.index.json). Callers see one config, one vocabulary and one flat
// tensor list whatever the format.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "model/config.h"
#include "tokenizer/vocab.h"

namespace pagoda {

class GgufFile;
class SafetensorsFile;

// A tensor of either format. Names are the file's own (GGUF "blk.0.attn_q.weight", Hugging Face
// "model.layers.0.self_attn.q_proj.weight"); mapping them is the model loader's job.
struct TensorRef {
  std::string name;
  DType type = DType::kF32;
  std::vector<uint64_t> shape;  // GGUF order: shape[0] is the innermost (contiguous) dimension
  uint64_t num_elements = 0;
  uint64_t num_bytes = 0;
  const uint8_t* data = nullptr;  // into a mapped file owned by the ModelFile; maybe unaligned
};

class ModelFile {
 public:
  // Throws Error naming the path: "<path>: not a GGUF file, a .safetensors file or a Hugging
  // Face model folder", or the first problem the format's reader found.
  static std::unique_ptr<ModelFile> open(const std::string& path);
  ~ModelFile();
  ModelFile(const ModelFile&) = delete;
  ModelFile& operator=(const ModelFile&) = delete;

  const std::string& path() const { return path_; }
  const std::string& format() const { return format_; }  // "GGUF v3", "safetensors"
  const ModelConfig& config() const { return config_; }

  // False when the model has no tokenizer (no tokenizer.json, no tokenizer.ggml.* keys) or its
  // tokenizer could not be read; vocab() then throws an Error saying which.
  bool has_vocab() const { return vocab_.has_value(); }
  const Vocab& vocab() const;
  // The file has a tokenizer, but it could not be read (vocab() says why).
  bool vocab_unreadable() const { return vocab_unreadable_; }

  const std::vector<TensorRef>& tensors() const { return tensors_; }
  const TensorRef* find_tensor(std::string_view name) const;

  // The GGUF reader (its metadata is what `inspect` shows), or nullptr for safetensors.
  const GgufFile* gguf() const { return gguf_.get(); }
  // The safetensors shards, in the order their tensors were listed; empty for GGUF.
  const std::vector<std::unique_ptr<SafetensorsFile>>& safetensors() const { return shards_; }

 private:
  ModelFile() = default;
  void open_gguf(const std::string& path);
  void open_hf(const std::string& folder, const std::vector<std::string>& shard_paths);
  void add_tensors_from(const SafetensorsFile& shard);
  void read_hf_vocab(const std::string& folder);

  std::string path_;
  std::string format_;
  ModelConfig config_;
  std::optional<Vocab> vocab_;
  std::string vocab_error_;  // why vocab_ is empty
  bool vocab_unreadable_ = false;
  std::vector<TensorRef> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
  std::unique_ptr<GgufFile> gguf_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
};

}  // namespace pagoda
