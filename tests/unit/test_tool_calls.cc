// Function calling without a model: each format parsed into calls, text outside the calls kept,
// unknown functions and broken JSON left as content, the stream giving the whole text's calls
// however the text is cut, and the forcing grammar accepting exactly well-formed calls.
#include <gtest/gtest.h>

#include "grammar/gbnf.h"
#include "grammar/matcher.h"
#include "server/tool_calls.h"

namespace pagoda::server {
namespace {

using ojson = nlohmann::ordered_json;

std::vector<ToolSpec> tools() {
  ToolSpec weather{"get_weather", "weather", ojson::parse(R"({"type": "object",
      "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
      "required": ["city", "unit"], "additionalProperties": false})")};
  ToolSpec time{"get_time", "time", nullptr};
  return {weather, time};
}

TEST(ToolCalls, HermesBlocksWithTextAround) {
  const ParsedToolCalls p = parse_tool_calls(
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\", \"unit\": \"c\"}}\n</tool_call>\n<tool_call>{\"name\": \"get_time\", "
      "\"arguments\": {}}</tool_call>",
      ToolFormat::kHermes, tools());
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, R"({"city":"Paris","unit":"c"})");
  EXPECT_EQ(p.calls[1].name, "get_time");
  EXPECT_EQ(p.calls[1].arguments, "{}");
  EXPECT_EQ(p.content, "Let me check.");
  EXPECT_NE(p.calls[0].id, p.calls[1].id);
  EXPECT_EQ(p.calls[0].id.rfind("call_", 0), 0u);
}

TEST(ToolCalls, LlamaMistralAndPlainJson) {
  ParsedToolCalls p = parse_tool_calls(
      "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\", \"unit\": "
      "\"f\"}}; {\"name\": \"get_time\", \"parameters\": {}}",
      ToolFormat::kLlama3, tools());
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].arguments, R"({"city":"Oslo","unit":"f"})");
  p = parse_tool_calls("[TOOL_CALLS] [{\"name\": \"get_time\", \"arguments\": {}}]",
                       ToolFormat::kMistral, tools());
  ASSERT_EQ(p.calls.size(), 1u);
  // Plain JSON, in a fence, arguments given as JSON text.
  p = parse_tool_calls(
      "```json\n{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": "
      "\\\"Rome\\\", \\\"unit\\\": \\\"c\\\"}\"}\n```",
      ToolFormat::kJson, tools());
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, R"({"city":"Rome","unit":"c"})");
}

TEST(ToolCalls, WhatIsNotACallStaysContent) {
  for (const char* text : {"{\"name\": \"launch_rockets\", \"arguments\": {}}",  // unknown
                           "<tool_call>{\"name\": \"get_time\", \"arguments\": }</tool_call>",
                           "The answer is {\"a\": 1}", "Just text."}) {
    const ParsedToolCalls p = parse_tool_calls(text, ToolFormat::kHermes, tools());
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
}

TEST(ToolCalls, TheStreamGivesTheWholeTextsCallsWhereverItIsCut) {
  const std::vector<std::pair<ToolFormat, std::string>> cases = {
      {ToolFormat::kHermes,
       "Sure. <tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"},
      {ToolFormat::kJson,
       "  {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lima\", "
       "\"unit\": \"c\"}}"},
      {ToolFormat::kJson, "No call here, {\"x\": 1}."},
      {ToolFormat::kHermes, "Text with a < sign and <tool_ but no call."},
  };
  for (const auto& [format, text] : cases) {
    const std::vector<ToolSpec> specs = tools();
    const ParsedToolCalls whole = parse_tool_calls(text, format, specs);
    for (size_t piece : {1, 3, 7, 1000}) {
      ToolCallStream stream(format, &specs);
      std::string content;
      for (size_t i = 0; i < text.size(); i += piece) content += stream.feed(text.substr(i, piece));
      const ParsedToolCalls end = stream.finish();
      content += end.content;
      ASSERT_EQ(end.calls.size(), whole.calls.size()) << text << " in pieces of " << piece;
      for (size_t k = 0; k < end.calls.size(); ++k) {
        EXPECT_EQ(end.calls[k].name, whole.calls[k].name);
        EXPECT_EQ(end.calls[k].arguments, whole.calls[k].arguments);
      }
      if (whole.calls.empty()) {
        EXPECT_EQ(content, text);
      } else {
        EXPECT_EQ(content.find("tool_call"), std::string::npos);
      }
    }
  }
}

bool matches(const Grammar& g, const std::string& text) {
  return advance(g, initial_state(g), text).complete;
}

TEST(ToolCalls, TheForcingGrammarTakesOnlyWellFormedCalls) {
  const Grammar hermes = parse_gbnf(tool_call_gbnf(ToolFormat::kHermes, tools(), "", true));
  EXPECT_TRUE(matches(hermes,
                      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                      "{\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>"));
  EXPECT_TRUE(matches(hermes,
                      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n"
                      "</tool_call>\n<tool_call>\n{\"name\": \"get_time\", "
                      "\"arguments\": {\"x\": 1}}\n</tool_call>"));
  EXPECT_FALSE(matches(hermes,
                       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                       "{\"city\": \"Paris\", \"unit\": \"k\"}}\n</tool_call>"));
  EXPECT_FALSE(
      matches(hermes, "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>"));
  // Only the named function; one call without parallel calls.
  const Grammar one = parse_gbnf(tool_call_gbnf(ToolFormat::kJson, tools(), "get_time", false));
  EXPECT_TRUE(matches(one, "{\"name\": \"get_time\", \"arguments\": {}}"));
  EXPECT_FALSE(matches(one, "[{\"name\": \"get_time\", \"arguments\": {}}]"));
  EXPECT_FALSE(matches(
      one, "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"a\", \"unit\": \"c\"}}"));
  const Grammar llama = parse_gbnf(tool_call_gbnf(ToolFormat::kLlama3, tools(), "", true));
  EXPECT_TRUE(matches(llama,
                      "{\"name\": \"get_time\", \"parameters\": {}}; {\"name\": "
                      "\"get_time\", \"parameters\": {}}"));
}

TEST(ToolCalls, FormatFromTheTemplate) {
  EXPECT_EQ(tool_format_for_template("... <tool_call> ..."), ToolFormat::kHermes);
  EXPECT_EQ(tool_format_for_template("... [TOOL_CALLS] ..."), ToolFormat::kMistral);
  EXPECT_EQ(tool_format_for_template("... <|python_tag|> ..."), ToolFormat::kLlama3);
  EXPECT_EQ(tool_format_for_template("{{ messages }}"), ToolFormat::kJson);
  EXPECT_FALSE(template_renders_tools("{{ messages }}"));
  EXPECT_TRUE(template_renders_tools("{% if tools %}"));
}

}  // namespace
}  // namespace pagoda::server
