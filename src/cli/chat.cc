// pagoda chat -m MODEL: a conversation in the terminal. Each turn renders the whole history
// through the model's chat template and runs it on one Engine whose prefix cache keeps the
// previous turns' K/V, so a turn costs only its new tokens (the stats line says how many came
// from the cache). With a terminal on stdin it prompts, edits lines and keeps their history
// (chat_input.h), streams replies and takes commands; with a pipe it reads one message per line
// and prints only the replies, each ended by a blank line, so it can be scripted. A conversation
// longer than the context goes on without its oldest turns (the system message stays).
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>

#include "cli/chat_input.h"
#include "cli/chat_support.h"
#include "cli/commands.h"
#include "cli/format_util.h"
#include "cli/generation_options.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "model/kv_storage.h"

namespace pagoda::cli {
namespace {

// The largest conversation /load reads (as /save writes them).
constexpr uint64_t kMaxConversationBytes = uint64_t{64} << 20;

using nlohmann::ordered_json;

constexpr const char* kHelp =
    "/system TEXT   set the system prompt (/system alone removes it)\n"
    "/clear         start the conversation again (the system prompt stays)\n"
    "/save FILE     write the conversation to FILE (JSON, OpenAI's messages)\n"
    "/load FILE     read a conversation saved with /save\n"
    "/stats         tokens, prefix-cache hits and KV use so far\n"
    "/exit          leave (also Ctrl-D, or Ctrl-C twice)\n"
    "A line ending in \\ continues on the next line; \"\"\" starts and ends a block of lines;\n"
    "a paste is one message (Enter sends it).\n"
    "Up and Down recall earlier lines, Ctrl-R searches them. Ctrl-C stops a reply.\n";

const std::vector<std::string> kCommands = {"/system", "/clear", "/save", "/load",
                                            "/stats",  "/exit",  "/quit", "/help"};

struct ChatOptions {
  GenerationOptions gen;
  std::string system;
  std::string chat_template_file;
  bool no_history = false;
};

struct SessionTotals {
  int64_t num_turns = 0, num_prompt_tokens = 0, num_cached_tokens = 0, num_output_tokens = 0;
};

class ChatSession {
 public:
  ChatSession(ChatOptions& o, LoadedModel& m, std::shared_ptr<ChatTemplate> chat, bool interactive)
      : o_(o), m_(m), interactive_(interactive) {
    context_.tokenizer = m.tokenizer.get();
    set_chat_renderer(context_, std::move(chat), m.tokenizer->vocab());
    num_context_ = resolve_context(o.gen, *m.model);
    warn_past_trained_context(num_context_, m.model->config().context_length);
    EngineConfig config;
    config.num_kv_cache_tokens = num_context_;
    config.max_model_len = num_context_;
    config.max_num_batched_tokens = 512;
    config.max_num_seqs = 1;
    config.enable_prefix_caching = true;  // the earlier turns' K/V serve the next turn
    config.kv_type = parse_kv_type(o.gen.kv_type);
    engine_ = std::make_unique<Engine>(*m.model, *m.backend, config);
    sampling_ = sampling_params(o.gen);
    if (!o.system.empty()) messages_.push_back({{"role", "system"}, {"content", o.system}});
  }

  int32_t context_size() const { return num_context_; }

  // Runs until /exit, Ctrl-D, end of input or a second Ctrl-C. Returns the exit code.
  // Piped, the first failure (a turn that could not run, a command that failed) ends the
  // session with exit code 1, so a script does not go on from a broken conversation; on a
  // terminal the person reads the error and goes on.
  int loop(ChatInput& input) {
    bool armed = false;  // a Ctrl-C came last: another one leaves
    while (true) {
      std::string text;
      const ChatInput::Status status = read_message(input, text);
      if (status == ChatInput::Status::kEof) {
        if (interactive_) std::cout << "\n" << std::flush;
        return exit_code();
      }
      if (status == ChatInput::Status::kInterrupted) {
        handled_ += 1;  // one at a time: a second one already pending leaves at the next read
        if (armed) {
          std::cout << "\n" << std::flush;
          return exit_code();
        }
        armed = true;
        std::cerr << "\n(Ctrl-C again or Ctrl-D to leave)\n";
        continue;
      }
      if (text.empty()) continue;
      if (text[0] == '/') {
        if (!command(text)) return exit_code();
        armed = false;
        if (failed_) return exit_code();
        continue;
      }
      turn(text);
      if (failed_) return exit_code();
      // A Ctrl-C during the reply stopped it; the next one leaves.
      const int now = g_num_interrupts.load();
      armed = now > handled_;
      handled_ = now;
    }
  }

 private:
  int exit_code() const { return failed_ ? 1 : 0; }

  // Says what went wrong, on one line; piped, the session has failed.
  void error(const std::string& message) {
    std::cerr << "error: " << message << "\n";
    if (!interactive_) failed_ = true;
  }

  // The prompt, on a terminal only.
  const char* prompt(const char* p) const { return interactive_ ? p : ""; }

  // One message: a line (or a paste), lines joined by a trailing backslash, or a """ block.
  ChatInput::Status read_message(ChatInput& input, std::string& text) {
    std::string line;
    ChatInput::Status s = input.read(line, prompt(">>> "), handled_);
    if (s != ChatInput::Status::kLine) return s;
    if (line == "\"\"\"") {
      while (true) {
        s = input.read(line, prompt("... "), handled_);
        if (s != ChatInput::Status::kLine) return s;
        if (line == "\"\"\"") break;
        text += text.empty() ? line : "\n" + line;
      }
      return ChatInput::Status::kLine;
    }
    while (!line.empty() && line.back() == '\\') {
      line.pop_back();
      text += line + "\n";
      s = input.read(line, prompt("... "), handled_);
      if (s != ChatInput::Status::kLine) return s;
    }
    text += line;
    return ChatInput::Status::kLine;
  }

  // Returns false to leave.
  bool command(const std::string& line) {
    const size_t space = line.find(' ');
    const std::string name = line.substr(0, space);
    std::string arg = space == std::string::npos ? "" : line.substr(space + 1);
    if (name == "/exit" || name == "/quit") return false;
    if (name == "/help") {
      std::cerr << kHelp;
    } else if (name == "/system") {
      if (!messages_.empty() && messages_[0]["role"] == "system")
        messages_.erase(messages_.begin());
      if (!arg.empty()) {
        // One object: a braced list here would insert its pairs as separate elements.
        messages_.insert(messages_.begin(), ordered_json{{"role", "system"}, {"content", arg}});
        std::cerr << "(system prompt set)\n";
      } else {
        std::cerr << "(system prompt removed)\n";
      }
    } else if (name == "/clear") {
      ordered_json kept = ordered_json::array();
      if (!messages_.empty() && messages_[0]["role"] == "system") kept.push_back(messages_[0]);
      messages_ = std::move(kept);
      std::cerr << "(conversation cleared)\n";
    } else if (name == "/save") {
      save(arg);
    } else if (name == "/load") {
      load(arg);
    } else if (name == "/stats") {
      stats();
    } else {
      std::string hint = nearest(name, kCommands);
      error("unknown command '" + name + "'" +
            (hint.empty() ? "" : " (did you mean '" + hint + "'?)") + "; /help lists them");
    }
    return true;
  }

  void save(const std::string& path) {
    if (path.empty()) {
      error("/save needs a file name");
      return;
    }
    std::ofstream out(path, std::ios::binary);
    out << messages_.dump(2) << "\n";
    out.close();
    if (!out) {
      error(path + ": cannot write");
      return;
    }
    std::cerr << "(saved " << messages_.size() << " messages to " << path << ")\n";
  }

  void load(const std::string& path) {
    if (path.empty()) {
      error("/load needs a file name");
      return;
    }
    try {
      ordered_json j = ordered_json::parse(read_file(path, kMaxConversationBytes), nullptr, /*allow_exceptions=*/false);
      if (j.is_object() && j.contains("messages")) j = j["messages"];
      if (!j.is_array()) fail(path, ": not a list of messages (as /save writes)");
      ordered_json loaded = ordered_json::array();
      for (size_t i = 0; i < j.size(); ++i) {
        const ordered_json& m = j[i];
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string() ||
            !m.contains("content") || !m["content"].is_string()) {
          fail(path, ": message ", i, " needs a string role and a string content");
        }
        loaded.push_back({{"role", m["role"]}, {"content", m["content"]}});
      }
      messages_ = std::move(loaded);
      std::cerr << "(loaded " << messages_.size() << " messages from " << path << ")\n";
    } catch (const Error& e) {
      error(e.what());
    }
  }

  void stats() const {
    const EngineStats s = engine_->stats();
    std::fprintf(stderr,
                 "turns %lld | prompt tokens %lld, %lld from the prefix cache | reply tokens %lld "
                 "| KV cache %s for %d tokens | history %zu messages\n",
                 static_cast<long long>(totals_.num_turns),
                 static_cast<long long>(totals_.num_prompt_tokens),
                 static_cast<long long>(totals_.num_cached_tokens),
                 static_cast<long long>(totals_.num_output_tokens),
                 human_bytes(s.kv_cache_bytes).c_str(), num_context_, messages_.size());
  }

  std::vector<TokenId> render() const {
    return server::render_chat_prompt(context_, messages_, ordered_json::object());
  }

  // Drops the oldest turns (a user message and the replies after it; never the system message
  // nor the message just sent) until the prompt leaves room for a reply of -n tokens, at most
  // half the context. Returns how many messages went. Throws Error when the template fails.
  size_t make_room(std::vector<TokenId>& prompt) {
    const auto room =
        static_cast<size_t>(std::max(1, std::min(o_.gen.num_tokens, num_context_ / 2)));
    const size_t first = !messages_.empty() && messages_[0]["role"] == "system" ? 1 : 0;
    size_t dropped = 0;
    while (prompt.size() + room > static_cast<size_t>(num_context_) &&
           messages_.size() > first + 1) {
      size_t end = first + 1;
      while (end + 1 < messages_.size() && messages_[end]["role"] != "user") ++end;
      messages_.erase(messages_.begin() + static_cast<std::ptrdiff_t>(first),
                      messages_.begin() + static_cast<std::ptrdiff_t>(end));
      dropped += end - first;
      prompt = render();
    }
    return dropped;
  }

  void turn(const std::string& text) {
    messages_.push_back({{"role", "user"}, {"content", text}});
    std::vector<TokenId> prompt;
    size_t dropped = 0;
    try {
      prompt = render();
      dropped = make_room(prompt);
    } catch (const Error& e) {
      messages_.erase(messages_.end() - 1);
      error(std::string("the chat template failed: ") + e.what());
      return;
    }
    if (dropped > 0) {
      std::cerr << "(the conversation outgrew the context of " << num_context_
                << " tokens: dropped the " << dropped << " oldest messages)\n";
    }
    const auto num_prompt = static_cast<int32_t>(prompt.size());
    if (num_prompt >= num_context_) {
      messages_.erase(messages_.end() - 1);
      error("the message makes a prompt of " + std::to_string(num_prompt) +
            " tokens and the context holds " + std::to_string(num_context_) +
            ": send a shorter one, or give a larger -c");
      return;
    }
    GenerationRequest request;
    request.prompt = std::move(prompt);
    request.sampling = sampling_;
    request.max_tokens = std::max(1, std::min(o_.gen.num_tokens, num_context_ - num_prompt));
    request.stop_ids = m_.tokenizer->vocab().eog;
    const bool context_limits = request.max_tokens < o_.gen.num_tokens;
    const TurnResult r = run_turn(
        *engine_, *m_.tokenizer, std::move(request), o_.gen.special, handled_,
        [](const std::string& piece) { std::cout << piece << std::flush; });
    // Piped, a blank line ends each reply, so replies of several lines stay apart.
    std::cout << (interactive_ ? "\n" : "\n\n") << std::flush;
    if (!r.error.empty()) {
      messages_.erase(messages_.end() - 1);
      error("the engine failed: " + r.error);
      return;
    }
    // An interrupted reply stays in the history as far as it went: that is what the user saw.
    messages_.push_back({{"role", "assistant"}, {"content", r.text}});
    ++totals_.num_turns;
    totals_.num_prompt_tokens += r.num_prompt_tokens;
    totals_.num_cached_tokens += r.num_cached_tokens;
    totals_.num_output_tokens += r.num_output_tokens;
    const double tps = r.num_decode_tokens / std::max(r.decode_seconds, 1e-9);
    const bool cut = !r.interrupted && r.finish == FinishReason::kLength;
    std::fprintf(stderr,
                 "prompt: %d tokens, %d from the prefix cache | first token: %.2f s | reply: %d "
                 "tokens at %.1f tok/s%s\n",
                 r.num_prompt_tokens, r.num_cached_tokens, r.prefill_seconds, r.num_output_tokens,
                 r.num_decode_tokens > 0 ? tps : 0.0,
                 r.interrupted                 ? " | stopped (Ctrl-C)"
                 : cut && context_limits       ? " | cut at the end of the context (-c)"
                 : cut                         ? " | cut at -n tokens"
                                               : "");
  }

  ChatOptions& o_;
  LoadedModel& m_;
  const bool interactive_;
  server::ModelContext context_;
  int32_t num_context_ = 0;
  std::unique_ptr<Engine> engine_;
  int handled_ = 0;  // interrupts acted on so far (g_num_interrupts starts at 0)
  bool failed_ = false;  // piped: a turn or a command failed
  SamplingParams sampling_;
  ordered_json messages_ = ordered_json::array();
  SessionTotals totals_;
};

}  // namespace

Action add_chat(CLI::App& app) {
  auto o = std::make_shared<ChatOptions>();
  auto* cmd = app.add_subcommand(
      "chat", "Talk with a chat model in the terminal (one message per line when piped)");
  add_generation_options(cmd, o->gen,
                         "Tokens per reply at most (a reply ends at the model's end of turn)");
  o->gen.num_tokens = 1024;
  cmd->get_option("--num-tokens")->default_val(1024);
  cmd->add_option("--system", o->system,
                  "System prompt (default: none; the template's own if it has one)");
  cmd->add_option("--chat-template", o->chat_template_file,
                  "Jinja chat template file (default: the model's, or pagoda's for its family)");
  cmd->add_flag("--no-history", o->no_history,
                "Keep no history file (default: $XDG_STATE_HOME/pagoda/history, else "
                "~/.local/state/pagoda/history)");
  return [o] {
    apply_gpu_layers(o->gen);
    LoadedModel m = load_model(o->gen);
    const Vocab& vocab = m.tokenizer->vocab();
    const std::string source = chat_template_source(o->chat_template_file, *m.file, vocab);
    if (source.empty()) {
      fail(o->gen.model,
           ": the model has no chat template and pagoda has none for its family; give one with "
           "--chat-template FILE, or use pagoda run for plain text");
    }
    auto chat = std::make_shared<ChatTemplate>(source);
    const bool interactive = isatty(STDIN_FILENO) != 0;
    ChatSession session(*o, m, chat, interactive);
    if (interactive) {
      std::fprintf(stderr,
                   "pagoda chat: %s (chat template: %s; context %d tokens). /help for commands; "
                   "Ctrl-C stops a reply, Ctrl-D leaves.\n",
                   o->gen.model.c_str(),
                   chat_template_origin(o->chat_template_file, *m.file, vocab).c_str(),
                   session.context_size());
    }
    g_num_interrupts = 0;
    install_interrupt_handler();
    int code = 0;
    {
      std::unique_ptr<ChatInput> input =
          make_chat_input(o->no_history ? std::string() : default_history_file());
      code = session.loop(*input);
    }
    restore_interrupt_handler();
    return code;
  };
}

}  // namespace pagoda::cli
