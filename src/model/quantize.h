// Requantizing a real GGUF model into another weight type (`pagoda quantize`): every weight
// matrix is decoded with the scalar reference and encoded again; norms, biases and other 1-D
// tensors are copied as they are, and so is the metadata (general.file_type updated). The type
// mix follows llama.cpp's basic rules: the output matrix (the token embedding when they are
// tied) and, in the K mixes, attn_v / ffn_down of some layers get more bits; rows that are no
// whole number of blocks fall back to a type that fits (see synth.h).
//
// This is for comparing weight types of one model (`pagoda bench quality --ref`), not an
// importance-matrix quantizer: requantizing an already quantized file compounds the error.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace pagoda {

struct QuantizeOptions {
  std::string input_path;   // a GGUF file
  std::string output_path;  // the GGUF file to write
  std::string type;         // f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q4_k q4_k_m q5_k_m q6_k
  int num_threads = 0;      // 0 = every core
};

// The names QuantizeOptions::type accepts, in the order above.
const std::vector<std::string>& quantize_type_names();

// Writes the file; `progress` (may be empty) is called with (bytes written, total bytes).
// Throws Error naming the input, the tensor or the type on a problem.
void quantize_model(const QuantizeOptions& options,
                    const std::function<void(uint64_t, uint64_t)>& progress);

}  // namespace pagoda
