#include "tools/synth.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "model/architecture.h"
#include "tools/convert.h"
#include "model/recipe.h"
#include "quant/reference.h"

namespace pagoda {
namespace {

// A cheap, seeded generator of roughly normal values (sum of uniforms), one stream per row so
// the output does not depend on the thread count.
float normal_ish(uint64_t& state) {
  float sum = 0;
  for (int k = 0; k < 4; ++k) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    sum += static_cast<float>(state >> 40) * (1.0f / 16777216.0f);
  }
  return (sum - 2.0f) * 1.7320508f;  // unit variance
}

void copy_vocab(const GgufFile& vocab, GgufWriter& w) {
  for (const auto& [key, value] : vocab.metadata()) {
    if (key.rfind("tokenizer.", 0) == 0) w.add_value(key, value);
  }
}

}  // namespace

const ModelShape& find_synth_preset(const std::string& name) {
  if (const ModelShape* shape = find_model_shape(name)) return *shape;
  std::string known;
  for (const auto& p : model_shapes()) known += " " + p.name;
  fail("synth: unknown model shape '", name, "' (known:", known, ")");
}

void write_synthetic_model(const SynthOptions& o,
                           const std::function<void(uint64_t, uint64_t)>& progress) {
  ModelConfig c = find_synth_preset(o.preset).config;
  const WeightRecipe& rule = weight_recipe(o.type, "synth");
  if (o.vocab_path.empty()) fail("synth: give --vocab FILE, a GGUF file with a tokenizer to copy");
  auto vocab = GgufFile::open(o.vocab_path);
  if (!vocab->has("tokenizer.ggml.tokens")) fail(o.vocab_path, ": has no tokenizer.ggml.tokens");
  c.vocab_size = static_cast<uint32_t>(vocab->find("tokenizer.ggml.tokens")->array.size());

  GgufWriter w;
  const std::string a = c.architecture + ".";
  w.add_string("general.architecture", c.architecture);
  w.add_string("general.name", "synthetic " + o.preset + " " + o.type);
  w.add_u32("general.file_type", rule.file_type);
  w.add_u32("general.quantization_version", 2);
  write_gguf_hyper_parameters(c, w, "synth preset " + o.preset);
  if (c.num_experts) {
    w.add_u32(a + "expert_count", c.num_experts);
    w.add_u32(a + "expert_used_count", c.num_experts_used);
    w.add_u32(a + "expert_feed_forward_length", c.expert_ffn_size());
    if (c.shared_expert_intermediate) {
      w.add_u32(a + "expert_shared_feed_forward_length", c.shared_expert_intermediate);
    }
  }
  copy_vocab(*vocab, w);

  const std::vector<PlannedTensor> plan = plan_model_tensors(c, rule);
  const float s = 0.02f;  // std of the random values; norms' weights are ones
  uint64_t total = 0;
  auto rows_of = [](const PlannedTensor& t) {  // every dimension after the first
    uint64_t rows = 1;
    for (size_t d = 1; d < t.shape.size(); ++d) rows *= t.shape[d];
    return rows;
  };
  for (const auto& t : plan) total += row_bytes(t.type, static_cast<int64_t>(t.shape[0])) * rows_of(t);
  auto written = std::make_shared<uint64_t>(0);
  const int threads = o.num_threads > 0 ? o.num_threads : omp_get_num_procs();
  for (size_t ti = 0; ti < plan.size(); ++ti) {
    const PlannedTensor t = plan[ti];
    const uint64_t cols = t.shape[0], rows = rows_of(t);
    const uint64_t rb = row_bytes(t.type, static_cast<int64_t>(cols));
    const uint64_t seed = o.seed * 0x9E3779B97F4A7C15ull + ti * 0xD1B54A32D192ED03ull;
    w.add_tensor(t.name, t.type, t.shape, [=](GgufWriter::Sink& sink) {
      const uint64_t chunk_rows = std::max<uint64_t>(1, (8u << 20) / std::max<uint64_t>(rb, 1));
      std::vector<uint8_t> out;
      for (uint64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
        const uint64_t n = std::min(chunk_rows, rows - r0);
        out.resize(n * rb);
#pragma omp parallel num_threads(threads)
        {
          std::vector<float> row(cols);
#pragma omp for schedule(static)
          for (int64_t r = 0; r < static_cast<int64_t>(n); ++r) {
            uint64_t state = seed ^ ((r0 + r + 1) * 0xBF58476D1CE4E5B9ull);
            for (uint64_t i = 0; i < 3; ++i) normal_ish(state);
            const float std = t.std > 0 ? t.std : s;
            for (uint64_t i = 0; i < cols; ++i) row[i] = t.norm ? 1.0f : t.mean + std * normal_ish(state);
            if (!t.values.empty()) row.assign(t.values.begin(), t.values.end());
            quantize_row(t.type, row.data(), out.data() + r * rb, static_cast<int64_t>(cols));
          }
        }
        sink.write(out.data(), out.size());
        *written += out.size();
        if (progress) progress(*written, total);
      }
    });
  }
  w.write(o.output_path);
}

}  // namespace pagoda
