// The chat's input (chat_input.h): libedit on a full terminal, plain reads elsewhere.
#include "cli/chat_input.h"

#include <histedit.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <clocale>
#include <cstdio>
#include <cstdlib>
#include <cwchar>
#include <filesystem>

#include "cli/generation_options.h"

namespace pagoda::cli {
namespace {

constexpr std::string_view kPasteStart = "\x1b[200~", kPasteEnd = "\x1b[201~";
constexpr const char* kPasteModeOn = "\x1b[?2004h";
constexpr const char* kPasteModeOff = "\x1b[?2004l";
constexpr int kHistorySize = 1000;

// Pasted text as a message: a terminal sends its line ends as CR (tmux) or CR LF; they become
// LF, and the newlines that end the paste go (Enter sends it).
template <typename String>
String paste_text(const String& raw) {
  String text;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '\r') {
      text += raw[i];
    } else if (i + 1 == raw.size() || raw[i + 1] != '\n') {
      text += '\n';
    }
  }
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

// Waits for standard input to be readable. False when an interrupt beyond `handled` came first.
// The SIGINT may be delivered to any of the compute threads, so the wait polls the handler's
// counter rather than counting on read(2) failing with EINTR in this thread; and an interrupt
// that lands between two reads (while a reply or the prompt is printed) is not lost.
bool wait_for_input(int handled) {
  while (true) {
    pollfd fd{STDIN_FILENO, POLLIN, 0};
    const int ready = ::poll(&fd, 1, 100);
    if (g_num_interrupts.load() != handled) return false;
    if (ready > 0) return true;
  }
}

bool wants_paste_mode() {
  const char* term = std::getenv("TERM");
  return isatty(STDIN_FILENO) != 0 && isatty(STDOUT_FILENO) != 0 &&
         (term == nullptr || std::string_view(term) != "dumb");
}

// Standard input read as it comes: a pipe, or a terminal libedit cannot drive.
class PlainInput final : public ChatInput {
 public:
  PlainInput() : paste_mode_(wants_paste_mode()) {
    if (paste_mode_) std::fputs(kPasteModeOn, stdout);
  }
  ~PlainInput() override {
    if (paste_mode_) std::fputs(kPasteModeOff, stdout);
    std::fflush(stdout);
  }

  Status read(std::string& line, const char* prompt, int handled) override {
    if (*prompt != '\0') std::fputs(prompt, stdout);
    std::fflush(stdout);
    bool at_eof = false;
    while (!take(line, at_eof)) {
      if (at_eof) return Status::kEof;
      if (!wait_for_input(handled)) return Status::kInterrupted;
      char chunk[4096];
      const ssize_t n = ::read(STDIN_FILENO, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) at_eof = true;
      if (n > 0) buffer_.append(chunk, static_cast<size_t>(n));
    }
    return Status::kLine;
  }

 private:
  // The first message of the buffer, when it is complete: up to a newline outside any paste
  // (or the end of input). A paste's own newlines belong to the message.
  bool take(std::string& line, bool at_eof) {
    std::string text;
    size_t i = 0;
    while (i < buffer_.size()) {
      if (buffer_.compare(i, kPasteStart.size(), kPasteStart) == 0) {
        const size_t begin = i + kPasteStart.size();
        const size_t end = buffer_.find(kPasteEnd, begin);
        if (end == std::string::npos && !at_eof) return false;
        const size_t stop = end == std::string::npos ? buffer_.size() : end;
        text += paste_text(buffer_.substr(begin, stop - begin));
        i = end == std::string::npos ? stop : end + kPasteEnd.size();
        continue;
      }
      if (buffer_[i] == '\n') {
        if (!text.empty() && text.back() == '\r') text.pop_back();
        line = std::move(text);
        buffer_.erase(0, i + 1);
        return true;
      }
      text += buffer_[i++];
    }
    if (!at_eof || buffer_.empty()) return false;
    line = std::move(text);  // a last line without its newline
    buffer_.clear();
    return true;
  }

  const bool paste_mode_;
  std::string buffer_;
};

// libedit in emacs mode: arrows, history (Up, Down, Ctrl-R), the usual Ctrl keys.
class EditorInput final : public ChatInput {
 public:
  explicit EditorInput(std::string history_file) : history_file_(std::move(history_file)) {
    editor_ = el_init("pagoda", stdin, stdout, stderr);
    history_ = history_init();
    HistEvent event;
    history(history_, &event, H_SETSIZE, kHistorySize);
    history(history_, &event, H_SETUNIQUE, 1);
    if (!history_file_.empty()) history(history_, &event, H_LOAD, history_file_.c_str());
    el_set(editor_, EL_EDITOR, "emacs");
    el_set(editor_, EL_CLIENTDATA, this);
    el_set(editor_, EL_PROMPT, &EditorInput::prompt_text);
    el_set(editor_, EL_HIST, history, history_);
    el_wset(editor_, EL_GETCFN, &EditorInput::read_char);
    el_set(editor_, EL_ADDFN, "pagoda-paste", "Take a bracketed paste as text",
           &EditorInput::paste);
    el_set(editor_, EL_BIND, "\\e[200~", "pagoda-paste", nullptr);
    el_set(editor_, EL_BIND, "^R", "em-inc-search-prev", nullptr);
    std::fputs(kPasteModeOn, stdout);
    std::fflush(stdout);
  }
  ~EditorInput() override {
    std::fputs(kPasteModeOff, stdout);
    std::fflush(stdout);
    el_end(editor_);
    history_end(history_);
  }

  Status read(std::string& line, const char* prompt, int handled) override {
    prompt_ = prompt;
    handled_ = handled;
    int count = 0;
    const char* text = el_gets(editor_, &count);
    if (g_num_interrupts.load() != handled) {
      el_reset(editor_);  // drop the half-typed line
      return Status::kInterrupted;
    }
    if (text == nullptr || count <= 0) return Status::kEof;
    line = text;
    if (!line.empty() && line.back() == '\n') line.pop_back();
    remember(line);
    return Status::kLine;
  }

 private:
  void remember(const std::string& line) {
    if (line.find_first_not_of(" \t\n") == std::string::npos) return;
    HistEvent event;
    history(history_, &event, H_ENTER, line.c_str());
    if (history_file_.empty()) return;
    std::error_code ignored;
    std::filesystem::create_directories(std::filesystem::path(history_file_).parent_path(),
                                        ignored);
    if (history(history_, &event, H_SAVE, history_file_.c_str()) < 0 && !warned_) {
      std::fprintf(stderr, "warning: cannot write the history file %s\n", history_file_.c_str());
      warned_ = true;
    }
  }

  static EditorInput& self(EditLine* editor) {
    void* data = nullptr;
    el_get(editor, EL_CLIENTDATA, &data);
    return *static_cast<EditorInput*>(data);
  }

  static char* prompt_text(EditLine* editor) { return const_cast<char*>(self(editor).prompt_); }

  // One character of UTF-8 from the terminal; -1 (an error to libedit, which then returns from
  // el_gets) once a Ctrl-C is pending, so the chat sees it at once.
  static int read_char(EditLine* editor, wchar_t* out) {
    const int handled = self(editor).handled_;
    unsigned char bytes[4];
    int have = 0, need = 1;
    while (have < need) {
      if (!wait_for_input(handled)) {
        errno = EINTR;
        return -1;
      }
      const ssize_t n = ::read(STDIN_FILENO, bytes + have, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return have == 0 ? 0 : -1;
      if (have++ == 0) need = bytes[0] < 0x80 ? 1 : bytes[0] >= 0xF0 ? 4 : bytes[0] >= 0xE0 ? 3 : 2;
    }
    wchar_t c = need == 1 ? bytes[0] : bytes[0] & (0x7F >> need);
    for (int i = 1; i < need; ++i) c = (c << 6) | (bytes[i] & 0x3F);
    *out = c;
    return 1;
  }

  // Bound to "\e[200~": everything up to "\e[201~" goes into the line as it is, newlines too.
  static unsigned char paste(EditLine* editor, int) {
    const std::wstring end(kPasteEnd.begin(), kPasteEnd.end());
    std::wstring raw;
    wchar_t c = 0;
    while (el_wgetc(editor, &c) == 1) {
      raw += c;
      if (raw.size() >= end.size() && raw.compare(raw.size() - end.size(), end.size(), end) == 0) {
        raw.resize(raw.size() - end.size());
        break;
      }
    }
    el_winsertstr(editor, paste_text(raw).c_str());
    return CC_REFRESH;
  }

  const std::string history_file_;
  EditLine* editor_ = nullptr;
  History* history_ = nullptr;
  const char* prompt_ = "";
  int handled_ = 0;
  bool warned_ = false;
};

// libedit works in wide characters and converts with the C library: it needs a UTF-8 LC_CTYPE,
// which a bare environment ("C") does not give.
void use_utf8_ctype() {
  std::setlocale(LC_CTYPE, "");
  if (MB_CUR_MAX == 1) std::setlocale(LC_CTYPE, "C.UTF-8");
}

}  // namespace

std::string default_history_file() {
  const char* state = std::getenv("XDG_STATE_HOME");
  if (state != nullptr && *state != '\0') return std::string(state) + "/pagoda/history";
  const char* home = std::getenv("HOME");
  if (home != nullptr && *home != '\0') return std::string(home) + "/.local/state/pagoda/history";
  return "";
}

std::unique_ptr<ChatInput> make_chat_input(const std::string& history_file) {
  const char* term = std::getenv("TERM");
  const bool full_terminal = isatty(STDIN_FILENO) != 0 && isatty(STDOUT_FILENO) != 0 &&
                             term != nullptr && *term != '\0' && std::string_view(term) != "dumb";
  if (!full_terminal) return std::make_unique<PlainInput>();
  use_utf8_ctype();
  return std::make_unique<EditorInput>(history_file);
}

}  // namespace pagoda::cli
