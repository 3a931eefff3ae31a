// Every ../shared/testdata/vocab/*.gguf with .inp/.out: each case must give exactly the ids the
// model's reference tokenizer gave (no BOS, no special-token parsing).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "conformance/vocab_cases.h"
#include "format/gguf_vocab.h"
#include "format/gguf.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

std::string show_ids(const std::vector<TokenId>& ids) {
  std::string s;
  for (TokenId id : ids) {
    s += ' ';
    s += std::to_string(id);
  }
  return s;
}

std::vector<std::string> vocab_names() {
  std::vector<std::string> names;
  auto dir = test::shared_dir();
  // A partial copy of the folder (scripts/device-check packs only its models) has no vocabs.
  if (!dir || !std::filesystem::is_directory(*dir + "/testdata/vocab")) return names;
  for (const auto& e : std::filesystem::directory_iterator(*dir + "/testdata/vocab")) {
    std::string p = e.path().string();
    if (e.path().extension() == ".gguf" && std::filesystem::exists(p + ".inp") &&
        std::filesystem::exists(p + ".out")) {
      std::string n = e.path().stem().string();  // ggml-vocab-NAME
      names.push_back(n.substr(std::string("ggml-vocab-").size()));
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

class VocabConformance : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabConformance, ExactIds) {
  PAGODA_SHARED_OR_SKIP(path, "testdata/vocab/ggml-vocab-" + GetParam() + ".gguf");
  auto file = GgufFile::open(path);
  auto tok = Tokenizer::create(vocab_from_gguf(*file));
  auto cases = test::read_vocab_cases(path + ".inp", path + ".out");
  ASSERT_FALSE(cases.empty());
  int failures = 0;
  for (const auto& c : cases) {
    std::vector<TokenId> got = tok->encode(c.text);
    if (got != c.expected) {
      ++failures;
      ADD_FAILURE() << GetParam() << ": input \"" << c.text << "\"\n  expected" << show_ids(c.expected)
                    << "\n  got     " << show_ids(got);
    }
  }
  EXPECT_EQ(failures, 0) << failures << " of " << cases.size() << " cases differ";
}

// Byte-level BPE and SentencePiece with byte fallback lose nothing: decoding the ids gives back
// the exact input bytes. WordPiece (BERT) lowercases and drops spaces by design, so it is the one
// kind without this property.
TEST_P(VocabConformance, RoundTrip) {
  PAGODA_SHARED_OR_SKIP(path, "testdata/vocab/ggml-vocab-" + GetParam() + ".gguf");
  auto file = GgufFile::open(path);
  auto tok = Tokenizer::create(vocab_from_gguf(*file));
  if (tok->vocab().kind == TokenizerKind::kWordPiece) GTEST_SKIP() << "WordPiece is lossy by design";
  for (const auto& c : test::read_vocab_cases(path + ".inp", path + ".out")) {
    EXPECT_EQ(tok->decode(tok->encode(c.text)), c.text);
  }
}

INSTANTIATE_TEST_SUITE_P(SharedVocabs, VocabConformance, ::testing::ValuesIn(vocab_names()),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(VocabConformance);

TEST(VocabConformanceData, SharedFolderPresent) {
  if (!test::shared_dir()) GTEST_SKIP() << "*** ../shared is absent: tokenizer conformance SKIPPED ***";
  EXPECT_GE(vocab_names().size(), 10u);
}

}  // namespace
}  // namespace pagoda
