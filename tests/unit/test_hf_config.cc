// Hugging Face model folders: config.json, tokenizer.json, and ModelFile over every format.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "format/gguf.h"
#include "format/hf_tokenizer.h"
#include "format/safetensors.h"
#include "model/config.h"
#include "model/model.h"
#include "model/model_file.h"
#include "test_util.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;

// The Error text of running `f`, or "" when it did not throw.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_ERROR(expr, substring)                                            \
  do {                                                                           \
    std::string got_ = error_of([&] { (void)(expr); });                          \
    EXPECT_NE(got_.find(substring), std::string::npos)                           \
        << #expr << "\n  expected: " << (substring) << "\n  got:      " << got_; \
  } while (0)

void write(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

// A safetensors file with one F32 tensor per name, each of `n` elements.
std::string tiny_safetensors(const std::vector<std::string>& names, uint64_t n = 2) {
  std::string header = "{";
  for (size_t i = 0; i < names.size(); ++i) {
    header += str_cat(i ? "," : "", "\"", names[i], "\":{\"dtype\":\"F32\",\"shape\":[", n,
                      "],\"data_offsets\":[", i * n * 4, ",", (i + 1) * n * 4, "]}");
  }
  header += "}";
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + std::string(names.size() * n * 4, '\0');
}

const char* kLlamaConfig = R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
  "intermediate_size": 128, "num_attention_heads": 4, "vocab_size": 300})";

// ---------------------------------------------------------------- config.json

TEST(HfConfig, LlamaWithDefaults) {
  ModelConfig c = config_from_hf_json(kLlamaConfig, "config.json");
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.num_layers, 2u);
  EXPECT_EQ(c.hidden_size, 64u);
  EXPECT_EQ(c.intermediate_size, 128u);
  EXPECT_EQ(c.num_heads, 4u);
  EXPECT_EQ(c.num_kv_heads, 4u);  // absent: plain multi-head
  EXPECT_EQ(c.head_dim, 16u);     // absent: hidden / heads
  EXPECT_EQ(c.vocab_size, 300u);
  EXPECT_EQ(c.context_length, 0u);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.rope_scaling_type, "");
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_NO_THROW(c.validate("config.json"));
}

TEST(HfConfig, AllFields) {
  ModelConfig c = config_from_hf_json(R"({"model_type": "mistral", "_name_or_path": "m/x",
    "num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 32768,
    "max_position_embeddings": 32768, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0,
    "rope_scaling": {"type": "linear", "factor": 2.0}, "sliding_window": 4096,
    "tie_word_embeddings": true, "torch_dtype": "bfloat16", "unknown_key": [1, {"a": null}]})",
                                      "config.json");
  EXPECT_EQ(c.architecture, "llama");  // mistral shares llama's forward pass
  EXPECT_EQ(c.name, "m/x");
  EXPECT_EQ(c.num_kv_heads, 8u);
  EXPECT_EQ(c.head_dim, 128u);
  EXPECT_EQ(c.context_length, 32768u);
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
  EXPECT_EQ(c.rope_scaling_type, "linear");
  EXPECT_FLOAT_EQ(c.rope_scaling_factor, 2.0f);
  EXPECT_EQ(c.sliding_window, 4096u);
  EXPECT_TRUE(c.tie_embeddings);
}

TEST(HfConfig, NullMeansAbsentAndRopeTypes) {
  ModelConfig c = config_from_hf_json(R"({"model_type": "llama", "num_hidden_layers": 1,
    "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": null, "head_dim": null,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0},
    "sliding_window": null})",
                                      "c");
  EXPECT_EQ(c.num_kv_heads, 4u);
  EXPECT_EQ(c.head_dim, 16u);
  EXPECT_EQ(c.rope_scaling_type, "llama3");
  EXPECT_FLOAT_EQ(c.rope_scaling_factor, 8.0f);
  EXPECT_EQ(c.sliding_window, 0u);
  c = config_from_hf_json(R"({"model_type": "llama", "rope_scaling": {"rope_type": "default"}})",
                          "c");
  EXPECT_EQ(c.rope_scaling_type, "");
}

// Llama 3.1's published rope_scaling; the divisors were computed independently (Python, from the
// definition in Hugging Face's rope utilities) at every 8th frequency.
TEST(HfConfig, Llama3RopeScalingGivesFrequencyDivisors) {
  const ModelConfig c = config_from_hf_json(R"({"model_type": "llama", "num_hidden_layers": 1,
    "hidden_size": 4096, "num_attention_heads": 32, "rope_theta": 500000.0,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})",
                                            "c");
  EXPECT_EQ(c.rope_original_context, 8192u);
  const std::vector<float> d = llama3_rope_freq_factors(c, 128);
  ASSERT_EQ(d.size(), 64u);
  const float expected[] = {1.0f, 1.0f, 1.0f, 1.0f, 2.69453f, 8.0f, 8.0f, 8.0f};
  for (size_t i = 0; i < 8; ++i) EXPECT_NEAR(d[i * 8], expected[i], 1e-4f) << i * 8;
  for (size_t i = 0; i < d.size(); ++i) {
    EXPECT_EQ(d[i] > 1.0f && d[i] < 8.0f, i >= 29 && i <= 34) << i;  // the blended band
  }
}

// Qwen3's published YaRN rope_scaling; the correction range (23.6 -> 23, 39.7 -> 40 pairs) and
// the attention factor 1 + 0.1 ln 4 computed by hand from transformers' _compute_yarn_parameters.
TEST(HfConfig, YarnRopeScalingGivesCorrectionRangeAndAttentionFactor) {
  const ModelConfig c = config_from_hf_json(R"({"model_type": "qwen3", "num_hidden_layers": 1,
    "hidden_size": 1024, "num_attention_heads": 8, "head_dim": 128, "rope_theta": 1000000.0,
    "max_position_embeddings": 40960,
    "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                     "original_max_position_embeddings": 32768}})",
                                            "c");
  EXPECT_EQ(c.rope_scaling_type, "yarn");
  EXPECT_EQ(c.rope_original_context, 32768u);
  RopeParams p;
  p.rotary_dim = 128;
  p.theta = c.rope_theta;
  apply_rope_scaling(c, p);
  EXPECT_TRUE(p.yarn);
  EXPECT_FLOAT_EQ(p.position_scale, 0.25f);
  EXPECT_FLOAT_EQ(p.yarn_low, 23.0f);
  EXPECT_FLOAT_EQ(p.yarn_high, 40.0f);
  EXPECT_NEAR(p.mscale, 1.1386294f, 1e-6f);
  EXPECT_DOUBLE_EQ(p.angle_scale(10), 1.0);    // extrapolated: the original frequency
  EXPECT_DOUBLE_EQ(p.angle_scale(50), 0.25);   // interpolated
  EXPECT_NEAR(p.angle_scale(31), 0.25 * (8.0 / 17) + (9.0 / 17), 1e-6);  // on the ramp
}

TEST(HfConfig, UnknownRopeScalingIsRefusedByName) {
  const ModelConfig c = config_from_hf_json(R"({"model_type": "llama", "num_hidden_layers": 1,
    "hidden_size": 64, "num_attention_heads": 4, "max_position_embeddings": 128,
    "rope_scaling": {"type": "dynamic", "factor": 4.0}})",
                                            "c");
  EXPECT_EQ(rope_scaling_problem(c),
            "RoPE scaling 'dynamic' is not supported (pagoda computes linear, llama3, yarn and "
            "longrope)");
  try {
    c.validate("m");
    FAIL() << "validate accepted dynamic";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("RoPE scaling 'dynamic'"), std::string::npos);
  }
}

// LongRoPE is computed from its two lists of factors; without them it is refused by name.
TEST(HfConfig, LongRopeReadsItsFactorsOrIsRefused) {
  const std::string head = R"({"model_type": "phi3", "num_hidden_layers": 1, "hidden_size": 64,
    "num_attention_heads": 4, "max_position_embeddings": 4096,
    "original_max_position_embeddings": 64, "rope_scaling": )";
  const ModelConfig c = config_from_hf_json(
      head + R"({"type": "longrope", "long_factor": [1, 2, 3, 4, 5, 6, 7, 8],
                 "short_factor": [1, 1, 1, 1, 1, 1, 1, 2]}})", "c");
  EXPECT_EQ(rope_scaling_problem(c), "");
  EXPECT_EQ(c.rope_long_factors.size(), 8u);
  EXPECT_EQ(c.rope_short_factors.back(), 2.0f);
  EXPECT_EQ(c.rope_original_context, 64u);
  // transformers' attention factor: sqrt(1 + ln(4096 / 64) / ln 64) = sqrt(2).
  EXPECT_NEAR(c.rope_attn_factor, std::sqrt(2.0f), 1e-6);
  try {
    config_from_hf_json(head + R"({"type": "longrope", "factor": 4.0}})", "c");
    FAIL() << "longrope without its factors was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("LongRoPE needs 'rope_scaling.long_factor'"),
              std::string::npos)
        << e.what();
  }
}

TEST(HfConfig, QwenSlidingWindowOnlyWhenUsed) {
  ModelConfig c = config_from_hf_json(
      R"({"model_type": "qwen2", "sliding_window": 131072, "use_sliding_window": false})", "c");
  EXPECT_EQ(c.architecture, "qwen2");
  EXPECT_EQ(c.sliding_window, 0u);
  c = config_from_hf_json(R"({"model_type": "qwen3", "head_dim": 128, "hidden_size": 1024,
    "num_attention_heads": 16})",
                          "c");
  EXPECT_EQ(c.architecture, "qwen3");
  EXPECT_EQ(c.head_dim, 128u);  // set explicitly, not hidden / heads (64)
}

TEST(HfConfig, Gemma3NestedTextConfigUsesClassDefaults) {
  ModelConfig c = config_from_hf_json(R"({"model_type": "gemma3", "architectures":
    ["Gemma3ForConditionalGeneration"], "text_config": {"hidden_size": 2560,
    "intermediate_size": 10240, "model_type": "gemma3_text", "num_hidden_layers": 34,
    "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024},
    "vision_config": {"hidden_size": 1152}})",
                                      "c");
  EXPECT_EQ(c.architecture, "gemma3");
  EXPECT_EQ(c.hidden_size, 2560u);
  EXPECT_EQ(c.num_layers, 34u);
  EXPECT_EQ(c.num_heads, 8u);
  EXPECT_EQ(c.num_kv_heads, 4u);
  EXPECT_EQ(c.head_dim, 256u);
  EXPECT_EQ(c.vocab_size, 262208u);
  EXPECT_EQ(c.sliding_window, 1024u);
  EXPECT_EQ(c.rope_scaling_type, "linear");
  EXPECT_TRUE(c.tie_embeddings);
  c = config_from_hf_json(R"({"model_type": "gemma3_text", "num_attention_heads": 4,
    "num_key_value_heads": 1, "hidden_size": 640})",
                          "c");
  EXPECT_EQ(c.architecture, "gemma3");
  EXPECT_EQ(c.head_dim, 256u);
  EXPECT_EQ(c.num_kv_heads, 1u);
}

TEST(HfConfig, WrongTypesNameTheKey) {
  auto with = [](const std::string& extra) {
    return config_from_hf_json(R"({"model_type": "llama", )" + extra + "}", "dir/config.json");
  };
  EXPECT_ERROR(with(R"("hidden_size": "128")"),
               "dir/config.json: key 'hidden_size' is a string, expected a non-negative integer");
  EXPECT_ERROR(with(R"("num_hidden_layers": -2)"),
               "dir/config.json: key 'num_hidden_layers' is a negative integer, expected a "
               "non-negative integer");
  EXPECT_ERROR(with(R"("num_attention_heads": 8.5)"),
               "dir/config.json: key 'num_attention_heads' is a float, expected a non-negative "
               "integer");
  EXPECT_ERROR(with(R"("vocab_size": 4294967296)"),
               "dir/config.json: key 'vocab_size' value 4294967296 is too large");
  EXPECT_ERROR(with(R"("rms_norm_eps": "1e-6")"),
               "dir/config.json: key 'rms_norm_eps' is a string, expected a number");
  EXPECT_ERROR(with(R"("rope_theta": [10000])"),
               "dir/config.json: key 'rope_theta' is an array, expected a number");
  EXPECT_ERROR(with(R"("tie_word_embeddings": 1)"),
               "dir/config.json: key 'tie_word_embeddings' is an integer, expected a bool");
  EXPECT_ERROR(with(R"("rope_scaling": 2.0)"),
               "dir/config.json: key 'rope_scaling' is a float, expected an object");
  EXPECT_ERROR(with(R"("rope_scaling": {"type": "linear", "factor": "2"})"),
               "dir/config.json: key 'rope_scaling.factor' is a string, expected a number");
  EXPECT_ERROR(with(R"("rope_scaling": {"rope_type": 3})"),
               "dir/config.json: key 'rope_scaling.rope_type' is an integer, expected a string");
  EXPECT_ERROR(with(R"("sliding_window": true)"),
               "dir/config.json: key 'sliding_window' is a bool, expected a non-negative integer");
  EXPECT_ERROR(config_from_hf_json(R"({"model_type": 5})", "c"),
               "c: key 'model_type' is an integer, expected a string");
  EXPECT_ERROR(config_from_hf_json(R"({"model_type": "gemma3", "text_config": [1]})", "c"),
               "c: key 'text_config' is an array, expected an object");
  EXPECT_ERROR(config_from_hf_json(R"({"model_type": "gemma3", "text_config": {"hidden_size":
    "x"}})",
                                   "c"),
               "c: key 'text_config.hidden_size' is a string");
  EXPECT_ERROR(config_from_hf_json(R"({"hidden_size": 4})", "c"), "c: key 'model_type' is missing");
  EXPECT_ERROR(config_from_hf_json("[1]", "c"), "c: the top level is an array, expected an object");
  EXPECT_ERROR(config_from_hf_json(R"({"model_type": "llama",})", "c"),
               "c: invalid JSON: parse error at line 1, column 24");
  EXPECT_ERROR(config_from_hf_json(std::string(100, '[') + std::string(100, ']'), "c"),
               "c: JSON nested deeper than 64 levels");
}

// ---------------------------------------------------------------- tokenizer.json

// A SentencePiece-style BPE like TinyStories': "▁" for spaces, byte fallback, a template that
// adds BOS.
std::string spm_tokenizer_json(const std::string& merges) {
  return R"({"version": "1.0", "added_tokens": [
      {"id": 0, "content": "<unk>", "special": true},
      {"id": 1, "content": "<s>", "special": true},
      {"id": 2, "content": "</s>", "special": true},
      {"id": 9, "content": "<extra>", "special": false}],
    "normalizer": {"type": "Sequence", "normalizers": [
      {"type": "Prepend", "prepend": "\u2581"},
      {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
    "pre_tokenizer": null,
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
    "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": true, "fuse_unk": true,
      "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x0A>": 3, "\u2581": 4, "a": 5, "b": 6,
                "\u2581a": 7, "\u2581ab": 8},
      "merges": )" +
         merges + "}}";
}

TEST(HfTokenizer, SentencePieceStyle) {
  Vocab v = vocab_from_hf_tokenizer_json(spm_tokenizer_json(R"(["\u2581 a", "\u2581a b"])"), "t");
  EXPECT_EQ(v.kind, TokenizerKind::kSpm);
  EXPECT_EQ(v.model, "llama");
  ASSERT_EQ(v.size(), 10u);
  EXPECT_EQ(v.tokens[7],
            "\xE2\x96\x81"
            "a");
  EXPECT_EQ(v.tokens[9], "<extra>");
  EXPECT_EQ(v.types[0], TokenType::kUnknown);
  EXPECT_EQ(v.types[1], TokenType::kControl);
  EXPECT_EQ(v.types[2], TokenType::kControl);
  EXPECT_EQ(v.types[3], TokenType::kByte);
  EXPECT_EQ(v.types[5], TokenType::kNormal);
  EXPECT_EQ(v.types[9], TokenType::kUserDefined);
  ASSERT_EQ(v.merges.size(), 2u);
  EXPECT_EQ(v.merges[1], (std::pair<std::string, std::string>{"\xE2\x96\x81"
                                                              "a",
                                                              "b"}));
  EXPECT_TRUE(v.scores.empty());
  EXPECT_EQ(v.unk, 0);
  EXPECT_EQ(v.bos, 1);
  EXPECT_TRUE(v.add_bos);
  EXPECT_FALSE(v.add_eos);
  EXPECT_EQ(v.eos, 2);  // no template says so; "</s>" is found by name
  EXPECT_TRUE(v.add_space_prefix);
  EXPECT_EQ(v.find("<extra>"), 9);
}

TEST(HfTokenizer, MergesAsPairsGiveTheSameList) {
  Vocab a = vocab_from_hf_tokenizer_json(spm_tokenizer_json(R"(["\u2581 a", "\u2581a b"])"), "t");
  Vocab b = vocab_from_hf_tokenizer_json(
      spm_tokenizer_json(R"([["\u2581", "a"], ["\u2581a", "b"]])"), "t");
  EXPECT_EQ(a.merges, b.merges);
}

TEST(HfTokenizer, MetaspaceIsSentencePieceStyle) {
  std::string json = spm_tokenizer_json("[]");
  size_t at = json.find(R"("pre_tokenizer": null)");
  json.replace(at, std::string(R"("pre_tokenizer": null)").size(),
               R"("pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581",
                   "prepend_scheme": "never", "split": false})");
  const std::string prepend = R"({"type": "Prepend", "prepend": "\u2581"},)";
  json.replace(json.find(prepend), prepend.size(), "");
  Vocab v = vocab_from_hf_tokenizer_json(json, "t");
  EXPECT_EQ(v.kind, TokenizerKind::kSpm);
  EXPECT_FALSE(v.add_space_prefix);
}

std::string byte_level_json(const std::string& pre_tokenizer, bool ignore_merges = false) {
  return R"({"added_tokens": [{"id": 5, "content": "<|endoftext|>", "special": true}],
    "normalizer": null, "pre_tokenizer": )" +
         pre_tokenizer + R"(,
    "post_processor": {"type": "ByteLevel"},
    "model": {"type": "BPE", "unk_token": null, "ignore_merges": )" +
         (ignore_merges ? "true" : "false") + R"(,
      "vocab": {"a": 0, "b": 1, "ab": 2, "\u0120": 3, "\u0120ab": 4},
      "merges": [["a", "b"], ["\u0120", "ab"]]}})";
}

TEST(HfTokenizer, ByteLevelGuessesThePreTokenizer) {
  Vocab v = vocab_from_hf_tokenizer_json(
      byte_level_json(R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})"),
      "t");
  EXPECT_EQ(v.kind, TokenizerKind::kBpe);
  EXPECT_EQ(v.model, "gpt2");
  EXPECT_EQ(v.pre, "gpt-2");
  EXPECT_FALSE(v.add_space_prefix);
  EXPECT_FALSE(v.add_bos);
  EXPECT_EQ(v.unk, kNoToken);
  EXPECT_EQ(v.eos, 5);
  EXPECT_EQ(v.types[5], TokenType::kControl);
  EXPECT_EQ(v.size(), 6u);
  ASSERT_EQ(v.merges.size(), 2u);

  const std::string llama3 =
      R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex":
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
      "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false,
      "trim_offsets": true, "use_regex": false}]})";
  auto pre_of = [](const std::string& pre_tokenizer, bool ignore_merges = false) {
    return vocab_from_hf_tokenizer_json(byte_level_json(pre_tokenizer, ignore_merges), "t").pre;
  };
  EXPECT_EQ(pre_of(llama3, true), "llama-bpe");
  // The same regex without ignore_merges is another family (DBRX, GLM-4...).
  EXPECT_EQ(pre_tokenizer_spec(pre_of(llama3, false)).patterns,
            pre_tokenizer_spec("llama-bpe").patterns);
  EXPECT_FALSE(pre_tokenizer_spec(pre_of(llama3, false)).ignore_merges);
  std::string qwen2 = llama3;
  qwen2.replace(qwen2.find("{1,3}"), 5, "");
  EXPECT_EQ(pre_of(qwen2), "qwen2");
  std::string other = llama3;
  other.replace(other.find("{1,3}"), 5, "{1,4}");
  EXPECT_EQ(pre_of(other), "default");
  // StarCoder: single digits, then ByteLevel with its own regex.
  EXPECT_EQ(pre_of(R"({"type": "Sequence", "pretokenizers": [
      {"type": "Digits", "individual_digits": true},
      {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}]})"),
            "starcoder");
  std::string removed = llama3;
  removed.replace(removed.find("Isolated"), 8, "Removed");
  EXPECT_EQ(pre_of(removed, true), "default");
}

// A BERT tokenizer.json becomes llama.cpp's "bert" vocabulary: word-initial pieces get "\u2581",
// "##" continuations lose it, special tokens stay; [CLS] ... [SEP] from the template.
TEST(HfTokenizer, WordPieceAsLlamaCppStoresIt) {
  const Vocab v = vocab_from_hf_tokenizer_json(R"({
    "added_tokens": [{"id": 0, "content": "[PAD]", "special": true},
                     {"id": 1, "content": "[UNK]", "special": true},
                     {"id": 2, "content": "[CLS]", "special": true},
                     {"id": 3, "content": "[SEP]", "special": true}],
    "normalizer": {"type": "BertNormalizer", "lowercase": true},
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "[CLS]"}}, {"Sequence": {"id": "A"}},
                 {"SpecialToken": {"id": "[SEP]"}}]},
    "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
              "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "hello": 4, "##s": 5,
                        "world": 6, "!": 7}}})", "t");
  EXPECT_EQ(v.kind, TokenizerKind::kWordPiece);
  EXPECT_EQ(v.model, "bert");
  EXPECT_EQ(v.tokens[2], "[CLS]");
  EXPECT_EQ(v.tokens[4], "\xE2\x96\x81hello");
  EXPECT_EQ(v.tokens[5], "s");
  EXPECT_EQ(v.bos, 2);
  EXPECT_EQ(v.cls, 2);
  EXPECT_EQ(v.eos, 3);
  EXPECT_EQ(v.sep, 3);
  EXPECT_EQ(v.unk, 1);
  EXPECT_TRUE(v.add_bos && v.add_eos);
  auto tok = Tokenizer::create(v);
  EXPECT_EQ(tok->encode("Hellos, World!", {.add_special = true}),
            (std::vector<TokenId>{2, 4, 5, 1, 6, 7, 3}));
}

TEST(HfTokenizer, BadFilesNameTheProblem) {
  EXPECT_ERROR(
      vocab_from_hf_tokenizer_json(R"({"model": {"type": "WordLevel", "vocab": {}}})", "t"),
      "t: tokenizer model type 'WordLevel' is not supported yet (BPE");
  // WordPiece is BERT's uncased one, with "##" continuations.
  EXPECT_ERROR(vocab_from_hf_tokenizer_json(
                   R"({"model": {"type": "WordPiece", "vocab": {"a": 0},
                      "continuing_subword_prefix": "@@"}})", "t"),
               "t: key 'model.continuing_subword_prefix' is '@@'; only '##' is supported");
  EXPECT_ERROR(vocab_from_hf_tokenizer_json(
                   R"({"normalizer": {"type": "BertNormalizer", "lowercase": false},
                      "model": {"type": "WordPiece", "vocab": {"a": 0}}})", "t"),
               "t: key 'normalizer.lowercase' is false");
  EXPECT_ERROR(vocab_from_hf_tokenizer_json(R"({"model": {"type": "Unigram"}})", "t"),
               "t: tokenizer model type 'Unigram' is not supported yet");
  EXPECT_ERROR(vocab_from_hf_tokenizer_json(R"({"version": "1.0"})", "t"),
               "t: key 'model' is missing");
  EXPECT_ERROR(vocab_from_hf_tokenizer_json(R"({"model": {"type": "BPE", "vocab": []}})", "t"),
               "is not supported yet");  // neither byte-level nor SPM-style
  EXPECT_ERROR(
      vocab_from_hf_tokenizer_json(
          byte_level_json(R"({"type": "ByteLevel"})")
              .replace(byte_level_json("{\"type\": \"ByteLevel\"}").find("\"ab\": 2"), 7,
                       "\"ab\": 7"),
          "t"),
      "t: key 'model.vocab.ab': id 7 is outside 0..4 (the ids of model.vocab must be dense)");
  EXPECT_ERROR(vocab_from_hf_tokenizer_json(
                   byte_level_json(R"({"type": "ByteLevel"})")
                       .replace(byte_level_json("{\"type\": \"ByteLevel\"}").find("\"ab\": 2"), 7,
                                "\"ab\": 1"),
                   "t"),
               "t: key 'model.vocab.b': id 1 is used twice");
  EXPECT_ERROR(vocab_from_hf_tokenizer_json(
                   byte_level_json(R"({"type": "ByteLevel"})")
                       .replace(byte_level_json("{\"type\": \"ByteLevel\"}").find("\"ab\": 2"), 7,
                                "\"ab\": \"2\""),
                   "t"),
               "t: key 'model.vocab.ab' is a string, expected a non-negative token id");
  EXPECT_ERROR(vocab_from_hf_tokenizer_json(spm_tokenizer_json(R"(["\u2581 b"])"), "t"),
               "t: key 'model.merges[0]': the merged token '\xE2\x96\x81"
               "b' is not in the vocabulary");
  EXPECT_ERROR(vocab_from_hf_tokenizer_json(spm_tokenizer_json(R"(["a z"])"), "t"),
               "t: key 'model.merges[0]': 'z' is not in the vocabulary");
  EXPECT_ERROR(vocab_from_hf_tokenizer_json(spm_tokenizer_json(R"(["ab"])"), "t"),
               "t: key 'model.merges[0]': merge 'ab' is not two tokens separated by one space");
  EXPECT_ERROR(vocab_from_hf_tokenizer_json(spm_tokenizer_json(R"([["a"]])"), "t"),
               "t: key 'model.merges[0]' is an array, expected \"a b\" or [\"a\", \"b\"]");
  EXPECT_ERROR(vocab_from_hf_tokenizer_json(spm_tokenizer_json(R"({"a": 1})"), "t"),
               "t: key 'model.merges' is an object, expected an array");
  std::string gap = spm_tokenizer_json("[]");
  gap.replace(gap.find(R"("id": 9)"), 7, R"("id": 11)");
  EXPECT_ERROR(vocab_from_hf_tokenizer_json(gap, "t"),
               "t: added token '<extra>' has id 11 but id 9 is the next free one");
  std::string clash = spm_tokenizer_json("[]");
  clash.replace(clash.find(R"("id": 9)"), 7, R"("id": 5)");
  EXPECT_ERROR(vocab_from_hf_tokenizer_json(clash, "t"),
               "t: key 'added_tokens[3].content': added token '<extra>' has id 5, which "
               "model.vocab gives to 'a'");
  std::string bad_id = spm_tokenizer_json("[]");
  bad_id.replace(bad_id.find(R"("id": 9)"), 7, R"("id": -1)");
  EXPECT_ERROR(vocab_from_hf_tokenizer_json(bad_id, "t"),
               "t: key 'added_tokens[3].id' is an integer, expected a token id");
  std::string bad_unk = spm_tokenizer_json("[]");
  bad_unk.replace(bad_unk.find(R"("unk_token": "<unk>")"), 20, R"("unk_token": "<nope>")");
  EXPECT_ERROR(vocab_from_hf_tokenizer_json(bad_unk, "t"),
               "t: key 'model.unk_token' names '<nope>', not in the vocabulary");
  EXPECT_ERROR(vocab_from_hf_tokenizer_json("{", "t"), "t: invalid JSON");
  EXPECT_ERROR(vocab_from_hf_tokenizer_json(R"({"model": {"type": "BPE", "vocab": {},
      "end_of_word_suffix": "</w>"}})",
                                            "t"),
               "t: key 'model.end_of_word_suffix' (\"</w>\") is not supported yet");
}

// ---------------------------------------------------------------- ModelFile

TEST(ModelFile, TinyStoriesFolder) {
  PAGODA_SHARED_OR_SKIP(dir, "models/tinystories-656k");
  auto m = ModelFile::open(dir);
  EXPECT_EQ(m->format(), "safetensors");
  EXPECT_EQ(m->path(), dir);
  EXPECT_EQ(m->gguf(), nullptr);
  EXPECT_EQ(m->safetensors().size(), 1u);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.num_layers, 2u);
  EXPECT_EQ(c.hidden_size, 128u);
  EXPECT_EQ(c.intermediate_size, 384u);
  EXPECT_EQ(c.num_heads, 8u);
  EXPECT_EQ(c.num_kv_heads, 4u);
  EXPECT_EQ(c.head_dim, 16u);
  EXPECT_EQ(c.vocab_size, 2048u);
  EXPECT_EQ(c.context_length, 512u);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.rope_scaling_type, "");
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_NO_THROW(c.validate(dir));

  EXPECT_EQ(m->tensors().size(), 21u);
  const TensorRef* emb = m->find_tensor("model.embed_tokens.weight");
  const TensorRef* head = m->find_tensor("lm_head.weight");
  ASSERT_NE(emb, nullptr);
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(emb->data, head->data);
  EXPECT_EQ(emb->shape, (std::vector<uint64_t>{128, 2048}));
  const TensorRef* q = m->find_tensor("model.layers.0.self_attn.q_proj.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->shape, (std::vector<uint64_t>{128, 128}));
  EXPECT_EQ(m->find_tensor("model.layers.1.mlp.gate_proj.weight")->shape,
            (std::vector<uint64_t>{128, 384}));

  ASSERT_TRUE(m->has_vocab());
  const Vocab& v = m->vocab();
  EXPECT_EQ(v.kind, TokenizerKind::kSpm);
  EXPECT_EQ(v.size(), 2048u);
  EXPECT_EQ(v.merges.size(), 1967u);
  EXPECT_EQ(v.merges[0], (std::pair<std::string, std::string>{"e", "\xE2\x96\x81"}));
  EXPECT_EQ(v.bos, 1);
  EXPECT_EQ(v.eos, 2);
  EXPECT_EQ(v.unk, 0);
  EXPECT_EQ(v.pad, 0);
  EXPECT_TRUE(v.add_bos);
  EXPECT_FALSE(v.add_eos);
  EXPECT_TRUE(v.add_space_prefix);
  EXPECT_EQ(v.tokens[1], "<|start_story|>");
  EXPECT_EQ(v.types[0], TokenType::kUnknown);
  EXPECT_EQ(v.types[1], TokenType::kControl);
  EXPECT_EQ(v.types[80], TokenType::kNormal);
  EXPECT_EQ(v.tokens[80], "\xE2\x96\x81");
  EXPECT_EQ(v.eog, (std::vector<TokenId>{2}));
}

TEST(ModelFile, SafetensorsFileFindsItsFolder) {
  PAGODA_SHARED_OR_SKIP(path, "models/tinystories-656k/model.safetensors");
  auto m = ModelFile::open(path);
  EXPECT_EQ(m->format(), "safetensors");
  EXPECT_EQ(m->config().num_layers, 2u);
  EXPECT_TRUE(m->has_vocab());
  EXPECT_EQ(m->tensors().size(), 21u);
}

TEST(ModelFile, Gguf) {
  PAGODA_SHARED_OR_SKIP(path, "models/llama-2-tiny-random/llama-2-tiny-random.gguf");
  auto m = ModelFile::open(path);
  EXPECT_EQ(m->format(), "GGUF v3");
  ASSERT_NE(m->gguf(), nullptr);
  EXPECT_TRUE(m->safetensors().empty());
  EXPECT_EQ(m->config().architecture, "llama");
  EXPECT_EQ(m->config().hidden_size, 8u);
  ASSERT_EQ(m->tensors().size(), 12u);
  const auto& g = m->gguf()->tensors()[0];
  const TensorRef* t = m->find_tensor(g.name);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->data, g.data);
  EXPECT_EQ(t->shape, g.shape);
  EXPECT_EQ(t->type, g.type);
  ASSERT_TRUE(m->has_vocab());
  EXPECT_EQ(m->vocab().size(), 32000u);
}

TEST(ModelFile, RefusesWhatIsNoModel) {
  std::string dir = test::temp_dir();
  write(fs::path(dir) / "notes.txt", "hello");
  EXPECT_ERROR(
      ModelFile::open(dir + "/notes.txt"),
      dir + "/notes.txt: not a GGUF file, a .safetensors file or a Hugging Face model folder");
  fs::create_directories(fs::path(dir) / "empty");
  EXPECT_ERROR(ModelFile::open(dir + "/empty"),
               dir + "/empty: not a GGUF file, a .safetensors file or a Hugging Face model folder");
  EXPECT_ERROR(ModelFile::open(dir + "/missing"), dir + "/missing: no such file or folder");
  write(fs::path(dir) / "bad.gguf", "GGUX1234");
  EXPECT_ERROR(ModelFile::open(dir + "/bad.gguf"), "not a GGUF file (it does not start with");
  write(fs::path(dir) / "config.json", kLlamaConfig);
  EXPECT_ERROR(ModelFile::open(dir),
               ": a Hugging Face model folder, but it has neither model.safetensors nor "
               "model.safetensors.index.json");
}

TEST(ModelFile, FolderWithoutTokenizer) {
  fs::path dir = test::temp_dir();
  write(dir / "model.safetensors", tiny_safetensors({"model.embed_tokens.weight", "x"}));
  EXPECT_ERROR(ModelFile::open(dir.string()), "config.json is missing");
  write(dir / "config.json", kLlamaConfig);
  auto m = ModelFile::open(dir.string());
  EXPECT_FALSE(m->has_vocab());
  EXPECT_ERROR(m->vocab(), dir.string() + ": no tokenizer.json beside the weights");
  EXPECT_TRUE(m->config().tie_embeddings);  // no lm_head.weight: the embedding serves
  EXPECT_EQ(m->config().vocab_size, 300u);

  // A broken tokenizer.json does not stop the weights from loading; vocab() says what broke.
  write(dir / "tokenizer.json", R"({"model": {"type": "Unigram"}})");
  m = ModelFile::open(dir.string());
  EXPECT_FALSE(m->has_vocab());
  EXPECT_ERROR(m->vocab(), "tokenizer.json: tokenizer model type 'Unigram' is not supported yet");

  write(dir / "config.json", R"({"model_type": "llama", "hidden_size": "64"})");
  EXPECT_ERROR(ModelFile::open(dir.string()),
               "config.json: key 'hidden_size' is a string, expected a non-negative integer");
}

TEST(ModelFile, ShardedFolder) {
  fs::path dir = test::temp_dir();
  write(dir / "config.json", kLlamaConfig);
  write(dir / "model-00001-of-00002.safetensors", tiny_safetensors({"a", "b"}));
  write(dir / "model-00002-of-00002.safetensors", tiny_safetensors({"c"}, 3));
  write(dir / "model.safetensors.index.json", R"({"metadata": {"total_size": 28}, "weight_map": {
    "a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
    "c": "model-00002-of-00002.safetensors"}})");
  auto m = ModelFile::open(dir.string());
  EXPECT_EQ(m->safetensors().size(), 2u);
  ASSERT_EQ(m->tensors().size(), 3u);
  EXPECT_EQ(m->find_tensor("c")->num_elements, 3u);

  write(dir / "model.safetensors.index.json", R"({"weight_map": {
    "a": "model-00001-of-00002.safetensors", "z": "model-00002-of-00002.safetensors"}})");
  EXPECT_ERROR(ModelFile::open(dir.string()),
               "model.safetensors.index.json: tensor 'z' is listed in "
               "'model-00002-of-00002.safetensors', which does not hold it");
  write(dir / "model.safetensors.index.json", R"({"weight_map": {"a": "../../etc/passwd"}})");
  EXPECT_ERROR(ModelFile::open(dir.string()),
               "model.safetensors.index.json: key 'weight_map.a': '../../etc/passwd' is not a "
               "plain file name");
  write(dir / "model-00002-of-00002.safetensors", tiny_safetensors({"b"}));
  write(dir / "model.safetensors.index.json", R"({"weight_map": {
    "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})");
  EXPECT_ERROR(ModelFile::open(dir.string()),
               "model-00002-of-00002.safetensors: tensor 'b' also appears in another shard");
}

TEST(ModelFile, SpecialTokensFromTheFilesBeside) {
  fs::path dir = test::temp_dir();
  write(dir / "model.safetensors", tiny_safetensors({"lm_head.weight"}));
  write(dir / "config.json",
        R"({"model_type": "llama", "bos_token_id": 2, "eos_token_id": [1, 9]})");
  write(dir / "tokenizer.json", spm_tokenizer_json("[]"));
  auto m = ModelFile::open(dir.string());
  ASSERT_TRUE(m->has_vocab()) << (m->has_vocab() ? "" : error_of([&] { m->vocab(); }));
  EXPECT_FALSE(m->config().tie_embeddings);
  EXPECT_EQ(m->vocab().bos, 2);
  EXPECT_EQ(m->vocab().eos, 1);
  EXPECT_EQ(m->vocab().eog, (std::vector<TokenId>{1, 9}));

  write(dir / "tokenizer_config.json", R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>",
    "add_bos_token": false, "add_eos_token": true,
    "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})");
  m = ModelFile::open(dir.string());
  ASSERT_TRUE(m->has_vocab()) << error_of([&] { m->vocab(); });
  EXPECT_EQ(m->vocab().bos, 1);
  EXPECT_EQ(m->vocab().eos, 2);
  EXPECT_FALSE(m->vocab().add_bos);
  EXPECT_TRUE(m->vocab().add_eos);
  EXPECT_EQ(m->vocab().chat_template, "D");
  write(dir / "chat_template.jinja", "J");
  EXPECT_EQ(ModelFile::open(dir.string())->vocab().chat_template, "J");
  fs::remove(dir / "chat_template.jinja");

  write(dir / "tokenizer_config.json", R"({"eos_token": "<nope>"})");
  m = ModelFile::open(dir.string());
  EXPECT_ERROR(m->vocab(),
               "tokenizer_config.json: key 'eos_token' names '<nope>', which is not a token");
  write(dir / "tokenizer_config.json", R"({"add_bos_token": "yes"})");
  EXPECT_ERROR(ModelFile::open(dir.string())->vocab(),
               "tokenizer_config.json: key 'add_bos_token' is not a bool");
  fs::remove(dir / "tokenizer_config.json");
  write(dir / "config.json", R"({"model_type": "llama", "eos_token_id": 4000})");
  EXPECT_ERROR(ModelFile::open(dir.string())->vocab(),
               "EOS token id 4000 is outside the vocabulary");
}

}  // namespace
}  // namespace pagoda
