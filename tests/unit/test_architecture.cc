// The architecture table: every name resolves to one family, each family can be loaded, and an
// unknown family is refused with the supported list.
#include <gtest/gtest.h>

#include <set>

#include "core/error.h"
#include "model/architecture.h"
#include "tools/synth.h"
#include "model/weights.h"

namespace pagoda {
namespace {

TEST(Architecture, EveryNameResolvesToOneFamily) {
  std::set<std::string_view> gguf_names, hf_names;
  for (const Architecture& a : architectures()) {
    ASSERT_NE(a.load, nullptr) << a.name;
    EXPECT_EQ(find_architecture(a.name), &a);
    EXPECT_TRUE(gguf_names.insert(a.name).second) << a.name << " twice";
    for (std::string_view alias : a.gguf_aliases) {
      EXPECT_EQ(find_architecture(alias), &a) << alias;
      EXPECT_TRUE(gguf_names.insert(alias).second) << alias << " twice";
    }
    // gpt-oss is read from GGUF files only (its checkpoints' experts are MXFP4 blocks and
    // scales in tensors of their own), and so are gemma4 (its per-layer shapes are read from
    // GGUF's arrays) and qwen35 / qwen35moe (their recurrent layers' shapes are GGUF's ssm.*
    // keys); every
    // other family has a config.json model_type.
    if (a.name != "gpt-oss" && a.name != "gemma4" && a.name != "qwen35" &&
        a.name != "qwen35moe") {
      EXPECT_FALSE(a.hf_model_types.empty()) << a.name << " names no config.json model_type";
    }
    for (std::string_view t : a.hf_model_types) {
      EXPECT_EQ(find_hf_architecture(t), &a) << t;
      EXPECT_TRUE(hf_names.insert(t).second) << t << " twice";
    }
  }
  EXPECT_EQ(find_architecture("mistral")->name, "llama");
  EXPECT_EQ(find_hf_architecture("gemma3_text")->name, "gemma3");
  EXPECT_EQ(find_architecture("gpt-neox"), nullptr);
  EXPECT_EQ(find_hf_architecture("phi3")->name, "phi3");
}

TEST(Architecture, UnknownFamilyNamesTheSupportedOnes) {
  EXPECT_EQ(supported_architectures(),
            "llama, mistral, qwen2, qwen3, qwen3moe, phi3, gemma3, gemma4, gpt-oss, qwen35, "
            "qwen35moe, bert");
  ModelConfig c;
  c.architecture = "falcon";
  try {
    architecture_of(c, "x.gguf");
    FAIL() << "falcon was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "x.gguf: architecture 'falcon' is not supported (supported: llama, mistral, qwen2, "
                 "qwen3, qwen3moe, phi3, gemma3, gemma4, gpt-oss, qwen35, qwen35moe, bert)");
  }
}

// Hugging Face names: the common table, a family's own spellings before it, a multimodal
// wrapper's prefixes, and tensors the text model does not use.
TEST(Architecture, HuggingFaceTensorNamesPerFamily) {
  const Architecture* llama = find_architecture("llama");
  const Architecture* gemma = find_architecture("gemma3");
  ASSERT_NE(llama, nullptr);
  ASSERT_NE(gemma, nullptr);
  const std::string post = "model.layers.4.post_attention_layernorm.weight";
  EXPECT_EQ(gguf_tensor_name(post, llama), "blk.4.ffn_norm.weight");
  EXPECT_EQ(gguf_tensor_name(post), "blk.4.ffn_norm.weight");
  EXPECT_EQ(gguf_tensor_name(post, gemma), "blk.4.post_attention_norm.weight");
  EXPECT_EQ(gguf_tensor_name("model.layers.0.pre_feedforward_layernorm.weight", gemma),
            "blk.0.ffn_norm.weight");
  EXPECT_EQ(gguf_tensor_name("model.layers.0.post_feedforward_layernorm.weight", gemma),
            "blk.0.post_ffw_norm.weight");
  EXPECT_EQ(gguf_tensor_name("language_model.model.layers.2.self_attn.q_norm.weight", gemma),
            "blk.2.attn_q_norm.weight");
  EXPECT_EQ(gguf_tensor_name("model.language_model.embed_tokens.weight", gemma), "token_embd.weight");
  EXPECT_EQ(gguf_tensor_name("language_model.lm_head.weight", gemma), "output.weight");
  EXPECT_EQ(gguf_tensor_name("vision_tower.vision_model.post_layernorm.weight", gemma), "");
  EXPECT_EQ(gguf_tensor_name("model.multi_modal_projector.mm_soft_emb_norm.weight", gemma), "");
  // Without the family, a wrapped name has no mapping; a prefix of a name is not a match.
  EXPECT_EQ(gguf_tensor_name("language_model.model.norm.weight", llama),
            "language_model.model.norm.weight");
  EXPECT_EQ(gguf_tensor_name("model.layers.1.mlp.up_projection.weight", llama),
            "model.layers.1.mlp.up_projection.weight");
  EXPECT_EQ(gemma->hf_norm_offset, 1.0f);
  EXPECT_EQ(llama->hf_norm_offset, 0.0f);
}

TEST(Architecture, EveryModelShapeIsARunnableFamily) {
  for (const ModelShape& p : model_shapes()) {
    EXPECT_NE(find_architecture(p.config.architecture), nullptr) << p.name;
  }
}

}  // namespace
}  // namespace pagoda
