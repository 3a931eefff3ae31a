// What `run` and `chat` share: the model, the engine's size, sampling, how many tokens, and one
// streamed generation on an Engine with its figures (prefill and decode speed, tokens from the
// prefix cache).
#pragma once

#include <CLI/CLI.hpp>
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "engine/engine.h"
#include "model/lora.h"
#include "model/model.h"
#include "model/model_file.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {
class Communicator;
}

namespace pagoda::cli {

struct GenerationOptions {
  std::string model;
  int32_t num_tokens = 128;  // -n
  int32_t context = 0;       // 0: resolve_context's default
  int threads = 0;           // 0: all cores
  std::string backend = "cpu";
  CLI::Option* backend_option = nullptr;
  int32_t gpu_layers = -1;  // -ngl / --n-gpu-layers; -1: not given
  std::string kv_type = "f16";
  bool special = false;  // print control tokens the model emits
  SamplingParams sampling;
  uint64_t seed = 0;
  CLI::Option* seed_option = nullptr;
  std::string lora;  // a LoRA adapter (GGUF) applied unmerged; empty: none
  float lora_scale = 1.0f;
};

// Adds -m, -n, -c, -t, --backend, --kv-type, --temp, --top-k, --top-p, --min-p, the penalties,
// --seed, --special, --lora and --lora-scale to `cmd`. `num_tokens_help` says what -n means for the command.
void add_generation_options(CLI::App* cmd, GenerationOptions& o,
                            const std::string& num_tokens_help);

// -ngl N into a backend: the GPU for N > 0 where this build and machine have one (said in a line),
// else the CPU with a warning; the CPU for 0. Throws UsageError when --backend says otherwise.
void apply_gpu_layers(GenerationOptions& o);
// The same for any command: `backend` (given on the command line or not) after -ngl N (N < 0:
// not given, `backend` unchanged).
void apply_gpu_layers(int32_t gpu_layers, const CLI::Option* backend_option, std::string& backend);
// Adds --n-gpu-layers (main.cc reads -ngl as it) writing `gpu_layers`.
void add_gpu_layers_option(CLI::App* cmd, int32_t& gpu_layers);

// The options' sampling params, checked (the seed applied when given).
SamplingParams sampling_params(GenerationOptions& o);

// The context a run gets: -c, else the model's trained length (kContextWithoutTrainedLength
// where the file gives none), at most kMaxDefaultContext and what a quarter of the free memory
// holds at --kv-type (KV memory is taken, and zeroed, up front).
inline constexpr int64_t kMaxDefaultContext = 16384;
inline constexpr int64_t kContextWithoutTrainedLength = 4096;
int32_t resolve_context(const GenerationOptions& o, const Model& model);

// A model file opened and checked, its tokenizer, weights and backend.
struct LoadedModel {
  std::unique_ptr<ModelFile> file;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Model> model;
  std::unique_ptr<LoraAdapter> lora;
  std::unique_ptr<Backend> device;   // the backend the ops run on, under `backend` with --lora
  std::unique_ptr<Backend> backend;  // what the engine calls
};
// With `tp` (several ranks) each rank loads its slice of the model (cli/ranks.h); --lora
// refuses several ranks.
LoadedModel load_model(const GenerationOptions& o, Communicator* tp = nullptr);

// Set by the SIGINT handler that `install_interrupt_handler` puts in place: how many Ctrl-C
// since the last reset. The handler does not restart interrupted reads, so a read waiting for
// input returns at once.
extern std::atomic<int> g_num_interrupts;
void install_interrupt_handler();
void restore_interrupt_handler();

// What one generation did.
struct TurnResult {
  std::string text;  // the output's text as printed
  int32_t num_prompt_tokens = 0;
  int32_t num_cached_tokens = 0;  // prompt tokens whose K/V came from the prefix cache
  int32_t num_output_tokens = 0;  // tokens delivered (an end-of-generation token not among them)
  int32_t num_decode_tokens = 0;  // tokens delivered after the first (speed of decoding)
  double prefill_seconds = 0;     // to the first token
  double decode_seconds = 0;      // from the first token to the last
  std::optional<FinishReason> finish;
  bool interrupted = false;  // Ctrl-C stopped it
  std::string error;         // the engine failed on it
};

// Runs `request` on `engine` (which has no other work) to its end, handing each piece of text
// to `emit` as it becomes complete (prompt + output decoded minus the prompt). A Ctrl-C
// (g_num_interrupts above `interrupts_before`) aborts it. `show` false: nothing is decoded
// (run -n 0 only prefills).
TurnResult run_turn(Engine& engine, const Tokenizer& tokenizer, GenerationRequest request,
                    bool render_special, int interrupts_before,
                    const std::function<void(const std::string&)>& emit, bool show = true);

}  // namespace pagoda::cli
