#include "conformance/vocab_cases.h"

#include <sstream>

#include "core/error.h"
#include "core/mapped_file.h"

namespace pagoda::test {

std::vector<VocabCase> read_vocab_cases(const std::string& inp_path, const std::string& out_path) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::string inp = read_file(inp_path);
  std::vector<VocabCase> cases;
  size_t pos = 0;
  while (pos < inp.size()) {
    size_t hit = inp.find(sep, pos);
    if (hit == std::string::npos) {
      cases.push_back({inp.substr(pos), {}});
      break;
    }
    cases.push_back({inp.substr(pos, hit - pos), {}});
    pos = hit + sep.size();
  }
  std::istringstream out(read_file(out_path));
  std::string line;
  size_t k = 0;
  while (std::getline(out, line)) {
    if (k >= cases.size()) fail(out_path, ": more lines than inputs in ", inp_path);
    std::istringstream ids(line);
    long id;
    while (ids >> id) cases[k].expected.push_back(static_cast<TokenId>(id));
    ++k;
  }
  if (k != cases.size()) fail(out_path, ": ", k, " lines for ", cases.size(), " inputs");
  return cases;
}

}  // namespace pagoda::test
