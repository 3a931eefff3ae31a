// gpt-oss's tool calls: a harmony message to functions.NAME, through the harmony reasoning
// parser and the tool-call parser as the server chains them (reasoning first, then the calls in
// the content), whole and streamed in every piece size; the raw harmony text
// (--reasoning-format none) too; and the grammar that forces a call.
#include <gtest/gtest.h>

#include "engine/reasoning.h"
#include "grammar/gbnf.h"
#include "grammar/matcher.h"
#include "server/tool_calls.h"

namespace pagoda::server {
namespace {

using ojson = nlohmann::ordered_json;

std::vector<ToolSpec> tools() {
  ToolSpec weather{"get_weather", "weather", ojson::parse(R"({"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"],
      "additionalProperties": false})")};
  ToolSpec time{"get_time", "time", nullptr};
  return {weather, time};
}

struct Chat {
  std::string reasoning, content;
  std::vector<ToolCall> calls;
};

// The output fed in pieces of `size` through the reasoning parser, its content through the
// tool-call stream, as a chat stream is.
Chat stream(std::string_view text, size_t size, const std::vector<ToolSpec>& specs) {
  auto parser = make_reasoning_parser(ReasoningSyntax::kHarmony, false);
  ToolCallStream calls(ToolFormat::kHarmony, &specs);
  Chat out;
  for (size_t at = 0; at <= text.size(); at += size) {
    const bool last = at + size > text.size();
    ReasoningParts parts = parser->feed(text.substr(at, size));
    if (last) {
      ReasoningParts rest = parser->finish();
      parts.reasoning += rest.reasoning;
      parts.content += rest.content;
    }
    out.reasoning += parts.reasoning;
    ParsedToolCalls p = calls.step(parts.content, last);
    out.content += p.content;
    for (ToolCall& c : p.calls) out.calls.push_back(std::move(c));
  }
  return out;
}

void expect_chat(std::string_view text, std::string_view reasoning, std::string_view content,
                 const std::vector<std::pair<std::string, std::string>>& calls) {
  const std::vector<ToolSpec> specs = tools();
  for (size_t size = text.size() + 1; size >= 1; --size) {
    const Chat c = stream(text, size, specs);
    EXPECT_EQ(c.reasoning, reasoning) << text << " in pieces of " << size;
    EXPECT_EQ(c.content, content) << text << " in pieces of " << size;
    ASSERT_EQ(c.calls.size(), calls.size()) << text << " in pieces of " << size;
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(c.calls[i].name, calls[i].first);
      EXPECT_EQ(c.calls[i].arguments, calls[i].second);
    }
  }
}

TEST(HarmonyToolCalls, AnalysisThenCall) {
  expect_chat("<|channel|>analysis<|message|>Need the weather.<|end|>"
              "<|start|>assistant<|channel|>commentary to=functions.get_weather "
              "<|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>",
              "Need the weather.", "", {{"get_weather", R"({"city":"Paris"})"}});
}

TEST(HarmonyToolCalls, RecipientInTheRoleHeaderAndNoEndMarker) {
  expect_chat("<|channel|>analysis<|message|>x<|end|><|start|>assistant to=functions.get_time"
              "<|channel|>commentary json<|message|>{}",
              "x", "", {{"get_time", "{}"}});
}

TEST(HarmonyToolCalls, PreambleStaysContent) {
  expect_chat("<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant"
              "<|channel|>commentary to=functions.get_time<|message|>{}<|call|>",
              "", "Checking.", {{"get_time", "{}"}});
}

TEST(HarmonyToolCalls, WhatIsNotACallStaysContentAndNothingIsLost) {
  // An unknown function, broken arguments: the message stays as the parser wrote it.
  expect_chat("<|channel|>commentary to=functions.launch<|message|>{}<|call|>", "",
              "to=functions.launch<|message|>{}<|call|>", {});
  expect_chat("<|channel|>commentary to=functions.get_time<|message|>{\"a\": <|call|>", "",
              "to=functions.get_time<|message|>{\"a\": <|call|>", {});
  // A final answer that mentions the marker's words is an answer.
  expect_chat("<|channel|>final<|message|>Write to=functions. in a header.", "",
              "Write to=functions. in a header.", {});
}

TEST(HarmonyToolCalls, RawHarmonyTextParses) {
  // --reasoning-format none: no reasoning parser, the generated text as it came.
  const std::string raw =
      "<|channel|>analysis<|message|>hm<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}";
  const ParsedToolCalls p = parse_tool_calls(raw, ToolFormat::kHarmony, tools());
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, R"({"city":"Oslo"})");
  EXPECT_EQ(p.content, "<|channel|>analysis<|message|>hm<|end|><|start|>assistant"
                       "<|channel|>commentary");
}

bool matches(const Grammar& g, const std::string& text) {
  return advance(g, initial_state(g), text).complete;
}

TEST(HarmonyToolCalls, TheForcingGrammarTakesACallAfterAnOptionalAnalysis) {
  const Grammar g = parse_gbnf(tool_call_gbnf(ToolFormat::kHarmony, tools(), "", true));
  const std::string call = "<|channel|>commentary to=functions.get_weather <|constrain|>json"
                           "<|message|>{\"city\": \"Rome\"}";
  EXPECT_TRUE(matches(g, call));
  EXPECT_TRUE(matches(g, "<|channel|>analysis<|message|>a < b<|end|><|start|>assistant" + call));
  EXPECT_FALSE(matches(g, "<|channel|>final<|message|>hi"));
  EXPECT_FALSE(matches(g, "<|channel|>commentary to=functions.get_weather <|constrain|>json"
                          "<|message|>{\"town\": \"Rome\"}"));
  const Grammar one = parse_gbnf(tool_call_gbnf(ToolFormat::kHarmony, tools(), "get_time", false));
  EXPECT_FALSE(matches(one, call));
  EXPECT_TRUE(matches(one, "<|channel|>commentary to=functions.get_time <|constrain|>json"
                           "<|message|>{}"));
  // What the grammar forces is a call to the parsers.
  auto parser = make_reasoning_parser(ReasoningSyntax::kHarmony, false);
  ReasoningParts parts = parser->feed(call);
  parts.content += parser->finish().content;
  EXPECT_EQ(parse_tool_calls(parts.content, ToolFormat::kHarmony, tools()).calls.size(), 1u);
}

TEST(HarmonyToolCalls, FormatFromTheTemplate) {
  EXPECT_EQ(tool_format_for_template("<|start|>assistant<|channel|>final<|message|>"),
            ToolFormat::kHarmony);
}

}  // namespace
}  // namespace pagoda::server
