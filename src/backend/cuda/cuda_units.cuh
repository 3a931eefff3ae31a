// 32 consecutive weights of a row ("a unit") decoded at once, for the products: one lane takes
// a whole unit, so its loads are a few wide ones in flight together rather than a byte per
// element (cuda_decode.cuh's element<T>, kept for the embedding lookup). Every type's blocks
// are 32 or 256 elements, so a unit never straddles two blocks. Loads are as wide as the
// block's alignment in a row allows (the rows start at cudaMalloc's 256-byte alignment and
// row_bytes is a whole number of blocks).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

#include "backend/cuda/cuda_decode.cuh"

// Unrolling in the device pass only: the host compiler (these also run on the host, for the
// tests) does not know the pragma.
#ifdef __CUDA_ARCH__
#define PAGODA_UNROLL _Pragma("unroll")
#else
#define PAGODA_UNROLL
#endif

namespace pagoda::cuda {

constexpr int kUnit = 32;

// N bytes from p, read as 2-, 4- or 16-byte words (p aligned to Width).
template <int Width, int N>
__host__ __device__ __forceinline__ void load_bytes(const uint8_t* p, uint8_t (&out)[N]) {
  static_assert(N % Width == 0);
  if constexpr (Width == 16) {
PAGODA_UNROLL
    for (int i = 0; i < N / 16; ++i) {
      const uint4 v = reinterpret_cast<const uint4*>(p)[i];
      const uint32_t w[4] = {v.x, v.y, v.z, v.w};
PAGODA_UNROLL
      for (int k = 0; k < 16; ++k) out[16 * i + k] = static_cast<uint8_t>(w[k / 4] >> (8 * (k % 4)));
    }
  } else if constexpr (Width == 4) {
PAGODA_UNROLL
    for (int i = 0; i < N / 4; ++i) {
      const uint32_t v = reinterpret_cast<const uint32_t*>(p)[i];
PAGODA_UNROLL
      for (int k = 0; k < 4; ++k) out[4 * i + k] = static_cast<uint8_t>(v >> (8 * k));
    }
  } else {
    static_assert(Width == 2);
PAGODA_UNROLL
    for (int i = 0; i < N / 2; ++i) {
      const uint16_t v = reinterpret_cast<const uint16_t*>(p)[i];
      out[2 * i] = static_cast<uint8_t>(v);
      out[2 * i + 1] = static_cast<uint8_t>(v >> 8);
    }
  }
}

__host__ __device__ __forceinline__ float half_of(const uint8_t* b) {  // b 2-byte aligned
  return __half2float(__ushort_as_half(*reinterpret_cast<const uint16_t*>(b)));
}

__host__ __device__ __forceinline__ float float_of_bits(uint32_t bits) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(bits);
#else
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
#endif
}

// w[e] = element 32u + e of the row.
template <DType T>
__host__ __device__ __forceinline__ void unit_values(const uint8_t* row, int64_t u, float (&w)[kUnit]) {
  if constexpr (T == DType::kF32) {
    const float4* p = reinterpret_cast<const float4*>(row) + u * 8;
PAGODA_UNROLL
    for (int i = 0; i < 8; ++i) {
      const float4 v = p[i];
      w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
    }
  } else if constexpr (T == DType::kF16 || T == DType::kBF16) {
    const uint4* p = reinterpret_cast<const uint4*>(row) + u * 4;
PAGODA_UNROLL
    for (int i = 0; i < 4; ++i) {
      const uint4 v = p[i];
      const uint32_t words[4] = {v.x, v.y, v.z, v.w};
PAGODA_UNROLL
      for (int k = 0; k < 4; ++k) {
PAGODA_UNROLL
        for (int h = 0; h < 2; ++h) {
          const auto bits = static_cast<uint16_t>(words[k] >> (16 * h));
          w[8 * i + 2 * k + h] = T == DType::kF16
                                     ? __half2float(__ushort_as_half(bits))
                                     : float_of_bits(static_cast<uint32_t>(bits) << 16);
        }
      }
    }
  } else if constexpr (T == DType::kQ8_0) {  // {d, qs[32]}, 34 bytes
    const uint8_t* b = row + u * 34;
    uint8_t q[32];
    load_bytes<2>(b + 2, q);
    const float d = half_of(b);
PAGODA_UNROLL
    for (int e = 0; e < 32; ++e) w[e] = d * static_cast<float>(static_cast<int8_t>(q[e]));
  } else if constexpr (T == DType::kQ4_0) {  // {d, qs[16]}, 18 bytes
    const uint8_t* b = row + u * 18;
    uint8_t q[16];
    load_bytes<2>(b + 2, q);
    const float d = half_of(b);
PAGODA_UNROLL
    for (int j = 0; j < 16; ++j) {
      w[j] = d * static_cast<float>((q[j] & 15) - 8);
      w[j + 16] = d * static_cast<float>((q[j] >> 4) - 8);
    }
  } else if constexpr (T == DType::kQ4_1) {  // {d, m, qs[16]}, 20 bytes
    const uint8_t* b = row + u * 20;
    uint8_t q[16];
    load_bytes<4>(b + 4, q);
    const float d = half_of(b), m = half_of(b + 2);
PAGODA_UNROLL
    for (int j = 0; j < 16; ++j) {
      w[j] = d * static_cast<float>(q[j] & 15) + m;
      w[j + 16] = d * static_cast<float>(q[j] >> 4) + m;
    }
  } else if constexpr (T == DType::kQ5_0) {  // {d, qh[4], qs[16]}, 22 bytes
    const uint8_t* b = row + u * 22;
    uint8_t q[20];
    load_bytes<2>(b + 2, q);
    const uint32_t qh = q[0] | (q[1] << 8) | (q[2] << 16) | (static_cast<uint32_t>(q[3]) << 24);
    const float d = half_of(b);
PAGODA_UNROLL
    for (int j = 0; j < 16; ++j) {
      const int lo = static_cast<int>((q[4 + j] & 15) | (((qh >> j) & 1) << 4));
      const int hi = static_cast<int>((q[4 + j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
      w[j] = d * static_cast<float>(lo - 16);
      w[j + 16] = d * static_cast<float>(hi - 16);
    }
  } else if constexpr (T == DType::kQ5_1) {  // {d, m, qh[4], qs[16]}, 24 bytes
    const uint8_t* b = row + u * 24;
    uint8_t q[20];
    load_bytes<4>(b + 4, q);
    const uint32_t qh = q[0] | (q[1] << 8) | (q[2] << 16) | (static_cast<uint32_t>(q[3]) << 24);
    const float d = half_of(b), m = half_of(b + 2);
PAGODA_UNROLL
    for (int j = 0; j < 16; ++j) {
      w[j] = d * static_cast<float>((q[4 + j] & 15) | (((qh >> j) & 1) << 4)) + m;
      w[j + 16] = d * static_cast<float>((q[4 + j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) + m;
    }
  } else if constexpr (T == DType::kQ4_K) {  // {d, dmin, scales[12], qs[128]}, 144 bytes
    const uint8_t* b = row + (u / 8) * 144;
    const int sub = static_cast<int>(u % 8), c = sub / 2;
    uint8_t q[32];
    load_bytes<16>(b + 16 + c * 32, q);
    int sc, m;
    scale_min_k4(sub, b + 4, &sc, &m);
    const float d = half_of(b) * static_cast<float>(sc), dm = half_of(b + 2) * static_cast<float>(m);
    const int shift = (sub & 1) * 4;
PAGODA_UNROLL
    for (int e = 0; e < 32; ++e) w[e] = d * static_cast<float>((q[e] >> shift) & 15) - dm;
  } else if constexpr (T == DType::kQ5_K) {  // {d, dmin, scales[12], qh[32], qs[128]}, 176
    const uint8_t* b = row + (u / 8) * 176;
    const int sub = static_cast<int>(u % 8), c = sub / 2;
    uint8_t q[32], qh[32];
    load_bytes<16>(b + 48 + c * 32, q);
    load_bytes<16>(b + 16, qh);
    int sc, m;
    scale_min_k4(sub, b + 4, &sc, &m);
    const float d = half_of(b) * static_cast<float>(sc), dm = half_of(b + 2) * static_cast<float>(m);
    const int shift = (sub & 1) * 4;
PAGODA_UNROLL
    for (int e = 0; e < 32; ++e) {
      w[e] = d * static_cast<float>(((q[e] >> shift) & 15) | (((qh[e] >> sub) & 1) << 4)) - dm;
    }
  } else if constexpr (T == DType::kQ6_K) {  // {ql[128], qh[64], scales[16], d}, 210 bytes
    const uint8_t* b = row + (u / 8) * 210;
    const int j = static_cast<int>(u % 8), n = j / 4, quarter = j % 4;
    uint8_t ql[32], qh[32];
    load_bytes<2>(b + n * 64 + (quarter & 1) * 32, ql);
    load_bytes<2>(b + 128 + n * 32, qh);
    const auto* scales = reinterpret_cast<const int8_t*>(b + 192 + n * 8 + 2 * quarter);
    const float d = half_of(b + 208);
    const float d0 = d * static_cast<float>(scales[0]), d1 = d * static_cast<float>(scales[1]);
    const int shift = quarter < 2 ? 0 : 4;
PAGODA_UNROLL
    for (int e = 0; e < 32; ++e) {
      const int q = (((ql[e] >> shift) & 15) | (((qh[e] >> (2 * quarter)) & 3) << 4)) - 32;
      w[e] = (e < 16 ? d0 : d1) * static_cast<float>(q);
    }
  } else {
    static_assert(T == DType::kF32, "no unit decoder for this type");
  }
}

}  // namespace pagoda::cuda
