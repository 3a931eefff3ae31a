// Finding a model's tensors by their GGUF names (Hugging Face names are mapped to them), as
// weight matrices used in place or as small float vectors (norms, biases).
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "model/architecture.h"
#include "model/model_file.h"

namespace pagoda {

class TensorLookup {
 public:
  explicit TensorLookup(const ModelFile& file);

  bool has(const std::string& gguf_name) const;
  // The stored type of a tensor; throws Error naming it when absent.
  DType type(const std::string& gguf_name) const;
  // A 2-D matrix [rows, cols]; throws Error naming the tensor when absent or of another shape.
  WeightMatrix matrix(const std::string& gguf_name, int64_t rows, int64_t cols) const;
  // Rows [first, first + rows) of a matrix of `total_rows` x `cols`, as a matrix of its own: a
  // view, for fused tensors (Phi-3's attn_qkv holds Q, K and V; its ffn_up the gate and up) and
  // stacked experts (a 3-D tensor's experts one after the other).
  WeightMatrix matrix_rows(const std::string& gguf_name, int64_t first, int64_t rows,
                           int64_t total_rows, int64_t cols) const;
  // Columns [first, first + cols) of every row of a `rows` x `total_cols` matrix, copied into
  // `storage` (a column slice is not contiguous in the file): a row-parallel matrix's part on
  // one tensor-parallel rank. Throws Error unless the columns fall on whole blocks of its type.
  WeightMatrix matrix_cols(const std::string& gguf_name, int64_t rows, int64_t total_cols,
                           int64_t first, int64_t cols, std::vector<uint8_t>& storage) const;
  // A 1-D tensor of `size` elements converted to float (norm weights, biases); a norm weight
  // of a Hugging Face checkpoint gets its family's hf_norm_offset added, as GGUF files store it.
  std::vector<float> vector(const std::string& gguf_name, int64_t size) const;
  // Every matrix handed out so far but the one whose id is `skip_id` (0: none skipped).
  std::vector<WeightMatrix> matrices_except(uint64_t skip_id) const;
  // Sum of the bytes of every tensor (or part of one) used so far.
  uint64_t bytes_used() const { return bytes_used_; }

 private:
  const TensorRef& get(const std::string& gguf_name) const;
  // matrix_rows' checks and view, neither counted nor handed out.
  WeightMatrix view(const std::string& gguf_name, int64_t first, int64_t rows,
                    int64_t total_rows, int64_t cols) const;
  // Adds `bytes` to bytes_used once for the bytes at `data`.
  void count(const uint8_t* data, uint64_t bytes) const;

  std::string source_;
  float norm_offset_ = 0;  // added to "*norm.weight" vectors (a Hugging Face Gemma checkpoint)
  std::unordered_map<std::string, const TensorRef*> by_name_;  // GGUF names
  mutable uint64_t bytes_used_ = 0;
  mutable std::vector<WeightMatrix> matrices_;
  mutable std::unordered_map<const uint8_t*, bool> counted_;   // aliased tensors count once
};

// The GGUF name for a Hugging Face tensor name ("model.layers.3.mlp.up_proj.weight" ->
// "blk.3.ffn_up.weight"), with the family's own spellings and wrapper prefixes when `arch` is
// given; "" for a tensor the family's text model does not use (a vision tower); the input
// unchanged when there is no mapping.
std::string gguf_tensor_name(const std::string& hf_name, const Architecture* arch = nullptr);

}  // namespace pagoda
