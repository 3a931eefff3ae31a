// Tokenizer speed in bytes/s on a real text (../shared/testdata/text/war-and-peace.txt by
// default; PAGODA_BENCH_TEXT overrides), for each vocabulary kind.
//   build/bench/bench_tokenizer [--benchmark_filter=gpt_2]
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "core/mapped_file.h"
#include "format/gguf_vocab.h"
#include "format/gguf.h"
#include "tokenizer/tokenizer.h"

namespace {

std::string shared_path(const std::string& relative) {
  const char* env = std::getenv("PAGODA_SHARED");
  std::string root = env ? env : std::string(PAGODA_SOURCE_DIR) + "/../shared";
  return root + "/" + relative;
}

// cold: a fresh tokenizer for every pass, so per-word caches start empty (the first request's
// speed); warm: one tokenizer reused (a server's steady state).
void bench_vocab(benchmark::State& state, const std::string& vocab_name, bool cold) {
  const char* text_env = std::getenv("PAGODA_BENCH_TEXT");
  std::string text_path = text_env ? text_env : shared_path("testdata/text/war-and-peace.txt");
  std::string vocab_path = shared_path("testdata/vocab/ggml-vocab-" + vocab_name + ".gguf");
  if (!std::filesystem::exists(text_path) || !std::filesystem::exists(vocab_path)) {
    state.SkipWithError("../shared text or vocabulary not found");
    return;
  }
  std::string text = pagoda::read_file(text_path);
  auto file = pagoda::GgufFile::open(vocab_path);
  const pagoda::Vocab vocab = pagoda::vocab_from_gguf(*file);
  auto tok = pagoda::Tokenizer::create(vocab);
  size_t num_tokens = 0;
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      tok = pagoda::Tokenizer::create(vocab);
      state.ResumeTiming();
    }
    auto ids = tok->encode(text);
    num_tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(num_tokens);
}

}  // namespace

BENCHMARK_CAPTURE(bench_vocab, llama_spm_cold, std::string("llama-spm"), true)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bench_vocab, llama_spm_warm, std::string("llama-spm"), false)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bench_vocab, gpt_2_cold, std::string("gpt-2"), true)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bench_vocab, gpt_2_warm, std::string("gpt-2"), false)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bench_vocab, llama_bpe_cold, std::string("llama-bpe"), true)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bench_vocab, llama_bpe_warm, std::string("llama-bpe"), false)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bench_vocab, bert_bge_cold, std::string("bert-bge"), true)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bench_vocab, bert_bge_warm, std::string("bert-bge"), false)
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
