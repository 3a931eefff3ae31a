// Benchmark workloads: length options, reproducible synthetic requests, prompt ids that are
// ordinary tokens, and ShareGPT-style files (first human turn, first gpt reply, vLLM's pruning).
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "planner/workload.h"
#include "core/error.h"
#include "model/model_file.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::bench {
namespace {

TEST(BenchWorkload, ParsesFixedAndUniformLengths) {
  const LengthRange fixed = parse_length_range("256", "--prompt-len");
  EXPECT_EQ(fixed.min, 256);
  EXPECT_EQ(fixed.max, 256);
  EXPECT_TRUE(fixed.fixed());
  EXPECT_EQ(fixed.to_string(), "256");
  const LengthRange range = parse_length_range("128:512", "--prompt-len");
  EXPECT_EQ(range.min, 128);
  EXPECT_EQ(range.max, 512);
  EXPECT_EQ(range.to_string(), "128:512");
  for (const char* bad : {"", "0", "-3", "12x", "512:128", "1:", ":4", "1:2:3", "99999999999"}) {
    EXPECT_THROW(parse_length_range(bad, "--prompt-len"), Error) << bad;
  }
  try {
    parse_length_range("abc", "--output-len");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--output-len"), std::string::npos);
  }
}

TEST(BenchWorkload, SyntheticRequestsAreReproducibleAndInRange) {
  std::vector<TokenId> pool = {5, 7, 9};
  const auto a = synthetic_requests(50, {4, 9}, {2, 3}, pool, 42);
  const auto b = synthetic_requests(50, {4, 9}, {2, 3}, pool, 42);
  const auto c = synthetic_requests(50, {4, 9}, {2, 3}, pool, 43);
  ASSERT_EQ(a.size(), 50u);
  std::set<size_t> prompt_lengths;
  bool differs = false;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].prompt, b[i].prompt);
    EXPECT_EQ(a[i].output_len, b[i].output_len);
    differs |= a[i].prompt != c[i].prompt;
    EXPECT_GE(a[i].prompt.size(), 4u);
    EXPECT_LE(a[i].prompt.size(), 9u);
    EXPECT_GE(a[i].output_len, 2);
    EXPECT_LE(a[i].output_len, 3);
    prompt_lengths.insert(a[i].prompt.size());
    for (TokenId id : a[i].prompt) EXPECT_TRUE(id == 5 || id == 7 || id == 9);
  }
  EXPECT_TRUE(differs);
  EXPECT_GT(prompt_lengths.size(), 3u);  // the range is used, not one length
}

TEST(BenchWorkload, PromptPoolLeavesOutControlTokens) {
  Vocab v;
  v.tokens = {"<s>", "a", "b", "<ctl>", "<0x00>"};
  v.types = {TokenType::kControl, TokenType::kNormal, TokenType::kNormal, TokenType::kControl,
             TokenType::kByte};
  EXPECT_EQ(prompt_token_pool(&v, 5), (std::vector<TokenId>{1, 2, 4}));
  EXPECT_EQ(prompt_token_pool(&v, 2), (std::vector<TokenId>{1}));  // ids past the model's vocab
  EXPECT_EQ(prompt_token_pool(nullptr, 3), (std::vector<TokenId>{0, 1, 2}));
}

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = test::temp_dir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(BenchWorkload, ShareGptTakesFirstHumanTurnAndGptReply) {
  PAGODA_SHARED_OR_SKIP(model_path, "models/stories260K.gguf");
  auto file = ModelFile::open(model_path);
  auto tok = Tokenizer::create(file->vocab());
  const std::string long_text(3000, 'x');
  const std::string path = write_temp("sharegpt.json", R"([
    {"conversations": [{"from": "human", "value": "Once upon a time there was a cat"},
                       {"from": "gpt", "value": "who lived in a big house with a dog"},
                       {"from": "human", "value": "ignored"}]},
    {"conversations": [{"from": "gpt", "value": "starts with the model"},
                       {"from": "human", "value": "so it is skipped"}]},
    {"conversations": [{"from": "human", "value": "only one turn"}]},
    {"conversations": [{"from": "human", "value": "Hi"},
                       {"from": "gpt", "value": "Hello there you"}]},
    {"conversations": [{"from": "human", "value": ")" +
                                      long_text + R"("},
                       {"from": "gpt", "value": "too long a prompt"}]},
    {"conversations": [{"from": "human", "value": "The little girl went to the park"},
                       {"from": "gpt", "value": "and she played with her friends all day"}]}
  ])");
  const DatasetRequests d = sharegpt_requests(path, *tok, 10, {});
  ASSERT_EQ(d.requests.size(), 2u);
  EXPECT_EQ(d.num_read, 6);
  EXPECT_EQ(d.num_skipped, 4);  // gpt first, one turn, "Hi" too short, the long prompt
  EXPECT_EQ(d.requests[0].prompt,
            tok->encode("Once upon a time there was a cat", {.add_special = true}));
  EXPECT_EQ(d.requests[0].output_len,
            static_cast<int32_t>(tok->encode("who lived in a big house with a dog").size()));
  // Reading stops once `count` are taken; a fixed output length replaces the replies'.
  const DatasetRequests one = sharegpt_requests(path, *tok, 1, {}, 7);
  ASSERT_EQ(one.requests.size(), 1u);
  EXPECT_EQ(one.num_read, 1);
  EXPECT_EQ(one.requests[0].output_len, 7);
}

TEST(BenchWorkload, ShareGptRejectsMalformedFiles) {
  PAGODA_SHARED_OR_SKIP(model_path, "models/stories260K.gguf");
  auto file = ModelFile::open(model_path);
  auto tok = Tokenizer::create(file->vocab());
  EXPECT_THROW(sharegpt_requests(write_temp("a.json", "{not json"), *tok, 1, {}), Error);
  EXPECT_THROW(sharegpt_requests(write_temp("b.json", "{}"), *tok, 1, {}), Error);
  EXPECT_THROW(sharegpt_requests(write_temp("c.json", "[{\"x\": 1}]"), *tok, 1, {}), Error);
  EXPECT_THROW(sharegpt_requests("/nonexistent.json", *tok, 1, {}), Error);
}

}  // namespace
}  // namespace pagoda::bench
