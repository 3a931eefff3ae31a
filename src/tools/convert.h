// A Hugging Face model folder (safetensors, config.json, tokenizer.json, tokenizer_config.json)
// written as a GGUF file (`pagoda convert`) that pagoda and llama.cpp load as they load the
// files llama.cpp's own converter writes:
// - metadata: general.*, the family's hyper-parameters under GGUF's key names (what
//   config_from_gguf reads back), and the tokenizer (tokenizer.ggml.*, chat template);
// - tensors: Hugging Face names mapped by gguf_tensor_name, matrices in the chosen type
//   (f32, f16, bf16), 1-D tensors (norms, biases) in F32 as llama.cpp keeps them, and Llama's
//   Q/K rows permuted so that RoPE's rotated pairs are adjacent, as GGUF llama files expect.
// Tensors are produced while the file is written, a bounded chunk at a time, so a model is
// never held in memory twice.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "format/gguf_writer.h"
#include "model/config.h"

namespace pagoda {

struct ConvertOptions {
  std::string input_path;   // a Hugging Face model folder
  std::string output_path;  // the GGUF file to write
  std::string type = "f16";  // one of convert_type_names()
};

// "f32", "f16", "bf16".
const std::vector<std::string>& convert_type_names();

struct ConvertProgress {
  size_t tensor = 0;  // index of the tensor being written
  size_t num_tensors = 0;
  std::string_view name;  // its GGUF name
  uint64_t bytes_done = 0;  // output tensor bytes written so far, all tensors
  uint64_t bytes_total = 0;
};

struct ConvertSummary {
  std::string architecture;
  std::string tokenizer_model;  // tokenizer.ggml.model
  size_t num_tokens = 0;
  size_t num_tensors = 0;
  size_t num_permuted = 0;  // Q/K tensors whose rows were reordered
  uint64_t bytes_in = 0;    // tensor bytes read
  uint64_t bytes_out = 0;   // tensor bytes written
};

// Throws Error (one line, naming the folder or file) for a folder that is not a model, an
// architecture or type convert does not handle, or a failed write; the output is then left as it
// was (GgufWriter writes to a temporary file renamed at the end).
ConvertSummary convert_hf_model(const ConvertOptions& options,
                                const std::function<void(const ConvertProgress&)>& progress);

// The Q/K row order GGUF llama files use: within each head of `head_dim` rows, HF's row
// j * head_dim / 2 + i (half j, pair i) goes to row 2 * i + j. Returns the source row of output
// row `row`.
uint64_t rope_pair_source_row(uint64_t row, uint64_t head_dim);

// A model's hyper-parameters under GGUF's keys for its family (<arch>.context_length, ...,
// the keys config_from_gguf reads back), as convert and synth write them. Throws Error naming
// `source` for a family outside the registry or a RoPE scaling GGUF cannot say.
void write_gguf_hyper_parameters(const ModelConfig& config, GgufWriter& w, const std::string& source);

}  // namespace pagoda
