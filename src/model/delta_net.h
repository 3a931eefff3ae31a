// The Gated DeltaNet mixer's per-sequence steps (Qwen3.5's linear-attention layers), on host
// memory: the causal conv1d over a sequence's tokens continuing from its conv window, and the
// gated delta rule continuing from its state. Each step reads one sequence; the forward pass
// (model/qwen35.cc) runs them per sequence, so a sequence's result does not depend on the others
// of its batch.
#pragma once

#include <cstdint>

namespace pagoda {

struct DeltaNetShape {
  int64_t key_heads = 0;    // GGUF ssm.group_count
  int64_t value_heads = 0;  // ssm.time_step_rank (a multiple of key_heads)
  int64_t head_dim = 0;     // ssm.state_size: key and value head size
  int64_t conv_kernel = 0;  // ssm.conv_kernel

  int64_t key_dim() const { return key_heads * head_dim; }
  int64_t value_dim() const { return value_heads * head_dim; }
  // The conv1d's channels: Q, K (key_dim each) and V (value_dim), in that order.
  int64_t channels() const { return 2 * key_dim() + value_dim(); }
};

// out[t, c] = silu(sum_j w[c, j] * in[t + j - (K - 1), c]) for the `n` tokens of one sequence,
// where positions before the first token read the window ([c, K - 1], oldest first), which then
// holds the last K - 1 inputs. in, out: [n, channels]; w: [channels, K].
void causal_conv1d_silu(const DeltaNetShape& s, const float* in, int64_t n, const float* w,
                        float* window, float* out);

// L2-normalises each Q and K head of the `n` rows of qkv ([n, channels], the conv's output) in
// place (x / sqrt(|x|^2 + eps)) and scales Q by 1/sqrt(head_dim).
void normalize_qk(const DeltaNetShape& s, float* qkv, int64_t n, float eps);

// The gated delta rule of value head `h` over the `n` tokens of one sequence, from its state
// [value dim, key dim] (updated in place). qkv: [n, channels], normalised; value head h reads
// key head h % key_heads (llama.cpp's layout). decay: [n, value heads], the log of each step's
// forget factor; beta: [n, value heads], the write strength. Per token:
//   S = exp(decay) S;  S += beta (v - S k) k^T;  out = S q.        out: [n, value_dim]
// A run goes in chunks of kDeltaChunk tokens from its start, each in the chunked form, but a
// last part shorter than kDeltaChunkedFrom tokens (a decode, speculative verification, a
// prompt's end) token by token: the choice depends on the sequence's own tokens alone, never on
// its batch. The two forms agree to rounding, not bit for bit, so a prompt split elsewhere than
// at multiples of kDeltaChunk gives slightly other values (test_delta_net.cc measures how far
// apart); the scheduler splits hybrid prompts at those multiples when the step budget allows
// (SchedulerConfig::state_align), and then every split gives the same bits.
void gated_delta_rule_head(const DeltaNetShape& s, const float* qkv, int64_t n, int64_t h,
                           const float* decay, const float* beta, float* state, float* out);

// Tokens per chunk of the chunked form, and the shortest run that takes it.
inline constexpr int64_t kDeltaChunk = 64;
inline constexpr int64_t kDeltaChunkedFrom = 16;

// The two forms, same arguments. Token by token: n rank-one updates of the state. Chunked
// (the WY form, as transformers' torch_chunk_gated_delta_rule): per chunk of kDeltaChunk
// tokens, the decay-weighted K K^T system solved by forward substitution, the chunk's outputs
// from the incoming state plus the part within the chunk, and one update of the state.
void gated_delta_rule_head_recurrent(const DeltaNetShape& s, const float* qkv, int64_t n,
                                     int64_t h, const float* decay, const float* beta,
                                     float* state, float* out);
void gated_delta_rule_head_chunked(const DeltaNetShape& s, const float* qkv, int64_t n, int64_t h,
                                   const float* decay, const float* beta, float* state, float* out);

}  // namespace pagoda
