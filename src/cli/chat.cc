// pagoda chat -m MODEL: a conversation in the terminal. Each turn renders the whole history
// through the model's chat template and runs it on one Engine whose prefix cache keeps the
// previous turns' K/V, so a turn costs only its new tokens (the stats line says how many came
// from the cache). With a terminal on stdin it prompts, streams replies and takes commands; with
// a pipe it reads one message per line and prints only the replies, so it can be scripted.
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <iostream>

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
    "A line ending in \\ continues on the next line; \"\"\" starts and ends a block of lines.\n"
    "Ctrl-C stops a reply.\n";

const std::vector<std::string> kCommands = {"/system", "/clear", "/save", "/load",
                                            "/stats",  "/exit",  "/quit", "/help"};

struct ChatOptions {
  GenerationOptions gen;
  std::string system;
  std::string chat_template_file;
};

// Reads lines from standard input. A Ctrl-C ends the wait: the signal may be delivered to any
// of the compute threads, so the wait polls the handler's counter rather than counting on
// read(2) failing with EINTR in this thread. `handled` is how many interrupts the session has
// already acted on: any beyond it ends the wait, so a Ctrl-C that lands between two reads (while
// a message or the prompt is printed) is not lost.
class LineReader {
 public:
  enum class Status { kLine, kEof, kInterrupted };
  Status read(std::string& line, int handled) {
    line.clear();
    while (true) {
      if (const size_t nl = buffer_.find('\n'); nl != std::string::npos) {
        line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return Status::kLine;
      }
      pollfd fd{STDIN_FILENO, POLLIN, 0};
      const int ready = ::poll(&fd, 1, 100);
      if (g_num_interrupts.load() != handled) return Status::kInterrupted;
      if (ready == 0 || (ready < 0 && errno == EINTR)) continue;
      char chunk[4096];
      const ssize_t n = ::read(STDIN_FILENO, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        if (buffer_.empty()) return Status::kEof;
        line = std::move(buffer_);  // a last line without its newline
        buffer_.clear();
        return Status::kLine;
      }
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

 private:
  std::string buffer_;
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

  // Runs until /exit, Ctrl-D, end of input or a second Ctrl-C. Returns the exit code.
  int loop() {
    LineReader reader;
    bool armed = false;  // a Ctrl-C came last: another one leaves
    while (true) {
      std::string text;
      const LineReader::Status status = read_message(reader, text);
      if (status == LineReader::Status::kEof) {
        if (interactive_) std::cout << "\n" << std::flush;
        return 0;
      }
      if (status == LineReader::Status::kInterrupted) {
        handled_ += 1;  // one at a time: a second one already pending leaves at the next read
        if (armed) {
          std::cout << "\n" << std::flush;
          return 0;
        }
        armed = true;
        std::cerr << "\n(Ctrl-C again or Ctrl-D to leave)\n";
        continue;
      }
      if (text.empty()) continue;
      if (text[0] == '/') {
        if (!command(text)) return 0;
        armed = false;
        continue;
      }
      turn(text);
      // A Ctrl-C during the reply stopped it; the next one leaves.
      const int now = g_num_interrupts.load();
      armed = now > handled_;
      handled_ = now;
    }
  }

 private:
  // Shows the prompt; returns the interrupts already acted on, for the read that follows.
  int prompt(const char* p) const {
    if (interactive_) std::cout << p << std::flush;
    return handled_;
  }

  // One message: a line, lines joined by a trailing backslash, or a """ block.
  LineReader::Status read_message(LineReader& reader, std::string& text) {
    std::string line;
    LineReader::Status s = reader.read(line, prompt(">>> "));
    if (s != LineReader::Status::kLine) return s;
    if (line == "\"\"\"") {
      while (true) {
        s = reader.read(line, prompt("... "));
        if (s != LineReader::Status::kLine) return s;
        if (line == "\"\"\"") break;
        text += text.empty() ? line : "\n" + line;
      }
      return LineReader::Status::kLine;
    }
    while (!line.empty() && line.back() == '\\') {
      line.pop_back();
      text += line + "\n";
      s = reader.read(line, prompt("... "));
      if (s != LineReader::Status::kLine) return s;
    }
    text += line;
    return LineReader::Status::kLine;
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
      std::cerr << "error: unknown command '" << name << "'"
                << (hint.empty() ? "" : " (did you mean '" + hint + "'?)")
                << "; /help lists them\n";
    }
    return true;
  }

  void save(const std::string& path) {
    if (path.empty()) {
      std::cerr << "error: /save needs a file name\n";
      return;
    }
    std::ofstream out(path, std::ios::binary);
    out << messages_.dump(2) << "\n";
    out.close();
    if (!out) {
      std::cerr << "error: " << path << ": cannot write\n";
      return;
    }
    std::cerr << "(saved " << messages_.size() << " messages to " << path << ")\n";
  }

  void load(const std::string& path) {
    if (path.empty()) {
      std::cerr << "error: /load needs a file name\n";
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
      std::cerr << "error: " << e.what() << "\n";
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

  void turn(const std::string& text) {
    messages_.push_back({{"role", "user"}, {"content", text}});
    std::vector<TokenId> prompt;
    try {
      prompt = server::render_chat_prompt(context_, messages_, ordered_json::object());
    } catch (const Error& e) {
      messages_.erase(messages_.end() - 1);
      std::cerr << "error: the chat template failed: " << e.what() << "\n";
      return;
    }
    const auto num_prompt = static_cast<int32_t>(prompt.size());
    if (num_prompt >= num_context_) {
      messages_.erase(messages_.end() - 1);
      std::cerr << "error: the conversation is " << num_prompt << " tokens and the context holds "
                << num_context_ << ": /clear to start again, or a larger -c\n";
      return;
    }
    GenerationRequest request;
    request.prompt = std::move(prompt);
    request.sampling = sampling_;
    request.max_tokens = std::max(1, std::min(o_.gen.num_tokens, num_context_ - num_prompt));
    request.stop_ids = m_.tokenizer->vocab().eog;
    const TurnResult r = run_turn(
        *engine_, *m_.tokenizer, std::move(request), o_.gen.special, handled_,
        [](const std::string& piece) { std::cout << piece << std::flush; });
    std::cout << "\n" << std::flush;
    if (!r.error.empty()) {
      messages_.erase(messages_.end() - 1);
      std::cerr << "error: the engine failed: " << r.error << "\n";
      return;
    }
    // An interrupted reply stays in the history as far as it went: that is what the user saw.
    messages_.push_back({{"role", "assistant"}, {"content", r.text}});
    ++totals_.num_turns;
    totals_.num_prompt_tokens += r.num_prompt_tokens;
    totals_.num_cached_tokens += r.num_cached_tokens;
    totals_.num_output_tokens += r.num_output_tokens;
    const double tps = r.num_decode_tokens / std::max(r.decode_seconds, 1e-9);
    std::fprintf(stderr,
                 "prompt: %d tokens, %d from the prefix cache | first token: %.2f s | reply: %d "
                 "tokens at %.1f tok/s%s\n",
                 r.num_prompt_tokens, r.num_cached_tokens, r.prefill_seconds, r.num_output_tokens,
                 r.num_decode_tokens > 0 ? tps : 0.0,
                 r.interrupted                       ? " | stopped (Ctrl-C)"
                 : r.finish == FinishReason::kLength ? " | cut at -n tokens"
                                                     : "");
  }

  ChatOptions& o_;
  LoadedModel& m_;
  const bool interactive_;
  server::ModelContext context_;
  int32_t num_context_ = 0;
  std::unique_ptr<Engine> engine_;
  int handled_ = 0;  // interrupts acted on so far (g_num_interrupts starts at 0)
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
  return [o] {
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
                   "pagoda chat: %s (chat template: %s). /help for commands; Ctrl-C stops a "
                   "reply, Ctrl-D leaves.\n",
                   o->gen.model.c_str(),
                   chat_template_origin(o->chat_template_file, *m.file, vocab).c_str());
    }
    g_num_interrupts = 0;
    install_interrupt_handler();
    const int code = session.loop();
    restore_interrupt_handler();
    return code;
  };
}

}  // namespace pagoda::cli
