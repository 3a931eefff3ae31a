// Compile cost of realistic structured-output grammars at the default GrammarLimits: for each
// schema of bench/grammar_corpus (OpenAI function-calling tools, OpenAI structured-output
// examples, a 100-field form, an order schema with deep $defs), the states its grammar takes,
// the compile time to its first token mask, then random token walks through the grammar (the
// stacks a parse state holds, the time of a mask, the bytes the mask caches reach). Then the
// time the hostile grammars of issue 33 take to be refused, and the limit each one hits.
//   build/bench/bench_grammar [VOCAB.gguf]   (default: models/smollm2-135m-instruct-q4_1.gguf)
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "format/gguf.h"
#include "format/gguf_vocab.h"
#include "grammar/grammar_cache.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "server/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace pagoda;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / 1024.0;
}

std::string gbnf_of(const std::filesystem::path& file, GrammarBudget& budget) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  const auto schema = nlohmann::ordered_json::parse(text.str());
  if (!schema.is_array()) return json_schema_to_gbnf(schema, &budget);
  std::vector<server::ToolSpec> tools;  // a list of OpenAI function definitions
  for (const auto& f : schema) {
    server::ToolSpec t;
    t.name = f["name"].get<std::string>();
    t.parameters = f["parameters"];
    tools.push_back(std::move(t));
  }
  return server::tool_call_gbnf(server::ToolFormat::kHermes, tools, "", true, &budget);
}

// "prefix" followed by i, built in place (GCC 12 misreads literal + to_string as overlapping).
std::string numbered(const char* prefix, int i) {
  std::string s(prefix);
  s += std::to_string(i);
  return s;
}

void refusals(GrammarCache& cache) {
  nlohmann::ordered_json chain = nlohmann::ordered_json::object(), props = chain,
                         values = nlohmann::ordered_json::array();
  for (int i = 0; i < 40; ++i) {
    const nlohmann::ordered_json ref = {{"$ref", numbered("#/$defs/d", i + 1)}};
    chain[numbered("d", i)] = {{"anyOf", {ref, ref}}};
  }
  chain["d40"] = {{"type", "integer"}};
  for (int i = 0; i < 10000; ++i) props[numbered("p", i)] = {{"type", "integer"}};
  for (int i = 0; i < 100000; ++i) values.push_back(numbered("value-", i));
  const std::vector<std::pair<std::string, std::function<std::string(GrammarBudget&)>>> cases = {
      {"anyOf/$ref x40",
       [&](GrammarBudget& b) {
         return json_schema_to_gbnf({{"$defs", chain}, {"$ref", "#/$defs/d0"}}, &b);
       }},
      {"regex .{0,65535}", [](GrammarBudget&) { return regex_to_gbnf(".{0,65535}", "root"); }},
      {"gbnf a{0,100000}", [](GrammarBudget&) { return std::string("root ::= \"a\"{0,100000}"); }},
      {"(a{0,100}){0,100}",
       [](GrammarBudget&) { return std::string("root ::= (\"a\"{0,100}){0,100}"); }},
      {"(a{0,100}|b){0,100}",
       [](GrammarBudget&) { return std::string("root ::= (\"a\"{0,100} | \"b\"){0,100}"); }},
      {"maxLength 65535",
       [](GrammarBudget& b) {
         return json_schema_to_gbnf({{"type", "string"}, {"maxLength", 65535}}, &b);
       }},
      {"10,000 properties",
       [&](GrammarBudget& b) {
         return json_schema_to_gbnf({{"type", "object"}, {"properties", props}}, &b);
       }},
      {"100,000-value enum", [&](GrammarBudget& b) {
         return json_schema_to_gbnf({{"enum", values}}, &b);
       }}};
  std::printf("\n%-20s %10s %10s  %s\n", "hostile", "ms", "rss_MiB", "error");
  for (const auto& [name, source] : cases) {
    GrammarBudget budget;
    const auto start = Clock::now();
    std::string error = "compiled";
    try {
      cache.get(source(budget), budget);
    } catch (const Error& e) {
      error = e.what();
    }
    std::printf("%-20s %10.1f %10.0f  %s\n", name.c_str(), ms_since(start), peak_rss_mib(),
                error.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string root = PAGODA_SOURCE_DIR;
  // bench_grammar [VOCAB.gguf] [--compile-only]: the last skips the random walks.
  const bool walks = std::string(argv[argc - 1]) != "--compile-only";
  const std::string vocab_path = argc > 1 && std::string(argv[1]) != "--compile-only"
                                     ? argv[1]
                                     : root + "/models/smollm2-135m-instruct-q4_1.gguf";
  auto file = GgufFile::open(vocab_path);
  auto tokenizer = Tokenizer::create(vocab_from_gguf(*file));
  GrammarCache cache(*tokenizer);
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(root + "/bench/grammar_corpus")) {
    if (e.path().extension() == ".json") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  std::printf("%-22s %8s %7s %10s %8s %10s %10s %10s\n", "schema", "states", "stacks", "compile_ms",
              "walk_max", "mask_ms", "cache_KiB", "rss_MiB");
  const GrammarLimits limits;
  for (const auto& path : files) {
    GrammarBudget budget(limits);
    const auto start = Clock::now();
    const std::string gbnf = gbnf_of(path, budget);
    auto masks = cache.get(gbnf, budget);
    const double compile_ms = ms_since(start);
    const Grammar& g = masks->grammar();
    const size_t first_stacks = initial_state(g).stacks.size();
    // Random walks: a token the mask allows, uniformly, until the sentence may end (then end
    // with probability 1/4) or 300 tokens.
    std::mt19937 rng(7);
    size_t max_stacks = first_stacks;
    double max_mask_ms = 0;
    TokenBitmask mask(masks->trie().vocab_size());
    for (int walk = 0; walk < (walks ? 20 : 0); ++walk) {
      GrammarState s = initial_state(g);
      for (int step = 0; step < 300 && !s.dead(); ++step) {
        const auto t = Clock::now();
        masks->allowed(s, mask);
        max_mask_ms = std::max(max_mask_ms, ms_since(t));
        std::vector<TokenId> allowed;
        for (TokenId id = 0; id < masks->trie().vocab_size(); ++id) {
          if (mask.test(id)) allowed.push_back(id);
        }
        if (allowed.empty() || (s.complete && rng() % 4 == 0)) break;
        const TokenId id = allowed[rng() % allowed.size()];
        s = advance(g, s, masks->trie().bytes(id));
        max_stacks = std::max(max_stacks, s.stacks.size());
      }
    }
    std::printf("%-22s %8zu %7zu %10.1f %8zu %10.2f %10.0f %10.0f\n", path.stem().string().c_str(),
                budget.states(), first_stacks, compile_ms, max_stacks, max_mask_ms,
                double(masks->memory_bytes()) / 1024.0, peak_rss_mib());
  }
  refusals(cache);
  return 0;
}
