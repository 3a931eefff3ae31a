// Teacher-forced logits against llama.cpp at every position (tests/data/logits/*.json, made by
// scripts/make_logit_vectors.py): the same token sequence goes through both engines in one batch,
// and at each position pagoda's logits of llama.cpp's top 20 tokens must agree within a bound,
// and pagoda's best token must be llama.cpp's unless llama.cpp's best two are within a near-tie.
// Unlike a free-running greedy comparison, a near-tie does not end the check: every position of
// every sequence is compared.
//
// Two oracles for a quantized file. Exact math: llama.cpp on the file's F32 twin, which pagoda's
// reference backend (float math on dequantized weights) must meet closely. And llama.cpp on the
// file itself, which like pagoda's CPU backend rounds activations to 8 bits before each quantized
// product; the two engines round at different places, so their distance is of the size of
// llama.cpp's own distance from exact math (stored per sequence as peer_max_diff and printed).
// A synthetic F32 file has one oracle, exact for both backends.
//
// Every bound is set from the largest value measured on this suite, written beside it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "core/mapped_file.h"
#include "engine/generator.h"
#include "model/model.h"
#include "model/model_file.h"
#include "tools/synth.h"
#include "test_util.h"

namespace pagoda {
namespace {

struct Bounds {
  double max_diff;   // largest |pagoda - oracle| over every position's top 20
  double mean_diff;  // mean over positions of each position's largest difference
  double near_tie;   // pagoda's best token may differ only where the oracle's top two are closer
};

struct LogitCase {
  const char* name;  // tests/data/logits/NAME.json
  Bounds cpu;        // the CPU backend against llama.cpp on the same file
  Bounds cpu_exact;  // the CPU backend against exact math (quantized files only)
  Bounds ref;        // the reference backend against exact math
};

// Measured on a 2-core Zen 4 (AVX-512 kernels) with the vectors of 2026-12-03 ("m": the measured
// largest difference, mean, and widest gap at which the best token differed). The CPU backend's
// near-tie, 0.5: its best token differed at gaps up to 0.337, each a position where 8-bit
// activations moved two close logits. On a 2-core Zen 3 with AVX2 kernels only (2026-12-03) every
// case passes too, the CPU backend against llama.cpp then measuring 2.20 / 0.575 / 0.329 (Gemma 3),
// 1.32 / 0.407 / 0.128 (SmolLM2) and 1.50 / 0.181 / 0.141 (Qwen2.5), the synthetic F32 files as
// below.
const LogitCase kCases[] = {
    // Gemma 3's activations are the largest of the three: llama.cpp on this file is up to 1.80
    // from exact math (mean 0.50); pagoda's CPU backend has a worse worst position (one in 284)
    // and the same mean. The reference backend's 0.027 is llama.cpp's rounding: its GELU reads a
    // table indexed by F16 inputs, and Gemma's feed-forward inputs are large.
    {"gemma-3-270m-q4_k_m",
     {5.0, 0.8, 0.5},     // m 3.79, 0.576, 0.171
     {5.0, 0.8, 0.5},     // m 3.75, 0.538, 0.171
     {0.05, 0.01, 0.1}},  // m 0.0273, 0.0046, none
    {"smollm2-135m-instruct-q4_1",
     {2.0, 0.6, 0.5},      // m 1.32, 0.402, 0.128
     {2.0, 0.6, 0.5},      // m 1.13, 0.369, 0.337 (llama.cpp on this file: 1.54 from exact)
     {1e-4, 3e-5, 2e-4}},  // m 3.6e-5, 1.2e-5, none
    {"qwen2.5-coder-0.5b-instruct-q4_k_m",
     {2.5, 0.3, 0.5},      // m 1.68, 0.183, 0.150
     {1.0, 0.3, 0.5},      // m 0.489, 0.161, 0.293 (llama.cpp on this file: 1.24 from exact)
     {2e-4, 2e-5, 4e-4}},  // m 8.5e-5, 7.8e-6, none
    // F32 weights: no rounding of activations, so both backends meet llama.cpp's exact math.
    {"synth-qwen3-tiny-f32",
     {5e-6, 1e-6, 1e-5},   // m 1.09e-6, 4.9e-7, none
     {},
     {5e-6, 1e-6, 1e-5}},  // m 1.05e-6, 4.2e-7, none
    // Gemma's GELU again (llama.cpp's F16 table), with no other rounding beside it.
    {"synth-gemma3-tiny-f32",
     {1e-3, 5e-4, 2e-3},   // m 4.5e-4, 2.5e-4, none
     {},
     {1e-3, 5e-4, 2e-3}},  // m 4.5e-4, 2.5e-4, none
    // Gemma 4's dense layer (model/gemma4.cc): GELU twice per layer (feed-forward and
    // per-layer input gate), which llama.cpp reads from its F16 table; pagoda and an exact
    // numpy pass agree within 2e-6 (tests/python/test_gemma4.py). Measured 2026-12-06.
    {"synth-gemma4-tiny-f32",
     {3e-3, 1e-3, 1e-3},   // m 1.08e-3, 4.8e-4, 4.8e-5
     {},
     {3e-3, 1e-3, 1e-3}},  // m 1.08e-3, 4.8e-4, 4.8e-5
    // Its mixture of experts (26B-A4B's feed-forward): a dense block beside routed experts.
    {"synth-gemma4-moe-tiny-f32",
     {2e-3, 1e-3, 1e-3},   // m 5.9e-4, 3.1e-4, 2.0e-4
     {},
     {2e-3, 1e-3, 1e-3}},  // m 5.9e-4, 3.1e-4, 2.0e-4
    // Routed experts: 8, two used per token, softmax gating, weights normalized.
    {"synth-mixtral-tiny-f32",
     {5e-6, 1e-6, 1e-5},   // m 7.1e-7, 3.0e-7, none
     {},
     {5e-6, 1e-6, 1e-5}},  // m 6.8e-7, 2.5e-7, none
    {"synth-qwen3-moe-tiny-f32",
     {5e-6, 1e-6, 1e-5},   // m 8.5e-7, 3.8e-7, none
     {},
     {5e-6, 1e-6, 1e-5}},  // m 7.6e-7, 3.2e-7, none
    // Phi-3 128K's LongRoPE (long factors: llama.cpp's context and pagoda's cache both exceed
    // the original 64 tokens).
    {"synth-phi-3-tiny-longrope-f32",
     {5e-6, 2e-6, 1e-5},   // m 8.5e-7, 6.2e-7, none (2026-12-06)
     {},
     {5e-6, 2e-6, 1e-5}},  // m 8.5e-7, 6.0e-7, none
    // gpt-oss: sinks, sliding and full layers, biases, the clamped SwiGLU, YaRN past position
    // 64. Measured 2026-12-06 (same machine and kernels as above).
    {"synth-gpt-oss-tiny-f32",
     {5e-6, 1e-6, 1e-5},   // m 5.5e-7, 2.1e-7, none
     {},
     {5e-6, 1e-6, 1e-5}},  // m 5.1e-7, 1.7e-7, none
    // Its published type: MXFP4 experts, Q8_0 elsewhere. Both engines round activations to 8
    // bits at the same places here, so the CPU backend stays within 0.006 of llama.cpp while
    // each is up to 0.37 from exact math (the wide synthetic biases make large activations).
    {"synth-gpt-oss-tiny-mxfp4_moe",
     {0.02, 0.005, 0.02},  // m 5.6e-3, 1.4e-3, 0.0019
     {1.0, 0.05, 0.1},     // m 0.367, 0.0116, 0.0357 (llama.cpp on this file: 0.367 from exact)
     {5e-6, 1e-6, 1e-5}},  // m 5.9e-7, 1.7e-7, none
    // Qwen3.5's hybrid layers: Gated DeltaNet (conv1d window and delta-rule state per
    // sequence), full attention with an output gate. Measured 2026-12-06 (same machine).
    {"synth-qwen3.5-tiny-f32",
     {1e-5, 1.5e-6, 1e-5},   // m 2.99e-6, 5.5e-7, none
     {},
     {1e-5, 1.5e-6, 1e-5}},  // m 2.39e-6, 6.2e-7, none
    // Its mixture of experts: 8 routed experts (2 used) and a shared expert behind a sigmoid
    // gate, seed 4 (no routing choice within 4e-4). Measured 2026-12-07 (same machine).
    {"synth-qwen3.5-moe-tiny-f32",
     {1e-5, 1.5e-6, 1e-5},   // m 1.90e-6, 5.3e-7, none
     {},
     {1e-5, 1.5e-6, 1e-5}},  // m 2.11e-6, 5.8e-7, none
    // Phi-3's fused Q/K/V and gate/up tensors, read as row ranges of one matrix.
    {"synth-phi-3-tiny-f32",
     {5e-6, 2e-6, 1e-5},   // m 9.3e-7, 6.4e-7, none
     {},
     {5e-6, 2e-6, 1e-5}},  // m 7.8e-7, 5.9e-7, none
};

struct Stats {
  int64_t positions = 0;
  double max_diff = 0;
  double sum_diff = 0;
  size_t worst_sequence = 0, worst_position = 0;
  int64_t worst_token = 0;
  double worst_pagoda = 0, worst_oracle = 0;
  std::vector<double> disagreement_gaps;  // the oracle's top-1 minus top-2 where the best differs
};

// pagoda's logits of every sequence, on one backend.
std::vector<std::vector<float>> run(Model& model, Backend& backend, const nlohmann::json& sequences) {
  std::vector<std::vector<float>> out;
  for (const auto& seq : sequences) {
    auto ids = seq.at("ids").get<std::vector<TokenId>>();
    Generator gen(model, backend, static_cast<int32_t>(ids.size()) + 1);
    out.push_back(gen.prompt_logits(ids));
  }
  return out;
}

// pagoda's logits against one oracle's top 20 (`key`) of each sequence.
Stats compare(const std::vector<std::vector<float>>& pagoda, int64_t vocab,
              const nlohmann::json& sequences, const char* key) {
  Stats s;
  for (size_t i = 0; i < pagoda.size(); ++i) {
    const auto& top = sequences[i].at(key);
    EXPECT_EQ(top.size() * vocab, pagoda[i].size());
    for (size_t pos = 0; pos < top.size(); ++pos) {
      const float* row = pagoda[i].data() + pos * vocab;
      double position_max = 0;
      for (const auto& entry : top[pos]) {
        const int64_t id = entry[0].get<int64_t>();
        const double oracle = entry[1].get<double>();
        const double diff = std::fabs(row[id] - oracle);
        position_max = std::max(position_max, diff);
        if (diff > s.max_diff) {
          s.max_diff = diff;
          s.worst_sequence = i;
          s.worst_position = pos;
          s.worst_token = id;
          s.worst_pagoda = row[id];
          s.worst_oracle = oracle;
        }
      }
      s.sum_diff += position_max;
      const auto best = std::max_element(row, row + vocab) - row;
      if (best != top[pos][0][0].get<int64_t>()) {
        s.disagreement_gaps.push_back(top[pos][0][1].get<double>() - top[pos][1][1].get<double>());
      }
      ++s.positions;
    }
  }
  return s;
}

void check(const std::string& what, const Stats& s, const Bounds& b) {
  const double mean = s.positions ? s.sum_diff / static_cast<double>(s.positions) : 0;
  std::cerr << "  " << what << ": " << s.positions << " positions; largest logit difference "
            << s.max_diff << " (bound " << b.max_diff << "; sequence " << s.worst_sequence
            << " position " << s.worst_position << " token " << s.worst_token << ": "
            << s.worst_pagoda << " against " << s.worst_oracle << "); mean " << mean << " (bound "
            << b.mean_diff << "); " << s.disagreement_gaps.size() << " top-1 disagreements";
  for (size_t i = 0; i < std::min<size_t>(s.disagreement_gaps.size(), 12); ++i) {
    std::cerr << " [gap " << s.disagreement_gaps[i] << "]";
  }
  if (s.disagreement_gaps.size() > 12) std::cerr << " ...";
  std::cerr << " (near-tie " << b.near_tie << ")\n";
  EXPECT_LE(s.max_diff, b.max_diff) << what;
  EXPECT_LE(mean, b.mean_diff) << what;
  const double widest = s.disagreement_gaps.empty()
                            ? 0
                            : *std::max_element(s.disagreement_gaps.begin(), s.disagreement_gaps.end());
  EXPECT_LT(widest, b.near_tie) << what << ": pagoda's best token differs where the oracle leads by "
                                << widest;
}

class LogitsPeer : public ::testing::TestWithParam<LogitCase> {};

TEST_P(LogitsPeer, EveryPositionMatchesLlamaCpp) {
  const LogitCase& c = GetParam();
  const std::string root = PAGODA_SOURCE_DIR;
  auto doc = nlohmann::json::parse(read_file(root + "/tests/data/logits/" + c.name + ".json"));
  std::string path;
  if (doc.contains("synth")) {  // written again here: synth is seeded and thread-count independent
    PAGODA_SHARED_OR_SKIP(vocab, doc.at("synth").at("vocab").get<std::string>());
    SynthOptions o;
    o.preset = doc.at("synth").at("like");
    o.type = doc.at("synth").at("type");
    o.seed = doc.at("synth").at("seed");
    o.vocab_path = vocab;
    o.output_path = path = test::temp_dir() + "/" + c.name + ".gguf";
    write_synthetic_model(o, {});
  } else {
    path = root + "/models/" + doc.at("file").get<std::string>();
    if (!std::filesystem::exists(path)) {
      GTEST_SKIP() << "*** " << path << " is absent (run scripts/setup): SKIPPING ***";
    }
  }
  auto file = ModelFile::open(path);
  auto model = Model::load(*file);
  const int64_t vocab = model->config().vocab_size;
  const auto& seqs = doc.at("sequences");
  const bool quantized = seqs[0].contains("top_exact");
  std::cerr << c.name << "\n";
  if (quantized) {
    double peer = 0;
    for (const auto& seq : seqs) peer = std::max(peer, seq.at("peer_max_diff").get<double>());
    std::cerr << "  llama.cpp on this file against exact math: largest logit difference " << peer << "\n";
  }
  auto cpu = make_cpu_backend(2);
  auto cpu_logits = run(*model, *cpu, seqs);
  check("cpu backend against llama.cpp", compare(cpu_logits, vocab, seqs, "top"), c.cpu);
  if (quantized) {
    check("cpu backend against exact", compare(cpu_logits, vocab, seqs, "top_exact"), c.cpu_exact);
  }
  auto ref = make_reference_backend();
  auto ref_logits = run(*model, *ref, seqs);
  check(quantized ? "reference backend against exact" : "reference backend against llama.cpp",
        compare(ref_logits, vocab, seqs, quantized ? "top_exact" : "top"), c.ref);
}

// LongRoPE's short factors while the KV cache holds no more than the original context (64), as
// llama.cpp takes them for a context that small: the same tokens then give other logits past
// position 0 (which no rotation moves).
TEST(LongRope, ShortFactorsWhileTheCacheFitsTheOriginalContext) {
  PAGODA_SHARED_OR_SKIP(vocab, "testdata/vocab/ggml-vocab-phi-3.gguf");
  SynthOptions o;
  o.preset = "phi-3-tiny-longrope";
  o.type = "f32";
  o.vocab_path = vocab;
  o.output_path = test::temp_dir() + "/phi-3-tiny-longrope.gguf";
  write_synthetic_model(o, {});
  auto file = ModelFile::open(o.output_path);
  auto model = Model::load(*file);
  auto ref = make_reference_backend();
  std::vector<TokenId> ids;
  for (TokenId i = 0; i < 40; ++i) ids.push_back(100 + 37 * i);
  const int64_t vocab_size = model->config().vocab_size;
  Generator small(*model, *ref, 41), large(*model, *ref, 200);  // caches of 48 and 208 slots
  const std::vector<float> short_logits = small.prompt_logits(ids), long_logits = large.prompt_logits(ids);
  ASSERT_EQ(short_logits.size(), long_logits.size());
  double first = 0, rest = 0;
  for (size_t i = 0; i < short_logits.size(); ++i) {
    double& worst = static_cast<int64_t>(i) < vocab_size ? first : rest;
    worst = std::max(worst, static_cast<double>(std::fabs(short_logits[i] - long_logits[i])));
  }
  EXPECT_LT(first, 1e-6);
  EXPECT_GT(rest, 1e-2);
}

INSTANTIATE_TEST_SUITE_P(Models, LogitsPeer, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<LogitCase>& info) {
                           std::string n = info.param.name;
                           for (char& ch : n) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace pagoda
