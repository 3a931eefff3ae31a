// pagoda convert FOLDER -o OUT.gguf --type f32|f16|bf16: a Hugging Face model folder written as
// a GGUF file (see tools/convert.h). A PEFT LoRA folder with --base BASE.gguf: the adapter in
// llama.cpp's GGUF form for that base (tools/peft_lora.h).
//
// stderr gets, on a terminal, a bar redrawn in place while the tensors are written; stdout gets
// the one-line summary.

#include <cstdio>
#include <iostream>
#include <string>

#include "cli/commands.h"
#include "cli/format_util.h"
#include "cli/tensor_bar.h"
#include "core/error.h"
#include "model/model_file.h"
#include "tools/convert.h"
#include "tools/peft_lora.h"

namespace pagoda::cli {
namespace {

struct Options {
  ConvertOptions convert;
  std::string base;  // a PEFT adapter's base model (GGUF)
  bool quiet = false;
};

int convert_adapter(const Options& o) {
  const ConvertOptions& c = o.convert;
  if (o.base.empty()) {
    throw UsageError(c.input_path + " is a PEFT LoRA adapter: give its base model with --base "
                     "BASE.gguf (its Q/K rows and shapes decide the GGUF form)");
  }
  auto base = ModelFile::open(o.base);
  const PeftSummary s = convert_peft_lora(c.input_path, *base, c.output_path);
  std::cout << "wrote " << c.output_path << " (LoRA adapter for " << base->config().architecture
            << "): " << s.num_pairs << " weights, rank " << s.rank << ", alpha " << s.alpha;
  if (s.num_permuted) std::cout << ", " << s.num_permuted << " Q/K lora_B permuted";
  std::cout << "\n";
  return 0;
}

// The bar, on a terminal only.
class Display {
 public:
  explicit Display(bool quiet) : bar_("convert", quiet) {}

  void update(const ConvertProgress& p) {
    bar_.draw(p.tensor, p.num_tensors, p.bytes_done, p.bytes_total, p.bytes_done == p.bytes_total);
  }

 private:
  TensorBar bar_;
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
  cmd->add_option("--base", o->base,
                  "For a PEFT LoRA folder (adapter_config.json): the base model's GGUF file");
  return [o] {
    const ConvertOptions& c = o->convert;
    if (is_peft_folder(c.input_path)) return convert_adapter(*o);
    if (!o->base.empty()) throw UsageError("--base is for PEFT LoRA folders; " + c.input_path + " is not one");
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
