// Memory estimates against published sizes of known models and against real files.
#include <gtest/gtest.h>

#include <filesystem>

#include "planner/estimate.h"
#include "core/error.h"
#include "model/model_file.h"
#include "tools/synth.h"
#include "test_util.h"

namespace pagoda {
namespace {

const ModelConfig& preset(const std::string& name) { return find_estimate_preset(name).config; }

TEST(Estimate, KvBytesPerTokenOfKnownModels) {
  // 2 (K, V) x layers x KV heads x head_dim x 2 bytes (F16).
  EXPECT_EQ(kv_bytes_per_token(preset("llama-2-7b"), DType::kF16), 524288u);   // 2x32x32x128x2
  EXPECT_EQ(kv_bytes_per_token(preset("llama-3-8b"), DType::kF16), 131072u);   // 2x32x8x128x2
  EXPECT_EQ(kv_bytes_per_token(preset("llama-2-70b"), DType::kF16), 327680u);  // 2x80x8x128x2
  EXPECT_EQ(kv_bytes_per_token(preset("qwen2-7b"), DType::kF16), 57344u);      // 2x28x4x128x2
  EXPECT_EQ(kv_bytes_per_token(preset("llama-2-13b"), DType::kF16), 819200u);  // 2x40x40x128x2
  EXPECT_EQ(kv_bytes_per_token(preset("llama-3-70b"), DType::kF16), 327680u);
  EXPECT_EQ(kv_bytes_per_token(preset("qwen2-72b"), DType::kF16), 327680u);
  // Element size from the traits table: F32 doubles it, Q8_0 is 34 bytes per 32 elements.
  EXPECT_EQ(kv_bytes_per_token(preset("llama-3-8b"), DType::kF32), 262144u);
  EXPECT_EQ(kv_bytes_per_token(preset("llama-3-8b"), DType::kQ8_0), 69632u);  // 64 x 1024/32 x 34
  // The same number the model config computes for F16.
  for (const auto& p : model_shapes()) {
    EXPECT_EQ(kv_bytes_per_token(p.config, DType::kF16), p.config.kv_bytes_per_token(2)) << p.name;
  }
}

// Gemma 4 E2B: of 35 layers only the first 15 hold K/V (the last 20 read layers 13's and
// 14's); among those, 12 sliding-window layers of one 256-wide KV head and 3 global ones of
// one 512-wide head.
TEST(Estimate, KvBytesPerTokenCountsEachLayersWidth) {
  EXPECT_EQ(kv_bytes_per_token(preset("gemma4-e2b"), DType::kF16), 18432u);  // 2x(12x256+3x512)x2
  // gemma4-tiny: sliding layers 0, 1, 3, 4 of 1 x 64, global 2 and 5 of 2 x 128.
  EXPECT_EQ(kv_bytes_per_token(preset("gemma4-tiny"), DType::kF32), 6144u);  // 2x(4x64+2x256)x4
}

TEST(Estimate, KvWithoutGqaUsesHiddenSize) {
  // Llama 2 7B has no GQA: both formulas agree.
  EXPECT_EQ(kv_bytes_per_token_without_gqa(preset("llama-2-7b"), DType::kF16), 524288u);
  EXPECT_EQ(kv_bytes_per_token_without_gqa(preset("llama-3-8b"), DType::kF16), 524288u);  // 4x
  EXPECT_EQ(kv_bytes_per_token_without_gqa(preset("llama-2-70b"), DType::kF16),
            2621440u);  // 2x80x8192x2
  EXPECT_EQ(kv_bytes_per_token_without_gqa(preset("qwen2-7b"), DType::kF16),
            401408u);  // 2x28x3584x2
}

TEST(Estimate, ParameterCountsMatchPublishedModels) {
  // Hugging Face's parameter counts of the released checkpoints.
  EXPECT_EQ(estimate_weights(preset("llama-2-7b"), "f16").num_parameters, 6738415616u);
  EXPECT_EQ(estimate_weights(preset("llama-2-13b"), "f16").num_parameters, 13015864320u);
  EXPECT_EQ(estimate_weights(preset("llama-2-70b"), "f16").num_parameters, 68976648192u);
  EXPECT_EQ(estimate_weights(preset("llama-3-8b"), "f16").num_parameters, 8030261248u);
  EXPECT_EQ(estimate_weights(preset("qwen2-7b"), "f16").num_parameters, 7615616512u);
}

// The 2026 shapes against their makers' published sizes (Google's Gemma 4 model card: E2B 2.3B
// effective parameters, 5.1B with the per-layer embeddings and its vision and audio encoders,
// which pagoda does not load; 26B-A4B 25.2B in all, 3.8B active; OpenAI's gpt-oss-20b: 20.9B
// in all, 3.6B active). Active: the parameters a token multiplies, all but the routed experts
// it does not use and a token table it only looks up (an untied one); the per-layer input
// table is looked up too, so "effective" leaves it out.
TEST(Estimate, NewShapesMatchTheirPublishedSizes) {
  auto billions = [](double n) { return n / 1e9; };
  auto active = [&](const ModelConfig& c) {
    const WeightEstimate w = estimate_weights(c, "f16");
    const double experts = static_cast<double>(c.num_layers) * c.num_experts * 3.0 * c.hidden_size *
                           c.expert_ffn_size();
    return billions(double(w.num_parameters) - (w.tied ? 0.0 : double(w.embedding_parameters)) -
                    experts * (1.0 - static_cast<double>(c.num_experts_used) / c.num_experts));
  };
  const ModelConfig& e2b = preset("gemma4-e2b");
  const double e2b_total = billions(double(estimate_weights(e2b, "f16").num_parameters));
  const double per_layer_table = billions(static_cast<double>(e2b.num_layers) * e2b.per_layer_input_dim *
                                          e2b.vocab_size);
  EXPECT_NEAR(e2b_total - per_layer_table, 2.3, 0.05);
  EXPECT_GT(e2b_total, 4.5);
  EXPECT_LT(e2b_total, 5.1);
  const ModelConfig& moe = preset("gemma4-26b-a4b");
  EXPECT_NEAR(billions(double(estimate_weights(moe, "f16").num_parameters)), 25.2, 0.1);
  EXPECT_NEAR(active(moe), 3.8, 0.1);
  const ModelConfig& oss = preset("gpt-oss-20b");
  EXPECT_NEAR(billions(double(estimate_weights(oss, "f16").num_parameters)), 20.9, 0.1);
  EXPECT_NEAR(active(oss), 3.6, 0.1);
}

TEST(Estimate, WeightBytesPerType) {
  const ModelConfig& llama3 = preset("llama-3-8b");
  // Norms (2 per layer + the final one) stay F32: 65 x 4096 parameters.
  const uint64_t norms = 65 * 4096, matrices = 8030261248u - norms;
  EXPECT_EQ(estimate_weights(llama3, "f16").num_bytes, 2 * matrices + 4 * norms);
  EXPECT_EQ(estimate_weights(llama3, "bf16").num_bytes, 2 * matrices + 4 * norms);
  EXPECT_EQ(estimate_weights(llama3, "f32").num_bytes, 4 * (matrices + norms));
  EXPECT_EQ(estimate_weights(llama3, "q8_0").num_bytes, matrices / 32 * 34 + 4 * norms);

  // Q4_0 puts output.weight (32000 x 4096) at Q6_K: 210 bytes per 256.
  const ModelConfig& llama2 = preset("llama-2-7b");
  const uint64_t output = 32000ull * 4096, rest = 6738415616u - 65 * 4096 - output;
  const uint64_t q4_0 = rest / 32 * 18 + output / 256 * 210 + 4 * 65 * 4096;
  EXPECT_EQ(q4_0, 3825065984u);  // by hand; the published llama-2-7b.Q4_0.gguf is 3.83 GB
  EXPECT_EQ(estimate_weights(llama2, "q4_0").num_bytes, q4_0);
  EXPECT_EQ(estimate_weights(llama2, "q8_0").num_bytes, 7160348672u);

  // Q4_K_M is a mixture (Q4_K, with Q6_K on output and on half the attn_v / ffn_down), so its
  // bits per weight lie between Q4_K's 4.5 and Q6_K's 6.5625. The published llama-2-7b
  // Q4_K_M file is 4.08 GB; without the more-bits layers it would be 3.83 GB.
  const WeightEstimate mixed = estimate_weights(llama2, "q4_k_m");
  const double bits = 8.0 * mixed.num_bytes / mixed.num_parameters;
  EXPECT_GT(bits, 4.6);
  EXPECT_LT(bits, 5.0);
  EXPECT_NEAR(static_cast<double>(mixed.num_bytes), 4.08e9, 0.005 * 4.08e9);
  EXPECT_EQ(mixed.num_parameters, 6738415616u);
}

TEST(Estimate, UnknownNamesListTheKnownOnes) {
  try {
    find_estimate_preset("gpt-5");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown preset 'gpt-5'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("llama-3-70b"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("smollm2-135m"), std::string::npos);
  }
  EXPECT_THROW(estimate_weights(preset("llama-3-8b"), "q3_x"), Error);
  EXPECT_THROW(parse_estimate_kv_type("q4_k"), Error);  // no K-quant caches
  EXPECT_EQ(parse_estimate_kv_type("q8_0"), DType::kQ8_0);
}

TEST(Estimate, MaxBatchArithmetic) {
  // floor((100 - 30 - 10) / (2 x 5)) = 6.
  EXPECT_EQ(max_batch_that_fits(100, 30, 10, 2, 5), 6u);
  EXPECT_EQ(max_batch_that_fits(69, 30, 10, 2, 5), 2u);  // 29 / 10
  EXPECT_EQ(max_batch_that_fits(70, 30, 10, 2, 5), 3u);  // exactly three
  EXPECT_EQ(max_batch_that_fits(40, 30, 10, 2, 5), 0u);  // weights and overhead only
  EXPECT_EQ(max_batch_that_fits(39, 30, 10, 2, 5), 0u);  // not even those
}

TEST(Estimate, Llama3On24GiB) {
  EstimateOptions o;
  o.context = 8192;
  o.memory_bytes = 24ull << 30;
  const ModelConfig& c = preset("llama-3-8b");
  const Estimate e = estimate_memory(c, estimate_weights(c, "f16"), o);
  EXPECT_EQ(e.weights.num_bytes, 16061054976u);
  EXPECT_EQ(e.kv_bytes_per_token, 131072u);
  EXPECT_EQ(e.kv_bytes_per_sequence, 1ull << 30);  // 128 KiB x 8192
  EXPECT_EQ(e.kv_bytes_total, 1ull << 30);
  // 2048 x (2x4096 + 2x4096 + 2x1024 + 2x14336) x 4 + 256 x 128256 x 4.
  EXPECT_EQ(e.overhead_bytes, 385875968u + 131334144u);
  EXPECT_EQ(e.total_bytes, 16061054976u + (1ull << 30) + 517210112u);
  // (25769803776 - 16061054976 - 517210112) / 2^30 = 8.56.
  EXPECT_EQ(e.max_batch, 8u);
  EXPECT_EQ(e.fits, true);
}

// qwen3.5-moe-tiny, by hand: three layers of which layers 0 and 2 are Gated DeltaNet ones (no
// K/V) and layer 1 attends with 2 KV heads of 64; the DeltaNet layers have 2 key heads and 4
// value heads of 32 and a conv1d of 4 taps.
TEST(Estimate, HybridModelCountsAttentionLayersAndTheRecurrentState) {
  const ModelConfig& c = preset("qwen3.5-moe-tiny");
  // K/V of the one attention layer: 2 x 2 KV heads x 64 x 2 bytes (F16).
  EXPECT_EQ(kv_bytes_per_token(c, DType::kF16), 512u);
  EXPECT_EQ(kv_bytes_per_token(c, "f16"), 512u);
  EXPECT_EQ(c.kv_bytes_per_token(2), 512u);               // what `inspect` prints
  EXPECT_EQ(kv_bytes_per_token_without_gqa(c, "f16"), 1024u);  // 2 x 1 layer x 256 x 2
  // Per DeltaNet layer, F32: conv window (2 x 2 x 32 + 4 x 32 = 256 channels) x 3 taps = 768,
  // delta state 4 heads x 32 x 32 = 4096; (768 + 4096) x 4 bytes x 2 layers = 38912.
  EXPECT_EQ(state_bytes_per_sequence(c), 38912u);
  EXPECT_EQ(state_bytes_per_sequence(preset("qwen3-tiny")), 0u);
  EstimateOptions o;
  o.context = 100;
  o.batch = 3;
  o.overhead_bytes = 1000;
  const WeightEstimate w = estimate_weights(c, "f32");
  o.memory_bytes = w.num_bytes + 1000 + 5 * (51200 + 38912) - 1;  // four sequences and most of a fifth
  const Estimate e = estimate_memory(c, w, o);
  EXPECT_EQ(e.kv_bytes_per_sequence, 51200u);  // 512 x 100
  EXPECT_EQ(e.kv_bytes_total, 153600u);
  EXPECT_EQ(e.state_bytes_per_sequence, 38912u);
  EXPECT_EQ(e.state_bytes_total, 116736u);      // x 3
  EXPECT_EQ(e.total_bytes, w.num_bytes + 153600u + 116736u + 1000u);
  EXPECT_EQ(e.max_batch, 4u);
  EXPECT_EQ(max_batch_that_fits(100, 30, 10, 2, 5, 2), 5u);  // floor(60 / (10 + 2))
}

TEST(Estimate, FitsExactlyUpToMaxBatch) {
  for (const auto& p : model_shapes()) {
    EstimateOptions o;
    o.context = 4096;
    o.memory_bytes = 80ull << 30;
    const WeightEstimate w = estimate_weights(p.config, "q4_k_m");
    const Estimate e = estimate_memory(p.config, w, o);
    if (*e.max_batch == 0) {
      EXPECT_FALSE(*e.fits) << p.name;
      continue;
    }
    o.batch = *e.max_batch;
    EXPECT_TRUE(*estimate_memory(p.config, w, o).fits) << p.name;
    o.batch = *e.max_batch + 1;
    EXPECT_FALSE(*estimate_memory(p.config, w, o).fits) << p.name;
  }
}

TEST(Estimate, DefaultsAndErrors) {
  const ModelConfig& c = preset("qwen2-7b");
  const Estimate e = estimate_memory(c, estimate_weights(c, "q8_0"), {});
  EXPECT_EQ(e.context, 32768u);  // the model's own context
  EXPECT_EQ(e.batch, 1u);
  EXPECT_FALSE(e.fits.has_value());
  EXPECT_FALSE(e.max_batch.has_value());
  EstimateOptions zero_batch;
  zero_batch.batch = 0;
  EXPECT_THROW(estimate_memory(c, {}, zero_batch), Error);
  EXPECT_THROW(estimate_memory(ModelConfig{}, {}, {}), Error);
  EstimateOptions overhead;
  overhead.overhead_bytes = 0;
  EXPECT_EQ(estimate_memory(c, {}, overhead).overhead_bytes, 0u);
}

TEST(Estimate, RealFileWeightsAreTheTensorBytes) {
  PAGODA_SHARED_OR_SKIP(path, "models/stories260K.gguf");
  auto file = ModelFile::open(path);
  const WeightEstimate w = file_weights(*file);
  uint64_t bytes = 0, elements = 0;
  for (const auto& t : file->tensors()) {
    bytes += static_cast<uint64_t>(t.num_elements) * dtype_traits(t.type).type_size /
             dtype_traits(t.type).block_size;
    elements += t.num_elements;
  }
  EXPECT_EQ(w.num_bytes, bytes);
  EXPECT_EQ(w.num_parameters, elements);
  EXPECT_GT(w.num_bytes, 0u);
  // The tensors are no larger than the file that holds them.
  EXPECT_LE(w.num_bytes, std::filesystem::file_size(path));
  const Estimate e = estimate_memory(file->config(), w, {});
  EXPECT_EQ(e.kv_bytes_per_token, file->config().kv_bytes_per_token(2));
}

// The preset arithmetic and pagoda synth's writer must list the same tensors at the same types:
// write smollm2-135m as Q4_K_M (its 576-wide rows exercise the K-quant fallbacks, its tied
// embeddings the missing output.weight) and each family's test shape (Qwen3's and Gemma 3's
// extra norms, Phi-3's fused tensors and untied output, the MoE shapes' router and stacked
// experts), and compare with their estimates.
TEST(Estimate, PresetBytesEqualASynthesizedFile) {
  PAGODA_SHARED_OR_SKIP(vocab, "testdata/vocab/ggml-vocab-gpt-2.gguf");
  for (const char* shape : {"smollm2-135m", "qwen3-tiny", "gemma3-tiny", "phi-3-tiny", "mixtral-tiny",
                            "qwen3-moe-tiny", "gpt-oss-tiny", "gemma4-tiny", "gemma4-moe-tiny"}) {
    SCOPED_TRACE(shape);
    const std::string out = test::temp_dir() + "/" + shape + ".gguf";
    SynthOptions o;
    o.preset = shape;
    o.type = "q4_k_m";
    o.vocab_path = vocab;
    o.output_path = out;
    write_synthetic_model(o, nullptr);
    auto file = ModelFile::open(out);
    ModelConfig c = preset(shape);
    c.vocab_size = file->config().vocab_size;  // the copied vocabulary's size
    const WeightEstimate estimated = estimate_weights(c, "q4_k_m");
    const WeightEstimate actual = file_weights(*file);
    EXPECT_EQ(estimated.num_parameters, actual.num_parameters);
    EXPECT_EQ(estimated.num_bytes, actual.num_bytes);
  }
}

}  // namespace
}  // namespace pagoda
