// Weight recipes (model/recipe.h): the one table quantize, synth and estimate share. A model
// quantized from F32 gets, tensor by tensor, the types pagoda synth writes for the same recipe
// (and estimate counts: test_estimate.cc holds synth and estimate together).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "planner/estimate.h"
#include "core/error.h"
#include "format/gguf.h"
#include "tools/quantize.h"
#include "model/recipe.h"
#include "tools/synth.h"
#include "test_util.h"

namespace pagoda {
namespace {

TEST(WeightRecipe, EveryCommandKnowsEveryRecipe) {
  const auto& quantize = quantize_type_names();
  const auto& estimate = estimate_weight_types();
  for (const WeightRecipe& r : weight_recipes()) {
    const std::string name(r.name);
    EXPECT_NE(std::find(quantize.begin(), quantize.end(), name), quantize.end()) << name;
    EXPECT_NE(std::find(estimate.begin(), estimate.end(), name), estimate.end()) << name;
    EXPECT_EQ(&weight_recipe(name, "test"), &r);
  }
  EXPECT_EQ(find_weight_recipe("q3_k"), nullptr);
  try {
    weight_recipe("q3_k", "synth");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("synth: unknown type 'q3_k' (known: f32 f16"), std::string::npos)
        << e.what();
  }
}

// llama.cpp gives the output matrix Q6_K under every 4- and 5-bit type, Q4_K included (the
// three tables this one replaced disagreed there), and the tied token table counts as it.
TEST(WeightRecipe, OutputMatrixAndKMix) {
  const WeightRecipe& q4k = weight_recipe("q4_k", "test");
  EXPECT_EQ(recipe_type(q4k, "output.weight", 4096, true, 32), DType::kQ6_K);
  EXPECT_EQ(recipe_type(q4k, "token_embd.weight", 4096, true, 32), DType::kQ4_K);
  EXPECT_EQ(recipe_type(q4k, "token_embd.weight", 4096, false, 32), DType::kQ6_K);
  EXPECT_EQ(recipe_type(q4k, "blk.0.attn_v.weight", 4096, true, 32), DType::kQ4_K);  // no mix
  const WeightRecipe& q4km = weight_recipe("q4_k_m", "test");
  // Layers 0..3 and 28..31 of 32, and every third between: 6, 9, ...
  for (uint32_t l : {0u, 3u, 6u, 9u, 28u, 31u}) {
    EXPECT_EQ(recipe_type(q4km, "blk." + std::to_string(l) + ".attn_v.weight", 4096, true, 32), DType::kQ6_K) << l;
    EXPECT_EQ(recipe_type(q4km, "blk." + std::to_string(l) + ".ffn_down_exps.weight", 4096, true, 32),
              DType::kQ6_K) << l;
  }
  for (uint32_t l : {4u, 5u, 7u, 26u}) {
    EXPECT_EQ(recipe_type(q4km, "blk." + std::to_string(l) + ".ffn_down.weight", 4096, true, 32), DType::kQ4_K) << l;
  }
  EXPECT_EQ(recipe_type(q4km, "blk.4.attn_q.weight", 4096, true, 32), DType::kQ4_K);
  // Rows that are no whole number of blocks: Q6_K -> Q8_0 -> F16, Q4_K -> Q5_0.
  EXPECT_EQ(recipe_type(q4km, "blk.0.attn_v.weight", 64, true, 32), DType::kQ8_0);
  EXPECT_EQ(recipe_type(q4km, "blk.0.attn_v.weight", 72, true, 32), DType::kF16);
  EXPECT_EQ(recipe_type(q4km, "blk.4.attn_q.weight", 64, true, 32), DType::kQ5_0);
  // llama.cpp's other fallbacks: Q5_K -> Q5_1, Q2_K / Q3_K -> Q4_0, a 32-block type -> F16.
  EXPECT_EQ(quant_fallback_type(DType::kQ5_K, 64), DType::kQ5_1);
  EXPECT_EQ(quant_fallback_type(DType::kQ3_K, 96), DType::kQ4_0);
  EXPECT_EQ(quant_fallback_type(DType::kQ4_0, 48), DType::kF16);
  EXPECT_EQ(quant_fallback_type(DType::kQ5_K, 512), DType::kQ5_K);
}

// llama.cpp's IQ4_NL / IQ4_XS file types (25, 30): output Q6_K, an untied token table the base
// type; IQ4_XS rows of 32-multiples fall back to IQ4_NL, the same grid in blocks of 32.
TEST(WeightRecipe, IQ4Recipes) {
  const WeightRecipe& nl = weight_recipe("iq4_nl", "test");
  const WeightRecipe& xs = weight_recipe("iq4_xs", "test");
  EXPECT_EQ(nl.file_type, 25u);
  EXPECT_EQ(xs.file_type, 30u);
  for (const WeightRecipe* r : {&nl, &xs}) {
    EXPECT_EQ(recipe_type(*r, "output.weight", 4096, true, 32), DType::kQ6_K);
    EXPECT_EQ(recipe_type(*r, "token_embd.weight", 4096, false, 32), DType::kQ6_K);
    EXPECT_EQ(recipe_type(*r, "token_embd.weight", 4096, true, 32), r->base);
    EXPECT_EQ(recipe_type(*r, "blk.0.attn_v.weight", 4096, true, 32), r->base);
  }
  EXPECT_EQ(recipe_type(xs, "blk.0.attn_q.weight", 64, true, 32), DType::kIQ4_NL);
  EXPECT_EQ(quant_fallback_type(DType::kIQ4_XS, 96), DType::kIQ4_NL);
  EXPECT_EQ(quant_fallback_type(DType::kIQ4_XS, 48), DType::kF16);
  EXPECT_EQ(quant_fallback_type(DType::kIQ4_NL, 48), DType::kF16);
  EXPECT_EQ(quant_fallback_type(DType::kIQ4_XS, 512), DType::kIQ4_XS);
}

// F32 synthetic models quantized by pagoda quantize: every tensor's type is the one pagoda synth
// writes directly for the recipe. Qwen3's shape has tied embeddings, Phi-3's an output matrix
// and fused tensors; the 256-wide rows and 64-wide heads exercise the fallbacks.
TEST(WeightRecipe, QuantizeGivesSynthTypes) {
  // stories260K's 512-token vocabulary keeps the token table small, so this stays quick.
  PAGODA_SHARED_OR_SKIP(vocab, "models/stories260K.gguf");
  const std::string dir = test::temp_dir();
  for (const char* shape : {"qwen3-tiny", "phi-3-tiny"}) {
    auto synth = [&](const std::string& type) {
      SynthOptions o;
      o.preset = shape;
      o.type = type;
      o.vocab_path = vocab;
      o.output_path = dir + "/" + shape + "-" + type + ".gguf";
      write_synthetic_model(o, nullptr);
      return o.output_path;
    };
    const std::string f32 = synth("f32");
    for (const char* type : {"q4_k_m", "q4_0", "q6_k", "iq4_xs"}) {
      SCOPED_TRACE(testing::Message() << shape << " " << type);
      const std::string quantized = dir + "/" + shape + "-quantized-" + type + ".gguf";
      quantize_model({.input_path = f32, .output_path = quantized, .type = type}, {});
      auto want = GgufFile::open(synth(type));
      auto got = GgufFile::open(quantized);
      ASSERT_EQ(got->tensors().size(), want->tensors().size());
      for (const GgufTensorInfo& t : want->tensors()) {
        const GgufTensorInfo* g = got->find_tensor(t.name);
        ASSERT_NE(g, nullptr) << t.name;
        EXPECT_EQ(g->type, t.type) << t.name;
      }
      EXPECT_EQ(got->get_u32("general.file_type"), want->get_u32("general.file_type"));
    }
  }
}

}  // namespace
}  // namespace pagoda
