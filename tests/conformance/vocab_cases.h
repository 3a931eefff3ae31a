// Reads llama.cpp-style tokenizer test pairs (.inp/.out; layout in ../shared/testdata/vocab/FORMAT.md).
#pragma once

#include <string>
#include <vector>

#include "tokenizer/vocab.h"

namespace pagoda::test {

struct VocabCase {
  std::string text;
  std::vector<TokenId> expected;
};

// Parses `inp_path` and `out_path`; throws Error when their counts differ.
std::vector<VocabCase> read_vocab_cases(const std::string& inp_path, const std::string& out_path);

}  // namespace pagoda::test
