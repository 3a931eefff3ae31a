// Weight blocks as byte images of GGUF (ggml) blocks: a tensor of type X is an array of
// BlockX, one per kBlockSize (or kSuperBlockSize) elements along a row.
//
// Every half-precision field is a uint16_t holding F16 bits (see quant/fp16.h), so a struct
// can be memcpy'd straight from a mapped file on any little-endian host. Field order and sizes
// are the file format: never reorder, never add members. Plain structs, so fields carry no
// trailing underscore.
#pragma once

#include <cstdint>
#include <cstring>

namespace pagoda {

constexpr int kBlockSize = 32;        // elements per block of the legacy types (Q4_0 .. Q8_0)
constexpr int kSuperBlockSize = 256;  // elements per super-block of the K-quants
constexpr int kScaleBytesK4 = 12;     // 8 scales + 8 mins of 6 bits each (Q4_K, Q5_K)

// x = (q - 8) * d. qs[j] holds element j in its low nibble and element j + 16 in its high one.
struct BlockQ4_0 {
  uint16_t d;                  // F16 scale
  uint8_t qs[kBlockSize / 2];  // 4-bit quants
};

// x = q * d + m, q in 0..15, nibbles packed as in Q4_0.
struct BlockQ4_1 {
  uint16_t d;  // F16 scale
  uint16_t m;  // F16 minimum (offset)
  uint8_t qs[kBlockSize / 2];
};

// x = (q - 16) * d with q = low nibble | (bit j of qh) << 4; qh is a little-endian uint32
// stored as bytes so the struct keeps 2-byte alignment and 22-byte size.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];               // bit j = fifth bit of element j
  uint8_t qs[kBlockSize / 2];  // low four bits, nibbles packed as in Q4_0
};

// x = q * d + m, q in 0..31, bits packed as in Q5_0.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kBlockSize / 2];
};

// x = q * d.
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kBlockSize];
};

// Sixteen groups of 16. x = d * (scales[g] & 15) * q - dmin * (scales[g] >> 4), q in 0..3.
// Element h*128 + j*32 + l (h in 0..1, j in 0..3, l in 0..31) is bits 2j..2j+1 of qs[h*32 + l].
struct BlockQ2_K {
  uint8_t scales[kSuperBlockSize / 16];  // low nibble scale, high nibble min, per group
  uint8_t qs[kSuperBlockSize / 4];
  uint16_t d;     // F16 super-scale of the scales
  uint16_t dmin;  // F16 super-scale of the mins
};

// Sixteen groups of 16. x = d * (s[g] - 32) * (q - 4), q = 2 low bits (qs, packed as in Q2_K)
// | 1 high bit (bit e / 32 of hmask[e % 32]) << 2. s[g] is 6 bits: low 4 in nibble g / 8 of
// scales[g % 8], high 2 in bits 2*(g / 4) of scales[8 + g % 4].
struct BlockQ3_K {
  uint8_t hmask[kSuperBlockSize / 8];
  uint8_t qs[kSuperBlockSize / 4];
  uint8_t scales[12];
  uint16_t d;
};

// Eight groups of 32. x = d * sc[g] * q - dmin * m[g], q in 0..15, sc and m 6 bits each
// packed into `scales` (see get_scale_min_k4 in reference.cc). Element c*64 + l (l < 32) is the
// low nibble of qs[c*32 + l], element c*64 + 32 + l its high nibble.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kScaleBytesK4];
  uint8_t qs[kSuperBlockSize / 2];
};

// As Q4_K with a fifth bit: bit e / 32 of qh[e % 32] adds 16 to element e's quant.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kScaleBytesK4];
  uint8_t qh[kSuperBlockSize / 8];
  uint8_t qs[kSuperBlockSize / 2];
};

// Sixteen groups of 16. x = d * scales[g] * (q - 32), q = 4 bits from ql | 2 bits from qh << 4.
// Within each half h (128 elements), element 32*j + l takes the low nibble (j = 0, 1) or
// high nibble (j = 2, 3) of ql[h*64 + (j % 2)*32 + l] and bits 2j..2j+1 of qh[h*32 + l].
struct BlockQ6_K {
  uint8_t ql[kSuperBlockSize / 2];
  uint8_t qh[kSuperBlockSize / 4];
  int8_t scales[kSuperBlockSize / 16];
  uint16_t d;
};

// Activations for K-quant dot products: x = d * q. bsums[g] = sum of qs over group g of 16,
// kept so a dot product with a "min" type can subtract the offsets once per group.
struct BlockQ8_K {
  float d;  // a float, not F16: the activation range is not known in advance
  int8_t qs[kSuperBlockSize];
  int16_t bsums[kSuperBlockSize / 16];
};

// The non-linear 4-bit grid of the IQ4 types: an index 0..15 stands for kIQ4Values[index].
// The levels crowd near zero, where most weights lie, and the table is asymmetric (-127 ..
// 113), so a block's scale is signed: the encoder picks the side its extreme element lands on.
inline constexpr int8_t kIQ4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};

// x = d * kIQ4Values[index]; indices packed as Q4_0's quants: qs[j] holds element j in its low
// nibble and element j + 16 in its high one.
struct BlockIQ4_NL {
  uint16_t d;  // F16 scale
  uint8_t qs[kBlockSize / 2];
};

// Eight sub-blocks of 32. x = d * (ls[s] - 32) * kIQ4Values[index], ls[s] 6 bits: low 4 in
// nibble s % 2 of scales_l[s / 2], high 2 in bits 2s..2s+1 of scales_h. Sub-block s's indices
// are qs[16s .. 16s + 16), nibbles packed as in BlockIQ4_NL.
struct BlockIQ4_XS {
  uint16_t d;  // F16 super-scale of the sub-block scales
  uint16_t scales_h;
  uint8_t scales_l[kSuperBlockSize / 64];
  uint8_t qs[kSuperBlockSize / 2];
};

// The 2- and 3-bit i-quants (llama.cpp's layouts): super-blocks of 256 in groups of 8 (IQ2) or
// 4 (IQ3) values, each group one index into a grid of magnitude patterns (quant/iq_grids.h,
// generated at build time) plus one sign per value, with a 4-bit scale per 32 (IQ2_XS: per 16).
// Seven sign bits are stored per group of 8; the eighth makes the count of minus signs even.
//
// IQ2_XXS: per 32 values two uint32 of qs: the first holds four 8-bit grid indices, the second
// four 7-bit sign codes (bits 7l..7l+6 for group l) and the scale ls in bits 28..31:
// x = d * (0.5 + ls) / 4 * grid * sign.
struct BlockIQ2_XXS {
  uint16_t d;  // F16
  uint16_t qs[kSuperBlockSize / 8];
};

// IQ2_XS: qs[g] = 9-bit grid index | 7-bit sign code << 9 for group g of 8; scales[s] holds the
// 4-bit scales of values 32s..32s+15 (low nibble) and 32s+16..32s+31 (high):
// x = d * (0.5 + ls) / 4 * grid * sign.
struct BlockIQ2_XS {
  uint16_t d;
  uint16_t qs[kSuperBlockSize / 8];
  uint8_t scales[kSuperBlockSize / 32];
};

// IQ2_S: group g of 8 has the 10-bit grid index qs[g] | bits 2(g % 4)..2(g % 4)+1 of
// qh[g / 4] << 8 and its 8 signs in signs[g] (bit j for value j); scales as IQ2_XS's:
// x = d * (0.5 + ls) / 4 * grid * sign. (llama.cpp's IQ3_XXS files hold some IQ2_S tensors.)
struct BlockIQ2_S {
  uint16_t d;
  uint8_t qs[kSuperBlockSize / 8];
  uint8_t signs[kSuperBlockSize / 8];
  uint8_t qh[kSuperBlockSize / 32];
  uint8_t scales[kSuperBlockSize / 32];
};

// IQ3_XXS: qs[0 .. 64) are 8-bit grid indices, one per group of 4; then one uint32 per 32
// values: four 7-bit sign codes (one per 8 values) and the scale in bits 28..31:
// x = d * (0.5 + ls) / 2 * grid * sign.
struct BlockIQ3_XXS {
  uint16_t d;
  uint8_t qs[3 * kSuperBlockSize / 8];
};

// IQ3_S: group i of 4 has the 9-bit grid index qs[i] | bit i % 8 of qh[i / 8] << 8; value e has
// its sign in bit e % 8 of signs[e / 8] (all eight stored); scales[s] holds the scales of
// values 64s..64s+31 (low nibble) and 64s+32..64s+63 (high): x = d * (1 + 2 ls) * grid * sign.
struct BlockIQ3_S {
  uint16_t d;
  uint8_t qs[kSuperBlockSize / 4];
  uint8_t qh[kSuperBlockSize / 32];
  uint8_t signs[kSuperBlockSize / 8];
  uint8_t scales[kSuperBlockSize / 64];
};

// MXFP4 (the OCP microscaling format gpt-oss ships its experts in): 32 E2M1 values sharing one
// E8M0 exponent. kFP4Values holds the E2M1 values doubled (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their
// negatives become integers), so x = kFP4Values[index] * e8m0_half(e); indices packed as Q4_0's.
inline constexpr int8_t kFP4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

struct BlockMXFP4 {
  uint8_t e;  // E8M0: 2^(e - 127)
  uint8_t qs[kBlockSize / 2];
};

// 2^(e - 128): half the E8M0 value, which the doubled grid needs; e 0 and 1 are subnormal.
inline float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? uint32_t{0x00200000} << e : uint32_t{e - 1u} << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// The sizes are the GGUF type sizes (also in the traits table in core/dtype.cc, which is not
// constexpr; tests/unit/test_quant.cc checks the two agree).
// FP8_E4M3 (pagoda's own type, core/dtype.h): 32 E4M3 codes (quant/fp8.h) with one F16 scale,
// laid out as Q8_0 is; x = d * e4m3(code), d = F16(amax / 448).
struct BlockFP8 {
  uint16_t d;
  uint8_t qs[kBlockSize];
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockIQ2_XXS) == 66);
static_assert(sizeof(BlockIQ2_XS) == 74);
static_assert(sizeof(BlockIQ2_S) == 82);
static_assert(sizeof(BlockIQ3_XXS) == 98);
static_assert(sizeof(BlockIQ3_S) == 110);
static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockIQ4_XS) == 136);
static_assert(sizeof(BlockFP8) == 34);
static_assert(sizeof(BlockMXFP4) == 17);

}  // namespace pagoda
