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
// Syntax kHarmony (gpt-oss): the output is a run of messages, each a header naming its channel
// (and for a tool call its recipient), <|message|>, a body, and <|end|> (or <|call|>,
// <|return|>, which end the generation):
//   <|channel|>analysis<|message|>...<|end|><|start|>assistant<|channel|>final<|message|>...
// analysis bodies are reasoning; final bodies, commentary preambles and bodies of any other
// channel are content; a message to functions.NAME becomes content in the one form the harmony
// tool-call parser reads (server/tool_calls.h): "to=functions.NAME<|message|>ARGS<|call|>".
// The markers themselves are never content. An output that does not open with a header is
// all content; from a header that is not one on, the text is content as written; a header the
// end of the output cuts off is dropped (it is structure, not text); a body without its end
// marker goes to its channel to the end. See reasoning_harmony.cc.
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

enum class ReasoningSyntax { kNone, kThinkTags, kHarmony };

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

// The base of the parsers that hold fed text back and take what they can from its front, one
// step at a time (think tags, harmony).
class SteppingReasoningParser : public ReasoningParser {
 public:
  ReasoningParts feed(std::string_view text) final {
    held_ += text;
    return drain();
  }

 protected:
  // Moves what can go now from the front of held_ into `out`; false when nothing more can.
  virtual bool step(ReasoningParts& out) = 0;
  ReasoningParts drain() {
    ReasoningParts out;
    while (step(out)) {
    }
    return out;
  }
  std::string held_;  // fed, not yet returned
};

// A parser for `syntax` (kNone: everything is content). `starts_inside`: the prompt opened the
// thinking (its text ends with the opening tag).
std::unique_ptr<ReasoningParser> make_reasoning_parser(ReasoningSyntax syntax, bool starts_inside);

// The kHarmony parser (reasoning_harmony.cc); make_reasoning_parser gives it for kHarmony.
std::unique_ptr<ReasoningParser> make_harmony_parser(bool starts_inside);

// True when a rendered chat prompt leaves the model inside its thinking: it ends (spaces aside)
// with the syntax's opening tag (harmony: "<|channel|>analysis<|message|>").
bool prompt_opens_thinking(ReasoningSyntax syntax, std::string_view prompt);

// The text a thinking budget forces when it is spent: the closing tag with the line breaks a
// model writes around it; harmony: the analysis message's <|end|> and the final message's header.
std::string_view thinking_end_text(ReasoningSyntax syntax);

}  // namespace pagoda
