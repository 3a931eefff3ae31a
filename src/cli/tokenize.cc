// pagoda tokenize / detokenize: the same path the conformance tests use, for users.
#include <iostream>
#include <sstream>

#include "cli/commands.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "model/model_file.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::cli {
namespace {

// The largest text --file tokenizes: far more than any text tokenized at once, and a clear
// error on /dev/zero or an endless pipe instead of memory filling up.
constexpr uint64_t kMaxTokenizeFileBytes = uint64_t{256} << 20;

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  auto model = ModelFile::open(path);
  return Tokenizer::create(model->vocab());
}

}  // namespace

Action add_tokenize(CLI::App& app) {
  struct Options {
    std::string model, text, file;
    bool special = false, bos = false, pieces = false;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("tokenize", "Turn text into token ids");
  cmd->add_option("-m,--model", o->model, "GGUF file or Hugging Face model folder")->required();
  auto* text = cmd->add_option("text", o->text, "The text to tokenize");
  auto* file = cmd->add_option("--file", o->file, "Tokenize this file's exact bytes");
  text->excludes(file);
  cmd->add_flag("--special", o->special, "Recognise control tokens written in the text");
  cmd->add_flag("--bos", o->bos, "Add BOS/EOS as the model's metadata says");
  cmd->add_flag("--pieces", o->pieces, "Print each token's text instead of its id");
  return [o] {
    if (o->file.empty() && o->text.empty() && !std::cin.good()) fail("tokenize: no text given");
    std::string input = !o->file.empty() ? read_file(o->file, kMaxTokenizeFileBytes) : o->text;
    auto tok = load_tokenizer(o->model);
    auto ids = tok->encode(input, {.add_special = o->bos, .parse_special = o->special});
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) std::cout << ' ';
      if (o->pieces) {
        std::cout << tok->piece(ids[i]);
      } else {
        std::cout << ids[i];
      }
    }
    std::cout << "\n";
    return 0;
  };
}

Action add_detokenize(CLI::App& app) {
  struct Options {
    std::string model;
    std::vector<std::string> ids;
    bool special = false;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("detokenize", "Turn token ids into text");
  cmd->add_option("-m,--model", o->model, "GGUF file or Hugging Face model folder")->required();
  cmd->add_option("ids", o->ids, "Token ids (separate arguments, or one space-separated string)")
      ->required();
  cmd->add_flag("--special", o->special, "Show control tokens as their text");
  return [o] {
    auto tok = load_tokenizer(o->model);
    std::vector<TokenId> ids;
    for (const std::string& arg : o->ids) {
      std::istringstream in(arg);
      std::string word;
      while (in >> word) {
        size_t used = 0;
        long long id = -1;
        try {
          id = std::stoll(word, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != word.size() || id < 0 || id >= static_cast<long long>(tok->vocab().size())) {
          fail("detokenize: '", word, "' is not a token id of this model (0 to ",
               tok->vocab().size() - 1, ")");
        }
        ids.push_back(static_cast<TokenId>(id));
      }
    }
    std::cout << tok->decode(ids, o->special) << "\n";
    return 0;
  };
}

}  // namespace pagoda::cli
