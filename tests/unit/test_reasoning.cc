// The reasoning parser: thinking split from the answer, whole or streamed in any pieces.
#include <gtest/gtest.h>

#include "engine/reasoning.h"
#include "unit/reasoning_test_util.h"

namespace pagoda {
namespace {

ReasoningParts whole(std::string_view text, bool inside = false) {
  auto p = make_reasoning_parser(ReasoningSyntax::kThinkTags, inside);
  ReasoningParts out = p->feed(text);
  ReasoningParts rest = p->finish();
  out.reasoning += rest.reasoning;
  out.content += rest.content;
  return out;
}

// Fed in pieces of `size` bytes; checks nothing is sent that the whole text does not hold.
ReasoningParts pieces(std::string_view text, size_t size, bool inside = false) {
  return test::parse_in_pieces(ReasoningSyntax::kThinkTags, text, size, inside);
}

void expect_split(std::string_view text, std::string_view reasoning, std::string_view content,
                  bool inside = false) {
  const ReasoningParts w = whole(text, inside);
  EXPECT_EQ(w.reasoning, reasoning) << text;
  EXPECT_EQ(w.content, content) << text;
  for (size_t size = 1; size <= text.size(); ++size) {
    const ReasoningParts s = pieces(text, size, inside);
    EXPECT_EQ(s.reasoning, reasoning) << text << " in pieces of " << size;
    EXPECT_EQ(s.content, content) << text << " in pieces of " << size;
  }
}

TEST(Reasoning, ThinkingThenAnswer) {
  expect_split("<think>\nLet me add.\n</think>\n\nFour.", "Let me add.", "Four.");
}

TEST(Reasoning, TagsSplitAcrossPieces) {
  // Every piece size from one byte cuts the tags somewhere (checked in expect_split).
  expect_split("<think>a < b and </thin is not a tag</think>yes", "a < b and </thin is not a tag",
               "yes");
}

TEST(Reasoning, PromptOpensTheThinking) {
  expect_split("I should answer.\n</think>\n\nHello", "I should answer.", "Hello", true);
}

TEST(Reasoning, NoClosingTagIsAllReasoning) {
  expect_split("<think>still thinking when cut off ", "still thinking when cut off", "");
  expect_split("thinking, cut off", "thinking, cut off", "", true);
}

TEST(Reasoning, TextBeforeTheTagIsAllContent) {
  expect_split("Use <think>tags</think> like this", "", "Use <think>tags</think> like this");
}

TEST(Reasoning, NoThinkingIsContent) {
  expect_split("Hello there", "", "Hello there");
  expect_split("  <thin", "", "  <thin");  // the start of a tag that never came
  expect_split("<", "", "<");
}

TEST(Reasoning, EmptyThinking) {
  expect_split("<think>\n\n</think>\n\nAnswer", "", "Answer");
}

TEST(Reasoning, ToolCallAfterThinkingIsContent) {
  // The tool-call parser reads the content; a call after the thinking reaches it whole.
  expect_split("<think>call the tool</think>\n<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
               "call the tool", "<tool_call>\n{\"name\": \"f\"}\n</tool_call>");
}

TEST(Reasoning, HoldsOnlyWhatMayBeATag) {
  auto p = make_reasoning_parser(ReasoningSyntax::kThinkTags, false);
  EXPECT_TRUE(p->feed("<th").empty());  // may be <think>
  EXPECT_FALSE(p->thinking());
  EXPECT_TRUE(p->feed("ink>").empty());
  EXPECT_TRUE(p->thinking());
  EXPECT_EQ(p->feed("abc</").reasoning, "abc");  // "</" may close it
  EXPECT_EQ(p->feed("x").reasoning, "</x");
  EXPECT_EQ(p->feed("</think>A").content, "A");
  EXPECT_FALSE(p->thinking());
}

TEST(Reasoning, NoSyntaxIsContent) {
  auto p = make_reasoning_parser(ReasoningSyntax::kNone, false);
  EXPECT_EQ(p->feed("<think>x</think>").content, "<think>x</think>");
}

TEST(Reasoning, PromptOpensThinking) {
  EXPECT_TRUE(prompt_opens_thinking(ReasoningSyntax::kThinkTags, "<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_opens_thinking(ReasoningSyntax::kThinkTags,
                                     "<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_thinking(ReasoningSyntax::kThinkTags, "<|im_start|>assistant\n"));
  EXPECT_FALSE(prompt_opens_thinking(ReasoningSyntax::kNone, "<think>\n"));
}

}  // namespace
}  // namespace pagoda
