// gpt-oss's harmony messages split into reasoning and content, whole and in every piece size.
#include <gtest/gtest.h>

#include "engine/reasoning.h"
#include "unit/reasoning_test_util.h"

namespace pagoda {
namespace {

ReasoningParts run(std::string_view text, size_t size, bool inside) {
  return test::parse_in_pieces(ReasoningSyntax::kHarmony, text, size, inside);
}

// The whole text and every split into pieces of equal size give the same parts.
void expect_split(std::string_view text, std::string_view reasoning, std::string_view content,
                  bool inside = false) {
  for (size_t size = text.size() + 1; size >= 1; --size) {
    const ReasoningParts s = run(text, size, inside);
    EXPECT_EQ(s.reasoning, reasoning) << text << " in pieces of " << size;
    EXPECT_EQ(s.content, content) << text << " in pieces of " << size;
  }
}

TEST(HarmonyReasoning, AnalysisThenFinal) {
  expect_split("<|channel|>analysis<|message|>User greets. Reply.<|end|>"
               "<|start|>assistant<|channel|>final<|message|>Hello! How can I help?",
               "User greets. Reply.", "Hello! How can I help?");
}

TEST(HarmonyReasoning, FinalAloneAndReturnMarker) {
  expect_split("<|channel|>final<|message|>Just the answer.<|return|>", "", "Just the answer.");
}

TEST(HarmonyReasoning, TextAroundMarkersIsKeptExactly) {
  // Spaces and line breaks inside bodies are the model's text; '<' and '|' that begin no
  // marker too.
  expect_split("<|channel|>analysis<|message|>\n a < b || c <|x \n<|end|>"
               "<|start|>assistant<|channel|>final<|message|> x <| y < ",
               "\n a < b || c <|x \n", " x <| y < ");
}

TEST(HarmonyReasoning, SeveralAnalysisMessagesAndPreamble) {
  expect_split("<|channel|>analysis<|message|>one.<|end|>"
               "<|start|>assistant<|channel|>commentary<|message|>Let me check.<|end|>"
               "<|start|>assistant<|channel|>analysis<|message|> two.<|end|>"
               "<|start|>assistant<|channel|>final<|message|>Done",
               "one. two.", "Let me check.Done");
}

TEST(HarmonyReasoning, ToolCallInChannelHeader) {
  expect_split("<|channel|>analysis<|message|>Need weather.<|end|>"
               "<|start|>assistant<|channel|>commentary to=functions.get_weather "
               "<|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>",
               "Need weather.", "to=functions.get_weather<|message|>{\"city\": \"Paris\"}<|call|>");
}

TEST(HarmonyReasoning, ToolCallInRoleHeaderUnterminated) {
  // The recipient in the role header (as the template renders past calls); <|call|> stops the
  // generation and is not in the text: finish() closes the call.
  expect_split("<|start|>assistant to=functions.lookup<|channel|>commentary json<|message|>{}",
               "", "to=functions.lookup<|message|>{}<|call|>");
  expect_split(" to=functions.f<|channel|>commentary<|message|>{\"a\":1}", "",
               "to=functions.f<|message|>{\"a\":1}<|call|>");
}

TEST(HarmonyReasoning, NoHeaderIsAllContent) {
  expect_split("Plain answer, no channels.", "", "Plain answer, no channels.");
  expect_split("", "", "");
  expect_split("\n<|channel|>final<|message|>x", "", "\n<|channel|>final<|message|>x");
}

TEST(HarmonyReasoning, HeaderCutOffByTheEndIsDropped) {
  // max_tokens ended the output inside a header: no marker or channel name becomes content.
  expect_split("<|channel|>analysis<|message|>a<|end|><|start|>assistant<|chan", "a", "");
  expect_split("<|channel|>final", "", "");
  expect_split("<|channel|>final<|message|>b<|end|><|start|>assistant to=functions.f", "", "b");
}

TEST(HarmonyReasoning, BrokenHeaderIsContentAsWritten) {
  expect_split("<|channel|>analysis<|message|>a<|end|>oops<|channel|>final<|message|>b", "a",
               "oops<|channel|>final<|message|>b");
  expect_split("<|channel|>final{\"x\"}<|message|>b", "", "<|channel|>final{\"x\"}<|message|>b");
  const std::string long_header = "<|channel|>" + std::string(300, 'a');
  expect_split(long_header, "", long_header);
}

TEST(HarmonyReasoning, UnterminatedAnalysisIsReasoning) {
  expect_split("<|channel|>analysis<|message|>still thinking <|en", "still thinking <|en", "");
}

TEST(HarmonyReasoning, PromptOpensTheAnalysis) {
  const std::string prompt = "<|start|>user<|message|>Hi<|end|><|start|>assistant"
                             "<|channel|>analysis<|message|>";
  EXPECT_TRUE(prompt_opens_thinking(ReasoningSyntax::kHarmony, prompt));
  EXPECT_FALSE(prompt_opens_thinking(ReasoningSyntax::kHarmony, "<|start|>assistant"));
  expect_split("thinking<|end|><|start|>assistant<|channel|>final<|message|>answer", "thinking",
               "answer", true);
}

TEST(HarmonyReasoning, ThinkingStateFollowsTheAnalysis) {
  auto p = make_reasoning_parser(ReasoningSyntax::kHarmony, false);
  EXPECT_FALSE(p->thinking());
  p->feed("<|channel|>analysis<|mess");
  EXPECT_FALSE(p->thinking());
  p->feed("age|>x");
  EXPECT_TRUE(p->thinking());
  p->feed(std::string(thinking_end_text(ReasoningSyntax::kHarmony)));
  EXPECT_FALSE(p->thinking());
  const ReasoningParts d = p->feed("y");
  EXPECT_EQ(d.content, "y");
}

}  // namespace
}  // namespace pagoda
