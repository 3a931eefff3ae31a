// The architecture table: every name resolves to one family, each family can be loaded, and an
// unknown family is refused with the supported list.
#include <gtest/gtest.h>

#include <set>

#include "core/error.h"
#include "model/architecture.h"
#include "model/synth.h"

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
    EXPECT_FALSE(a.hf_model_types.empty()) << a.name << " names no config.json model_type";
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
  EXPECT_EQ(supported_architectures(), "llama, mistral, qwen2, qwen3, qwen3moe, phi3, gemma3");
  ModelConfig c;
  c.architecture = "falcon";
  try {
    architecture_of(c, "x.gguf");
    FAIL() << "falcon was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "x.gguf: architecture 'falcon' is not supported (supported: llama, mistral, qwen2, "
                 "qwen3, qwen3moe, phi3, gemma3)");
  }
}

TEST(Architecture, EverySynthShapeIsARunnableFamily) {
  for (const SynthPreset& p : synth_presets()) {
    EXPECT_NE(find_architecture(p.config.architecture), nullptr) << p.name;
  }
}

}  // namespace
}  // namespace pagoda
