// pagoda run -m FILE -p PROMPT: generate text for one prompt, streamed as it is produced.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>

#include "backend/backend.h"
#include "cli/commands.h"
#include "cli/format_util.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "engine/generator.h"
#include "model/model.h"
#include "model/model_file.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::cli {
namespace {

std::atomic<bool> g_interrupted{false};

void on_sigint(int) { g_interrupted = true; }

}  // namespace

Action add_run(CLI::App& app) {
  struct Options {
    std::string model, prompt, file;
    int32_t num_tokens = 128;
    int32_t context = 0;
    int threads = 0;
    std::string backend = "cpu";
    bool raw = false;
    SamplingParams sampling;
    uint64_t seed = 0;
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
  cmd->add_option("--temp", o->sampling.temperature, "Temperature; 0 = greedy")->default_val(0.8f);
  cmd->add_option("--top-k", o->sampling.top_k, "Keep the k most likely tokens; 0 = off")->default_val(40);
  cmd->add_option("--top-p", o->sampling.top_p, "Nucleus sampling threshold")->default_val(0.95f);
  cmd->add_option("--min-p", o->sampling.min_p, "Drop tokens below min-p x the best")->default_val(0.05f);
  cmd->add_option("--repeat-penalty", o->sampling.repetition_penalty, "Repetition penalty; 1 = off");
  cmd->add_option("--presence-penalty", o->sampling.presence_penalty, "Presence penalty");
  cmd->add_option("--frequency-penalty", o->sampling.frequency_penalty, "Frequency penalty");
  auto* seed = cmd->add_option("--seed", o->seed, "Random seed (same seed, same text)");
  cmd->add_flag("--raw", o->raw, "Do not add BOS");
  return [o, seed] {
    if (seed->count() > 0) {
      o->sampling.seed = o->seed;
      o->sampling.has_seed = true;
    }
    o->sampling.validate();
    auto file = ModelFile::open(o->model);
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
    Generator generator(*model, *backend, context);
    GenerateOptions options;
    options.max_new_tokens = o->num_tokens;
    options.sampling = o->sampling;

    g_interrupted = false;
    auto old_handler = std::signal(SIGINT, on_sigint);
    StreamDecoder decoder(*tokenizer);
    std::cout << text << std::flush;
    GenerateStats s = generator.generate(prompt, options, tokenizer->vocab().eog, [&](TokenId id) {
      std::cout << decoder.feed(id) << std::flush;
      return !g_interrupted.load();
    });
    std::cout << decoder.flush() << std::endl;
    std::signal(SIGINT, old_handler);

    std::fprintf(stderr,
                 "prefill: %d tokens at %.1f tok/s | decode: %d tokens at %.1f tok/s | weights %s | "
                 "KV %s%s\n",
                 s.num_prompt_tokens, s.num_prompt_tokens / std::max(s.prefill_seconds, 1e-9),
                 s.num_generated, s.num_decode_steps / std::max(s.decode_seconds, 1e-9),
                 human_bytes(model->weight_bytes()).c_str(),
                 human_bytes(generator.kv().bytes()).c_str(),
                 g_interrupted ? " | interrupted" : "");
    return g_interrupted ? 130 : 0;
  };
}

}  // namespace pagoda::cli
