// pagoda imatrix -m MODEL -f TEXT -o OUT.gguf: runs calibration text through a model and writes
// its importance matrix (tools/imatrix.h) for `pagoda quantize --imatrix` (or llama-quantize).
// The text is cut as llama-imatrix cuts it, so the two tools' files agree: tokenized once (BOS
// first when the model wants one), split into chunks of -c tokens, each chunk's first token
// replaced by BOS; every position of every chunk goes through every layer. Ctrl-C writes what
// was measured so far.
#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>

#include "backend/backend.h"
#include "bench/progress.h"
#include "cli/commands.h"
#include "core/error.h"
#include "tools/imatrix.h"
#include "model/model.h"
#include "model/model_file.h"

namespace pagoda::cli {
namespace {

std::atomic<bool> g_stop{false};
void on_sigint(int) { g_stop = true; }

struct Options {
  std::string model, file, output;
  int32_t ctx = 512;
  int64_t chunks = 0;
  int threads = 0;
};

int run_imatrix(const Options& o) {
  auto file = ModelFile::open(o.model);
  auto model = Model::load(*file);
  const CalibrationText text = calibration_chunks(*file, o.file, o.ctx, o.chunks, "-c");
  const auto& chunks = text.chunks;
  const auto num_chunks = static_cast<int64_t>(chunks.size());

  Imatrix imatrix;
  imatrix.datasets = {o.file};
  imatrix.chunk_size = static_cast<uint32_t>(o.ctx);
  auto backend = make_cpu_backend(o.threads);
  auto collector = make_imatrix_collector(*backend, *file, imatrix);
  std::fprintf(stderr, "%s: %zu tokens, %lld chunks of %d\n", o.file.c_str(), text.num_tokens,
               static_cast<long long>(num_chunks), o.ctx);
  g_stop = false;
  auto old_handler = std::signal(SIGINT, on_sigint);
  bench::Progress progress("imatrix", num_chunks, "chunks");
  const int64_t done = run_imatrix_chunks(*model, *collector, chunks, [&](int64_t n) {
    progress.update(n);
    return !g_stop;
  });
  progress.finish();
  std::signal(SIGINT, old_handler);
  if (done == 0) fail("interrupted before the first chunk: nothing written");
  imatrix.chunk_count = static_cast<uint32_t>(done);
  imatrix.write(o.output);
  std::printf("%s: %zu weight matrices, %lld chunks of %d tokens%s\n", o.output.c_str(),
              imatrix.entries.size(), static_cast<long long>(done), o.ctx,
              g_stop ? " (interrupted: what was measured so far)" : "");
  return g_stop ? 130 : 0;
}

}  // namespace

Action add_imatrix(CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "imatrix",
      "Measure an importance matrix on calibration text (llama.cpp's GGUF imatrix format), "
      "for quantize --imatrix");
  cmd->add_option("-m,--model", o->model, "GGUF file or Hugging Face model folder")->required();
  cmd->add_option("-f,--file", o->file, "Calibration text file")->required();
  cmd->add_option("-o,--output", o->output, "The imatrix GGUF file to write")->required();
  cmd->add_option("-c,--ctx", o->ctx, "Tokens per chunk")
      ->check(CLI::Range(2, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--chunks", o->chunks, "Use at most N chunks; 0 = every whole chunk of the text")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("-t,--threads", o->threads, "Threads (default: all cores)")->check(CLI::Range(0, 1024));
  return [o] { return run_imatrix(*o); };
}

}  // namespace pagoda::cli
