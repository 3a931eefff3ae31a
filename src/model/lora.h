// LoRA adapters, applied unmerged: y = W x + scale * B (A x) for each base weight W an adapter
// has a pair for. Read in llama.cpp's GGUF adapter form (what its convert_lora_to_gguf.py
// writes): general.type "adapter", adapter.type "lora", adapter.lora.alpha, and for a base
// tensor NAME the tensors NAME.lora_a (ggml shape [cols, rank]: a rank x cols matrix) and
// NAME.lora_b ([rank, rows]: rows x rank). The scale is llama.cpp's: the user's scale times
// alpha / rank, or the user's scale alone where alpha is 0.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/forwarding_backend.h"
#include "format/gguf.h"
#include "model/model_file.h"

namespace pagoda {

struct LoraWeight {
  std::string target;  // the base weight's GGUF name ("blk.0.attn_q.weight")
  WeightMatrix a;      // rank x cols
  WeightMatrix b;      // rows x rank
  float scale = 1.0f;
};

class LoraAdapter {
 public:
  // Reads `path` and checks it against `base`: an adapter file, of the base's architecture,
  // each pair complete and of the shapes of a 2-D weight of the base. Throws Error naming the
  // path and the first problem (the base's tensors it needs are named as llama.cpp names them).
  static std::unique_ptr<LoraAdapter> open(const std::string& path, const ModelFile& base,
                                           float user_scale);

  const std::string& path() const { return path_; }
  float alpha() const { return alpha_; }
  const std::vector<LoraWeight>& weights() const { return weights_; }
  // FNV-1a over the adapter's tensor bytes and scales: what names its contents (a prefix-cache
  // key must change when the adapter does, whatever its file is called).
  uint64_t digest() const { return digest_; }

 private:
  std::unique_ptr<GgufFile> file_;  // the A and B bytes are read in place
  std::string path_;
  float alpha_ = 0;
  std::vector<LoraWeight> weights_;
  uint64_t digest_ = 0;
};

// A backend that runs `inner`'s ops and adds an adapter pair's product to the products of its
// base weight: the base weights are found by address in `base`'s mapping (a view of some of a
// weight's rows, as fused Q/K/V are taken, gets those rows of B). Adapter k (1-based) is
// adapters[k - 1]; 0 is none. Which rows use which adapter: route() before each forward pass,
// else `default_adapter` for every row. `inner`, `base` and the adapters must outlive it (an
// adapter until set_adapter takes it out). It has max(`slots`, adapters.size()) slots, those
// past the adapters empty until set_adapter fills them.
class LoraBackend;
// Throws Error when `inner`'s memory is not the host's (the additions are host code for now).
std::unique_ptr<LoraBackend> make_lora_backend(Backend& inner, const ModelFile& base,
                                               std::vector<const LoraAdapter*> adapters,
                                               int32_t default_adapter, int32_t slots = 0);

class LoraBackend : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  // Its slots: a row's adapter is 0 (none) to num_adapters().
  virtual int32_t num_adapters() const = 0;
  // Puts `adapter` (null: none) in `slot` (1-based), an adapter of the same base, and forgets
  // the slot's old one: its pairs and the copies the backend made of its matrices, so it may be
  // destroyed once this returns. Between forward passes, on the thread that runs them, with no
  // row of a live sequence routed to the slot.
  virtual void set_adapter(int32_t slot, const LoraAdapter* adapter) = 0;
  // The adapter of each token of the next forward pass (empty: the default for all), and the
  // rows whose logits it computes (ForwardBatch::logit_rows): a product over those rows only
  // (the output matrix, the last layer's rows nobody else reads) takes their adapters.
  virtual void route(std::span<const int32_t> token_adapters,
                     std::span<const int32_t> logit_rows) = 0;
};

}  // namespace pagoda
