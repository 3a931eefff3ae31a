// Options and the streamed generation loop shared by `run` and `chat` (generation_options.h).
#include "cli/generation_options.h"

#include <signal.h>

#include <algorithm>
#include <chrono>

#include "backend/backend_choice.h"
#include "backend/kv_format.h"
#include "core/error.h"
#include "model/model_check.h"

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
  cmd->add_option("-n,--num-tokens", o.num_tokens, num_tokens_help)->check(CLI::Range(0, 1 << 20));
  cmd->add_option("-c,--context", o.context,
                  "Context length in tokens (0: the model's, at most 4096)")
      ->check(CLI::Range(0, 1 << 22));
  cmd->add_option("-t,--threads", o.threads, "Threads (0: all cores)")->check(CLI::Range(0, 1024));
  cmd->add_option("--backend,--device", o.backend, backend_help())
      ->check(CLI::IsMember(backend_names()));
  cmd->add_option("--kv-type", o.kv_type, kv_type_help())
      ->capture_default_str()
      ->check(CLI::IsMember(kv_type_name_list()));
  cmd->add_option("--temp", o.sampling.temperature, "Temperature; 0 = greedy")->default_val(0.8f);
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
  const uint32_t trained = model.config().context_length;
  return static_cast<int32_t>(trained == 0 || trained > 4096 ? 4096 : trained);
}

LoadedModel load_model(const GenerationOptions& o, Communicator* tp) {
  LoadedModel m;
  m.file = ModelFile::open(o.model);
  check_model(*m.file);
  m.tokenizer = Tokenizer::create(m.file->vocab());
  m.model = Model::load(*m.file, tp);
  m.backend = make_backend(o.backend, o.threads);
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
    for (const OutputEvent& e : events) {
      result.num_cached_tokens = std::max(result.num_cached_tokens, e.num_cached_tokens);
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
