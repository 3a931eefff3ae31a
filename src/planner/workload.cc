// Benchmark workloads (see workload.h).
#include "planner/workload.h"

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mapped_file.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::bench {
namespace {

constexpr int32_t kMaxLength = 1 << 20;

int32_t parse_length(std::string_view text, const std::string& option) {
  int32_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 1 || value > kMaxLength) {
    fail(option, ": '", text, "' is not a length in [1, ", kMaxLength, "]");
  }
  return value;
}

bool usable_for_prompts(TokenType type) {
  return type == TokenType::kNormal || type == TokenType::kByte || type == TokenType::kUndefined;
}

// The text of turn `index` when it is from `speaker`; nullptr otherwise.
const nlohmann::json* turn_text(const nlohmann::json& turns, size_t index, const char* speaker) {
  if (turns.size() <= index || !turns[index].is_object()) return nullptr;
  const auto& turn = turns[index];
  const auto from = turn.find("from");
  const auto value = turn.find("value");
  if (from == turn.end() || value == turn.end() || !value->is_string()) return nullptr;
  if (!from->is_string() || from->get<std::string>() != speaker) return nullptr;
  return &*value;
}

bool within_limits(size_t prompt_len, size_t output_len, const DatasetLimits& limits) {
  const size_t min_len = static_cast<size_t>(limits.min_len);
  return prompt_len >= min_len && output_len >= min_len &&
         prompt_len <= static_cast<size_t>(limits.max_prompt_len) &&
         prompt_len + output_len <= static_cast<size_t>(limits.max_total_len);
}

}  // namespace

std::string LengthRange::to_string() const {
  return fixed() ? std::to_string(min) : std::to_string(min) + ":" + std::to_string(max);
}

LengthRange parse_length_range(const std::string& text, const std::string& option) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos) {
    const int32_t len = parse_length(text, option);
    return {len, len};
  }
  LengthRange range{parse_length(std::string_view(text).substr(0, colon), option),
                    parse_length(std::string_view(text).substr(colon + 1), option)};
  if (range.min > range.max) fail(option, ": the range '", text, "' runs backwards");
  return range;
}

std::vector<TokenId> prompt_token_pool(const Vocab* vocab, int32_t vocab_size) {
  std::vector<TokenId> pool;
  const auto n =
      static_cast<TokenId>(vocab ? std::min<size_t>(vocab->size(), vocab_size) : vocab_size);
  for (TokenId id = 0; id < n; ++id) {
    if (!vocab || vocab->types.empty() || usable_for_prompts(vocab->type(id))) pool.push_back(id);
  }
  if (pool.empty()) fail("the vocabulary has no ordinary token to build prompts from");
  return pool;
}

std::vector<TokenId> random_prompt(const std::vector<TokenId>& pool, int32_t len,
                                   std::mt19937_64& rng) {
  std::uniform_int_distribution<size_t> pick(0, pool.size() - 1);
  std::vector<TokenId> prompt(static_cast<size_t>(len));
  for (TokenId& id : prompt) id = pool[pick(rng)];
  return prompt;
}

std::vector<BenchRequest> synthetic_requests(int32_t count, const LengthRange& prompt_len,
                                             const LengthRange& output_len,
                                             const std::vector<TokenId>& pool, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> prompt_dist(prompt_len.min, prompt_len.max);
  std::uniform_int_distribution<int32_t> output_dist(output_len.min, output_len.max);
  std::vector<BenchRequest> requests(static_cast<size_t>(count));
  for (BenchRequest& r : requests) {
    const int32_t len = prompt_dist(rng);
    r.output_len = output_dist(rng);
    r.prompt = random_prompt(pool, len, rng);
  }
  return requests;
}

DatasetRequests sharegpt_requests(const std::string& path, const Tokenizer& tokenizer,
                                  int32_t count, const DatasetLimits& limits, int32_t output_len) {
  nlohmann::json data;
  try {
    data = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": not JSON: ", e.what());
  }
  if (!data.is_array()) fail(path, ": expected a list of conversations");
  DatasetRequests out;
  const EncodeOptions with_bos{.add_special = true};
  for (size_t i = 0; i < data.size() && out.requests.size() < static_cast<size_t>(count); ++i) {
    ++out.num_read;
    const auto turns = data[i].is_object() ? data[i].find("conversations") : data[i].end();
    if (!data[i].is_object() || turns == data[i].end() || !turns->is_array()) {
      fail(path, ": entry ", i, ": no \"conversations\" list");
    }
    const nlohmann::json* human = turn_text(*turns, 0, "human");
    const nlohmann::json* gpt = turn_text(*turns, 1, "gpt");
    if (!human || !gpt) {
      ++out.num_skipped;
      continue;
    }
    BenchRequest r;
    r.prompt = tokenizer.encode(human->get<std::string>(), with_bos);
    const size_t reply_len = output_len > 0 ? static_cast<size_t>(output_len)
                                            : tokenizer.encode(gpt->get<std::string>()).size();
    if (!within_limits(r.prompt.size(), reply_len, limits)) {
      ++out.num_skipped;
      continue;
    }
    r.output_len = static_cast<int32_t>(reply_len);
    out.requests.push_back(std::move(r));
  }
  return out;
}

}  // namespace pagoda::bench
