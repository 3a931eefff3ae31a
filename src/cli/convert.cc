// pagoda convert FOLDER -o OUT.gguf --type f32|f16|bf16: a Hugging Face model folder written as
// a GGUF file (see model/convert.h).
//
// stderr gets, on a terminal, a bar redrawn in place while the tensors are written; stdout gets
// the one-line summary.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

#include "cli/commands.h"
#include "cli/format_util.h"
#include "model/convert.h"

namespace pagoda::cli {
namespace {

struct Options {
  ConvertOptions convert;
  bool quiet = false;
};

// The bar, on a terminal only, at most ten redraws a second.
class Display {
 public:
  explicit Display(bool quiet) : shown_(!quiet && isatty(STDERR_FILENO) == 1) {}

  void update(const ConvertProgress& p) {
    if (!shown_) return;
    const auto now = std::chrono::steady_clock::now();
    const bool last = p.bytes_done == p.bytes_total;
    if (drawn_ && !last && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    drawn_ = true;
    constexpr int kWidth = 30;
    const int filled = p.bytes_total ? static_cast<int>(kWidth * static_cast<double>(p.bytes_done) /
                                                        static_cast<double>(p.bytes_total))
                                     : kWidth;
    std::fprintf(stderr, "\r\033[Kconvert [%s%s] tensor %zu/%zu, %s of %s",
                 std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(),
                 p.tensor + 1, p.num_tensors, human_bytes(p.bytes_done).c_str(),
                 human_bytes(p.bytes_total).c_str());
    std::fflush(stderr);
  }

  // Clears the bar; also when converting failed part way.
  ~Display() {
    if (drawn_) std::fputs("\r\033[K", stderr);
  }

 private:
  bool shown_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace

Action add_convert(CLI::App& app) {
  auto o = std::make_shared<Options>();
  ConvertOptions& c = o->convert;
  auto* cmd = app.add_subcommand(
      "convert", "Write a Hugging Face model folder (safetensors) as a GGUF file");
  cmd->footer(
      "FOLDER holds config.json, model.safetensors (or a sharded index), tokenizer.json and "
      "optionally tokenizer_config.json. Supported families: llama (and mistral), qwen2, qwen3. "
      "Matrices are written in --type; norms and biases stay F32; Llama's Q/K rows are reordered "
      "for GGUF's RoPE layout. The file loads in pagoda and in llama.cpp.");
  std::string names;
  for (const auto& n : convert_type_names()) names += (names.empty() ? "" : " ") + n;
  cmd->add_option("folder", c.input_path, "Hugging Face model folder")->required();
  cmd->add_option("-o,--output", c.output_path, "Output GGUF path")->required();
  // Checked by the command, not CLI11: an unknown type is a bad value (exit 1), not misuse.
  cmd->add_option("--type", c.type, "Weight type of the matrices: " + names);
  cmd->add_flag("-q,--quiet", o->quiet, "No progress bar on stderr");
  return [o] {
    const ConvertOptions& c = o->convert;
    ConvertSummary s;
    {
      Display display(o->quiet);
      s = convert_hf_model(c, [&](const ConvertProgress& p) { display.update(p); });
    }
    std::cout << "wrote " << c.output_path << " (" << s.architecture << ", " << c.type << "): "
              << s.num_tensors << " tensors, " << human_bytes(s.bytes_in) << " -> "
              << human_bytes(s.bytes_out) << ", " << s.num_tokens << " tokens ("
              << s.tokenizer_model << ")";
    if (s.num_permuted) std::cout << ", " << s.num_permuted << " Q/K tensors permuted";
    std::cout << "\n";
    return 0;
  };
}

}  // namespace pagoda::cli
