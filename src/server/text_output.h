// The text of one choice as it streams: tokens become UTF-8 text through a StreamDecoder (never
// splitting a character), and stop strings are caught even when they span tokens. Text that
// could be the start of a stop string is held back until the next token settles it, so nothing
// sent to a client is ever taken back and a stop string is never sent.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace pagoda::server {

class TextOutput {
 public:
  // `prompt`: the tokens the output continues; the text is that of prompt + output minus the
  // prompt's (see StreamDecoder::continue_after).
  TextOutput(const Tokenizer& tokenizer, std::vector<std::string> stop,
             std::span<const TokenId> prompt = {});

  // Adds a token; returns the text now safe to send (possibly empty). After a stop string is
  // found, stopped() is true and further tokens are ignored.
  std::string feed(TokenId token);
  // The end of the output: returns whatever was held back (an unfinished character becomes
  // U+FFFD), unless a stop string was found.
  std::string finish();

  bool stopped() const { return stopped_; }
  const std::string& text() const { return sent_; }  // everything returned so far
  // The stop string that ended the output (empty when none did).
  const std::string& matched_stop() const { return matched_; }

 private:
  std::string release(std::string text);
  // Where the earliest stop string starts in `text`, or npos; records which one in matched_.
  size_t find_stop(const std::string& text);

  StreamDecoder decoder_;
  std::vector<std::string> stop_;
  std::string held_;  // decoded, not yet sent: could begin a stop string
  std::string sent_;
  std::string matched_;
  bool stopped_ = false;
};

// The longest suffix of `text` that is a proper prefix of one of `stop` (its length).
size_t stop_prefix_length(const std::string& text, const std::vector<std::string>& stop);

}  // namespace pagoda::server
