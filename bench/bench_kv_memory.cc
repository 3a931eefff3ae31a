// What the paged KV cache buys: for one KV budget, how many sequences fit with paged blocks
// against a contiguous max-length allocation per sequence, then a measured mixed-length run
// through the engine (concurrency, KV utilization, preemptions, tokens/s).
//   build/bench/bench_kv_memory [MODEL] [KV_TOKENS] [MAX_LEN] [NUM_REQUESTS]
// Defaults: ../shared/models/stories260K.gguf, 4096 tokens, the model's context, 48 requests.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "bench/kv_fit.h"
#include "engine/engine.h"
#include "model/model.h"
#include "model/model_file.h"

int main(int argc, char** argv) try {
  const std::string model_path =
      argc > 1 ? argv[1] : std::string(PAGODA_SOURCE_DIR) + "/../shared/models/stories260K.gguf";
  const int64_t kv_tokens = argc > 2 ? std::stoll(argv[2]) : 4096;
  auto file = pagoda::ModelFile::open(model_path);
  auto model = pagoda::Model::load(*file);
  const int64_t max_len = argc > 3 ? std::stoll(argv[3]) : model->config().context_length;
  const int num_requests = argc > 4 ? std::stoi(argv[4]) : 48;
  const int64_t block = pagoda::kDefaultBlockSize;

  std::printf("KV budget %lld tokens (%lld blocks of %lld), max sequence length %lld\n",
              static_cast<long long>(kv_tokens), static_cast<long long>(kv_tokens / block),
              static_cast<long long>(block), static_cast<long long>(max_len));
  std::printf("%-22s %-18s %-18s %s\n", "sequence length", "contiguous fit", "paged fit", "gain");
  // Fit arithmetic shared with `pagoda bench memory` (src/bench/kv_fit.h); the same memory in
  // bytes, so the per-token size cancels out.
  const uint64_t kv_bytes_per_token = model->config().kv_bytes_per_token(sizeof(float));
  for (int64_t len : pagoda::bench::kv_fit_lengths(max_len)) {
    const pagoda::bench::KvFit fit =
        pagoda::bench::kv_fit(kv_tokens / block, block, kv_bytes_per_token, max_len, len);
    std::printf("%-22lld %-18lld %-18lld %.1fx\n", static_cast<long long>(len),
                static_cast<long long>(fit.contiguous), static_cast<long long>(fit.paged),
                fit.gain());
  }

  // Measured: requests of mixed lengths through the engine under the same budget.
  auto backend = pagoda::make_cpu_backend(0);
  pagoda::EngineConfig config;
  config.num_kv_cache_tokens = kv_tokens;
  config.max_num_seqs = 256;
  pagoda::Engine engine(*model, *backend, config);
  std::mt19937 rng(7);
  const int64_t vocab = model->config().vocab_size;
  std::uniform_int_distribution<int> prompt_len(8, static_cast<int>(std::max<int64_t>(16, max_len / 4)));
  std::uniform_int_distribution<int> out_len(8, static_cast<int>(std::max<int64_t>(16, max_len / 4)));
  std::uniform_int_distribution<int64_t> token(3, vocab - 1);
  int64_t total_tokens = 0;
  for (int r = 0; r < num_requests; ++r) {
    pagoda::GenerationRequest request;
    request.prompt.resize(static_cast<size_t>(prompt_len(rng)));
    for (auto& t : request.prompt) t = static_cast<pagoda::TokenId>(token(rng));
    request.sampling.temperature = 0;
    request.max_tokens = out_len(rng);
    total_tokens += static_cast<int64_t>(request.prompt.size()) + request.max_tokens;
    engine.add_request(std::move(request));
  }
  double sum_util = 0, peak_util = 0;
  int64_t steps = 0;
  int32_t peak_running = 0;
  auto t0 = std::chrono::steady_clock::now();
  while (engine.has_work()) {
    engine.step();
    const auto s = engine.stats().scheduler;
    sum_util += s.kv.utilization();
    peak_util = std::max(peak_util, s.kv.utilization());
    peak_running = std::max(peak_running, s.num_running);
    ++steps;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto s = engine.stats();
  std::printf("\nmixed run: %d requests (prompt and output 8..%lld tokens), %lld steps, %.2f s\n",
              num_requests, static_cast<long long>(std::max<int64_t>(16, max_len / 4)),
              static_cast<long long>(steps), seconds);
  std::printf("  peak concurrent sequences %d (contiguous allocation would allow %lld)\n",
              peak_running, static_cast<long long>(kv_tokens / max_len));
  std::printf("  KV utilization mean %.1f%%, peak %.1f%%; preemptions %lld\n",
              100 * sum_util / std::max<int64_t>(steps, 1), 100 * peak_util,
              static_cast<long long>(s.scheduler.num_preemptions));
  std::printf("  %lld token rows computed, %.1f tokens/s (prompt + output %lld)\n",
              static_cast<long long>(s.num_computed_tokens), s.num_computed_tokens / seconds,
              static_cast<long long>(total_tokens));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
