// pagoda embed: one embedding per text, as the server's /v1/embeddings computes it.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "backend/backend_choice.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "engine/embedder.h"
#include "model/model.h"
#include "model/model_file.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::cli {
namespace {

constexpr uint64_t kMaxEmbedFileBytes = uint64_t{256} << 20;

struct Options {
  std::string model, file, pooling, backend = "cpu";
  std::vector<std::string> texts;
  bool normalize = false, plain = false, quiet = false;
  int threads = 0;
  int64_t batch_tokens = 4096;
};

// --file's lines, one text each; empty lines are skipped.
std::vector<std::string> read_lines(const std::string& path) {
  std::istringstream in(read_file(path, kMaxEmbedFileBytes));
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) lines.push_back(std::move(line));
  }
  return lines;
}

void print(const std::vector<float>& v, size_t index, size_t tokens, bool plain) {
  std::string out;
  char buf[32];
  if (!plain) out = str_cat("{\"index\":", index, ",\"tokens\":", tokens, ",\"embedding\":[");
  for (size_t d = 0; d < v.size(); ++d) {
    std::snprintf(buf, sizeof buf, "%s%.9g", d ? (plain ? " " : ",") : "", double{v[d]});
    out += buf;
  }
  out += plain ? "\n" : "]}\n";
  std::cout << out;
}

int run(const Options& o) {
  std::vector<std::string> texts = o.file.empty() ? o.texts : read_lines(o.file);
  if (texts.empty()) throw UsageError("embed: no text given (TEXT arguments or --file F)");
  auto file = ModelFile::open(o.model);
  auto model = Model::load(*file);
  auto tokenizer = Tokenizer::create(file->vocab());
  auto backend = make_backend(o.backend, o.threads);
  model->prepare(*backend);
  Embedder embedder(*model, *backend, *tokenizer,
                    {.pooling = o.pooling, .normalize = o.normalize, .batch_tokens = o.batch_tokens});
  std::vector<std::vector<TokenId>> inputs;
  for (size_t i = 0; i < texts.size(); ++i) {
    inputs.push_back(embedder.tokenize(texts[i]));
    if (static_cast<int64_t>(inputs.back().size()) > embedder.max_tokens()) {
      fail("embed: text ", i + 1, " has ", inputs.back().size(), " tokens, more than the model's ",
           embedder.max_tokens());
    }
  }
  const auto start = std::chrono::steady_clock::now();
  EmbeddingResult r = embedder.embed(inputs);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (size_t i = 0; i < r.vectors.size(); ++i) print(r.vectors[i], i, inputs[i].size(), o.plain);
  if (!o.quiet) {
    std::fprintf(stderr,
                 "embed: %zu texts, %lld tokens in %.3f s: %.1f texts/s, %.0f tokens/s (%s "
                 "pooling%s, %lld dimensions)\n",
                 texts.size(), static_cast<long long>(r.prompt_tokens), seconds,
                 static_cast<double>(texts.size()) / seconds,
                 static_cast<double>(r.prompt_tokens) / seconds, embedder.pooling().c_str(),
                 embedder.normalizes() ? ", normalised" : "",
                 static_cast<long long>(embedder.dimensions()));
  }
  return 0;
}

}  // namespace

Action add_embed(CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "embed", "One embedding per text: a JSON line each ({\"index\", \"tokens\", \"embedding\"})");
  cmd->add_option("-m,--model", o->model,
                  "An embedding model (GGUF file or Hugging Face folder), or a generative one "
                  "with --pooling")
      ->required();
  auto* text = cmd->add_option("text", o->texts, "Texts to embed, one embedding each");
  auto* file = cmd->add_option("--file", o->file, "Embed each non-empty line of this file");
  text->excludes(file);
  cmd->add_option("--pooling", o->pooling,
                  "mean, cls or last (default: an embedding model's own, from 1_Pooling or "
                  "pooling_type); a generative model needs one")
      ->check(CLI::IsMember({"mean", "cls", "last"}));
  cmd->add_flag("--normalize", o->normalize,
                "L2-normalise every vector (done anyway when the model says so)");
  cmd->add_flag("--plain", o->plain, "Print each vector as space-separated numbers, no JSON");
  cmd->add_flag("-q,--quiet", o->quiet, "No timing line on stderr");
  cmd->add_option("--batch-tokens", o->batch_tokens, "Tokens per forward pass")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("-t,--threads", o->threads, "Threads (0: all cores)")->check(CLI::Range(0, 1024));
  cmd->add_option("--backend,--device", o->backend, backend_help());
  return [o] { return run(*o); };
}

}  // namespace pagoda::cli
