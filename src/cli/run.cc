// pagoda run -m FILE -p PROMPT: generate text for one prompt, streamed as it is produced, through
// the same engine (paged KV cache, scheduler) that serves many requests.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>

#include "backend/backend.h"
#include "cli/commands.h"
#include "cli/format_util.h"
#include "cli/speculative_options.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "engine/engine.h"
#include "kv/kv_storage.h"
#include "model/model.h"
#include "model/model_check.h"
#include "model/model_file.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::cli {
namespace {

std::atomic<bool> g_interrupted{false};

void on_sigint(int) { g_interrupted = true; }

double seconds_between(std::chrono::steady_clock::time_point a,
                       std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

Action add_run(CLI::App& app) {
  struct Options {
    std::string model, prompt, file;
    int32_t num_tokens = 128;
    int32_t context = 0;
    int threads = 0;
    std::string backend = "cpu";
    std::string kv_type = "f32";
    bool raw = false;
    bool ignore_eos = false;
    SamplingParams sampling;
    uint64_t seed = 0;
    SpeculativeOptions speculative;
    int32_t beam_width = 0;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("run", "Generate text for one prompt");
  cmd->add_option("-m,--model", o->model, "GGUF file or Hugging Face model folder")->required();
  auto* p = cmd->add_option("-p,--prompt", o->prompt, "The prompt");
  cmd->add_option("-f,--file", o->file, "Read the prompt from this file")->excludes(p);
  cmd->add_option("-n,--num-tokens", o->num_tokens, "Tokens to generate")->check(CLI::Range(0, 1 << 20));
  cmd->add_option("-c,--context", o->context, "Context length (default: the model's, at most 4096)")
      ->check(CLI::Range(0, 1 << 22));
  cmd->add_option("-t,--threads", o->threads, "Threads (default: all cores)")->check(CLI::Range(0, 1024));
  cmd->add_option("--backend", o->backend, "cpu or reference")->check(CLI::IsMember({"cpu", "reference"}));
  cmd->add_option("--kv-type", o->kv_type, "KV cache values: f32, or f16 for half the memory")
      ->check(CLI::IsMember({"f32", "f16"}));
  cmd->add_option("--temp", o->sampling.temperature, "Temperature; 0 = greedy")->default_val(0.8f);
  cmd->add_option("--top-k", o->sampling.top_k, "Keep the k most likely tokens; 0 = off")->default_val(40);
  cmd->add_option("--top-p", o->sampling.top_p, "Nucleus sampling threshold")->default_val(0.95f);
  cmd->add_option("--min-p", o->sampling.min_p, "Drop tokens below min-p x the best")->default_val(0.05f);
  cmd->add_option("--repeat-penalty", o->sampling.repetition_penalty, "Repetition penalty; 1 = off");
  cmd->add_option("--presence-penalty", o->sampling.presence_penalty, "Presence penalty");
  cmd->add_option("--frequency-penalty", o->sampling.frequency_penalty, "Frequency penalty");
  auto* seed = cmd->add_option("--seed", o->seed, "Random seed (same seed, same text)");
  cmd->add_flag("--raw", o->raw, "Do not add BOS");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating past end-of-generation tokens (benchmarks)");
  add_speculative_options(cmd, o->speculative);
  cmd->add_option("--beam-width", o->beam_width,
                  "Beam search with this many beams: the likeliest output, printed when done")
      ->check(CLI::Range(1, kMaxBeamWidth));
  return [o, seed] {
    if (seed->count() > 0) {
      o->sampling.seed = o->seed;
      o->sampling.has_seed = true;
    }
    o->sampling.validate();
    auto file = ModelFile::open(o->model);
    check_model(*file);
    auto tokenizer = Tokenizer::create(file->vocab());
    auto model = Model::load(*file);
    auto backend = o->backend == "reference" ? make_reference_backend() : make_cpu_backend(o->threads);
    std::string text = o->file.empty() ? o->prompt : read_file(o->file);
    auto prompt = tokenizer->encode(text, {.add_special = !o->raw, .parse_special = true});
    int32_t context = o->context;
    if (context == 0) {
      uint32_t trained = model->config().context_length;
      context = static_cast<int32_t>(trained == 0 || trained > 4096 ? 4096 : trained);
    }
    warn_past_trained_context(context, model->config().context_length);
    const auto num_prompt = static_cast<int32_t>(prompt.size());
    if (num_prompt >= context) {
      fail("the prompt has ", num_prompt, " tokens; the context holds ", context);
    }
    EngineConfig config;
    config.num_kv_cache_tokens = context;
    config.max_model_len = context;
    config.max_num_batched_tokens = 512;  // prompt tokens per step
    config.max_num_seqs = 1;
    config.enable_prefix_caching = false;  // one prompt: nothing to share
    config.kv_type = parse_kv_cache_type(o->kv_type);
    DraftModel draft;
    config.speculative = speculative_config(o->speculative, *file, draft);
    Engine engine(*model, *backend, config);
    // -n 0 only prefills: one token is sampled (the engine always samples) and not shown.
    const bool prefill_only = o->num_tokens == 0;
    GenerationRequest request;
    request.prompt = prompt;
    request.sampling = o->sampling;
    request.max_tokens = std::max(1, std::min(o->num_tokens, context - num_prompt));
    if (!o->ignore_eos) request.stop_ids = tokenizer->vocab().eog;
    request.beam.width = o->beam_width;

    g_interrupted = false;
    auto old_handler = std::signal(SIGINT, on_sigint);
    StreamDecoder decoder(*tokenizer);
    std::cout << text << std::flush;
    using Clock = std::chrono::steady_clock;
    const Clock::time_point start = Clock::now();
    Clock::time_point first_token = start, last_step = start;
    int32_t num_generated = 0, num_decode_tokens = 0;
    bool aborted = false;
    const RequestId id = engine.add_request(std::move(request));
    while (engine.has_work()) {
      const bool decoding = num_generated > 0;
      const std::vector<OutputEvent> events = engine.step();
      last_step = Clock::now();
      for (const OutputEvent& e : events) {
        // Tokens delivered after the first: several per step when proposals are accepted.
        if (decoding) num_decode_tokens += static_cast<int32_t>(e.token_ids.size());
        for (TokenId token : e.token_ids) {
          if (prefill_only) continue;
          if (num_generated++ == 0) first_token = last_step;
          std::cout << decoder.feed(token) << std::flush;
        }
      }
      if (g_interrupted && !aborted) {
        engine.abort(id);
        aborted = true;
      }
    }
    std::cout << decoder.flush() << std::endl;
    std::signal(SIGINT, old_handler);
    const double prefill_seconds = seconds_between(start, num_generated > 0 ? first_token : last_step);
    const double decode_seconds = num_generated > 0 ? seconds_between(first_token, last_step) : 0.0;

    const std::string spec = speculative_summary(engine.stats().speculative);
    std::fprintf(stderr,
                 "prefill: %d tokens at %.1f tok/s | decode: %d tokens at %.1f tok/s | weights %s | "
                 "KV %s%s%s%s\n",
                 num_prompt, num_prompt / std::max(prefill_seconds, 1e-9), num_generated,
                 num_decode_tokens / std::max(decode_seconds, 1e-9),
                 human_bytes(model->weight_bytes()).c_str(),
                 human_bytes(engine.stats().kv_cache_bytes).c_str(), spec.empty() ? "" : " | ",
                 spec.c_str(), g_interrupted ? " | interrupted" : "");
    return g_interrupted ? 130 : 0;
  };
}

}  // namespace pagoda::cli
