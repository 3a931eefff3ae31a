// The Responses API without a model: the store's bounds (count, bytes, least recently used out
// first), and a request's input items and fields translated onto a chat completions body.
#include <gtest/gtest.h>

#include "server/responses_api.h"

namespace pagoda::server {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

StoredResponse sized(size_t text_bytes) {
  StoredResponse r;
  r.response = {{"id", "x"}};
  r.conversation = ordered_json::array({{{"role", "user"}, {"content", std::string(text_bytes, 'a')}}});
  return r;
}

TEST(ResponseStore, KeepsAtMostItsCountLeastRecentlyUsedOutFirst) {
  ResponseStore store(3, 1 << 20);
  for (const char* id : {"a", "b", "c"}) ASSERT_TRUE(store.put(id, sized(10)));
  ASSERT_TRUE(store.get("a"));  // a is now the most recently used: b goes next
  ASSERT_TRUE(store.put("d", sized(10)));
  EXPECT_EQ(store.size(), 3u);
  EXPECT_FALSE(store.get("b"));
  for (const char* id : {"a", "c", "d"}) EXPECT_TRUE(store.get(id)) << id;
}

TEST(ResponseStore, KeepsAtMostItsBytes) {
  const size_t one = sized(1000).bytes();
  ResponseStore store(100, 3 * one);
  for (const char* id : {"a", "b", "c", "d"}) ASSERT_TRUE(store.put(id, sized(1000)));
  EXPECT_EQ(store.size(), 3u);
  EXPECT_LE(store.bytes(), 3 * one);
  EXPECT_FALSE(store.get("a"));
  // One larger than the whole bound is not kept, and evicts nothing.
  EXPECT_FALSE(store.put("huge", sized(4 * one)));
  EXPECT_EQ(store.size(), 3u);
  EXPECT_FALSE(store.get("huge"));
}

TEST(ResponseStore, EraseAndReplace) {
  ResponseStore store(4, 1 << 20);
  ASSERT_TRUE(store.put("a", sized(10)));
  ASSERT_TRUE(store.put("a", sized(20)));
  EXPECT_EQ(store.size(), 1u);
  EXPECT_EQ(store.bytes(), sized(20).bytes());
  EXPECT_TRUE(store.erase("a"));
  EXPECT_FALSE(store.erase("a"));
  EXPECT_EQ(store.bytes(), 0u);
  ResponseStore none(0, 1 << 20);
  EXPECT_FALSE(none.enabled());
  EXPECT_FALSE(none.put("a", sized(1)));
}

TEST(ResponseStore, IdsAreRandomAndLong) {
  const std::string a = ResponseStore::new_id(), b = ResponseStore::new_id();
  EXPECT_EQ(a.size(), 5u + 48u);
  EXPECT_EQ(a.rfind("resp_", 0), 0u);
  EXPECT_NE(a, b);
}

ordered_json translate(const std::string& body, ResponseStore& store, ResponsesInput& in) {
  return responses_to_chat(json::parse(body), ordered_json::parse(body), store, in);
}

std::string param_of(const std::string& body) {
  ResponseStore store(4, 1 << 20);
  ResponsesInput in;
  try {
    translate(body, store, in);
  } catch (const ApiError& e) {
    return e.param();
  }
  return "(accepted)";
}

TEST(ResponsesToChat, ItemsBecomeMessagesAndCallsJoinTheAssistantTurn) {
  ResponseStore store(4, 1 << 20);
  ResponsesInput in;
  const ordered_json chat = translate(R"({
    "instructions": "Be brief.", "max_output_tokens": 9,
    "input": [{"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
              {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me see."}]},
              {"type": "function_call", "call_id": "call_1", "name": "w", "arguments": "{\"c\":1}"},
              {"type": "function_call", "call_id": "call_2", "name": "w", "arguments": "{}"},
              {"type": "reasoning", "id": "rs_1", "summary": []},
              {"type": "function_call_output", "call_id": "call_1", "output": "Sunny"}]})",
                                      store, in);
  const ordered_json& m = chat["messages"];
  ASSERT_EQ(m.size(), 4u) << m.dump();
  EXPECT_EQ(m[0], (ordered_json{{"role", "system"}, {"content", "Be brief."}}));
  EXPECT_EQ(m[1]["content"][0]["text"], "Weather?");
  EXPECT_EQ(m[2]["content"][0]["text"], "Let me see.");
  ASSERT_EQ(m[2]["tool_calls"].size(), 2u);
  EXPECT_EQ(m[2]["tool_calls"][1]["id"], "call_2");
  EXPECT_EQ(m[3], (ordered_json{{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "Sunny"}}));
  EXPECT_EQ(chat["max_tokens"], 9);
  // Instructions are not part of the conversation a later response continues.
  EXPECT_EQ(in.conversation.size(), 3u);
  EXPECT_EQ(in.echo["instructions"], "Be brief.");
}

TEST(ResponsesToChat, PreviousResponseComesFirst) {
  ResponseStore store(4, 1 << 20);
  StoredResponse before;
  before.conversation = ordered_json::array({{{"role", "user"}, {"content", "Hi"}},
                                             {{"role", "assistant"}, {"content", "Hello"}}});
  store.put("resp_1", before);
  ResponsesInput in;
  const ordered_json chat = translate(R"({"previous_response_id": "resp_1", "input": "Again"})",
                                      store, in);
  ASSERT_EQ(chat["messages"].size(), 3u);
  EXPECT_EQ(chat["messages"][1]["content"], "Hello");
  EXPECT_EQ(chat["messages"][2]["content"], "Again");
  EXPECT_EQ(param_of(R"({"previous_response_id": "resp_2", "input": "x"})"), "previous_response_id");
}

TEST(ResponsesToChat, FieldsItCannotHonourAreRefusedByName) {
  EXPECT_EQ(param_of(R"({"input": "x", "text": {"format": {"type": "json_schema"}}})"), "text.format.schema");
  EXPECT_EQ(param_of(R"({"input": "x", "text": {"verbosity": "low"}})"), "text.verbosity");
  EXPECT_EQ(param_of(R"({"input": "x", "tools": [{"type": "file_search"}]})"), "tools[0].type");
  EXPECT_EQ(param_of(R"({"input": "x", "tool_choice": {"type": "allowed_tools"}})"), "tool_choice");
  EXPECT_EQ(param_of(R"({"input": "x", "conversation": "c"})"), "conversation");
  EXPECT_EQ(param_of(R"({"input": "x", "service_tier": "flex"})"), "service_tier");
  EXPECT_EQ(param_of(R"({"input": "x", "top_logprobs": 21})"), "top_logprobs");
  EXPECT_EQ(param_of(R"({"input": "x", "include": ["reasoning.encrypted_content"]})"), "include");
  EXPECT_EQ(param_of(R"({"input": []})"), "input");
  EXPECT_EQ(param_of(R"({"input": [{"role": "tool", "content": "x"}]})"), "input[0].role");
  EXPECT_EQ(param_of(R"({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]})"),
            "input[0].content[0].type");
  EXPECT_EQ(param_of(R"({"input": "x", "metadata": {"k": "v", "n": 1}})"), "metadata");
  EXPECT_EQ(param_of(R"({"input": "x", "store": "yes"})"), "store");
  EXPECT_EQ(param_of(R"({"input": "x", "user": "u", "prompt_cache_key": "k", "truncation": "disabled",
                        "include": [], "service_tier": "auto", "max_tool_calls": 3, "store": false})"),
            "(accepted)");
}

}  // namespace
}  // namespace pagoda::server
