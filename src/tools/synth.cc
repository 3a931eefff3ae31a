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

ModelConfig make_config(const char* arch, uint32_t layers, uint32_t hidden, uint32_t ff,
                        uint32_t heads, uint32_t kv_heads, uint32_t head_dim, uint32_t vocab,
                        uint32_t context, float theta, bool tied, uint32_t window = 0) {
  ModelConfig c;
  c.architecture = arch;
  c.num_layers = layers;
  c.hidden_size = hidden;
  c.intermediate_size = ff;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.vocab_size = vocab;
  c.context_length = context;
  c.rope_theta = theta;
  c.tie_embeddings = tied;
  c.sliding_window = window;
  c.rms_norm_eps = 1e-5f;
  return c;
}

SynthPreset moe_config(const char* name, ModelConfig c, uint32_t experts, uint32_t used,
                       uint32_t expert_ff) {
  c.num_experts = experts;
  c.num_experts_used = used;
  c.expert_intermediate = expert_ff;
  return {name, c};
}

// Shapes from each model's published config.json.
const std::vector<SynthPreset> kPresets = {
    {"llama-3.2-1b", make_config("llama", 16, 2048, 8192, 32, 8, 64, 128256, 131072, 500000, true)},
    {"llama-3.2-3b", make_config("llama", 28, 3072, 8192, 24, 8, 128, 128256, 131072, 500000, true)},
    {"llama-3.1-8b", make_config("llama", 32, 4096, 14336, 32, 8, 128, 128256, 131072, 500000, false)},
    {"llama-2-7b", make_config("llama", 32, 4096, 11008, 32, 32, 128, 32000, 4096, 10000, false)},
    {"tinyllama-1.1b", make_config("llama", 22, 2048, 5632, 32, 4, 64, 32000, 2048, 10000, false)},
    {"smollm2-135m", make_config("llama", 30, 576, 1536, 9, 3, 64, 49152, 8192, 100000, true)},
    {"mistral-7b", make_config("llama", 32, 4096, 14336, 32, 8, 128, 32768, 32768, 1000000, false)},
    {"qwen2.5-0.5b", make_config("qwen2", 24, 896, 4864, 14, 2, 64, 151936, 32768, 1000000, true)},
    {"qwen2.5-1.5b", make_config("qwen2", 28, 1536, 8960, 12, 2, 128, 151936, 32768, 1000000, true)},
    {"qwen3-0.6b", make_config("qwen3", 28, 1024, 3072, 16, 8, 128, 151936, 40960, 1000000, true)},
    {"gemma3-270m", make_config("gemma3", 18, 640, 2048, 4, 1, 256, 262144, 32768, 1000000, true, 512)},
    // Test shapes: each family's quirks at a size a test writes in a second. Qwen3's heads are
    // wider than the hidden size (4 x 128 > 256) and normed per head; Gemma 3's six layers hold
    // five sliding-window ones and a global one, with a window shorter than the test sequences.
    {"phi-3-mini", make_config("phi3", 32, 3072, 8192, 32, 32, 96, 32064, 4096, 10000, false)},
    {"qwen3-tiny", make_config("qwen3", 3, 256, 768, 4, 2, 128, 151936, 4096, 1000000, true)},
    {"gemma3-tiny", make_config("gemma3", 6, 256, 768, 4, 1, 128, 262144, 4096, 1000000, true, 32)},
    moe_config("mixtral-8x7b", make_config("llama", 32, 4096, 14336, 32, 8, 128, 32000, 32768, 1000000, false), 8, 2, 0),
    moe_config("qwen3-moe-30b-a3b", make_config("qwen3moe", 48, 2048, 6144, 32, 4, 128, 151936, 40960, 1000000, false), 128, 8, 768),
    // Mixtral's and Qwen3-MoE's routing at test size: 8 experts, 2 used per token.
    moe_config("mixtral-tiny", make_config("llama", 3, 256, 512, 4, 2, 64, 32000, 4096, 1000000, false), 8, 2, 0),
    moe_config("qwen3-moe-tiny", make_config("qwen3moe", 3, 256, 768, 4, 2, 128, 151936, 4096, 1000000, true), 8, 2, 256),
    // Phi-3's fused Q/K/V and gate/up tensors, here with grouped K/V heads (Phi-3-medium's).
    {"phi-3-tiny", make_config("phi3", 3, 256, 768, 4, 2, 64, 32064, 4096, 10000, false)},
};

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

const std::vector<SynthPreset>& synth_presets() { return kPresets; }

const SynthPreset& find_synth_preset(const std::string& name) {
  for (const auto& p : kPresets) {
    if (p.name == name) return p;
  }
  std::string known;
  for (const auto& p : kPresets) known += " " + p.name;
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
            for (uint64_t i = 0; i < cols; ++i) row[i] = t.norm ? 1.0f : s * normal_ish(state);
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
