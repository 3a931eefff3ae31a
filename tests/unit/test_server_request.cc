// Server pieces without HTTP: stop strings over streamed text, request parsing and its errors,
// the OpenAI error shape, Prometheus histograms, and the key comparison.
#include <gtest/gtest.h>

#include "format/gguf_vocab.h"
#include "format/gguf.h"
#include "server/api_error.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/responses.h"
#include "server/text_output.h"
#include "template/chat_template.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::server {
namespace {

using nlohmann::json;

TEST(StopPrefix, LongestSuffixThatStartsAStopString) {
  EXPECT_EQ(stop_prefix_length("hello wor", {"world"}), 3u);
  EXPECT_EQ(stop_prefix_length("hello", {"world"}), 0u);
  EXPECT_EQ(stop_prefix_length("aa", {"aab"}), 2u);
  EXPECT_EQ(stop_prefix_length("xab", {"b", "abc"}), 2u);  // "b" alone is a whole match, not held
  EXPECT_EQ(stop_prefix_length("", {"x"}), 0u);
}

class ServerWithVocab : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = test::shared_dir();
    if (!dir) GTEST_SKIP() << "*** ../shared is absent: SKIPPING a test on real data ***";
    auto file = GgufFile::open(*dir + "/testdata/vocab/ggml-vocab-llama-bpe.gguf");
    tokenizer_ = Tokenizer::create(vocab_from_gguf(*file));
    model_.name = "m";
    model_.tokenizer = tokenizer_.get();
    model_.max_model_len = 64;
    model_.vocab_size = static_cast<int32_t>(tokenizer_->vocab().size());
  }

  // Feeds the tokens of `text` one by one; returns what was sent.
  std::string stream(const std::string& text, std::vector<std::string> stop, bool* stopped) {
    TextOutput out(*tokenizer_, std::move(stop));
    std::string sent;
    for (TokenId id : tokenizer_->encode(text)) sent += out.feed(id);
    sent += out.finish();
    EXPECT_EQ(sent, out.text());
    *stopped = out.stopped();
    return sent;
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  ModelContext model_;
  RequestLimits limits_;
};

TEST_F(ServerWithVocab, StopStringsAcrossTokensAreCutAndNeverSent) {
  bool stopped = false;
  EXPECT_EQ(stream("The quick brown fox jumps", {"brown fox"}, &stopped), "The quick ");
  EXPECT_TRUE(stopped);
  EXPECT_EQ(stream("The quick brown fox jumps", {"own f", "quick"}, &stopped), "The ");
  EXPECT_EQ(stream("The quick brown fox", {"cat"}, &stopped), "The quick brown fox");
  EXPECT_FALSE(stopped);
  EXPECT_EQ(stream("héllo wörld", {"wö"}, &stopped), "héllo ");
  EXPECT_EQ(stream("abc", {"c"}, &stopped), "ab");
}

TEST_F(ServerWithVocab, TheStopStringThatEndedTheOutputIsKnown) {
  // The earliest match wins, whichever string is listed first.
  TextOutput out(*tokenizer_, {"own f", "quick"});
  for (TokenId id : tokenizer_->encode("The quick brown fox")) out.feed(id);
  out.finish();
  EXPECT_EQ(out.matched_stop(), "quick");
  TextOutput none(*tokenizer_, {"cat"});
  for (TokenId id : tokenizer_->encode("The quick brown fox")) none.feed(id);
  none.finish();
  EXPECT_EQ(none.matched_stop(), "");
}

TEST_F(ServerWithVocab, HeldTextIsReleasedWhenItStopsMatching) {
  TextOutput out(*tokenizer_, {"fox!"});
  std::string sent;
  for (TokenId id : tokenizer_->encode("a fox")) sent += out.feed(id);
  EXPECT_EQ(sent, "a ");  // "fox" could still become "fox!"
  for (TokenId id : tokenizer_->encode(" ran")) sent += out.feed(id);
  EXPECT_EQ(sent, "a fox ran");
}

TEST_F(ServerWithVocab, ParsesCompletionParameters) {
  const json body = {{"model", "m"},         {"prompt", "hello"}, {"max_tokens", 5},
                     {"temperature", 0.5},   {"top_p", 0.9},      {"top_k", 7},
                     {"seed", 42},           {"n", 2},            {"stop", {"x", "y"}},
                     {"logit_bias", {{"5", -100}}}, {"logprobs", 3}, {"stream", true},
                     {"stream_options", {{"include_usage", true}}}};
  const ApiRequest r = parse_completion_request(body, model_, limits_);
  EXPECT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0], tokenizer_->encode("hello", {.add_special = true, .parse_special = true}));
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_EQ(r.sampling.top_k, 7);
  EXPECT_TRUE(r.sampling.has_seed);
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"x", "y"}));
  ASSERT_EQ(r.sampling.logit_bias.size(), 1u);
  EXPECT_EQ(r.sampling.logit_bias[0].first, 5);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 3);
  EXPECT_TRUE(r.stream && r.include_usage);
}

TEST_F(ServerWithVocab, PromptShapes) {
  const auto ids = parse_completion_request({{"prompt", {1, 2, 3}}}, model_, limits_).prompts;
  EXPECT_EQ(ids, (std::vector<std::vector<TokenId>>{{1, 2, 3}}));
  EXPECT_EQ(parse_completion_request({{"prompt", {"a", "b"}}}, model_, limits_).prompts.size(), 2u);
  EXPECT_EQ(parse_completion_request({{"prompt", {{1}, {2, 3}}}}, model_, limits_).prompts.size(),
            2u);
}

// The ApiError a parse throws.
ApiError parse_error(const json& body, const ModelContext& model, const RequestLimits& limits) {
  try {
    parse_completion_request(body, model, limits);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "no error for " << body.dump();
  return ApiError(0, "", "");
}

TEST_F(ServerWithVocab, ErrorsNameTheParameter) {
  struct Case {
    json body;
    int status;
    std::string param;
  };
  const std::vector<Case> cases = {
      {{{"prompt", "x"}, {"temperature", "hot"}}, 400, "temperature"},
      {{{"prompt", "x"}, {"temperature", 3}}, 400, "temperature"},
      {{{"prompt", "x"}, {"max_tokens", 0}}, 400, "max_tokens"},
      {{{"prompt", "x"}, {"n", 100}}, 400, "n"},
      {{{"prompt", "x"}, {"stop", 1}}, 400, "stop"},
      {{{"prompt", "x"}, {"stop", {""}}}, 400, "stop"},
      {{{"prompt", "x"}, {"logit_bias", {{"-1", 1}}}}, 400, "logit_bias"},
      {{{"prompt", "x"}, {"logit_bias", {{"1", 500}}}}, 400, "logit_bias"},
      {{{"prompt", "x"}, {"logit_bias", {{"999999", 1}}}}, 400, "logit_bias"},
      {{{"prompt", "x"}, {"logit_bias", {{"4294967297", 1}}}}, 400, "logit_bias"},
      {{{"prompt", "x"}, {"logprobs", 50}}, 400, "logprobs"},
      {{{"prompt", "x"}, {"stream_options", {{"include_usage", true}}}}, 400, "stream_options"},
      {{{"prompt", {1, -2}}}, 400, "prompt"},
      {{{"prompt", json::array()}}, 400, "prompt"},
      {{{"prompt", 7}}, 400, "prompt"},
      {{{"max_tokens", 3}}, 400, "prompt"},
      {{{"prompt", "x"}, {"model", "other"}}, 404, "model"},
      {{{"prompt", "x"}, {"max_tokens", 64}}, 400, "max_tokens"},
      {{{"prompt", "x"}, {"seed", 1.5}}, 400, "seed"},
      {{{"prompt", "x"}, {"max_tokens", 0}}, 400, "max_tokens"},  // 0 only with echo
      {{{"prompt", "x"}, {"reasoning_budget", 2}}, 400, "reasoning_budget"},
  };
  for (const Case& c : cases) {
    const ApiError e = parse_error(c.body, model_, limits_);
    EXPECT_EQ(e.status(), c.status) << c.body.dump() << ": " << e.what();
    EXPECT_EQ(e.param(), c.param) << c.body.dump() << ": " << e.what();
  }
}

TEST_F(ServerWithVocab, ContextLengthErrorSaysBothLengths) {
  const ApiError e = parse_error({{"prompt", std::string(400, 'a')}}, model_, limits_);
  EXPECT_EQ(e.code(), "context_length_exceeded");
  EXPECT_NE(std::string(e.what()).find("maximum context length is 64 tokens"), std::string::npos)
      << e.what();
  const json shape = e.to_json();
  EXPECT_EQ(shape["error"]["code"], "context_length_exceeded");
  EXPECT_TRUE(shape["error"].contains("type") && shape["error"].contains("param"));
}

// OpenAI's API lists the alternatives most likely first (a plain JSON object would sort them by
// text: ' jump', ' jumped', ' jumps').
TEST_F(ServerWithVocab, CompletionTopLogprobsComeMostLikelyFirst) {
  std::vector<TokenId> ids;
  for (const char* word : {" jumps", " jumped", " jump"}) {
    const std::vector<TokenId> t = tokenizer_->encode(word);
    ASSERT_EQ(t.size(), 1u) << word;
    ids.push_back(t[0]);
  }
  TokenLogprob lp{ids[0], -0.015f, {{ids[0], -0.015f}, {ids[1], -4.73f}, {ids[2], -6.49f}}};
  const std::string text = dump(completion_logprobs(*tokenizer_, {lp}, 0));
  const size_t jumps = text.find("\" jumps\":"), jumped = text.find("\" jumped\":"),
               jump = text.find("\" jump\":");
  ASSERT_NE(jump, std::string::npos) << text;
  EXPECT_LT(jumps, jumped) << text;
  EXPECT_LT(jumped, jump) << text;
}

TEST_F(ServerWithVocab, ChatNeedsATemplateAndGoodMessages) {
  const json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  EXPECT_THROW(parse_chat_request(body, model_, limits_), ApiError);  // no template
  model_.render_chat = [](const nlohmann::ordered_json& messages, bool add,
                          const nlohmann::ordered_json&) {
    std::string s;
    for (const auto& m : messages) s += m["role"].get<std::string>() + ": " +
                                        m["content"].get<std::string>() + "\n";
    return add ? s + "assistant:" : s;
  };
  const ApiRequest r = parse_chat_request(body, model_, limits_);
  EXPECT_EQ(r.prompt_texts[0], "user: hi\nassistant:");
  EXPECT_EQ(r.max_tokens, 64 - static_cast<int32_t>(r.prompts[0].size()));  // up to the context
  const json parts = {{"messages", {{{"role", "user"},
                                     {"content", {{{"type", "text"}, {"text", "a"}},
                                                  {{"type", "text"}, {"text", "b"}}}}}}}};
  EXPECT_EQ(parse_chat_request(parts, model_, limits_).prompt_texts[0], "user: ab\nassistant:");
  try {
    parse_chat_request({{"messages", {{{"content", "x"}}}}}, model_, limits_);
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param(), "messages[0].role");
  }
}

// Templates see messages and tools in the request's key order, as transformers passes them.
TEST_F(ServerWithVocab, ChatTemplatesSeeKeysInRequestOrder) {
  std::string seen;
  model_.render_chat = [&seen](const nlohmann::ordered_json& messages, bool,
                               const nlohmann::ordered_json& extra) {
    seen = messages.dump() + " " + extra.dump();
    return std::string("x");
  };
  model_.template_renders_tools = true;  // else pagoda describes the tools in a system message
  const std::string raw =
      R"({"messages": [{"role": "user", "zeta": 1, "content": "hi", "alpha": 2}],)"
      R"( "tools": [{"type": "function", "function": {"name": "f", "b": 1, "a": 2}}]})";
  parse_chat_request(json::parse(raw), model_, limits_, raw);
  EXPECT_EQ(seen,
            R"([{"role":"user","zeta":1,"content":"hi","alpha":2}] )"
            R"({"tools":[{"type":"function","function":{"name":"f","b":1,"a":2}}]})");
}

// The served id is --model-name, else the file's stem; requests may also name the file, its stem
// or its general.name.
TEST(ModelName, IdFromOptionElseStem) {
  const ModelContext stem = named_model("models/smollm2-135m-instruct-q4_1.gguf", "", "");
  EXPECT_EQ(stem.name, "smollm2-135m-instruct-q4_1");
  EXPECT_TRUE(stem.answers_to("smollm2-135m-instruct-q4_1.gguf"));
  EXPECT_TRUE(stem.answers_to("smollm2-135m-instruct-q4_1"));
  EXPECT_FALSE(stem.answers_to("smollm2"));
  const ModelContext general = named_model("/x/qwen-q4_k_m.gguf", "Qwen2.5 Coder 0.5B AWQ", "");
  EXPECT_EQ(general.name, "qwen-q4_k_m");
  EXPECT_TRUE(general.answers_to("qwen-q4_k_m.gguf"));
  EXPECT_TRUE(general.answers_to("Qwen2.5 Coder 0.5B AWQ"));
  const ModelContext option = named_model("/x/qwen.gguf", "Qwen2.5", "mine");
  EXPECT_EQ(option.name, "mine");
  EXPECT_TRUE(option.answers_to("qwen"));
  EXPECT_TRUE(option.answers_to("Qwen2.5"));
  EXPECT_EQ(named_model("models/tinystories-656k/", "", "").name, "tinystories-656k");
}

TEST(Usage, ReportsCachedPromptTokens) {
  const auto u = usage_json(100, 7, 64);
  EXPECT_EQ(u.dump(), R"({"prompt_tokens":100,"completion_tokens":7,"total_tokens":107,)"
                      R"("prompt_tokens_details":{"cached_tokens":64}})");
}

TEST(Histogram, CumulativeBucketsSumAndCount) {
  Histogram h({0.1, 1.0});
  h.observe(0.05);
  h.observe(0.5);
  h.observe(5.0);
  const std::string text = h.render("x");
  EXPECT_NE(text.find("x_bucket{le=\"0.1\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("x_bucket{le=\"1\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("x_bucket{le=\"+Inf\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("x_count 3\n"), std::string::npos) << text;
}

TEST(ApiKey, ConstantTimeEqualAndLoopback) {
  EXPECT_TRUE(constant_time_equal("abc", "abc"));
  EXPECT_FALSE(constant_time_equal("abc", "abd"));
  EXPECT_FALSE(constant_time_equal("abc", "abcd"));
  EXPECT_FALSE(constant_time_equal("", "a"));
  EXPECT_TRUE(is_loopback_host("127.0.0.1"));
  EXPECT_TRUE(is_loopback_host("localhost"));
  EXPECT_FALSE(is_loopback_host("0.0.0.0"));
  EXPECT_FALSE(is_loopback_host("10.0.0.1"));
}

// A template in the manner of Qwen2.5's: a default system prompt unless the first message is a
// system one, no developer role; it prints enable_thinking and reasoning_effort when given.
class TemplateFields : public ServerWithVocab {
 protected:
  void use_template(const std::string& source) {
    auto chat = std::make_shared<ChatTemplate>(source);
    model_.render_chat = [chat](const nlohmann::ordered_json& messages, bool add,
                                const nlohmann::ordered_json& extra) {
      return chat->apply_ordered(messages, add, "", "", extra);
    };
    model_.template_traits = template_traits(source);
  }
  std::string render(const json& body) {
    return parse_chat_request(body, model_, limits_).prompt_texts.at(0);
  }
  static constexpr const char* kQwenLike =
      "{% if messages[0].role != 'system' %}[sys]default{% endif %}"
      "{% for m in messages %}{% if m.role in ['system', 'user', 'assistant'] %}"
      "[{{ m.role }}]{{ m.content }}{% endif %}{% endfor %}"
      "{% if enable_thinking is defined %}[think={{ enable_thinking }}]{% endif %}";
};

TEST_F(TemplateFields, DeveloperIsSystemForTemplatesWithoutTheRole) {
  use_template(kQwenLike);
  const json body = {{"messages", {{{"role", "developer"}, {"content", "be brief"}},
                                   {{"role", "user"}, {"content", "hi"}}}}};
  EXPECT_EQ(render(body), "[system]be brief[user]hi");
  // A template that names the role gets it as sent.
  use_template("{% for m in messages %}{% if m.role == 'developer' %}[dev]{% endif %}"
               "{{ m.content }}{% endfor %}");
  EXPECT_EQ(render(body), "[dev]be briefhi");
}

TEST_F(TemplateFields, AnEmptyToolListIsNoTools) {
  use_template(kQwenLike);
  json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  const std::string plain = render(body);
  body["tools"] = json::array();
  EXPECT_EQ(render(body), plain);  // no system message describing zero tools
  body["tool_choice"] = "required";
  EXPECT_THROW(render(body), ApiError);
}

TEST_F(TemplateFields, KwargsReachTheTemplateAndReservedNamesAreRefused) {
  use_template(kQwenLike);
  json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
               {"chat_template_kwargs", {{"enable_thinking", false}}}};
  EXPECT_EQ(render(body), "[sys]default[user]hi[think=False]");
  for (const json& bad : {json("x"), json({{"messages", 1}}), json({{"bad key", 1}}),
                          json({{"add_generation_prompt", false}})}) {
    body["chat_template_kwargs"] = bad;
    try {
      render(body);
      FAIL() << bad.dump();
    } catch (const ApiError& e) {
      EXPECT_EQ(e.param(), "chat_template_kwargs") << bad.dump();
    }
  }
}

TEST_F(TemplateFields, ReasoningEffortOnlyWhereTheTemplateReadsIt) {
  use_template(kQwenLike);
  json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"reasoning_effort", "low"}};
  EXPECT_THROW(render(body), ApiError);  // this template has no use for it
  use_template("{{ messages[0].content }}{% if reasoning_effort %}[{{ reasoning_effort }}]{% endif %}");
  EXPECT_EQ(render(body), "hi[low]");
  body["reasoning_effort"] = "extreme";
  EXPECT_THROW(render(body), ApiError);
  EXPECT_TRUE(mentions_word("a reasoning_effort b", "reasoning_effort"));
  EXPECT_FALSE(mentions_word("my_reasoning_effort_x", "reasoning_effort"));
  EXPECT_FALSE(mentions_word("developers", "developer"));
  EXPECT_TRUE(mentions_word("'developer'", "developer"));
}


}  // namespace
}  // namespace pagoda::server
