// Activation-aware weight quantization (AWQ's method, `pagoda quantize --awq TEXT`): before
// rounding, each group of matrices that read one input (attn q/k/v; ffn gate/up; ffn_down; attn
// output) gets a per-input-column scale s, W' = W·diag(s), and whatever produces that input is
// divided by s (the norm weight before q/k/v and gate/up, the rows of ffn_up before ffn_down, the
// rows of attn_v before attn_output), so the model computes the same function in exact
// arithmetic. Columns that see large activations are stretched and lose relatively less to
// rounding. s = mean|x|^alpha per column, alpha on a grid in [0, 1], chosen per group to minimise
// the group's output error on calibration tokens,
//     sum over its matrices W and sampled inputs x of |(W - Q(W·diag(s))·diag(s)^-1) x|^2,
// with Q the matrix's real target type (and importance weighting when an imatrix is given).
// alpha = 0 is s = 1, plain quantization, and is kept unless another alpha does strictly
// better, so the search never does worse than it on this objective.
//
// Statistics: one calibration pass (the imatrix chunks) through make_awq_collector, which keeps
// per distinct input (q/k/v share one, gate/up share one) the sum of |x| per column over every
// token and a sample of at most max_sample_rows rows (every sample_stride-th token): memory
// 4·cols·max_sample_rows bytes per input, e.g. 1.1 MiB for 576 columns and 512 rows; SmolLM2-135M
// (30 layers, inputs of 576, 576, 576 and 1536 columns) takes 190 MiB.
// The search's time is rows x cols x tokens multiply-adds per matrix and alpha; AwqOptions
// bounds it by scoring 512 sampled tokens and 256 evenly strided rows of each matrix.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"
#include "format/gguf.h"
#include "model/model_file.h"

namespace pagoda {

// ---- calibration statistics

struct AwqInput {
  int64_t cols = 0;
  int64_t rows_seen = 0;        // tokens that went through
  std::vector<double> abs_sum;  // [cols] sum of |x| over them
  std::vector<float> sample;    // [sample_rows(), cols]

  int64_t sample_rows() const { return cols ? static_cast<int64_t>(sample.size()) / cols : 0; }
  std::vector<float> mean_abs() const;
};

struct AwqStats {
  int64_t max_sample_rows = 512;
  int64_t sample_stride = 1;
  std::map<std::string, AwqInput> inputs;  // by awq_input_key

  // Adds `rows` rows of `cols` values to the input `key`; throws Error on another width.
  void add(const std::string& key, const float* x, int64_t rows, int64_t cols);
  uint64_t bytes() const;
};

// The input a weight matrix (GGUF name) reads: "blk.N.attn_in" (attn_q / attn_k / attn_v /
// attn_qkv), "blk.N.ffn_in" (ffn_gate / ffn_up), "blk.N.ffn_down", "blk.N.attn_output"; empty
// for the others (not collected).
std::string awq_input_key(std::string_view tensor_name);

// Passes every op to `inner` and adds the input of every product with a collected matrix of
// `file` to `stats` (once per input: q, k and v read the same rows).
std::unique_ptr<Backend> make_awq_collector(Backend& inner, const ModelFile& file, AwqStats& stats);

// ---- groups and folding

struct AwqGroup {
  std::string input;                  // key in AwqStats::inputs
  std::vector<std::string> matrices;  // columns multiplied by s
  // Divided by s: 1-D tensors (a norm's weight, a bias) element by element; matrices row by row.
  std::vector<std::string> divided;
  int64_t cols = 0;  // the matrices' columns
  // Grouped-query attention (attn_output after attn_v): column c of the matrices uses scale
  // scale_index[c]; one scale per value channel, shared by the heads that read it. Empty: s
  // has one value per column.
  std::vector<int32_t> scale_index;
  int64_t num_scales() const;
};

struct AwqPlan {
  std::vector<AwqGroup> groups;
  std::vector<std::string> skipped;  // "blk.0.attn_output: why", one per skipped group
};

// The groups of a GGUF model, layer by layer in the order q/k/v, attn_output, gate/up, ffn_down.
AwqPlan awq_plan(const GgufFile& file);

// Per tensor: values multiplied column-wise by col_mul (cols; for a 1-D tensor, per element)
// and row-wise divided by row_div (rows); either may be empty.
struct TensorScaling {
  std::vector<float> col_mul;
  std::vector<float> row_div;
};
using AwqScaling = std::map<std::string, TensorScaling>;

// Records group `g` scaled by `s` (num_scales values) into `scaling`, combined with what is
// there (attn_v and ffn_up are scaled by two groups: columns by one, rows by the next).
// `file` tells the divided tensors' ranks: vectors get col_mul 1/s, matrices row_div s.
void fold_awq_scales(const AwqGroup& g, std::span<const float> s, const GgufFile& file,
                     AwqScaling& scaling);

// Applies `scaling` of one tensor to row `row` (cols values) in place.
void apply_scaling(const TensorScaling& t, int64_t row, float* values, int64_t cols);

// ---- the search

struct AwqMatrix {
  const float* w = nullptr;  // [rows, cols], as in the source model
  int64_t rows = 0;
  DType type = DType::kF32;  // the type it will be written in
  const float* importance = nullptr;  // per column (of the unscaled input), or null
};

struct AwqSearch {
  double alpha = 0;
  std::vector<float> scales;   // num_scales values for alpha
  std::vector<double> errors;  // the objective at each grid point; errors[0] is alpha 0
};

// alpha over `grid` points i / (grid - 1); x: `n` sampled input rows of `cols`; mean_abs per
// scale. Matrices whose type is not quantized add nothing. `threads` 0: OpenMP's default.
// max_rows > 0: only every ceil(rows / max_rows)-th row of each matrix is scored (the objective
// is then that subset's error), which bounds the time a group takes.
AwqSearch awq_search(std::span<const AwqMatrix> matrices, int64_t cols, const float* x, int64_t n,
                     std::span<const float> mean_abs, std::span<const int32_t> scale_index, int grid,
                     int threads, int64_t max_rows = 0);

// ---- the whole step, for quantize_model

struct AwqOptions {
  std::string text_path;   // calibration text
  int32_t ctx = 512;       // tokens per chunk
  int64_t chunks = 0;      // at most; 0 = every whole chunk of the text
  int64_t sample_rows = 512;   // calibration tokens the objective is scored on
  int64_t matrix_rows = 256;   // rows of each matrix scored (evenly strided); 0: all
  int grid = 21;
  int threads = 0;
};

struct AwqProgress {
  bool searching = false;  // false: calibration (done / total chunks); true: groups
  int64_t done = 0, total = 0;
  std::string_view group;          // searching: the group just done
  double alpha = 0, error_ratio = 1;  // its alpha and objective relative to alpha 0
};

struct AwqGroupResult {
  std::string input;
  double alpha = 0;
  double error = 0, error_rtn = 0;  // the objective at alpha and at alpha 0
};

struct AwqReport {
  int64_t chunks = 0, tokens = 0;
  uint64_t stats_bytes = 0;
  std::vector<AwqGroupResult> groups;
  std::vector<std::string> skipped;
};

// The calibration pass alone: chunks of `ctx` tokens of `text_path` (at most `max_chunks`, 0:
// all; cut as the imatrix cuts them) through the model at `model_path` on the CPU backend,
// keeping per input the sum of |x| and about `sample_rows` rows sampled evenly over all tokens.
// `progress(done, total)` after each chunk; `ctx_flag` names the option in errors.
struct AwqCalibration {
  AwqStats stats;
  int64_t chunks = 0, tokens = 0;
};
AwqCalibration awq_calibrate(const std::string& model_path, const std::string& text_path,
                             int32_t ctx, int64_t max_chunks, int64_t sample_rows, int threads,
                             const char* ctx_flag,
                             const std::function<void(int64_t, int64_t)>& progress);

// Calibrates on `o.text_path` with the model at `model_path` (which `file` is), then searches
// every group. `type_of(name)` is the type a matrix will be written in; `importance_of(name)`
// its imatrix weights or empty. Throws Error when a group's tensors are quantized already.
AwqScaling awq_compute(const std::string& model_path, const GgufFile& file, const AwqOptions& o,
                       const std::function<DType(const std::string&)>& type_of,
                       const std::function<std::vector<float>(const std::string&)>& importance_of,
                       const std::function<void(const AwqProgress&)>& progress, AwqReport& report);

}  // namespace pagoda
