// Loading a model for an in-process benchmark (see bench_model.h).
#include "bench/bench_model.h"

#include <omp.h>

#include <cctype>
#include <cmath>
#include <filesystem>

#include "backend/backend_choice.h"
#include "planner/estimate.h"
#include "core/error.h"
#include "model/kv_storage.h"
#include "model/model_check.h"
#include "model/recipe.h"

namespace pagoda::bench {

const Tokenizer& BenchModel::need_tokenizer() const {
  if (!tokenizer) fail(path, ": the file has no tokenizer, so text prompts cannot be encoded");
  return *tokenizer;
}

std::string dominant_type(const std::string& types) { return types.substr(0, types.find(' ')); }

std::string file_precision(const ModelFile& file, const std::string& types) {
  const WeightRecipe* recipe = file_recipe(file);
  if (recipe == nullptr) return dominant_type(types);
  std::string name(recipe->name);
  for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return name;
}

BenchModel load_bench_model(const std::string& path, int num_threads, const std::string& backend) {
  BenchModel m;
  m.path = path;
  m.name = std::filesystem::path(path).filename().string();
  if (m.name.empty()) m.name = std::filesystem::path(path).parent_path().filename().string();
  m.file = ModelFile::open(path);
  check_model(*m.file);
  if (m.file->has_vocab()) m.tokenizer = Tokenizer::create(m.file->vocab());
  m.model = Model::load(*m.file);
  m.backend = make_backend(backend, num_threads);
  const WeightEstimate weights = file_weights(*m.file);
  m.weight_types = weights.type;
  m.precision = file_precision(*m.file, weights.type);
  m.weight_bytes = m.model->weight_bytes();
  m.step_weight_bytes = weights.layer_bytes + weights.output_bytes;
  m.step_parameters = weights.layer_parameters + weights.output_parameters;
  m.num_threads = num_threads > 0 ? num_threads : omp_get_num_procs();  // as the backend does
  return m;
}

EngineConfig engine_config(const EngineOptions& o, int64_t default_kv_tokens) {
  if (o.kv_cache_gb != 0 && o.kv_tokens != 0) {
    fail("give the KV budget as --kv-cache-gb or --kv-tokens, not both");
  }
  if (!std::isfinite(o.kv_cache_gb) || o.kv_cache_gb < 0 || o.kv_cache_gb > 1e6) {
    fail("--kv-cache-gb ", o.kv_cache_gb, " is not a size in GiB");
  }
  EngineConfig c;
  c.block_size = o.block_size;
  c.max_num_seqs = o.max_num_seqs;
  c.max_num_batched_tokens = o.max_num_batched_tokens;
  c.enable_prefix_caching = !o.no_prefix_caching;
  c.kv_type = parse_kv_type(o.kv_type);
  if (o.kv_cache_gb > 0) {
    c.kv_cache_bytes = static_cast<uint64_t>(std::llround(o.kv_cache_gb * 1073741824.0));
  } else {
    c.num_kv_cache_tokens = o.kv_tokens > 0 ? o.kv_tokens : default_kv_tokens;
  }
  return c;
}

}  // namespace pagoda::bench
