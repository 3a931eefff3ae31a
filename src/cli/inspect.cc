// pagoda inspect FILE: what a model file holds, and what it will cost in memory.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "cli/commands.h"
#include "cli/format_util.h"
#include "core/error.h"
#include "format/gguf.h"
#include "model/config.h"
#include "model/model_check.h"
#include "model/model_file.h"
#include "model/state_storage.h"
#include "tokenizer/vocab.h"

namespace pagoda::cli {
namespace {

std::string shape_text(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

const char* kind_name(TokenizerKind kind) {
  switch (kind) {
    case TokenizerKind::kSpm: return "SentencePiece BPE (by merge score, byte fallback)";
    case TokenizerKind::kBpe: return "byte-level BPE (by merge rank)";
    case TokenizerKind::kWordPiece: return "WordPiece";
  }
  return "?";
}

std::string rope_scaling_text(const ModelConfig& c) {
  const std::string& type = c.rope_scaling_type;
  if (type.empty() || type == "none") return "";
  std::ostringstream out;
  out << "  scaling " << type;
  if (c.rope_scaling_factor > 0) out << " x" << c.rope_scaling_factor;
  if (type == "yarn" || type == "llama3") out << " from context " << c.rope_original_context;
  return out.str();
}

void print_config(const ModelConfig& c) {
  std::cout << "architecture:    " << (c.architecture.empty() ? "(none)" : c.architecture)
            << (c.name.empty() ? "" : "  (" + c.name + ")") << "\n";
  if (c.num_layers == 0) return;  // vocabulary-only files stop here
  std::cout << "layers:          " << c.num_layers << "\n"
            << "hidden size:     " << c.hidden_size << "\n"
            << "FFN size:        " << c.intermediate_size << "\n"
            << "attention heads: " << c.num_heads << " (KV heads " << c.num_kv_heads
            << ", head size " << c.head_dim << ")\n"
            << "context length:  " << c.context_length << "\n"
            << "RoPE base:       " << c.rope_theta
            << rope_scaling_text(c) << "\n"
            << "RMSNorm eps:     " << c.rms_norm_eps << "\n";
  if (c.sliding_window) std::cout << "sliding window:  " << c.sliding_window << "\n";
  if (!c.sliding_layers.empty()) {  // Gemma 4: the sliding-window layers' own shape
    uint32_t sliding = 0;
    for (uint32_t l = 0; l < c.num_layers; ++l) sliding += c.layer_sliding(l) ? 1 : 0;
    std::cout << "layer kinds:     " << sliding << " sliding-window (head size "
              << c.layer_head_dim(0) << ", RoPE base " << c.rope_theta_sliding << "), "
              << c.num_layers - sliding << " global; " << c.kv_layer_count()
              << " layers hold K/V, the last " << c.kv_shared_layers << " read earlier ones'\n";
  }
  std::cout << "tied embeddings: " << (c.tie_embeddings ? "yes" : "no") << "\n";
}

// Hyper-parameters the file sets in a form pagoda cannot read: shown, whether or not the file
// has weights that would need them.
void print_unreadable(const ModelConfig& c) {
  if (c.unreadable.empty()) return;
  std::cout << "not read:        " << c.unreadable.size() << " hyper-parameters\n";
  for (const std::string& line : c.unreadable) std::cout << "  - " << line << "\n";
}

void print_special(const Vocab& v, const char* label, TokenId id) {
  if (id == kNoToken) return;
  std::cout << "  " << label << " " << id << " '" << v.tokens[static_cast<size_t>(id)] << "'\n";
}

void print_vocab(const Vocab& v) {
  std::cout << "\ntokenizer:       " << kind_name(v.kind) << ", model '" << v.model << "'";
  if (v.kind == TokenizerKind::kBpe) std::cout << ", pre-tokenizer '" << v.pre << "'";
  std::cout << "\nvocabulary:      " << v.size() << " tokens";
  if (!v.merges.empty()) std::cout << ", " << v.merges.size() << " merges";
  std::cout << "\nadd BOS/EOS:     " << (v.add_bos ? "yes" : "no") << " / "
            << (v.add_eos ? "yes" : "no") << "\nspecial tokens:\n";
  print_special(v, "BOS ", v.bos);
  print_special(v, "EOS ", v.eos);
  print_special(v, "EOT ", v.eot);
  print_special(v, "UNK ", v.unk);
  print_special(v, "PAD ", v.pad);
  print_special(v, "SEP ", v.sep);
  print_special(v, "CLS ", v.cls);
  print_special(v, "MASK", v.mask);
  size_t num_control = 0;
  for (TokenType t : v.types) num_control += t == TokenType::kControl;
  std::cout << "  " << num_control << " control tokens; end of generation:";
  for (TokenId id : v.eog) std::cout << " " << id;
  std::cout << "\n";
  if (!v.chat_template.empty()) {
    std::istringstream lines(v.chat_template);
    std::string line;
    std::cout << "chat template (first lines):\n";
    for (int k = 0; k < 4 && std::getline(lines, line); ++k) std::cout << "  | " << line << "\n";
  }
}

void print_tensors(const std::vector<TensorRef>& tensors, const ModelConfig& c) {
  if (tensors.empty()) {
    std::cout << "\ntensors:         none (vocabulary-only file)\n";
    return;
  }
  std::cout << "\n" << tensors.size() << " tensors:\n";
  uint64_t total = 0, params = 0;
  int type_width = 6;  // the longest type name present ("FP8_E4M3", "IQ2_XXS") widens it
  for (const auto& t : tensors) {
    type_width = std::max(type_width, static_cast<int>(dtype_traits(t.type).name.size()));
  }
  for (const auto& t : tensors) {
    std::printf("  %-48s %-*s %-22s %12s\n", t.name.c_str(), type_width,
                std::string(dtype_traits(t.type).name).c_str(), shape_text(t.shape).c_str(),
                human_bytes(t.num_bytes).c_str());
    total += t.num_bytes;
    params += t.num_elements;
  }
  std::cout << "weights:         " << human_bytes(total) << " (" << total << " bytes, "
            << params << " parameters, " << (params ? 8.0 * total / params : 0) << " bits each)\n";
  if (c.num_layers == 0) return;
  uint64_t per_token = c.kv_bytes_per_token(2);
  uint32_t kv_layers = 0;  // a hybrid model's recurrent layers hold no K/V
  for (uint32_t l = 0; l < c.num_layers; ++l) kv_layers += c.layer_recurrent(l) ? 0 : 1;
  uint64_t mha = 2ull * kv_layers * c.num_heads * c.head_dim * 2;
  std::cout << "KV cache (F16):  " << per_token << " bytes per token = 2 x ";
  if (c.sliding_layers.empty()) {
    std::cout << kv_layers << (c.hybrid() ? " attention layers x " : " layers x ")
              << c.num_kv_heads << " KV heads x " << c.head_dim << " x 2 bytes";
  } else {
    std::cout << "2 bytes x the KV heads x head size of each of the " << c.kv_layer_count()
              << " layers that hold K/V";
  }
  if (mha != per_token && c.sliding_layers.empty()) {
    std::cout << " (" << mha << " without grouped-query attention)";
  }
  std::cout << "\n";
  if (c.context_length) {
    std::cout << "                 " << human_bytes(per_token * c.context_length)
              << " for one sequence of the full " << c.context_length << "-token context\n";
  }
  if (c.hybrid()) {
    std::cout << "recurrent state: " << StateStorage::slot_bytes(c) << " bytes per sequence (F32, "
              << c.num_layers - kv_layers << " Gated DeltaNet layers' conv window and delta-rule "
              << "state), whatever its length\n";
  }
}

void print_metadata(const GgufFile& g) {
  std::cout << "\nmetadata (" << g.metadata().size() << " keys, GGUF v" << g.version()
            << ", alignment " << g.alignment() << "):\n";
  for (const auto& [key, value] : g.metadata()) {
    if (key == "tokenizer.chat_template") continue;
    std::cout << "  " << key << " = " << value.to_string(6) << "\n";
  }
}

}  // namespace

Action add_inspect(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "inspect", "Show a model file's architecture, tokenizer, tensors and memory needs");
  auto path = std::make_shared<std::string>();
  auto show_metadata = std::make_shared<bool>(false);
  cmd->add_option("file", *path, "GGUF file, .safetensors file or Hugging Face model folder")
      ->required();
  cmd->add_flag("--metadata", *show_metadata, "Also list every metadata key");
  return [=] {
    auto model = ModelFile::open(*path);
    std::cout << "file:            " << *path << " (" << model->format() << ")\n";
    const ModelConfig& c = model->config();
    print_config(c);
    print_unreadable(c);
    if (model->has_vocab()) print_vocab(model->vocab());
    print_tensors(model->tensors(), c);
    if (*show_metadata && model->gguf() != nullptr) print_metadata(*model->gguf());
    const std::vector<std::string> problems = model_problems(*model);
    if (problems.empty()) return 0;
    std::cout << "problems:        " << problems.size() << " (run and serve refuse this file)\n";
    for (const std::string& p : problems) std::cout << "  - " << p << "\n";
    std::cerr << "error: " << *path << ": " << problems[0] << "\n";
    return 1;
  };
}

}  // namespace pagoda::cli
