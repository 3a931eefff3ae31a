// The text of generated tokens, on real models: what StreamDecoder gives after continue_after
// (the path of run, chat and the server) must equal decode(prompt + output) minus
// decode(prompt), the way llama.cpp's server and vLLM produce it. On SentencePiece models the
// output's first word then keeps its space ("The little dog" continues " was", as in llama.cpp's
// greedy vectors), and a character split across tokens comes out whole.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "conformance/greedy.h"
#include "core/mapped_file.h"
#include "engine/generator.h"
#include "model/model.h"
#include "model/model_file.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

std::string streamed(const Tokenizer& tok, const std::vector<TokenId>& prompt,
                     const std::vector<TokenId>& output, bool render_special) {
  StreamDecoder d(tok, render_special);
  d.continue_after(prompt);
  std::string text;
  for (TokenId id : output) text += d.feed(id);
  return text + d.flush();
}

// The peers' definition, for text that ends on a whole character.
std::string peer_text(const Tokenizer& tok, const std::vector<TokenId>& prompt,
                      const std::vector<TokenId>& output, bool render_special) {
  std::vector<TokenId> all = prompt;
  all.insert(all.end(), output.begin(), output.end());
  const std::string whole = tok.decode(all, render_special),
                    head = tok.decode(prompt, render_special);
  EXPECT_EQ(whole.compare(0, head.size(), head), 0) << "the prompt's text is not a prefix";
  return whole.substr(head.size());
}

void check_model(const std::string& path, const std::vector<std::string>& prompts, int32_t n) {
  SCOPED_TRACE(path);
  auto file = ModelFile::open(path);
  auto tok = Tokenizer::create(file->vocab());
  auto model = Model::load(*file);
  auto backend = make_cpu_backend(2);
  for (const std::string& p : prompts) {
    SCOPED_TRACE("prompt \"" + p + "\"");
    const std::vector<TokenId> prompt =
        tok->encode(p, {.add_special = true, .parse_special = true, .plain_ranges = {}});
    const std::vector<TokenId> output = test::greedy_ids(*model, *backend, prompt, n);
    for (bool special : {false, true}) {
      const std::string text = streamed(*tok, prompt, output, special);
      if (text.find("\uFFFD") == std::string::npos) {
        EXPECT_EQ(text, peer_text(*tok, prompt, output, special)) << "special " << special;
      }
      if (!special) {
        for (TokenId id : output) {
          if (tok->is_hidden(id)) {
            EXPECT_EQ(text.find(tok->vocab().tokens[static_cast<size_t>(id)]), std::string::npos)
                << "a control token is printed as text";
          }
        }
      }
    }
  }
}

const std::vector<std::string> kPrompts = {"The little dog", "Once upon a time",
                                           "The capital of France is"};

TEST(OutputText, Stories260kMatchesLlamaCppGreedyText) {
  PAGODA_SHARED_OR_SKIP(vectors, "testdata/stories260K_greedy.json");
  PAGODA_SHARED_OR_SKIP(path, "models/stories260K.gguf");
  const auto j = nlohmann::json::parse(read_file(vectors));
  auto file = ModelFile::open(path);
  auto tok = Tokenizer::create(file->vocab());
  for (const auto& c : j["cases"]) {
    const std::vector<TokenId> prompt = c["prompt_ids"].get<std::vector<TokenId>>();
    const std::vector<TokenId> output = c["greedy_ids"].get<std::vector<TokenId>>();
    EXPECT_EQ(streamed(*tok, prompt, output, false), c["greedy_text"].get<std::string>())
        << c["prompt"];
  }
  check_model(path, kPrompts, 32);
}

TEST(OutputText, SharedModels) {
  PAGODA_SHARED_OR_SKIP(tiny, "models/llama-2-tiny-random/llama-2-tiny-random.gguf");
  PAGODA_SHARED_OR_SKIP(hf, "models/tinystories-656k");
  check_model(tiny, kPrompts, 24);
  check_model(hf, kPrompts, 24);
}

TEST(OutputText, InstalledModels) {
  const std::string root = std::string(PAGODA_SOURCE_DIR) + "/models/";
  int found = 0;
  for (const char* name : {"smollm2-135m-instruct-q4_1.gguf", "gemma-3-270m-q4_k_m.gguf",
                           "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"}) {
    if (!std::filesystem::exists(root + name)) continue;
    ++found;
    check_model(root + name,
                {"The capital of France is",
                 "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
                 "<|im_start|>assistant\n"},
                24);
  }
  if (found == 0) GTEST_SKIP() << "*** no model in models/: run scripts/setup; SKIPPING ***";
}

}  // namespace
}  // namespace pagoda
