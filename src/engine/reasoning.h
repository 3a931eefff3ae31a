// The thinking of reasoning models, split from their answer as the text streams.
//
// A ReasoningParser takes a choice's text piece by piece and returns each piece's reasoning and
// content. The server keeps one per choice (message.reasoning_content, thinking blocks,
// Ollama's message.thinking); the engine keeps one per sequence to count thinking tokens for a
// budget (ThinkingBudget below). It lives in engine/ because the engine needs it and the server
// sits above the engine.
//
// Syntax kThinkTags (Qwen3, Qwen3.5, DeepSeek-R1 and its distills, QwQ): the output opens with
// <think>, thinks, writes </think>, then answers. A template that ends its generation prompt
// with <think> starts the output inside the thinking (starts_inside). Thinking is recognised
// only at the start of the output (after spaces): text before a <think> makes the whole output
// content, so an answer that talks about the tag stays an answer. Without a closing tag every
// byte after <think> is reasoning. The reasoning is trimmed of surrounding whitespace and the
// content of the whitespace after </think>.
//
// Streaming: feed() holds back only what may still be part of a tag, plus whitespace that the
// trimming may drop, so feeding a text in any pieces gives the same parts as feeding it whole.
//
// Other syntaxes (gpt-oss's harmony channels: analysis -> reasoning, final -> content,
// commentary -> content for the tool-call parser) implement the same interface.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace pagoda {

struct ReasoningParts {
  std::string reasoning;
  std::string content;
  bool empty() const { return reasoning.empty() && content.empty(); }
};

enum class ReasoningSyntax { kNone, kThinkTags };

class ReasoningParser {
 public:
  virtual ~ReasoningParser() = default;
  // The parts of `text` (appended to what came before) that can be sent now.
  virtual ReasoningParts feed(std::string_view text) = 0;
  // At the end of the output: whatever was held back.
  virtual ReasoningParts finish() = 0;
  // True while the text fed so far ends inside the thinking.
  virtual bool thinking() const = 0;
};

// A parser for `syntax` (kNone: everything is content). `starts_inside`: the prompt opened the
// thinking (its text ends with the opening tag).
std::unique_ptr<ReasoningParser> make_reasoning_parser(ReasoningSyntax syntax, bool starts_inside);

// True when a rendered chat prompt leaves the model inside its thinking: it ends (spaces aside)
// with the syntax's opening tag.
bool prompt_opens_thinking(ReasoningSyntax syntax, std::string_view prompt);

// The text a thinking budget forces when it is spent: the closing tag with the line breaks a
// model writes around it.
std::string_view thinking_end_text(ReasoningSyntax syntax);

}  // namespace pagoda
