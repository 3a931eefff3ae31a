// Requantizing a real GGUF model into another weight type (`pagoda quantize`): every weight
// matrix is decoded with the scalar reference and encoded again; norms, biases and other 1-D
// tensors are copied as they are, and so is the metadata (general.file_type updated). Which type
// each matrix gets is the weight recipe's (model/recipe.h), the table synth and estimate use.
//
// Rounding is plain, weighted by an importance matrix (imatrix_path), and / or preceded by
// AWQ's activation-aware scaling (awq, tools/awq.h), or GPTQ's error-compensating rounding
// (gptq, quant/gptq.h) with the same calibration pass. Requantizing an already quantized file compounds the error, so,
// as llama.cpp does, it is refused unless asked for (allow_requantize); decoding one to F32 is
// exact and always allowed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "tools/awq.h"

namespace pagoda {

// GPTQ's error-compensating rounding (quant/gptq.h) of every matrix written in a 32-block legacy
// type (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0; on models whose rows are no whole super-blocks the K
// recipes fall back to these too), with each input's second moments from a calibration pass.
struct GptqOptions {
  std::string text_path;      // calibration text; empty: off
  int32_t ctx = 512;          // tokens per chunk
  int64_t chunks = 0;         // at most; 0 = every whole chunk of the text
  int64_t sample_rows = 2048; // calibration tokens, sampled evenly, that H is summed over
  double damp = 0.01;         // times the mean of H's diagonal, added to it
  int threads = 0;
};

struct QuantizeOptions {
  std::string input_path;   // a GGUF file
  std::string output_path;  // the GGUF file to write
  std::string type;         // a weight recipe's name (model/recipe.h)
  int num_threads = 0;      // 0 = every core
  // Write tensors that are already quantized (any type but F32, F16, BF16) in another type
  // other than F32; without it quantize_model refuses such a file.
  bool allow_requantize = false;
  // An importance matrix (tools/imatrix.h): each converted matrix it has an entry for is
  // quantized minimising the error weighted by it (quantize_row_weighted); the others plainly.
  std::string imatrix_path = {};
  // Activation-aware scaling (tools/awq.h): with a calibration text, the groups of matrices that
  // share an input are rescaled (the preceding norm or matrix rows divided back) before they
  // are quantized, and an importance matrix, if given, weighs the rescaled columns. Needs an
  // F32 / F16 / BF16 input.
  AwqOptions awq = {};
  std::function<void(const AwqProgress&)> awq_progress = {};
  // Scales to fold as they are, instead of searching them (tests); ignored with awq.text_path.
  const AwqScaling* awq_scaling = nullptr;
  // GPTQ (above). With awq it rounds the scaled matrices, with their inputs' second moments
  // divided by the scales. With an importance matrix, each block's scale fit is weighted by it.
  // progress(done, total) through the calibration chunks.
  GptqOptions gptq = {};
  std::function<void(int64_t, int64_t)> gptq_progress = {};
  // A LoRA adapter merged into the weights it changes, W + lora_scale * alpha / rank * B A
  // (model/lora.h: a GGUF adapter or a PEFT folder): the file then runs without it. Not with awq
  // or gptq. A quantized matrix it changes is written again, so requantizing needs
  // allow_requantize as above.
  std::string merge_lora = {};
  float lora_scale = 1.0f;
};

// The names QuantizeOptions::type accepts, in the order above.
const std::vector<std::string>& quantize_type_names();

// Whether a tensor of this type counts as quantized (anything but F32, F16 and BF16).
bool is_quantized_type(DType type);

// The already quantized tensors `options` would write in another type, F32 aside (count 0 when
// none); `first` names the first of them. Throws Error as quantize_model does on a bad input.
struct Requantization {
  size_t count = 0;
  std::string first;
  DType from = DType::kF32, to = DType::kF32;
};
Requantization find_requantization(const QuantizeOptions& options);

// Where quantize_model stands, for a progress display. It is reported as each tensor's bytes
// are written (tensor_done false), and once more when a tensor is complete (tensor_done true,
// `error` set).
struct QuantizeProgress {
  size_t tensor = 0;  // the tensor being written, 0-based, in file order
  size_t num_tensors = 0;
  std::string_view name;
  DType from = DType::kF32;  // its type in the input
  DType to = DType::kF32;    // its type in the output; `from` when copied as it is
  bool requantized = false;  // already quantized, and written in another type (not F32)
  uint64_t tensor_bytes_in = 0, tensor_bytes_out = 0;
  uint64_t bytes_done = 0;   // output tensor bytes written so far, this tensor's included
  uint64_t bytes_total = 0;  // output tensor bytes in all
  bool tensor_done = false;
  // With tensor_done: the relative RMS error of the round trip, ‖w − deq(q(w))‖ / ‖w‖ over the
  // whole tensor, where w are the values as decoded from the input (for a requantized tensor,
  // the input's quantized values, not the original weights; for an AWQ-scaled one, the scaled
  // values). 0 for a tensor copied as it is or
  // decoded to F32; 0 for an all-zero w that stays zero, infinity when it does not.
  double error = 0;
};

struct QuantizeSummary {
  size_t num_tensors = 0;
  size_t num_converted = 0;    // written in another type
  size_t num_requantized = 0;  // of those, already quantized ones
  uint64_t bytes_in = 0;       // tensor bytes read
  uint64_t bytes_out = 0;      // tensor bytes written
  // The converted tensor with the largest error (empty name when none was converted).
  std::string worst_name;
  DType worst_from = DType::kF32, worst_to = DType::kF32;
  double worst_error = 0;
  // With an importance matrix: converted tensors quantized with its weights, and the names of
  // those it had no entry for (quantized without).
  size_t num_weighted = 0;
  std::vector<std::string> without_importance;
  // With --awq: the calibration and each group's alpha and objective.
  AwqReport awq;
  // With --gptq: the calibration, and the matrices rounded by GPTQ.
  int64_t gptq_chunks = 0, gptq_tokens = 0;
  size_t num_gptq = 0;
  size_t num_merged = 0;  // matrices a LoRA adapter was merged into
};

// Writes the file; `progress` (may be empty) is called as described above. Throws Error naming
// the input, the tensor or the type on a problem, the refused requantization included; nothing
// is written at `output_path` then.
QuantizeSummary quantize_model(const QuantizeOptions& options,
                               const std::function<void(const QuantizeProgress&)>& progress);

}  // namespace pagoda
