// pagoda run -m FILE -p PROMPT: generate text for one prompt, streamed as it is produced, through
// the same engine (paged KV cache, scheduler) that serves many requests. --chat sends the prompt
// as one user message through the model's chat template and prints only the reply.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <iterator>

#include "cli/chat_support.h"
#include "cli/commands.h"
#include "cli/format_util.h"
#include "cli/generation_options.h"
#include "cli/kv_disk_options.h"
#include "cli/prompt_cache.h"
#include "cli/ranks.h"
#include "cli/speculative_options.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "model/kv_storage.h"

namespace pagoda::cli {
namespace {

struct RunOptions {
  GenerationOptions gen;
  std::string prompt, file;
  bool raw = false;
  bool ignore_eos = false;
  bool chat = false;
  std::string system, chat_template_file;
  SpeculativeOptions speculative;
  KvDiskOptions kv_disk;
  std::string prompt_cache;  // --prompt-cache FILE
  int32_t beam_width = 0;
  CLI::Option* prompt_option = nullptr;
};

// The prompt text: -p, -f, or standard input when it is not a terminal.
std::string prompt_text(const RunOptions& o) {
  if (o.prompt_option->count() > 0) return o.prompt;
  if (!o.file.empty()) return read_file(o.file);
  if (isatty(STDIN_FILENO) != 0) {
    throw UsageError(
        "pagoda run: no prompt: give -p TEXT, -f FILE, or pipe the prompt on standard input");
  }
  std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  if (text.empty()) {
    throw UsageError("pagoda run: no prompt: standard input was empty; give -p TEXT or -f FILE");
  }
  return text;
}

}  // namespace

Action add_run(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  auto* cmd = app.add_subcommand("run", "Generate text for one prompt");
  add_generation_options(cmd, o->gen, "Tokens to generate");
  o->prompt_option = cmd->add_option(
      "prompt,-p,--prompt", o->prompt,
      "The prompt, with -p or as the last argument, quoted (default: standard input when it is "
      "not a terminal)");
  cmd->add_option("-f,--file", o->file, "Read the prompt from this file")
      ->excludes(o->prompt_option);
  cmd->add_flag("--chat", o->chat,
                "Send the prompt as one user message through the model's chat template; print "
                "only the reply");
  cmd->add_option("--system", o->system, "With --chat: a system prompt (default: none)");
  cmd->add_option("--chat-template", o->chat_template_file,
                  "With --chat: a Jinja chat template file (default: the model's)");
  cmd->add_flag("--raw", o->raw, "Do not add BOS");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating past end-of-generation tokens (benchmarks)");
  add_speculative_options(cmd, o->speculative);
  add_kv_disk_options(cmd, o->kv_disk);
  cmd->add_option("--prompt-cache", o->prompt_cache,
                  "Load the prompt's KV blocks from this file when it has them (same model and "
                  "K/V format); save them to it after the prompt is computed");
  cmd->add_option(
         "--beam-width", o->beam_width,
         "Beam search with this many beams: the likeliest output, printed when done (0: off)")
      ->check(CLI::Range(0, kMaxBeamWidth));
  return [o] {
    if (!o->chat && (!o->system.empty() || !o->chat_template_file.empty())) {
      throw UsageError("pagoda run: --system and --chat-template go with --chat");
    }
    const SamplingParams sampling = sampling_params(o->gen);
    apply_gpu_layers(o->gen);
    check_kv_disk_options(o->kv_disk, o->gen.backend);
    check_prompt_cache_option(o->prompt_cache, o->gen.backend, o->speculative);
    // Under mpirun only rank 0 reads the prompt (stdin goes to it alone); the others follow.
    const std::string text = is_follower() ? std::string() : prompt_text(*o);
    LoadedModel m = load_model(o->gen, ranks());
    if (follow_rank0(*m.model, *m.backend)) return 0;
    const Tokenizer& tokenizer = *m.tokenizer;
    std::vector<TokenId> prompt;
    if (o->chat) {
      const std::string source =
          chat_template_source(o->chat_template_file, *m.file, tokenizer.vocab());
      if (source.empty()) {
        fail(o->gen.model,
             ": the model has no chat template and pagoda has none for its family; "
             "give one with --chat-template FILE, or leave out --chat");
      }
      server::ModelContext context;
      context.tokenizer = &tokenizer;
      set_chat_renderer(context, std::make_shared<ChatTemplate>(source), tokenizer.vocab());
      nlohmann::ordered_json messages = nlohmann::ordered_json::array();
      if (!o->system.empty()) messages.push_back({{"role", "system"}, {"content", o->system}});
      messages.push_back({{"role", "user"}, {"content", text}});
      prompt = server::render_chat_prompt(context, messages, nlohmann::ordered_json::object());
    } else {
      prompt = tokenizer.encode(
          text, {.add_special = !o->raw, .parse_special = true, .plain_ranges = {}});
      // An instruct model given plain text often ends its turn at once: say how to talk to it.
      if (!tokenizer.vocab().chat_template.empty() &&
          tokenizer.control_token_ranges(text).empty()) {
        std::fprintf(stderr,
                     "note: %s has a chat template: --chat sends the prompt as a user message, "
                     "pagoda chat -m %s starts a conversation\n",
                     o->gen.model.c_str(), o->gen.model.c_str());
      }
    }
    const int32_t context = resolve_context(o->gen, *m.model);
    warn_past_trained_context(context, m.model->config().context_length);
    const auto num_prompt = static_cast<int32_t>(prompt.size());
    if (num_prompt >= context) {
      fail("the prompt has ", num_prompt, " tokens; the context holds ", context);
    }
    EngineConfig config;
    config.num_kv_cache_tokens = context;
    config.max_model_len = context;
    config.max_num_batched_tokens = 512;  // prompt tokens per step
    config.max_num_seqs = 1;
    config.kv_type = parse_kv_type(o->gen.kv_type);
    const std::string lora_identity =
        m.lora ? str_cat("lora ", m.lora->digest(), " scale ", o->gen.lora_scale) : std::string();
    apply_kv_disk_options(o->kv_disk, *m.file, context, config, lora_identity);
    // One prompt: nothing to share, unless with blocks on disk from earlier runs.
    config.enable_prefix_caching = !config.kv_disk.folder.empty() || !o->prompt_cache.empty() ||
                                   config.kv_offload_bytes > 0;
    DraftModel draft;
    config.speculative = speculative_config(o->speculative, *m.file, draft);
    Engine engine(*m.model, *m.backend, config);
    PromptCache prompt_cache(o->prompt_cache, engine,
                             prompt_cache_identity(*m.file, config, lora_identity));
    prompt_cache.load(prompt);
    // -n 0 only prefills: one token is sampled (the engine always samples) and not shown.
    const bool prefill_only = o->gen.num_tokens == 0;
    GenerationRequest request;
    request.prompt = prompt;
    request.sampling = sampling;
    request.max_tokens = std::max(1, std::min(o->gen.num_tokens, context - num_prompt));
    if (!o->ignore_eos) request.stop_ids = tokenizer.vocab().eog;
    request.beam.width = o->beam_width;

    g_num_interrupts = 0;
    install_interrupt_handler();
    if (!o->chat) std::cout << text << std::flush;
    const TurnResult r = run_turn(
        engine, tokenizer, std::move(request), o->gen.special, 0,
        [](const std::string& piece) { std::cout << piece << std::flush; }, !prefill_only);
    std::cout << std::endl;
    restore_interrupt_handler();
    if (!r.error.empty()) fail("the engine failed: ", r.error);
    prompt_cache.save(prompt);

    const std::string spec = speculative_summary(engine.stats().speculative);
    const std::string disk = cache_summary(engine, !config.kv_disk.folder.empty(),
                                           !o->prompt_cache.empty(), config.kv_offload_bytes > 0);
    std::fprintf(
        stderr,
        "prefill: %d tokens%s at %.1f tok/s | decode: %d tokens at %.1f tok/s | weights %s | "
        "KV %s%s%s%s\n",
        num_prompt, disk.c_str(), num_prompt / std::max(r.prefill_seconds, 1e-9),
        r.num_output_tokens,
        r.num_decode_tokens / std::max(r.decode_seconds, 1e-9),
        human_bytes(m.model->weight_bytes()).c_str(),
        human_bytes(engine.stats().kv_cache_bytes).c_str(), spec.empty() ? "" : " | ", spec.c_str(),
        r.interrupted ? " | interrupted" : "");
    return r.interrupted ? 130 : 0;
  };
}

}  // namespace pagoda::cli
