// Repacking GGUF weight blocks into the interleaved groups of packed.h. Scalar: each matrix is
// packed once per backend (Backend::prepare, else on its first product).
#include <algorithm>
#include <cstring>

#include "backend/cpu/packed.h"
#include "core/error.h"

namespace pagoda::cpu {
namespace {

constexpr int kVectorBytes = 4 * kPackRows;  // one 512-bit vector: 4 columns of 16 rows

uint16_t u16_at(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// One row's block of 32 columns, decoded to unsigned quants and its F16 scale fields.
struct Block32 {
  uint8_t u[32] = {};
  uint16_t d = 0, m = 0;
};

// Writes vectors 0..7 of a block as four nibble vectors (vector k low, k + 4 high).
void put_nibbles(const uint8_t (*u)[32], uint8_t* out) {
  for (int k = 0; k < 4; ++k)
    for (int r = 0; r < kPackRows; ++r)
      for (int i = 0; i < 4; ++i) {
        out[k * kVectorBytes + 4 * r + i] =
            static_cast<uint8_t>((u[r][4 * k + i] & 15) | (u[r][16 + 4 * k + i] & 15) << 4);
      }
}

void put_bytes(const uint8_t (*u)[32], uint8_t* out) {
  for (int j = 0; j < 8; ++j)
    for (int r = 0; r < kPackRows; ++r)
      for (int i = 0; i < 4; ++i) out[j * kVectorBytes + 4 * r + i] = u[r][4 * j + i];
}

// Q6_K: bits 4-5 of vectors 4h .. 4h + 3 in high-bit vector h.
void put_high_bits(const uint8_t (*u)[32], uint8_t* out) {
  for (int h = 0; h < 2; ++h)
    for (int r = 0; r < kPackRows; ++r)
      for (int i = 0; i < 4; ++i) {
        int byte = 0;
        for (int k = 0; k < 4; ++k) byte |= (u[r][4 * (4 * h + k) + i] >> 4 & 3) << (2 * k);
        out[h * kVectorBytes + 4 * r + i] = static_cast<uint8_t>(byte);
      }
}

void put_f16(const uint16_t* v, uint8_t* out) { std::memcpy(out, v, 2 * kPackRows); }

// ---- legacy types ----

// Q4_0 (quants at byte 2) and Q4_1 (its min at 2, quants at 4): element i < 16 in the low
// nibble of quant byte i, element i + 16 in its high nibble.
template <int kQs, bool kMin>
Block32 decode_nibbles(const uint8_t* b) {
  Block32 o;
  o.d = u16_at(b);
  if (kMin) o.m = u16_at(b + 2);
  for (int i = 0; i < 16; ++i) {
    o.u[i] = b[kQs + i] & 15;
    o.u[i + 16] = b[kQs + i] >> 4;
  }
  return o;
}

Block32 decode_q8_0(const uint8_t* b) {
  Block32 o;
  o.d = u16_at(b);
  for (int i = 0; i < 32; ++i) o.u[i] = static_cast<uint8_t>(b[2 + i] ^ 0x80);
  return o;
}

template <Block32 (*kDecode)(const uint8_t*), int kInBytes, bool kMin, bool kNibbles>
void pack_legacy(const uint8_t* w, size_t w_stride, int64_t rows, int64_t cols, int64_t group,
                 uint8_t* out) {
  for (int64_t b = 0; b < cols / 32; ++b) {
    uint8_t u[kPackRows][32] = {};
    uint16_t d[kPackRows] = {}, m[kPackRows] = {};
    for (int r = 0; r < kPackRows; ++r) {
      const int64_t row = group * kPackRows + r;
      if (row >= rows) break;
      const Block32 blk = kDecode(w + row * w_stride + b * kInBytes);
      std::memcpy(u[r], blk.u, 32);
      d[r] = blk.d;
      m[r] = blk.m;
    }
    put_f16(d, out);
    out += 32;
    if (kMin) {
      put_f16(m, out);
      out += 32;
    }
    if (kNibbles) {
      put_nibbles(u, out);
      out += 4 * kVectorBytes;
    } else {
      put_bytes(u, out);
      out += 8 * kVectorBytes;
    }
  }
}

// FP8_E4M3: the 16 rows' scales, then per column the 16 rows' codes as stored.
void pack_fp8(const uint8_t* w, size_t w_stride, int64_t rows, int64_t cols, int64_t group,
              uint8_t* out) {
  for (int64_t b = 0; b < cols / 32; ++b) {
    uint16_t d[kPackRows] = {};
    uint8_t codes[32][kPackRows] = {};
    for (int r = 0; r < kPackRows; ++r) {
      const int64_t row = group * kPackRows + r;
      if (row >= rows) break;
      const uint8_t* blk = w + row * w_stride + b * 34;
      d[r] = u16_at(blk);
      for (int j = 0; j < 32; ++j) codes[j][r] = blk[2 + j];
    }
    put_f16(d, out);
    std::memcpy(out + 32, codes, sizeof(codes));
    out += 32 + sizeof(codes);
  }
}

// ---- K-quants: super-blocks of 256 ----

struct Block256 {
  uint8_t u[256] = {};
  uint8_t scale[16] = {};  // Q4_K: 8 scales of 32; Q6_K: 16 signed scales of 16
  uint8_t min[8] = {};
  uint16_t d = 0, dmin = 0;
};

Block256 decode_q4_k(const uint8_t* b) {
  Block256 o;
  o.d = u16_at(b);
  o.dmin = u16_at(b + 2);
  const uint8_t* s = b + 4;
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      o.scale[j] = s[j] & 63;
      o.min[j] = s[j + 4] & 63;
    } else {
      o.scale[j] = static_cast<uint8_t>((s[j + 4] & 15) | (s[j - 4] >> 6) << 4);
      o.min[j] = static_cast<uint8_t>((s[j + 4] >> 4) | (s[j] >> 6) << 4);
    }
  }
  const uint8_t* qs = b + 16;
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      o.u[c * 64 + l] = qs[c * 32 + l] & 15;
      o.u[c * 64 + 32 + l] = qs[c * 32 + l] >> 4;
    }
  return o;
}

Block256 decode_q6_k(const uint8_t* b) {
  Block256 o;
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  std::memcpy(o.scale, b + 192, 16);
  o.d = u16_at(b + 208);
  for (int half = 0; half < 2; ++half) {
    uint8_t* u = o.u + half * 128;
    const uint8_t* l_ = ql + half * 64;
    const uint8_t* h_ = qh + half * 32;
    for (int l = 0; l < 32; ++l) {
      u[l] = static_cast<uint8_t>((l_[l] & 15) | (h_[l] & 3) << 4);
      u[l + 32] = static_cast<uint8_t>((l_[l + 32] & 15) | (h_[l] >> 2 & 3) << 4);
      u[l + 64] = static_cast<uint8_t>((l_[l] >> 4) | (h_[l] >> 4 & 3) << 4);
      u[l + 96] = static_cast<uint8_t>((l_[l + 32] >> 4) | (h_[l] >> 6 & 3) << 4);
    }
  }
  return o;
}

template <Block256 (*kDecode)(const uint8_t*), int kInBytes, bool kQ6>
void pack_k(const uint8_t* w, size_t w_stride, int64_t rows, int64_t cols, int64_t group,
            uint8_t* out) {
  for (int64_t b = 0; b < cols / 256; ++b) {
    Block256 blk[kPackRows];
    for (int r = 0; r < kPackRows; ++r) {
      const int64_t row = group * kPackRows + r;
      blk[r] = row < rows ? kDecode(w + row * w_stride + b * kInBytes) : Block256{};
    }
    uint16_t d[kPackRows], dmin[kPackRows];
    for (int r = 0; r < kPackRows; ++r) {
      d[r] = blk[r].d;
      dmin[r] = blk[r].dmin;
    }
    put_f16(d, out);
    out += 32;
    if (!kQ6) {
      put_f16(dmin, out);
      out += 32;
    }
    const int num_scales = kQ6 ? 16 : 8;
    for (int j = 0; j < num_scales; ++j) {
      for (int r = 0; r < kPackRows; ++r) out[r] = blk[r].scale[j];
      out += kPackRows;
      if (!kQ6) {
        for (int r = 0; r < kPackRows; ++r) out[r] = blk[r].min[j];
        out += kPackRows;
      }
    }
    for (int s = 0; s < 8; ++s) {
      uint8_t u[kPackRows][32];
      for (int r = 0; r < kPackRows; ++r) std::memcpy(u[r], blk[r].u + 32 * s, 32);
      put_nibbles(u, out);
      out += 4 * kVectorBytes;
      if (kQ6) {
        put_high_bits(u, out);
        out += 2 * kVectorBytes;
      }
    }
  }
}

// ---- float types: per column, the 16 rows' values ----

template <int kElementBytes>
void pack_float(const uint8_t* w, size_t w_stride, int64_t rows, int64_t cols, int64_t group,
                uint8_t* out) {
  std::memset(out, 0, static_cast<size_t>(cols * kPackRows * kElementBytes));
  for (int r = 0; r < kPackRows; ++r) {
    const int64_t row = group * kPackRows + r;
    if (row >= rows) break;
    const uint8_t* src = w + row * w_stride;
    for (int64_t c = 0; c < cols; ++c) {
      std::memcpy(out + (c * kPackRows + r) * kElementBytes, src + c * kElementBytes, kElementBytes);
    }
  }
}

using PackFn = void (*)(const uint8_t* w, size_t w_stride, int64_t rows, int64_t cols, int64_t group,
                       uint8_t* out);

// The types with a packed layout (packed.h): bytes of one group per `per_cols` columns, and the
// packer of one group. A type is packed at a level where x86_packed.inc's fill_packed also
// gives it a tile.
struct PackedLayout {
  DType type;
  int64_t per_cols;
  int64_t group_bytes;
  PackFn pack;
};

constexpr PackedLayout kLayouts[] = {
    {DType::kQ4_0, 32, 32 + 4 * kVectorBytes, pack_legacy<decode_nibbles<2, false>, 18, false, true>},
    {DType::kQ4_1, 32, 64 + 4 * kVectorBytes, pack_legacy<decode_nibbles<4, true>, 20, true, true>},
    {DType::kQ8_0, 32, 32 + 8 * kVectorBytes, pack_legacy<decode_q8_0, 34, false, false>},
    {DType::kFP8_E4M3, 32, 32 + 32 * kPackRows, pack_fp8},
    {DType::kQ4_K, 256, 64 + 8 * 32 + 8 * 4 * kVectorBytes, pack_k<decode_q4_k, 144, false>},
    {DType::kQ6_K, 256, 32 + 16 * 16 + 8 * 6 * kVectorBytes, pack_k<decode_q6_k, 210, true>},
    {DType::kF16, 1, kPackRows * 2, pack_float<2>},
    {DType::kBF16, 1, kPackRows * 2, pack_float<2>},
};

const PackedLayout* find_layout(DType type) {
  for (const PackedLayout& l : kLayouts) {
    if (l.type == type) return &l;
  }
  return nullptr;
}

}  // namespace

size_t packed_group_bytes(DType type, int64_t cols) {
  const PackedLayout* l = find_layout(type);
  return l == nullptr ? 0 : static_cast<size_t>(cols / l->per_cols * l->group_bytes);
}

void pack_groups(DType type, const uint8_t* w, size_t w_stride, int64_t rows, int64_t cols,
                 int64_t first_group, int64_t last_group, uint8_t* out) {
  const size_t group_bytes = packed_group_bytes(type, cols);
  if (group_bytes == 0) fail("pack: no packed layout for ", dtype_traits(type).name);
  const PackFn pack = find_layout(type)->pack;
  for (int64_t g = first_group; g < last_group; ++g) {
    pack(w, w_stride, rows, cols, g, out + static_cast<size_t>(g) * group_bytes);
  }
}

}  // namespace pagoda::cpu
