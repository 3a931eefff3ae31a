// Internal to backend/cpu: weights repacked once into groups of 16 rows whose quants are
// interleaved four bytes per row, so that one 512-bit VPDPBUSD multiplies 4 columns of 16 rows
// by one broadcast group of 4 activation bytes, and the int32 lanes of a block sum are the 16
// rows' sums themselves (no horizontal sums, one float FMA per block for 16 rows).
//
// A group holds every block of its 16 rows in column order (rows past the matrix end are zero).
// Within a block of 32 columns, "vector j" (j = 0..7) is 64 bytes: byte 4r + i is the unsigned
// quant u of row r, column 4j + i. Per type, per block of 32 columns (K-quants: per 256):
//   Q4_0, Q4_1  [d f16 x16] [m f16 x16, Q4_1 only] [4 nibble vectors]             x = d (u - 8), d u + m
//   Q8_0        [d f16 x16] [8 byte vectors, u = q + 128]                          x = d (u - 128)
//   FP8_E4M3    [d f16 x16] [per column: the 16 rows' E4M3 codes, 16 bytes] x32   x = d e4m3(code)
//   Q4_K        [d x16][dmin x16 f16] [scale u8 x16, min u8 x16] x8 [4 nibble vectors] x8
//                                                                  x = d sc u - dmin mn (groups of 32)
//   Q6_K        [d f16 x16] [scale i8 x16] x16 [4 nibble vectors, 2 high-bit vectors] x8
//                                                                  x = d sc (u - 32)    (groups of 16)
//   F16, BF16   per column: the 16 rows' values as stored                      (no blocks)
// A nibble vector k holds vector k in its low nibbles and vector k + 4 in its high ones. Q6_K's
// high-bit vector h holds bits 4-5 of vectors 4h .. 4h + 3 at bits 0-1, 2-3, 4-5, 6-7.
//
// Packing copies the bytes once (the same size as the file's blocks, up to 3 % more for Q4_K)
// and is exact: the quants and scales are the file's. The products of a packed matrix differ from
// the row-major tiles only in float summation order, and are the same for every token count.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/kernels.h"
#include "core/dtype.h"

namespace pagoda::cpu {

// Bytes of one packed group of `cols` columns; 0 when `type` has no packed layout.
size_t packed_group_bytes(DType type, int64_t cols);

// Packs groups [first_group, last_group) of a row-major matrix of `rows` x `cols` (rows
// `w_stride` bytes apart) into out + group * packed_group_bytes(type, cols).
void pack_groups(DType type, const uint8_t* w, size_t w_stride, int64_t rows, int64_t cols,
                 int64_t first_group, int64_t last_group, uint8_t* out);

}  // namespace pagoda::cpu
