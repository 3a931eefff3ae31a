// What every in-process benchmark loads: the model file, its tokenizer, the model and a CPU
// backend, plus the names a report shows (file name, dominant weight type), and the engine
// configuration the benchmark options describe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "engine/engine.h"
#include "model/model.h"
#include "model/model_file.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::bench {

struct BenchModel {
  std::unique_ptr<ModelFile> file;
  std::unique_ptr<Tokenizer> tokenizer;  // nullptr when the file has no vocabulary
  std::unique_ptr<Model> model;
  std::unique_ptr<Backend> backend;
  std::string path;
  std::string name;          // the file (or folder) name without its directory
  std::string precision;     // the file's type ("Q4_K_M"; file_precision)
  std::string weight_types;  // every type by falling share: "Q4_0 + Q6_K + F32"
  uint64_t weight_bytes = 0;
  // What one step multiplies by: every layer matrix and the output matrix, read whole (the
  // token table is only looked up). Decode's bandwidth and prefill's FLOP/s are counted on these.
  uint64_t step_weight_bytes = 0;
  uint64_t step_parameters = 0;
  int num_threads = 0;  // threads the backend runs (every core when not given)

  const Tokenizer& need_tokenizer() const;  // throws Error when the file has none
  const Vocab* vocab() const { return tokenizer ? &tokenizer->vocab() : nullptr; }
};

BenchModel load_bench_model(const std::string& path, int num_threads,
                            const std::string& backend = "cpu");

// "Q4_0 + Q6_K + F32" -> "Q4_0".
std::string dominant_type(const std::string& types);
// The file's precision: its general.file_type by pagoda's name for it ("Q4_K_M", whatever type
// the most bytes have), else the dominant one of `types` (safetensors, an unknown file type).
std::string file_precision(const ModelFile& file, const std::string& types);

// The engine settings a benchmark takes from its options. A KV budget of neither bytes nor
// tokens means "enough": the caller passes its default in tokens.
struct EngineOptions {
  double kv_cache_gb = 0;  // GiB of K/V memory
  int64_t kv_tokens = 0;
  int32_t max_num_seqs = 64;
  int32_t max_num_batched_tokens = 2048;
  int32_t block_size = kDefaultBlockSize;
  bool no_prefix_caching = false;
  std::string kv_type = "f16";  // backend/kv_format.h
};
// Throws Error for both budgets at once or a size that is not a size.
EngineConfig engine_config(const EngineOptions& options, int64_t default_kv_tokens);

}  // namespace pagoda::bench
