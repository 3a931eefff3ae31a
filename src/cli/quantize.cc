// pagoda quantize -i IN.gguf -o OUT.gguf --type TYPE: the same model in another weight type, for
// comparing types with `pagoda bench quality --ref` (see tools/quantize.h).
//
// stderr gets one line per tensor (its name, the type change and the round-trip error) and, on
// a terminal, a bar redrawn in place under them; stdout gets the summary. With --awq, a
// calibration bar and one line per searched group (its alpha and error) come first.

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <iostream>
#include <string>

#include "bench/progress.h"
#include "cli/commands.h"
#include "cli/format_util.h"
#include "cli/tensor_bar.h"
#include "core/error.h"
#include "tools/quantize.h"

namespace pagoda::cli {
namespace {

struct Options {
  QuantizeOptions quantize;
  bool quiet = false;
};

std::string type_name(DType t) { return std::string(dtype_traits(t).name); }

std::string error_text(double error) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3e", error);
  return buf;
}

// The per-tensor lines and, on a terminal, the bar; nothing with --quiet.
class Display {
 public:
  explicit Display(bool quiet) : quiet_(quiet), bar_("quantize", quiet) {}

  void update(const QuantizeProgress& p) {
    if (quiet_) return;
    if (p.tensor_done) {
      bar_.clear();
      const int width = static_cast<int>(std::to_string(p.num_tensors).size());
      std::string what =
          p.from == p.to ? type_name(p.from) + ", " + human_bytes(p.tensor_bytes_in) + ", copied"
                         : type_name(p.from) + " -> " + type_name(p.to) + ", " +
                               human_bytes(p.tensor_bytes_in) + " -> " +
                               human_bytes(p.tensor_bytes_out) + ", rel. RMS error " +
                               error_text(p.error) + (p.requantized ? " (requantized)" : "");
      std::fprintf(stderr, "quantize: [%*zu/%zu] %.*s %s\n", width, p.tensor + 1, p.num_tensors,
                   static_cast<int>(p.name.size()), p.name.data(), what.c_str());
    }
    bar_.draw(p.tensor, p.num_tensors, p.bytes_done, p.bytes_total, p.tensor_done);
  }

 private:
  bool quiet_;
  TensorBar bar_;
};

// --awq: a bar over the calibration chunks, then one over the groups with a line per group.
class AwqDisplay {
 public:
  explicit AwqDisplay(bool quiet) : quiet_(quiet) {}

  void update(const AwqProgress& p) {
    if (quiet_) return;
    if (!p.searching) {
      if (!bar_) bar_ = std::make_unique<bench::Progress>("awq calibration", p.total, "chunks");
      bar_->update(p.done);
      return;
    }
    if (!searching_) {
      searching_ = true;
      bar_.reset();
      bar_ = std::make_unique<bench::Progress>("awq search", p.total, "groups");
    }
    if (!p.group.empty()) {
      if (isatty(STDERR_FILENO) == 1) std::fputs("\r\033[K", stderr);  // over the bar
      std::fprintf(stderr, "awq: [%lld/%lld] %.*s alpha %.2f, output error %.3fx alpha 0's\n",
                   static_cast<long long>(p.done), static_cast<long long>(p.total),
                   static_cast<int>(p.group.size()), p.group.data(), p.alpha, p.error_ratio);
    }
    bar_->update(p.done);
    if (p.done == p.total) bar_.reset();
  }

 private:
  bool quiet_;
  bool searching_ = false;
  std::unique_ptr<bench::Progress> bar_;
};

}  // namespace

Action add_quantize(CLI::App& app) {
  auto o = std::make_shared<Options>();
  QuantizeOptions& q = o->quantize;
  auto* cmd = app.add_subcommand("quantize", "Write a GGUF model's weights in another type");
  cmd->footer(
      "stderr shows each tensor as it is written: its name, its type in and out, its size in and "
      "out, and the round trip's relative RMS error ||w - deq(q(w))|| / ||w|| (w: the values "
      "decoded from the input); on a terminal a bar counts tensors and bytes. stdout gets the "
      "summary: bytes in and out, and the tensor with the largest error. A tensor the input holds "
      "quantized that --type would write in another type (f32 aside) is refused (exit 1) unless "
      "--allow-requantize is given.");
  std::string names;
  for (const auto& n : quantize_type_names()) names += (names.empty() ? "" : " ") + n;
  cmd->add_option("-i,--input", q.input_path, "GGUF model file")->required();
  cmd->add_option("-o,--output", q.output_path, "Output GGUF path")->required();
  cmd->add_option("--type", q.type, "Weight type: " + names)
      ->required()
      ->check(CLI::IsMember(quantize_type_names()));
  cmd->add_option("-t,--threads", q.num_threads, "Threads (default: all cores)")
      ->check(CLI::Range(0, 1024));
  cmd->add_flag("--allow-requantize", q.allow_requantize,
                "Requantize tensors the input already holds quantized (any type but F32, F16, "
                "BF16) into another type; refused without it, as the errors compound (decoding "
                "them to f32 is exact and always allowed)");
  cmd->add_option("--merge-lora", q.merge_lora,
                  "A LoRA adapter (llama.cpp's GGUF form or a PEFT folder) merged into the weights "
                  "it changes: W + scale B A, so the file runs without it")
      ->check(CLI::ExistingPath);
  cmd->add_option("--lora-scale", q.lora_scale, "With --merge-lora: the adapter's scale (times "
                  "its alpha / rank, as llama.cpp)")->default_val(1.0f)
      ->check(CLI::Range(-100.0f, 100.0f));
  cmd->add_option("--imatrix", q.imatrix_path,
                  "Importance matrix (GGUF, from pagoda imatrix or llama-imatrix): the matrices it "
                  "has entries for are quantized minimising the error weighted by it")
      ->check(CLI::ExistingFile);
  cmd->add_option("--awq", q.awq.text_path,
                  "Activation-aware scaling (AWQ) calibrated on this text: the text runs through the "
                  "model once (chunks of --awq-ctx tokens, as imatrix cuts them); then for each group "
                  "of matrices that read one input (q/k/v, gate/up, down, attn_output) a per-column "
                  "scale s = mean|x|^alpha, alpha in 0, 0.05 .. 1, is chosen to minimise the group's "
                  "output error after quantizing to its --type, and "
                  "folded in (columns times s, the preceding norm or matrix rows divided by s: same "
                  "function, plain GGUF). Costs one forward pass over the text plus 21 trial "
                  "quantizations of every matrix scored on --awq-tokens sampled tokens: seconds for "
                  "models of a few million weights, 2 to 10 minutes for SmolLM2-135M on 2 cores (q4_0; q4_k_m with --imatrix). Needs an F32/F16/BF16 "
                  "input; with --imatrix the trials and the output are importance-weighted too")
      ->check(CLI::ExistingFile);
  cmd->add_option("--awq-ctx", q.awq.ctx, "--awq: tokens per calibration chunk")
      ->check(CLI::Range(2, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--awq-chunks", q.awq.chunks, "--awq: at most N chunks; 0 = every whole chunk of the text")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--awq-tokens", q.awq.sample_rows,
                  "--awq: calibration tokens each group's error is scored on (sampled evenly; memory "
                  "4 x columns x N bytes per distinct input)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--awq-matrix-rows", q.awq.matrix_rows,
                  "--awq: rows of each matrix scored in the search (evenly strided; 0 = all). The "
                  "search costs about tokens x rows x columns x 21 multiply-adds per matrix")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--gptq", q.gptq.text_path,
                  "GPTQ's error-compensating rounding, calibrated on this text (chunks of "
                  "--gptq-ctx tokens): every matrix written in q4_0, q4_1, q5_0, q5_1, q8_0, q4_k, "
                  "q5_k, q6_k, iq4_nl or iq4_xs (the types of the K and IQ4 recipes too) is rounded "
                  "a column at a time, each column's error carried onto "
                  "the columns not rounded yet through the inverse of its input's second moments "
                  "(summed over --gptq-tokens sampled tokens). With --imatrix each block's scale "
                  "fit is weighted by it. With --awq, the matrices AWQ scaled are rounded, their "
                  "inputs' second moments divided by the scales")
      ->check(CLI::ExistingFile);
  cmd->add_option("--gptq-ctx", q.gptq.ctx, "--gptq: tokens per calibration chunk")
      ->check(CLI::Range(2, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--gptq-chunks", q.gptq.chunks,
                  "--gptq: at most N chunks; 0 = every whole chunk of the text")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--gptq-tokens", q.gptq.sample_rows,
                  "--gptq: calibration tokens the second moments are summed over (sampled evenly; "
                  "memory 4 x columns x N bytes per distinct input)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--gptq-damp", q.gptq.damp,
                  "--gptq: added to the second moments' diagonal, times its mean")
      ->check(CLI::Range(0.0, 10.0))
      ->capture_default_str();
  cmd->add_flag("-q,--quiet", o->quiet,
                "No per-tensor lines or progress bar on stderr (warnings and the summary still "
                "print)");
  return [o] {
    QuantizeOptions& q = o->quantize;
    // The same file by any path (a link, another spelling): writing it would destroy the input
    // while it is read.
    if (std::error_code ec; std::filesystem::equivalent(q.input_path, q.output_path, ec)) {
      fail("quantize: the output ", q.output_path, " is the input ", q.input_path,
           " (the same file); write the output to another path");
    }
    q.awq.threads = q.num_threads;
    q.gptq.threads = q.num_threads;
    if (q.allow_requantize) {
      const Requantization r = find_requantization(q);
      if (r.count > 0) {
        std::fprintf(stderr,
                     "warning: %s: requantizing %zu already quantized tensor%s (first %s, %s "
                     "-> %s); the errors compound, and each error reported is against the "
                     "input's quantized values, not the original weights\n",
                     q.input_path.c_str(), r.count, r.count == 1 ? "" : "s", r.first.c_str(),
                     type_name(r.from).c_str(), type_name(r.to).c_str());
      }
    }
    QuantizeSummary s;
    {
      AwqDisplay awq_display(o->quiet);
      q.awq_progress = [&](const AwqProgress& p) { awq_display.update(p); };
      std::unique_ptr<bench::Progress> gptq_bar;
      q.gptq_progress = [&](int64_t done, int64_t total) {
        if (o->quiet) return;
        if (!gptq_bar) gptq_bar = std::make_unique<bench::Progress>("gptq calibration", total, "chunks");
        gptq_bar->update(done);
        if (done == total) gptq_bar.reset();
      };
      Display display(o->quiet);
      s = quantize_model(q, [&](const QuantizeProgress& p) { display.update(p); });
      q.awq_progress = nullptr;
      q.gptq_progress = nullptr;
    }
    std::cout << "wrote " << q.output_path << " (" << q.type << "): " << s.num_tensors
              << " tensors, " << human_bytes(s.bytes_in) << " -> " << human_bytes(s.bytes_out)
              << " (" << s.num_converted << " converted";
    if (s.num_requantized > 0) std::cout << ", " << s.num_requantized << " of them requantized";
    std::cout << ", " << s.num_tensors - s.num_converted << " copied)\n";
    if (!q.imatrix_path.empty()) {
      std::cout << "importance matrix: " << s.num_weighted << " tensors weighted";
      if (!s.without_importance.empty()) {
        std::cout << ", " << s.without_importance.size() << " without an entry (quantized plainly, first "
                  << s.without_importance.front() << ")";
      }
      std::cout << "\n";
    }
    if (!q.awq.text_path.empty()) {
      double err = 0, rtn = 0;
      int moved = 0;
      for (const auto& g : s.awq.groups) {
        err += g.error;
        rtn += g.error_rtn;
        moved += g.alpha > 0;
      }
      std::cout << "awq: " << s.awq.chunks << " chunks (" << s.awq.tokens << " tokens, statistics "
                << human_bytes(s.awq.stats_bytes) << "), " << s.awq.groups.size() << " groups searched, "
                << moved << " scaled (alpha > 0); summed output error " << (rtn > 0 ? err / rtn : 1.0)
                << "x alpha 0's on the calibration sample\n";
      for (const auto& why : s.awq.skipped) std::cout << "awq: skipped " << why << "\n";
    }
    if (!q.merge_lora.empty()) {
      std::cout << "lora: " << q.merge_lora << " merged into " << s.num_merged << " matrices\n";
    }
    if (!q.gptq.text_path.empty()) {
      std::cout << "gptq: " << s.gptq_chunks << " chunks (" << s.gptq_tokens << " tokens), "
                << s.num_gptq << " matrices rounded by GPTQ\n";
    }
    if (!s.worst_name.empty()) {
      std::cout << "worst tensor: " << s.worst_name << " " << type_name(s.worst_from) << " -> "
                << type_name(s.worst_to) << ", rel. RMS error " << error_text(s.worst_error)
                << "\n";
    }
    return 0;
  };
}

}  // namespace pagoda::cli
