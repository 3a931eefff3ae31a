// Importance matrices: per weight matrix, the sum over calibration tokens of each input
// column's squared activation, and the number of tokens summed (per expert for stacked MoE
// experts). The mean (sum / count) weighs each column's rounding error when quantizing
// (quant/reference.h, quantize_row_weighted). Files are llama.cpp's GGUF imatrix format, so
// either tool reads the other's:
//   general.type = "imatrix"; imatrix.datasets (strings), imatrix.chunk_count,
//   imatrix.chunk_size (u32); per weight W (sorted by name) two F32 tensors
//   "W.in_sum2" [cols, num_experts] and "W.counts" [1, num_experts].
// Collection: ImatrixCollector is a Backend that passes every op to another and, on each
// product with a model weight, adds the input rows to the weight's entry.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/model.h"
#include "model/model_file.h"

namespace pagoda {

struct ImatrixEntry {
  int64_t cols = 0;
  std::vector<double> sums;     // [num_experts, cols]
  std::vector<int64_t> counts;  // [num_experts]
  int64_t num_experts() const { return static_cast<int64_t>(counts.size()); }
};

struct Imatrix {
  std::map<std::string, ImatrixEntry> entries;  // by GGUF weight name
  std::vector<std::string> datasets;
  uint32_t chunk_count = 0;
  uint32_t chunk_size = 0;

  // Adds `num_rows` input rows x[r * cols + c] to expert `expert` of `name` (created with
  // `num_experts` experts of `cols` columns on first use; throws Error on another shape).
  void add(const std::string& name, int64_t expert, int64_t num_experts, const float* x,
           int64_t num_rows, int64_t cols);
  // Mean squared activation per column of one expert; empty when it saw no token (the caller
  // then quantizes that matrix without weights, as llama.cpp does).
  std::vector<float> mean(const std::string& name, int64_t expert) const;

  void write(const std::string& path) const;
  // Throws Error naming the path for a file that is no imatrix GGUF.
  static Imatrix read(const std::string& path);
};

// A backend that measures: every op goes to `inner`; matmul / matmul_many also add their input
// to `imatrix` under the name of the file tensor the weights lie in (`file`'s tensors, by
// address; a view into a stacked-expert tensor counts for its expert, and the several views of
// one fused tensor in one call count once). Weights outside the file's blk.* tensors (the
// output matrix, llama.cpp's default) are not collected.
std::unique_ptr<Backend> make_imatrix_collector(Backend& inner, const ModelFile& file,
                                                Imatrix& imatrix);

// The same pass-through with the input handed to `sink` instead of an Imatrix (the AWQ
// collector, tools/awq.h, keeps other statistics): sink(name, expert, num_experts, x, rows,
// cols) is called where make_imatrix_collector would call Imatrix::add, with the same rules.
using MatmulInputSink = std::function<void(const std::string& name, int64_t expert, int64_t num_experts,
                                           const float* x, int64_t num_rows, int64_t cols)>;
std::unique_ptr<Backend> make_matmul_observer(Backend& inner, const ModelFile& file, MatmulInputSink sink);

// Calibration chunks cut as llama-imatrix cuts them: `text` (token ids, BOS first when the
// model adds one) in consecutive chunks of `ctx` tokens, each chunk's first token replaced by
// `bos` (kNoToken: kept); the last partial chunk dropped; at most `max_chunks` (0: all).
std::vector<std::vector<TokenId>> imatrix_chunks(const std::vector<TokenId>& text, int32_t ctx,
                                                 TokenId bos, int64_t max_chunks);

// A calibration text file tokenized by `file`'s tokenizer (BOS first when the model adds one)
// and cut by imatrix_chunks. Throws Error naming the path when it cannot be read or holds too
// few tokens for one chunk (the message names the chunk length as `ctx_option` N).
struct CalibrationText {
  std::vector<std::vector<TokenId>> chunks;
  size_t num_tokens = 0;
};
CalibrationText calibration_chunks(const ModelFile& file, const std::string& path, int32_t ctx,
                                   int64_t max_chunks, const std::string& ctx_option);

// Runs each chunk through `model` (every position through every layer) on `backend`, which
// collects; `after_chunk(done)` is called after each and may return false to stop. Returns the
// number of chunks run.
int64_t run_imatrix_chunks(Model& model, Backend& backend, const std::vector<std::vector<TokenId>>& chunks,
                           const std::function<bool(int64_t)>& after_chunk);

}  // namespace pagoda
