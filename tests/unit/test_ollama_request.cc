// Ollama's /api/chat and /api/generate bodies translated onto the OpenAI ones (no model needed):
// options under their OpenAI names, what is refused by name, format, tool calls, raw generate,
// the model name with its tag, and the load request.
#include <gtest/gtest.h>

#include "server/ollama_api.h"

namespace pagoda::server {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

ModelContext served() {
  ModelContext m;
  m.name = "smol";
  m.aliases = {"smol.gguf"};
  m.max_model_len = 1024;
  return m;
}

ordered_json translate(const json& body, bool generate = false, bool* raw_out = nullptr) {
  bool raw = false;
  const ordered_json out =
      ollama_to_openai(body, ordered_json::parse(body.dump()), served(), generate, &raw);
  if (raw_out != nullptr) *raw_out = raw;
  return out;
}

json chat_body(const json& extra = json::object()) {
  json body = {{"model", "smol"}, {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
  body.update(extra);
  return body;
}

// The ApiError's message when `body` is refused; "" when it is not.
std::string refusal(const json& body, bool generate = false) {
  try {
    translate(body, generate);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    return e.what();
  }
  return "";
}

TEST(OllamaRequest, OptionsTakeTheirOpenAINames) {
  const ordered_json out = translate(chat_body(
      {{"options", {{"temperature", 0.5}, {"top_k", 3}, {"top_p", 0.9}, {"min_p", 0.1},
                    {"seed", 7}, {"num_predict", 12}, {"stop", {"x"}}, {"repeat_penalty", 1.3},
                    {"presence_penalty", 0.2}, {"num_ctx", 512}}}}));
  EXPECT_EQ(out["temperature"], 0.5);
  EXPECT_EQ(out["top_k"], 3);
  EXPECT_EQ(out["min_p"], 0.1);
  EXPECT_EQ(out["seed"], 7);
  EXPECT_EQ(out["max_tokens"], 12);
  EXPECT_EQ(out["stop"], ordered_json::array({"x"}));
  EXPECT_EQ(out["repetition_penalty"], 1.3);
  EXPECT_EQ(out["presence_penalty"], 0.2);
  EXPECT_FALSE(out.contains("num_ctx"));  // checked against the prompt after parsing
  EXPECT_EQ(out["model"], "smol");
  EXPECT_EQ(out["stream"], true);  // Ollama streams unless told not to
  EXPECT_EQ(out["messages"][0], (ordered_json{{"role", "user"}, {"content", "hi"}}));
}

TEST(OllamaRequest, UnlimitedNumPredictAndRepeatLastNZero) {
  EXPECT_FALSE(translate(chat_body({{"options", {{"num_predict", -1}}}})).contains("max_tokens"));
  EXPECT_FALSE(translate(chat_body({{"options", {{"num_predict", -2}}}})).contains("max_tokens"));
  const ordered_json off = translate(chat_body(
      {{"options", {{"repeat_penalty", 1.5}, {"frequency_penalty", 1.0}, {"repeat_last_n", 0}}}}));
  EXPECT_FALSE(off.contains("repetition_penalty"));
  EXPECT_FALSE(off.contains("frequency_penalty"));
  EXPECT_EQ(translate(chat_body({{"options", {{"repeat_penalty", 1.5}, {"repeat_last_n", -1}}}}))
                ["repetition_penalty"], 1.5);
}

TEST(OllamaRequest, WhatCannotBeHonouredIsRefusedByName) {
  EXPECT_NE(refusal(chat_body({{"options", {{"mirostat", 2}}}})).find("'options.mirostat'"),
            std::string::npos);
  EXPECT_NE(refusal(chat_body({{"options", {{"repeat_last_n", 64}}}})).find("repeat_last_n"),
            std::string::npos);
  EXPECT_NE(refusal(chat_body({{"options", {{"num_predict", 0}}}})).find("num_predict"),
            std::string::npos);
  EXPECT_NE(refusal(chat_body({{"think", true}})).find("'think'"), std::string::npos);  // no <think>
  EXPECT_NE(refusal(chat_body({{"think", "max"}})).find("'think'"), std::string::npos);
  EXPECT_EQ(translate(chat_body({{"think", false}}))["chat_template_kwargs"],
            (ordered_json{{"enable_thinking", false}}));
  EXPECT_EQ(refusal(chat_body({{"think", false}, {"keep_alive", "5m"}})), "");
  EXPECT_NE(refusal(chat_body({{"keep_alive", json::array()}})).find("keep_alive"), std::string::npos);
  EXPECT_NE(refusal(chat_body({{"suffix", "x"}})).find("'suffix'"), std::string::npos);
  EXPECT_NE(refusal({{"model", "smol"}, {"prompt", "p"}, {"suffix", "x"}}, true).find("suffix"),
            std::string::npos);
  EXPECT_NE(refusal({{"model", "smol"}, {"prompt", "p"}, {"context", {1, 2}}}, true).find("context"),
            std::string::npos);
  EXPECT_NE(refusal(chat_body({{"messages", json::array({{{"role", "user"}, {"content", "x"},
                                                          {"images", {"AAAA"}}}})}}))
                .find("images"),
            std::string::npos);
  // Empty is not given too.
  EXPECT_EQ(refusal(json::parse(R"({"model": "smol", "prompt": "p", "suffix": "", "images": []})"), true),
            "");
  // Nulls are "not given", as Go clients write them.
  EXPECT_EQ(refusal(chat_body({{"suffix", nullptr}, {"options", {{"mirostat", nullptr}}}})), "");
}

TEST(OllamaRequest, FormatBecomesResponseFormat) {
  EXPECT_EQ(translate(chat_body({{"format", "json"}}))["response_format"],
            (ordered_json{{"type", "json_object"}}));
  EXPECT_FALSE(translate(chat_body({{"format", std::string()}})).contains("response_format"));
  const std::string text =
      R"({"model": "smol", "messages": [{"role": "user", "content": "x"}],
          "format": {"type": "object", "properties": {"z": {"type": "string"}, "a": {"type": "integer"}}}})";
  bool raw = false;
  const ordered_json out =
      ollama_to_openai(json::parse(text), ordered_json::parse(text), served(), false, &raw);
  const ordered_json& schema = out["response_format"]["json_schema"]["schema"];
  EXPECT_EQ(schema["properties"].begin().key(), "z");  // the order written
  EXPECT_NE(refusal(chat_body({{"format", "xml"}})).find("'format'"), std::string::npos);
}

TEST(OllamaRequest, ToolCallsAndToolResultsTakeTheOpenAIShape) {
  const ordered_json out = translate(chat_body(
      {{"messages",
        json::array({{{"role", "user"}, {"content", "q"}},
                     {{"role", "assistant"},
                      {"tool_calls", json::array({{{"function", {{"name", "f"}, {"arguments", {{"a", 1}}}}}}})}},
                     {{"role", "tool"}, {"content", "42"}, {"tool_name", "f"}}})},
       {"tools", json::array({{{"type", "function"}, {"function", {{"name", "f"}}}}})}}));
  const ordered_json& call = out["messages"][1]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "f");
  EXPECT_EQ(call["function"]["arguments"], R"({"a":1})");
  EXPECT_EQ(out["messages"][1]["content"], "");
  EXPECT_EQ(out["messages"][2], (ordered_json{{"role", "tool"}, {"content", "42"}, {"name", "f"}}));
  EXPECT_EQ(out["tools"][0]["function"]["name"], "f");
  // The Python client sends an empty list for no tools.
  EXPECT_FALSE(translate(chat_body({{"tools", json::array()}})).contains("tools"));
}

TEST(OllamaRequest, GenerateIsAChatOrARawCompletion) {
  bool raw = true;
  const ordered_json chat =
      translate({{"model", "smol"}, {"prompt", "p"}, {"system", "s"}, {"stream", false}}, true, &raw);
  EXPECT_FALSE(raw);
  EXPECT_EQ(chat["messages"], (ordered_json::array({{{"role", "system"}, {"content", "s"}},
                                                   {{"role", "user"}, {"content", "p"}}})));
  EXPECT_EQ(chat["stream"], false);
  const ordered_json completion = translate(
      {{"model", "smol"}, {"prompt", "p"}, {"raw", true}, {"logprobs", true}, {"top_logprobs", 2}},
      true, &raw);
  EXPECT_TRUE(raw);
  EXPECT_EQ(completion["prompt"], "p");
  EXPECT_EQ(completion["logprobs"], 2);  // the completions path's one integer
  EXPECT_NE(refusal({{"model", "smol"}, {"prompt", "p"}, {"raw", true}, {"system", "s"}}, true)
                .find("'system'"),
            std::string::npos);
}

TEST(OllamaRequest, TheModelIsNamedAsOllamaNamesIt) {
  const ModelContext m = served();
  EXPECT_EQ(ollama_model_name({{"model", "smol"}}, m), "smol");
  EXPECT_EQ(ollama_model_name({{"model", "smol:latest"}}, m), "smol:latest");
  EXPECT_EQ(ollama_model_name({{"model", "smol.gguf:latest"}}, m), "smol.gguf:latest");
  try {
    ollama_model_name({{"model", "smol:7b"}}, m);
    FAIL() << "another tag was taken";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 404);
    EXPECT_EQ(ollama_error_json(e), (json{{"error", "model 'smol:7b' not found"}}));
  }
  EXPECT_THROW(ollama_model_name(json::object(), m), ApiError);
}

TEST(OllamaRequest, ALoadRequestHasNothingToGenerate) {
  EXPECT_TRUE(is_ollama_load_request({{"model", "smol"}}, false));
  EXPECT_TRUE(is_ollama_load_request({{"model", "smol"}, {"messages", json::array()}}, false));
  EXPECT_FALSE(is_ollama_load_request(chat_body(), false));
  EXPECT_TRUE(is_ollama_load_request(json::parse(R"({"model": "smol", "prompt": ""})"), true));
  EXPECT_FALSE(is_ollama_load_request(
      json::parse(R"({"model": "smol", "prompt": "", "system": "s"})"), true));
  EXPECT_FALSE(
      is_ollama_load_request(json::parse(R"({"model": "smol", "prompt": "", "raw": true})"), true));
}

}  // namespace
}  // namespace pagoda::server
