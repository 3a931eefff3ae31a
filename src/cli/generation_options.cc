// Options and the streamed generation loop shared by `run` and `chat` (generation_options.h).
#include "cli/generation_options.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "backend/backend_choice.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/kv_format.h"
#include "cli/commands.h"
#include "comm/communicator.h"
#include "core/error.h"
#include "core/memory.h"
#include "model/kv_storage.h"
#include "model/model_check.h"
#include "tools/peft_lora.h"

namespace pagoda::cli {

std::atomic<int> g_num_interrupts{0};

namespace {

struct sigaction g_old_action;

void on_sigint(int) { g_num_interrupts.fetch_add(1); }

}  // namespace

void install_interrupt_handler() {
  struct sigaction action {};
  action.sa_handler = on_sigint;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: a read waiting on the terminal returns EINTR
  sigaction(SIGINT, &action, &g_old_action);
}

void restore_interrupt_handler() { sigaction(SIGINT, &g_old_action, nullptr); }

void add_generation_options(CLI::App* cmd, GenerationOptions& o,
                            const std::string& num_tokens_help) {
  cmd->add_option("-m,--model", o.model, "GGUF file or Hugging Face model folder")->required();
  cmd->add_option("-n,--num-tokens,--n-predict", o.num_tokens, num_tokens_help)
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("-c,--context,--ctx-size", o.context,
                  "Context length in tokens (0: the model's trained length, at most 16384 and "
                  "what a quarter of the free memory holds)")
      ->check(CLI::Range(0, 1 << 22));
  cmd->add_option("-t,--threads", o.threads, "Threads (0: all cores)")->check(CLI::Range(0, 1024));
  o.backend_option = cmd->add_option("--backend,--device", o.backend, backend_help())
                         ->check(CLI::IsMember(backend_names()));
  add_gpu_layers_option(cmd, o.gpu_layers);
  cmd->add_option("--kv-type", o.kv_type, kv_type_help())
      ->capture_default_str()
      ->check(CLI::IsMember(kv_type_name_list()));
  cmd->add_option("--temp,--temperature", o.sampling.temperature, "Temperature; 0 = greedy")
      ->default_val(0.8f);
  cmd->add_option("--top-k", o.sampling.top_k, "Keep the k most likely tokens; 0 = off")
      ->default_val(40);
  cmd->add_option("--top-p", o.sampling.top_p, "Nucleus sampling threshold")->default_val(0.95f);
  cmd->add_option("--min-p", o.sampling.min_p, "Drop tokens below min-p x the best")
      ->default_val(0.05f);
  cmd->add_option("--repeat-penalty", o.sampling.repetition_penalty, "Repetition penalty; 1 = off");
  cmd->add_option("--presence-penalty", o.sampling.presence_penalty, "Presence penalty");
  cmd->add_option("--frequency-penalty", o.sampling.frequency_penalty, "Frequency penalty");
  o.seed_option = cmd->add_option("--seed", o.seed, "Random seed (same seed, same text)")
                      ->default_str("random");
  cmd->add_flag("--special", o.special,
                "Print control tokens the model emits (<|im_end|>, <start_of_image>) as text");
  cmd->add_option("--lora", o.lora,
                  "LoRA adapter (llama.cpp's GGUF form, or a PEFT folder), applied unmerged: W x + scale B A x")
      ->check(CLI::ExistingPath);
  cmd->add_option("--lora-scale", o.lora_scale,
                  "The adapter's scale (times its alpha / rank, as llama.cpp)")
      ->default_val(1.0f)
      ->check(CLI::Range(-100.0f, 100.0f));
}

SamplingParams sampling_params(GenerationOptions& o) {
  SamplingParams s = o.sampling;
  if (o.seed_option != nullptr && o.seed_option->count() > 0) {
    s.seed = o.seed;
    s.has_seed = true;
  }
  validate(s, /*vocab_size=*/0);  // before the model loads; the commands set no logit_bias
  return s;
}

int32_t resolve_context(const GenerationOptions& o, const Model& model) {
  if (o.context > 0) return o.context;
  const ModelConfig& config = model.config();
  int64_t tokens = config.context_length == 0
                       ? kContextWithoutTrainedLength
                       : std::min<int64_t>(config.context_length, kMaxDefaultContext);
  const uint64_t per_token =
      KvStorage::token_bytes(config, parse_kv_type(o.kv_type));
  const std::optional<uint64_t> available = available_memory_bytes();
  if (available && per_token > 0) {
    // At most a quarter of the free memory, in whole blocks of 256 tokens (and at least one).
    const auto fits = static_cast<int64_t>(*available / 4 / per_token) / 256 * 256;
    tokens = std::min(tokens, std::max<int64_t>(fits, 256));
  }
  return static_cast<int32_t>(tokens);
}

void add_gpu_layers_option(CLI::App* cmd, int32_t& gpu_layers) {
  cmd->add_option("--n-gpu-layers", gpu_layers,
                  "llama.cpp's -ngl: N > 0 puts the whole model on the GPU (--backend cuda; "
                  "pagoda does not split layers), 0 keeps it on the CPU")
      ->default_str("none")
      ->check(CLI::Range(0, 1 << 20));
}

void apply_gpu_layers(int32_t gpu_layers, const CLI::Option* backend_option, std::string& backend) {
  if (gpu_layers < 0) return;
  const bool backend_given = backend_option != nullptr && backend_option->count() > 0;
  const std::string wanted = gpu_layers > 0 ? "cuda" : "cpu";
  if (backend_given && backend != wanted) {
    throw UsageError(str_cat("-ngl ", gpu_layers, " asks for the ", gpu_layers > 0 ? "GPU" : "CPU",
                             " but --backend is ", backend, ": give one of the two"));
  }
  if (gpu_layers == 0) {
    backend = "cpu";
    return;
  }
  if (!cuda_backend_built() || cuda_device_count() == 0) {
    std::fprintf(stderr, "warning: -ngl %d: %s; running on the CPU\n", gpu_layers,
                 cuda_backend_built() ? "no CUDA device here" : "this pagoda has no CUDA backend");
    backend = "cpu";
    return;
  }
  std::fprintf(stderr,
               "-ngl %d: the whole model goes on the GPU (CUDA backend; pagoda does not split "
               "layers)\n",
               gpu_layers);
  backend = "cuda";
}

void apply_gpu_layers(GenerationOptions& o) { apply_gpu_layers(o.gpu_layers, o.backend_option, o.backend); }

LoadedModel load_model(const GenerationOptions& o, Communicator* tp) {
  LoadedModel m;
  m.file = ModelFile::open(o.model);
  check_model(*m.file);
  m.tokenizer = Tokenizer::create(m.file->vocab());
  m.model = Model::load(*m.file, tp);
  m.backend = make_backend(o.backend, o.threads);
  if (!o.lora.empty()) {
    if (tp != nullptr && tp->size() > 1) {
      throw UsageError("--lora runs on one process; tensor parallelism (mpirun -np N) does not "
                       "apply adapters yet");
    }
    m.lora = open_lora_adapter(o.lora, *m.file, o.lora_scale);
    m.device = std::move(m.backend);
    m.backend = make_lora_backend(*m.device, *m.file, {m.lora.get()}, 1);
    std::fprintf(stderr, "lora: %s, %zu weights, alpha %g, scale %g\n", o.lora.c_str(),
                 m.lora->weights().size(), double(m.lora->alpha()), double(o.lora_scale));
  }
  return m;
}

TurnResult run_turn(Engine& engine, const Tokenizer& tokenizer, GenerationRequest request,
                    bool render_special, int interrupts_before,
                    const std::function<void(const std::string&)>& emit, bool show) {
  using Clock = std::chrono::steady_clock;
  TurnResult result;
  result.num_prompt_tokens = static_cast<int32_t>(request.prompt.size());
  StreamDecoder decoder(tokenizer, render_special);
  decoder.continue_after(request.prompt);
  auto out = [&](const std::string& text) {
    if (text.empty()) return;
    result.text += text;
    emit(text);
  };
  const Clock::time_point start = Clock::now();
  Clock::time_point first_token = start, last_step = start;
  bool aborted = false;
  const RequestId id = engine.add_request(std::move(request));
  while (engine.has_work()) {
    const bool decoding = result.num_output_tokens > 0;
    std::vector<OutputEvent> events = engine.step();
    last_step = Clock::now();
    if (g_num_interrupts.load() > interrupts_before && !aborted) {
      for (OutputEvent& e : engine.abort(id)) events.push_back(std::move(e));
      aborted = true;
      result.interrupted = true;
    }
    for (OutputEvent& e : events) {
      result.num_cached_tokens = std::max(result.num_cached_tokens, e.num_cached_tokens);
      // The tokens of the step a Ctrl-C came during are not shown: the ^C was the last word.
      if (aborted) e.token_ids.clear();
      // Tokens delivered after the first: several per step when proposals are accepted.
      if (decoding) result.num_decode_tokens += static_cast<int32_t>(e.token_ids.size());
      for (TokenId token : e.token_ids) {
        if (result.num_output_tokens++ == 0) first_token = last_step;
        if (show) out(decoder.feed(token));
      }
      if (e.finish_reason) {
        result.finish = e.finish_reason;
        if (*e.finish_reason == FinishReason::kError) result.error = e.error;
      }
    }
  }
  if (show) out(decoder.flush());
  if (!show) result.num_output_tokens = 0;  // the one token a prefill samples is not output
  result.prefill_seconds = std::chrono::duration<double>(
                               (result.num_output_tokens > 0 ? first_token : last_step) - start)
                               .count();
  result.decode_seconds = result.num_output_tokens > 0
                              ? std::chrono::duration<double>(last_step - first_token).count()
                              : 0.0;
  return result;
}

}  // namespace pagoda::cli
