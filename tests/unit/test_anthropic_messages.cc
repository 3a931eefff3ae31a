// The Messages API's translation onto a chat completions body (no model needed): blocks, tool
// use and results, tool_choice, stop sequences, what is refused, and Anthropic's error shape.
#include <gtest/gtest.h>

#include "server/anthropic_messages.h"

namespace pagoda::server {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

ordered_json translate(const json& body, bool count_only = false) {
  return messages_to_chat(body, ordered_json::parse(body.dump()), RequestLimits{}, count_only);
}

// The ApiError's message when `body` is refused; "" when it is not.
std::string refusal(const json& body) {
  try {
    translate(body);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    return e.what();
  }
  return "";
}

json user(const json& content) { return {{"role", "user"}, {"content", content}}; }

TEST(AnthropicMessages, SystemBlocksAndTextBecomeChatMessages) {
  const ordered_json chat = translate(
      {{"max_tokens", 5},
       {"system", json::array({{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}})},
       {"messages", json::array({user(json::array({{{"type", "text"}, {"text", "hi"}}}))})},
       {"stop_sequences", {"x"}},
       {"top_k", 3}});
  EXPECT_EQ(chat["messages"][0], (ordered_json{{"role", "system"}, {"content", "a\n\nb"}}));
  EXPECT_EQ(chat["messages"][1], (ordered_json{{"role", "user"}, {"content", "hi"}}));
  EXPECT_EQ(chat["stop"], ordered_json::array({"x"}));
  EXPECT_EQ(chat["max_tokens"], 5);
  EXPECT_EQ(chat["top_k"], 3);
}

TEST(AnthropicMessages, ToolUseAndResultsBecomeToolCallsAndToolMessages) {
  const json body = {
      {"max_tokens", 5},
      {"tools", json::array({{{"name", "f"}, {"input_schema", {{"type", "object"}}}}})},
      {"tool_choice", {{"type", "any"}, {"disable_parallel_tool_use", true}}},
      {"messages",
       json::array({user("q"),
                    {{"role", "assistant"},
                     {"content", json::array({{{"type", "tool_use"}, {"id", "toolu_1"},
                                               {"name", "f"}, {"input", {{"a", 1}}}}})}},
                    user(json::array({{{"type", "tool_result"}, {"tool_use_id", "toolu_1"},
                                       {"content", "42"}, {"is_error", true}},
                                      {{"type", "text"}, {"text", "and?"}}}))})}};
  const ordered_json chat = translate(body);
  const ordered_json& m = chat["messages"];
  ASSERT_EQ(m.size(), 4u);
  EXPECT_TRUE(m[1]["content"].is_null());
  EXPECT_EQ(m[1]["tool_calls"][0]["id"], "toolu_1");
  EXPECT_EQ(m[1]["tool_calls"][0]["function"]["arguments"], "{\"a\":1}");
  EXPECT_EQ(m[2], (ordered_json{{"role", "tool"}, {"tool_call_id", "toolu_1"}, {"content", "Error: 42"}}));
  EXPECT_EQ(m[3], (ordered_json{{"role", "user"}, {"content", "and?"}}));
  EXPECT_EQ(chat["tools"][0]["function"]["parameters"], (ordered_json{{"type", "object"}}));
  EXPECT_EQ(chat["tool_choice"], "required");
  EXPECT_EQ(chat["parallel_tool_calls"], false);
  json named = body;
  named["tool_choice"] = {{"type", "tool"}, {"name", "f"}};
  EXPECT_EQ(translate(named)["tool_choice"]["function"]["name"], "f");
}

TEST(AnthropicMessages, WhatCannotBeHonouredIsRefusedByName) {
  const json base = {{"max_tokens", 5}, {"messages", json::array({user("x")})}};
  auto with = [&](const char* key, const json& value) {
    json b = base;
    b[key] = value;
    return b;
  };
  EXPECT_NE(refusal(with("messages", json::array({user(json::array(
                {{{"type", "image"}, {"source", json::object()}}}))}))).find("'image'"),
            std::string::npos);
  // thinking reaches the template and the budget (a model that does not think refuses it when
  // the request is parsed against it).
  const ordered_json thinking = translate(with("thinking", {{"type", "enabled"}, {"budget_tokens", 9}}));
  EXPECT_EQ(thinking["chat_template_kwargs"], (ordered_json{{"enable_thinking", true}}));
  EXPECT_EQ(thinking["reasoning_budget"], 9);
  EXPECT_EQ(translate(with("thinking", {{"type", "disabled"}}))["chat_template_kwargs"],
            (ordered_json{{"enable_thinking", false}}));
  EXPECT_NE(refusal(with("thinking", {{"type", "enabled"}, {"budget_tokens", -1}})).find("budget_tokens"),
            std::string::npos);
  EXPECT_NE(refusal(with("thinking", {{"type", "adaptive"}})).find("thinking"), std::string::npos);
  EXPECT_NE(refusal(with("thinking", {{"type", "disabled"}, {"budget_tokens", 3}})).find("budget_tokens"),
            std::string::npos);
  EXPECT_NE(refusal(with("top_logprobs", 2)).find("'top_logprobs'"), std::string::npos);
  EXPECT_NE(refusal(with("temperature", 1.5)).find("temperature"), std::string::npos);
  EXPECT_NE(refusal(with("stop_sequences", {""})).find("stop_sequences"), std::string::npos);
  EXPECT_NE(refusal(with("tools", {{{"type", "bash_20250124"}, {"name", "bash"}}})).find("server tools"),
            std::string::npos);
  EXPECT_NE(refusal({{"messages", json::array({user("x")})}}).find("max_tokens"), std::string::npos);
  // count_tokens takes no max_tokens and no sampling.
  EXPECT_THROW(translate(base, /*count_only=*/true), ApiError);
  EXPECT_EQ(translate({{"messages", json::array({user("x")})}}, true)["max_tokens"], 1);
}

TEST(AnthropicMessages, ErrorsHaveAnthropicsShape) {
  const json e = anthropic_error_json(ApiError(404, "invalid_request_error", "no such model"));
  EXPECT_EQ(e["type"], "error");
  EXPECT_EQ(e["error"]["type"], "not_found_error");
  EXPECT_EQ(e["error"]["message"], "no such model");
  EXPECT_EQ(anthropic_error_json(ApiError(401, "x", "m"))["error"]["type"], "authentication_error");
  EXPECT_EQ(anthropic_error_json(ApiError(503, "x", "m"))["error"]["type"], "overloaded_error");
  EXPECT_EQ(anthropic_error_json(ApiError(400, "x", "m"))["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(is_messages_path("/v1/messages") && is_messages_path("/v1/messages/count_tokens"));
  EXPECT_FALSE(is_messages_path("/v1/messagesx"));
}

}  // namespace
}  // namespace pagoda::server
