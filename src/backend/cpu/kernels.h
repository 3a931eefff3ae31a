// Internal to backend/cpu: the kernel table each instruction-set level fills in, and the layout
// of quantized activations the matrix kernels read. Ops pick a table once per call
// (cpu_kernels(active_cpu_level())); nothing here depends on the ISA a file was compiled for.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/cpu_features.h"
#include "backend/kv_format.h"
#include "core/dtype.h"
#include "quant/weight_types.h"

namespace pagoda::cpu {

// What a weight type's dot product wants its activations as.
enum class ActFormat {
  kF32,  // the float rows as given
  kQ8,   // 8-bit, one float scale per 32 values (for Q4_0 .. Q8_0)
  kQ8K,  // 8-bit, one float scale per 256 values and sums per 16 (for the K-quants)
};

constexpr int kQ8Block = 32;
constexpr int kQ8KBlock = 256;

// One token's activations quantized for integer dot products, as a struct-of-arrays so that
// 8-bit values of neighbouring blocks are contiguous:
//   kQ8:  qs[cols] int8 | d[cols / 32] float | sum[cols / 32] int32 | sm[cols / 32] float
//   kQ8K: qs[cols] int8 | d[cols / 256] float | bsums[cols / 16] int16
// q = round(x * 127 / amax) in -127..127 (nearest even), so x ~= d * q. The scales carry the
// values llama.cpp's Q8_0 / Q8_1 / Q8_K blocks would (d = F16(amax / 127) for kQ8, 1 / (127 /
// amax) for kQ8K; sm = F16(amax / 127 * sum(q)) as Q8_1's s), so that greedy outputs can match
// that peer's bit for bit; sum = sum(q) lets the offset types (Q4_0, Q8_0 packed) take their
// offset in the integer block sum, as that peer does.
inline int64_t act_row_bytes(ActFormat format, int64_t cols) {
  int64_t bytes = 0;
  switch (format) {
    case ActFormat::kF32: bytes = cols * 4; break;
    case ActFormat::kQ8: bytes = cols + cols / kQ8Block * 12; break;
    case ActFormat::kQ8K: bytes = cols + cols / kQ8KBlock * 4 + cols / 16 * 2; break;
  }
  return (bytes + 63) / 64 * 64;  // rows start on cache lines
}
inline const int8_t* act_qs(const uint8_t* row) { return reinterpret_cast<const int8_t*>(row); }
inline const float* act_d(const uint8_t* row, int64_t cols) {
  return reinterpret_cast<const float*>(row + cols);
}
inline const int32_t* act_sum(const uint8_t* row, int64_t cols) {
  return reinterpret_cast<const int32_t*>(act_d(row, cols) + cols / kQ8Block);
}
inline const float* act_sm(const uint8_t* row, int64_t cols) {
  return act_d(row, cols) + 2 * (cols / kQ8Block);
}
inline const int16_t* act_bsums(const uint8_t* row, int64_t cols) {
  return reinterpret_cast<const int16_t*>(act_d(row, cols) + cols / kQ8KBlock);
}

// y[t * y_stride + r] = (row r of w) . (activation row t) for r < num_rows, t < num_tokens,
// both at most the kernel's tile size. w rows are `w_stride` bytes apart (any alignment);
// activation rows `x_stride` bytes apart in the kernel's ActFormat.
using TileFn = void (*)(const uint8_t* w, size_t w_stride, int num_rows, const uint8_t* x,
                        size_t x_stride, int num_tokens, int64_t cols, float* y,
                        int64_t y_stride);

// Copies rows [0, num_rows) of w into `panel` in a layout faster to multiply from (weights
// unpacked once per chunk of rows, then reused by every token of a prefill).
using UnpackFn = void (*)(const uint8_t* w, size_t w_stride, int64_t num_rows, int64_t cols,
                          uint8_t* panel);

struct MatmulKernel {
  ActFormat act = ActFormat::kF32;
  TileFn tile = nullptr;  // null: this level has no kernel for the type
  int tile_rows = 1;      // the largest num_rows / num_tokens a call takes
  int tile_tokens = 1;
  // Optional, for many tokens: unpack a chunk of rows into a panel (panel_bytes_per_block bytes
  // per 32 columns of a row), then panel_tile over it. Same results as `tile`, bit for bit.
  UnpackFn unpack = nullptr;
  TileFn panel_tile = nullptr;
  int panel_bytes_per_block = 0;
};

// Packed weights (packed.h): groups of kPackRows rows interleaved for 512-bit dot products.
constexpr int kPackRows = 16;
constexpr int kPackTokens = 8;  // the most tokens one packed tile call takes

// y[t * y_stride + r] = (row r from the group on) . (activation row t) for r < num_rows,
// t < num_tokens <= kPackTokens; activations `x_stride` bytes apart in the kernel's ActFormat.
// num_rows is at most kPackRows * the kernel's tile_groups (consecutive groups).
using PackedTileFn = void (*)(const uint8_t* group, int64_t cols, const uint8_t* x,
                              size_t x_stride, int num_tokens, float* y, int64_t y_stride,
                              int num_rows);

struct PackedKernel {
  ActFormat act = ActFormat::kQ8;
  PackedTileFn tile = nullptr;  // null: no packed kernel for the type at this level
  int tile_groups = 1;          // groups one tile call may take
};

// Low-rank products (Backend::add_low_rank) take at most this many tokens per kernel call.
constexpr int kLowRankTokens = 4;

// Quantizes one row of `cols` floats (a multiple of the block) into the layout above.
using QuantizeFn = void (*)(const float* x, int64_t cols, uint8_t* out);

struct Kernels {
  CpuLevel level = CpuLevel::kScalar;
  MatmulKernel matmul[kNumWeightTypes];  // indexed by dtype_index (the type's table row)
  // Where set, products of the type run from weights packed once (packed.h), at every token
  // count, in place of `matmul`.
  PackedKernel packed[kNumWeightTypes];
  QuantizeFn quantize_q8 = nullptr;
  QuantizeFn quantize_q8k = nullptr;

  // Attention. Both sum each value in an order fixed by the head dimension and the number of
  // keys alone, never by how many rows share a call, so a token's attention does not depend on
  // what it is batched with.
  //   qk_block: scores of num_rows query rows against one KV block's keys of one head, stored
  //     transposed in `type` (`k`: the head's key slab, backend/kv_format.h):
  //       scores[r * s_stride + o] = q_r . key_o   for o < block_size
  //     summed as two chains (even and odd dimensions) added at the end; for Q8_0 / FP8, two
  //     chains over each group of the codes, added and then times the group's scale into the
  //     score (group after group).
  //   pv_rows: out_r = sum_{j < num_values} p[r * p_stride + j] * v_j, v_j being the value row
  //     at v[j] in `type` (Q8_0 / FP8: code times its group's scale, a product exact in F32),
  //     summed in order of j.
  void (*qk_block)(const float* const* q, int num_rows, const void* k, KvType type, int64_t dim,
                   int block_size, float* scores, int64_t s_stride) = nullptr;
  void (*pv_rows)(const float* p, int64_t p_stride, int num_rows, const void* const* v, KvType type,
                  int num_values, int64_t dim, float* out, int64_t out_stride) = nullptr;

  // Low-rank products from a matrix packed as float groups (packed.h's F16 layout: groups of 16
  // rows, per column the 16 rows' values, rows past the end zero), in F16 or, where `f16` is
  // false, F32; n <= kLowRankTokens tokens given by row pointers:
  //   low_rank_down: u[t * u_stride + r] = scale * (row r of A) . x[t]   for r < round_up(rank, 16)
  //   low_rank_up:   y[t][r] += (row r of B) . (u[t * u_stride + j], j < rank)   for r < rows
  // A token's values go through the same operations in the same order whatever n is.
  void (*low_rank_down)(const uint8_t* a, bool f16, int64_t rank, int64_t cols,
                        const float* const* x, int n, float scale, float* u,
                        int64_t u_stride) = nullptr;
  void (*low_rank_up)(const uint8_t* b, bool f16, int64_t rows, int64_t rank, const float* u,
                      int64_t u_stride, int n, float* const* y) = nullptr;

  // F16 K/V cache rows: conversions with round-to-nearest-even (as F16C does).
  void (*f16_to_f32)(const uint16_t* x, float* y, int64_t n) = nullptr;
  void (*f32_to_f16)(const float* x, uint16_t* y, int64_t n) = nullptr;

  float (*dot)(const float* a, const float* b, int64_t n) = nullptr;
  void (*axpy)(float a, const float* x, float* y, int64_t n) = nullptr;  // y += a * x
  float (*sum_squares)(const float* x, int64_t n) = nullptr;
  // y = x * s * w
  void (*scale_mul)(const float* x, float s, const float* w, float* y, int64_t n) = nullptr;
  // x = exp(x - shift); returns the sum of the new values.
  float (*exp_shift_sum)(float* x, int64_t n, float shift) = nullptr;
  void (*silu_mul)(const float* gate, const float* up, int64_t n, float* out) = nullptr;
  void (*gelu_mul)(const float* gate, const float* up, int64_t n, float* out) = nullptr;
  void (*add)(float* x, const float* y, int64_t n) = nullptr;
  void (*scale)(float* x, float s, int64_t n) = nullptr;
  // x = x * s; returns the largest new value (n >= 1).
  float (*scale_max)(float* x, float s, int64_t n) = nullptr;
};

// The table for `level`; entries a level lacks are taken from the level below, so every entry
// of every table is set (matmul entries only for the types some level supports).
const Kernels& cpu_kernels(CpuLevel level);

// Each level's own entries (null where it defers to the level below). Defined in
// kernels_scalar.cc, kernels_avx2.cc, kernels_avx512.cc.
void fill_scalar_kernels(Kernels& k);
void fill_avx2_kernels(Kernels& k);
void fill_avx512_kernels(Kernels& k);

// The type's row in the weight-type table (quant/weight_types.h); -1 for none.
inline int dtype_index(DType type) { return weight_type_index(type); }

}  // namespace pagoda::cpu
