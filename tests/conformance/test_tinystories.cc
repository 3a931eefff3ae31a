// TinyStories-656K from its Hugging Face folder: the tokenizer built from tokenizer.json must give
// exactly the ids of ../shared/models/tinystories-656k/tests/tokenizer.out (no BOS, no
// special-token parsing), and the prompts of tests/REFERENCE.md their listed ids.
#include <gtest/gtest.h>

#include "conformance/vocab_cases.h"
#include "model/model_file.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

std::string show_ids(const std::vector<TokenId>& ids) {
  std::string s;
  for (TokenId id : ids) {
    s += ' ';  // appended separately: GCC 12 warns (-Wrestrict, falsely) on " " + to_string
    s += std::to_string(id);
  }
  return s;
}

TEST(TinyStories, TokenizerMatchesReference) {
  PAGODA_SHARED_OR_SKIP(dir, "models/tinystories-656k");
  auto model = ModelFile::open(dir);
  auto tok = Tokenizer::create(model->vocab());
  auto cases = test::read_vocab_cases(dir + "/tests/tokenizer.inp", dir + "/tests/tokenizer.out");
  ASSERT_EQ(cases.size(), 40u);  // REFERENCE.md: the 40 of 46 inputs two encoders agree on
  int failures = 0;
  for (const auto& c : cases) {
    std::vector<TokenId> got = tok->encode(c.text);
    if (got != c.expected) {
      ++failures;
      ADD_FAILURE() << "input \"" << c.text << "\"\n  expected" << show_ids(c.expected)
                    << "\n  got     " << show_ids(got);
    }
  }
  EXPECT_EQ(failures, 0) << failures << " of " << cases.size() << " cases differ";
}

TEST(TinyStories, PromptsWithBos) {
  PAGODA_SHARED_OR_SKIP(dir, "models/tinystories-656k");
  auto tok = Tokenizer::create(ModelFile::open(dir)->vocab());
  EncodeOptions with_bos;
  with_bos.add_special = true;
  EXPECT_EQ(tok->encode("Once upon a time", with_bos),
            (std::vector<TokenId>{1, 80, 147, 201, 282, 57}));
  EXPECT_EQ(tok->encode("Lily and Ben", with_bos), (std::vector<TokenId>{1, 80, 669, 667}));
}

}  // namespace
}  // namespace pagoda
