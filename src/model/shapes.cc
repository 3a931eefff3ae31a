#include "model/shapes.h"

#include <cmath>

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

ModelShape moe_config(const char* name, ModelConfig c, uint32_t experts, uint32_t used,
                      uint32_t expert_ff) {
  c.num_experts = experts;
  c.num_experts_used = used;
  c.expert_intermediate = expert_ff;
  return {name, c};
}

// A shared expert of `ff` beside the routed ones (Qwen3.5-MoE).
ModelShape shared_expert(ModelShape s, uint32_t ff) {
  s.config.shared_expert_intermediate = ff;
  return s;
}

// YaRN RoPE scaling by `factor` from an original context of `original` tokens.
ModelShape yarn(ModelShape s, float factor, uint32_t original) {
  s.config.rope_scaling_type = "yarn";
  s.config.rope_scaling_factor = factor;
  s.config.rope_original_context = original;
  return s;
}

// LongRoPE from an original context of `original`, with the converter's attention factor.
ModelShape longrope(ModelShape s, uint32_t original) {
  s.config.rope_scaling_type = "longrope";  // the shape's mark; its GGUF file has no type
  s.config.rope_original_context = original;
  s.config.rope_attn_factor = static_cast<float>(
      std::sqrt(1.0 + std::log(static_cast<double>(s.config.context_length) / original) /
                          std::log(static_cast<double>(original))));
  return s;
}

// Gemma 4: `sliding_run` sliding-window layers then a global one, repeated; the global layers'
// head size and KV heads, the sliding ones' (head_dim, num_kv_heads); the last `shared` layers
// read earlier layers' K/V and (double_wide) have twice the feed-forward size; per-layer input
// embeddings of `per_layer` (0: none); RoPE bases 1e6 (global, a quarter of the head rotated)
// and 1e4; final logits capped at 30; `v_is_k`: the global layers have no V projection.
ModelShape gemma4(const char* name, ModelConfig c, uint32_t sliding_run, uint32_t global_head,
                  uint32_t global_kv_heads, uint32_t shared, bool double_wide, uint32_t per_layer,
                  bool v_is_k = false) {
  c.global_v_is_k = v_is_k;
  c.head_dim_sliding = c.rotary_dim_sliding = c.head_dim;
  c.head_dim = global_head;
  c.rope_theta_sliding = 10000.0f;
  c.global_rotary_fraction = 0.25f;
  c.kv_shared_layers = shared;
  c.per_layer_input_dim = per_layer;
  c.final_logit_softcap = 30.0f;
  c.rms_norm_eps = 1e-6f;
  for (uint32_t l = 0; l < c.num_layers; ++l) {
    const bool sliding = (l + 1) % (sliding_run + 1) != 0;
    c.sliding_layers.push_back(sliding ? 1 : 0);
    c.num_kv_heads_per_layer.push_back(sliding ? c.num_kv_heads : global_kv_heads);
    c.intermediate_per_layer.push_back(double_wide && l >= c.num_layers - shared
                                           ? 2 * c.intermediate_size : c.intermediate_size);
  }
  return {name, c};
}

// Qwen3.5: Gated DeltaNet layers with `k_heads` key heads and `v_heads` value heads of
// `state` each and a conv1d of 4 taps, every `interval`-th layer attending fully with a quarter
// of its head rotated (multi-axis RoPE sections as llama.cpp's converter writes them).
ModelShape qwen35(const char* name, ModelConfig c, uint32_t interval, uint32_t k_heads,
                  uint32_t v_heads, uint32_t state) {
  c.full_attention_interval = interval;
  c.ssm_conv_kernel = 4;
  c.ssm_state_size = state;
  c.ssm_group_count = k_heads;
  c.ssm_time_step_rank = v_heads;
  c.ssm_inner_size = v_heads * state;
  c.rotary_dim = c.head_dim / 4;
  const int32_t pairs = static_cast<int32_t>(c.rotary_dim / 2);
  const int32_t third = pairs * 10 / 32, second = (pairs - third) / 2;  // 0.8B: 11, 11, 10
  c.rope_sections = {pairs - second - third, second, third, 0};
  c.rms_norm_eps = 1e-6f;
  return {name, c};
}

// Shapes from each model's published config.json.
const std::vector<ModelShape> kShapes = {
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
    // Gemma 4 E2B: 35 layers of 1536 (four sliding-window ones of head 256 then a global one of
    // head 512, one KV head each, window 512), the last 20 reading earlier layers' K/V with a
    // double-wide feed-forward block, per-layer input embeddings of 256.
    gemma4("gemma4-e2b", make_config("gemma4", 35, 1536, 6144, 8, 1, 256, 262144, 131072, 1000000, true, 512), 4, 512, 1, 20, true, 256),
    // Every dense Gemma 4 feature at test size: nine layers (two sliding-window ones then a
    // global one, three times; the last three read layers 4's and 5's K/V), sliding heads of 64
    // with one KV head and global ones of 128 with two (K/V rows of 64 and 256), a window of 16,
    // per-layer inputs of 32, global layers without a V projection.
    gemma4("gemma4-tiny", make_config("gemma4", 9, 256, 512, 4, 1, 64, 262144, 4096, 1000000, true, 16), 2, 128, 2, 3, true, 32, true),
    // Gemma 4 26B-A4B: 30 layers of 2816 (five sliding-window ones of head 256 with 8 KV heads,
    // window 1024, then a global one of head 512 with 2 KV heads and no V projection), a dense
    // block of 2112 beside 128 experts of 704, 8 used per token.
    moe_config("gemma4-26b-a4b", gemma4("", make_config("gemma4", 30, 2816, 2112, 16, 8, 256, 262144, 262144, 1000000, true, 1024), 5, 512, 2, 0, false, 0, true).config, 128, 8, 704),
    // Its mixture of experts at test size: six layers (two sliding, one global, twice), a dense
    // block of 256 beside 8 experts of 128 with 2 used, no shared K/V or per-layer inputs.
    moe_config("gemma4-moe-tiny", gemma4("", make_config("gemma4", 6, 256, 256, 4, 2, 64, 262144, 4096, 1000000, true, 16), 2, 128, 1, 0, false, 0, true).config, 8, 2, 128),
    moe_config("mixtral-8x7b", make_config("llama", 32, 4096, 14336, 32, 8, 128, 32000, 32768, 1000000, false), 8, 2, 0),
    moe_config("qwen3-moe-30b-a3b", make_config("qwen3moe", 48, 2048, 6144, 32, 4, 128, 151936, 40960, 1000000, false), 128, 8, 768),
    // Mixtral's and Qwen3-MoE's routing at test size: 8 experts, 2 used per token.
    moe_config("mixtral-tiny", make_config("llama", 3, 256, 512, 4, 2, 64, 32000, 4096, 1000000, false), 8, 2, 0),
    moe_config("qwen3-moe-tiny", make_config("qwen3moe", 3, 256, 768, 4, 2, 128, 151936, 4096, 1000000, true), 8, 2, 256),
    // gpt-oss-20b: 32 experts (4 used) of 2880, 64 heads of 64 over a hidden size of 2880,
    // sliding window 128 on every other layer, YaRN x32 from 4096.
    yarn(moe_config("gpt-oss-20b", make_config("gpt-oss", 24, 2880, 2880, 64, 8, 64, 201088, 131072, 150000, false, 128), 32, 4, 2880), 32, 4096),
    // Every gpt-oss feature at test size: two sliding-window layers (window 16, shorter than
    // the test sequences) and two full ones, sinks, biases, 8 experts with 4 used, and YaRN from
    // an original context of 64 so that the test sequences run past it.
    yarn(moe_config("gpt-oss-tiny", make_config("gpt-oss", 4, 256, 256, 4, 2, 64, 32000, 4096, 150000, false, 16), 8, 4, 256), 4, 64),
    // Phi-3's fused Q/K/V and gate/up tensors, here with grouped K/V heads (Phi-3-medium's).
    {"phi-3-tiny", make_config("phi3", 3, 256, 768, 4, 2, 64, 32064, 4096, 10000, false)},
    // Phi-3 128K's LongRoPE at test size: long and short frequency divisors, an original
    // context of 64 (the test sequences run past it, so llama.cpp and pagoda take the long
    // ones), and the attention factor sqrt(1 + ln(4096 / 64) / ln 64) llama.cpp's converter writes.
    longrope({"phi-3-tiny-longrope", make_config("phi3", 3, 256, 768, 4, 2, 64, 32064, 4096, 10000, false)}, 64),
    // Larger models, for estimates (none ties its embeddings). Qwen2's context is the instruct
    // models' max_position_embeddings (32K native; longer only with YaRN).
    // Qwen3.5-0.8B: 24 layers of 1024 (three Gated DeltaNet layers of 16 key and 16 value heads
    // of 128, then a full-attention one of 8 heads of 256 with 2 KV heads), feed-forward 3584.
    qwen35("qwen3.5-0.8b", make_config("qwen35", 24, 1024, 3584, 8, 2, 256, 248320, 262144, 1e7f, true), 4, 16, 16, 128),
    // Both layer kinds at test size: DeltaNet, full attention, DeltaNet (the last layer
    // recurrent), 2 key heads shared by 4 value heads of 32, attention heads of 64 (16 rotated).
    qwen35("qwen3.5-tiny", make_config("qwen35", 3, 256, 512, 4, 2, 64, 32000, 4096, 1e7f, true), 2, 2, 4, 32),
    // Qwen3.5-35B-A3B (llama.cpp's 40-layer qwen35moe type): 40 layers of 2048 (three Gated
    // DeltaNet layers of 16 key and 32 value heads of 128, then a full-attention one of 16 heads
    // of 256 with 2 KV heads), 256 experts of 512 with 8 used, a shared expert of 512.
    shared_expert(moe_config("qwen3.5-moe", qwen35("", make_config("qwen35moe", 40, 2048, 512, 16, 2, 256, 248320, 262144, 1e7f, false), 4, 16, 32, 128).config, 256, 8, 512), 512),
    // Its mixture of experts at qwen3.5-tiny's size: 8 experts of 128 with 2 used, and a shared
    // expert of another width (192) so that the two cannot be confused.
    shared_expert(moe_config("qwen3.5-moe-tiny", qwen35("", make_config("qwen35moe", 3, 256, 512, 4, 2, 64, 32000, 4096, 1e7f, true), 2, 2, 4, 32).config, 8, 2, 128), 192),
    {"llama-2-13b", make_config("llama", 40, 5120, 13824, 40, 40, 128, 32000, 4096, 1e4f, false)},
    {"llama-2-70b", make_config("llama", 80, 8192, 28672, 64, 8, 128, 32000, 4096, 1e4f, false)},
    {"llama-3-8b", make_config("llama", 32, 4096, 14336, 32, 8, 128, 128256, 8192, 5e5f, false)},
    {"llama-3-70b", make_config("llama", 80, 8192, 28672, 64, 8, 128, 128256, 8192, 5e5f, false)},
    {"qwen2-7b", make_config("qwen2", 28, 3584, 18944, 28, 4, 128, 152064, 32768, 1e6f, false)},
    {"qwen2-72b", make_config("qwen2", 80, 8192, 29568, 64, 8, 128, 152064, 32768, 1e6f, false)},
};

}  // namespace

const std::vector<ModelShape>& model_shapes() { return kShapes; }

const ModelShape* find_model_shape(std::string_view name) {
  for (const auto& s : kShapes) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

}  // namespace pagoda
