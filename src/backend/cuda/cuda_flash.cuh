// Prompt attention on the F16 tensor cores, FlashAttention-2 style over the paged KV cache
// (cuda_flash.cu): a block of four warps takes a query tile of 64 rows, each row one (token,
// query head) of one KV head's group, so the heads of a GQA group share every K/V load; it
// walks the tile's positions 32 at a time, staging the chunk's keys and values in shared memory
// (F16, transposed as the mma fragments read them; the block table is read once per position
// of a chunk, never per element), and each warp computes its 16 rows' scores with
// mma.sync m16n8k16 (F16 in, F32 sums), the causal / sliding-window mask, the online softmax in
// F32, and P V with P rounded to F16.
//
// Everything here compiles with nvcc and with the host compiler alone: the fragment mapping,
// the rows of a tile, the mask, the K/V addresses and the tiling of a prompt are the kernel's
// and the host emulation's (flash_attention_host, compared with the reference backend).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/cuda/cuda_q8.cuh"

namespace pagoda::cuda {

constexpr int kFlashWarps = 4;
constexpr int kFlashRows = 16 * kFlashWarps;  // (token, head) rows of a query tile
constexpr int kFlashChunk = 32;               // positions a stage holds
// Halves between staged rows: 8 past the row, so that the 32 lanes' 4-byte fragment loads
// (8 rows x 4 words) fall in 32 different banks.
constexpr int kFlashKeyPad = 8;
constexpr int kFlashValueStride = kFlashChunk + 8;

// ---- the fragments of mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 (PTX ISA) ----
// Lane l is group g = l / 4, thread t = l % 4; each register holds two consecutive k (halves).
//   A (16 x 16), 4 registers: register r holds row g + 8 (r % 2), k 2t + 8 (r / 2) and + 1.
//   B (16 x 8), 2 registers: register r holds column g, k 2t + 8 r and + 1.
//   C (16 x 8, F32), 4 values: c[i] is row g + 8 (i / 2), column 2t + i % 2.
PAGODA_HD int f16_a_row(int lane, int reg) { return lane / 4 + 8 * (reg % 2); }
PAGODA_HD int f16_a_k(int lane, int reg) { return 2 * (lane % 4) + 8 * (reg / 2); }
PAGODA_HD int f16_b_col(int lane) { return lane / 4; }
PAGODA_HD int f16_b_k(int lane, int reg) { return 2 * (lane % 4) + 8 * reg; }
PAGODA_HD int f16_c_row(int lane, int i) { return lane / 4 + 8 * (i / 2); }
PAGODA_HD int f16_c_col(int lane, int i) { return 2 * (lane % 4) + i % 2; }
// The scores of 16 positions (two C tiles of 8) are the A fragment of P V in place: A register
// r of k step s is C tile 2s + r / 2, values p_value(r) and p_value(r) + 1.
PAGODA_HD int p_tile(int s, int reg) { return 2 * s + reg / 2; }
PAGODA_HD int p_value(int reg) { return 2 * (reg % 2); }

// ---- a query tile's rows ----

// Tokens of a tile: as many as fill 64 rows with a group's heads each.
PAGODA_HD int flash_tile_tokens(int group) { return group >= kFlashRows ? 1 : kFlashRows / group; }

// Row r of a tile of `count` tokens from t0, for KV head kvh: its token (-1 for a row past the
// tile) and query head.
struct FlashRow {
  int64_t token;
  int32_t head;
};
PAGODA_HD FlashRow flash_row(int64_t t0, int32_t count, int32_t group, int32_t kvh, int r) {
  const int32_t i = r / group;
  return {i < count ? t0 + i : -1, kvh * group + r % group};
}

// The positions a token at `pos` sees: first .. pos (window 0: all earlier ones).
PAGODA_HD int32_t first_seen(int32_t pos, int32_t window) {
  return window > 0 ? (pos - window + 1 > 0 ? pos - window + 1 : 0) : 0;
}
PAGODA_HD bool sees(int32_t pos, int32_t window, int32_t j) {
  return j <= pos && j >= first_seen(pos, window);
}

// Where position j's key and value lie in a layer's F16 cache (kv_format.h): the KV head's
// slab of j's block, and j's slot in it. The key of (j, d) is at slab + d * block_size + slot,
// its value at slab + slot * head_dim + d.
struct KvSlot {
  int64_t slab;
  int32_t slot;
};
PAGODA_HD KvSlot kv_slot(const int32_t* table, int32_t block_size, int32_t kv_heads, int32_t kvh,
                         int32_t head_dim, int32_t j) {
  const int64_t block = table[j / block_size];
  return {(block * kv_heads + kvh) * block_size * head_dim, j % block_size};
}

// A sequence's tokens begin .. end - 1 as tiles of at most max_tokens tokens with consecutive
// positions (so the positions a tile's block loads are the ones its tokens see): {first token,
// count} pairs appended to tiles.
inline void prompt_tiles(const int32_t* positions, int32_t begin, int32_t end,
                         int32_t max_tokens, std::vector<int32_t>* tiles) {
  for (int32_t t = begin; t < end;) {
    int32_t count = 1;
    while (count < max_tokens && t + count < end &&
           positions[t + count] == positions[t + count - 1] + 1) {
      ++count;
    }
    tiles->push_back(t);
    tiles->push_back(count);
    t += count;
  }
}

// The online softmax's step for one row: the new running maximum's base (0 while the row has
// seen nothing, so that exp(-inf - base) is 0, never NaN) and the factor the old sums take.
struct SoftmaxStep {
  float base;
  float correction;
};
PAGODA_HD SoftmaxStep softmax_step(float old_max, float new_max) {
  const float base = new_max == -INFINITY ? 0.0f : new_max;
  return {base, expf(old_max - base)};
}

// Attention sinks (gpt-oss, AttentionParams::sinks, device memory in the kernels): query head
// `head`'s learned logit joins its row's softmax with no value, so a row whose sum is taken at
// `row_max` gains exp(sink - row_max) in its denominator. No sinks: nothing.
PAGODA_HD float sink_term(const float* sinks, int32_t head, float row_max) {
  return sinks == nullptr ? 0.0f : expf(sinks[head] - row_max);
}

// ---- the host emulation ----

// F16 rounding, as the kernel's operands take it.
inline float round_f16(float x) { return half_to_float(float_to_half(x)); }

// out[token, head, :] for the tiles' tokens, as cuda_flash.cu computes it: the same tiles,
// rows, chunks, mask, addresses and softmax steps, the products over F16-rounded operands in
// F32 (the order of the sums within one product differs from the tensor cores').
inline void flash_attention_host(const float* q, const uint16_t* kc, const uint16_t* vc,
                                 const int32_t* seq_of, const int32_t* positions,
                                 const int32_t* block_table, int32_t max_blocks,
                                 int32_t block_size, const int32_t* tiles, int64_t num_tiles,
                                 int32_t heads, int32_t kv_heads, int32_t head_dim, float scale,
                                 int32_t window, const float* sinks, float* out) {
  const int32_t group = heads / kv_heads, d_max = head_dim;
  std::vector<float> ks(static_cast<size_t>(kFlashChunk * d_max)), vs(ks.size());
  std::vector<float> qr(static_cast<size_t>(kFlashRows * d_max)), o(qr.size());
  for (int64_t tile = 0; tile < num_tiles; ++tile) {
    const int64_t t0 = tiles[2 * tile];
    const int32_t count = tiles[2 * tile + 1];
    const int32_t* table = block_table + static_cast<int64_t>(seq_of[t0]) * max_blocks;
    const int32_t lo = first_seen(positions[t0], window), hi = positions[t0 + count - 1];
    for (int32_t kvh = 0; kvh < kv_heads; ++kvh) {
      float row_max[kFlashRows], row_sum[kFlashRows];
      for (int r = 0; r < kFlashRows; ++r) {
        const FlashRow fr = flash_row(t0, count, group, kvh, r);
        row_max[r] = -INFINITY, row_sum[r] = 0.0f;
        for (int d = 0; d < head_dim; ++d) {
          qr[r * d_max + d] = fr.token < 0 ? 0.0f : round_f16(q[(fr.token * heads + fr.head) * head_dim + d]);
          o[r * d_max + d] = 0.0f;
        }
      }
      // Chunks from lo (never a position before it: its block may be gone from the table).
      for (int32_t c0 = lo; c0 <= hi; c0 += kFlashChunk) {
        for (int j = 0; j < kFlashChunk; ++j) {
          const int32_t p = c0 + j;
          const bool in = p <= hi;
          const KvSlot at = in ? kv_slot(table, block_size, kv_heads, kvh, head_dim, p) : KvSlot{0, 0};
          for (int d = 0; d < head_dim; ++d) {
            ks[j * d_max + d] = in ? half_to_float(kc[at.slab + int64_t{d} * block_size + at.slot]) : 0.0f;
            vs[j * d_max + d] = in ? half_to_float(vc[at.slab + int64_t{at.slot} * head_dim + d]) : 0.0f;
          }
        }
        for (int r = 0; r < kFlashRows; ++r) {
          const FlashRow fr = flash_row(t0, count, group, kvh, r);
          const int32_t pos = fr.token < 0 ? -1 : positions[fr.token];
          float s[kFlashChunk], new_max = row_max[r];
          for (int j = 0; j < kFlashChunk; ++j) {
            float dot = 0.0f;
            for (int d = 0; d < head_dim; ++d) dot += qr[r * d_max + d] * ks[j * d_max + d];
            s[j] = sees(pos, window, c0 + j) ? dot * scale : -INFINITY;
            new_max = fmaxf(new_max, s[j]);
          }
          const SoftmaxStep step = softmax_step(row_max[r], new_max);
          row_max[r] = new_max;
          float sum = 0.0f;
          for (float& v : s) sum += (v = expf(v - step.base));
          row_sum[r] = row_sum[r] * step.correction + sum;
          for (int d = 0; d < head_dim; ++d) {
            float acc = o[r * d_max + d] * step.correction;
            for (int j = 0; j < kFlashChunk; ++j) acc += round_f16(s[j]) * vs[j * d_max + d];
            o[r * d_max + d] = acc;
          }
        }
      }
      for (int r = 0; r < kFlashRows; ++r) {
        const FlashRow fr = flash_row(t0, count, group, kvh, r);
        if (fr.token < 0) continue;
        const float total = row_sum[r] + sink_term(sinks, fr.head, row_max[r]);
        for (int d = 0; d < head_dim; ++d) {
          out[(fr.token * heads + fr.head) * head_dim + d] = o[r * d_max + d] / total;
        }
      }
    }
  }
}

}  // namespace pagoda::cuda
