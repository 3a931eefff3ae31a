// Where `pagoda chat` reads its messages: a line editor (libedit: editing, history kept in a file,
// Ctrl-R search) on a full terminal, else plain reads of standard input (a pipe, or a terminal
// without TERM or with TERM=dumb). Both take a bracketed paste ("\e[200~ ... \e[201~", which a
// terminal sends around pasted text once the program turns the mode on) as one message, newlines
// and all.
#pragma once

#include <memory>
#include <string>

namespace pagoda::cli {

class ChatInput {
 public:
  enum class Status { kLine, kEof, kInterrupted };
  virtual ~ChatInput() = default;
  // Reads one line, or one whole paste (up to the Enter after it), showing `prompt` on a
  // terminal. A Ctrl-C ends the wait: any interrupt beyond the `handled` ones the caller has
  // acted on (g_num_interrupts) returns kInterrupted.
  virtual Status read(std::string& line, const char* prompt, int handled) = 0;
};

// The history file: $XDG_STATE_HOME/pagoda/history, else ~/.local/state/pagoda/history; empty
// when neither variable is set.
std::string default_history_file();

// The line editor when standard input and output are a terminal whose TERM names a full one;
// plain reads otherwise. `history_file` empty: history lives only as long as the session.
std::unique_ptr<ChatInput> make_chat_input(const std::string& history_file);

}  // namespace pagoda::cli
