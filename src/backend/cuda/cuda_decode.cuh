// Element i of a weight row in its stored type, on the device: the block layouts of
// quant/blocks.h (GGUF's), read byte by byte so no alignment beyond the file's is assumed.
// Consecutive lanes of a warp read consecutive elements of one block, so the scale bytes are
// one broadcast and the quants one coalesced run.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/cuda_q8.cuh"
#include "core/dtype.h"
#include "core/error.h"

namespace pagoda::cuda {

__device__ __forceinline__ float half_at(const uint8_t* p) {
  const uint16_t bits = static_cast<uint16_t>(p[0] | (p[1] << 8));
  return __half2float(__ushort_as_half(bits));
}

__device__ __forceinline__ float bf16_at(const uint8_t* p) {
  const uint32_t bits = static_cast<uint32_t>(p[0] | (p[1] << 8)) << 16;
  return __uint_as_float(bits);
}

// The types decoded here; every other type is converted to F16 when uploaded.
__host__ __device__ constexpr bool device_decodes(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kQ4_0 ||
         t == DType::kQ4_1 || t == DType::kQ5_0 || t == DType::kQ5_1 || t == DType::kQ8_0 ||
         t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K;
}

// Calls f.template operator()<T>() for the device-decoded type `type` (the one dispatch from a
// run-time type to the templated decoders); throws Error for any other type.
template <class F>
void by_device_type(DType type, F&& f) {
  switch (type) {
    case DType::kF32: return f.template operator()<DType::kF32>();
    case DType::kF16: return f.template operator()<DType::kF16>();
    case DType::kBF16: return f.template operator()<DType::kBF16>();
    case DType::kQ4_0: return f.template operator()<DType::kQ4_0>();
    case DType::kQ4_1: return f.template operator()<DType::kQ4_1>();
    case DType::kQ5_0: return f.template operator()<DType::kQ5_0>();
    case DType::kQ5_1: return f.template operator()<DType::kQ5_1>();
    case DType::kQ8_0: return f.template operator()<DType::kQ8_0>();
    case DType::kQ4_K: return f.template operator()<DType::kQ4_K>();
    case DType::kQ5_K: return f.template operator()<DType::kQ5_K>();
    case DType::kQ6_K: return f.template operator()<DType::kQ6_K>();
    default: fail("CUDA: no device decoder for weight type ", static_cast<int>(type));
  }
}

template <DType T>
__device__ __forceinline__ float element(const uint8_t* row, int64_t i) {
  if constexpr (T == DType::kF32) {
    return reinterpret_cast<const float*>(row)[i];  // F32 rows are 4-byte aligned in GGUF
  } else if constexpr (T == DType::kF16) {
    return half_at(row + 2 * i);
  } else if constexpr (T == DType::kBF16) {
    return bf16_at(row + 2 * i);
  } else if constexpr (T == DType::kQ8_0) {  // {d, qs[32]}
    const uint8_t* b = row + (i / 32) * 34;
    return half_at(b) * static_cast<float>(static_cast<int8_t>(b[2 + i % 32]));
  } else if constexpr (T == DType::kQ4_0) {  // {d, qs[16]}: low nibbles 0..15, high 16..31
    const uint8_t* b = row + (i / 32) * 18;
    const int j = static_cast<int>(i % 32);
    const int q = j < 16 ? (b[2 + j] & 15) : (b[2 + j - 16] >> 4);
    return half_at(b) * static_cast<float>(q - 8);
  } else if constexpr (T == DType::kQ4_1) {  // {d, m, qs[16]}
    const uint8_t* b = row + (i / 32) * 20;
    const int j = static_cast<int>(i % 32);
    const int q = j < 16 ? (b[4 + j] & 15) : (b[4 + j - 16] >> 4);
    return half_at(b) * static_cast<float>(q) + half_at(b + 2);
  } else if constexpr (T == DType::kQ5_0) {  // {d, qh[4], qs[16]}
    const uint8_t* b = row + (i / 32) * 22;
    const int j = static_cast<int>(i % 32);
    const int low = j < 16 ? (b[6 + j] & 15) : (b[6 + j - 16] >> 4);
    const int high = (b[2 + j / 8] >> (j % 8)) & 1;
    return half_at(b) * static_cast<float>((low | (high << 4)) - 16);
  } else if constexpr (T == DType::kQ5_1) {  // {d, m, qh[4], qs[16]}
    const uint8_t* b = row + (i / 32) * 24;
    const int j = static_cast<int>(i % 32);
    const int low = j < 16 ? (b[8 + j] & 15) : (b[8 + j - 16] >> 4);
    const int high = (b[4 + j / 8] >> (j % 8)) & 1;
    return half_at(b) * static_cast<float>(low | (high << 4)) + half_at(b + 2);
  } else if constexpr (T == DType::kQ4_K) {  // {d, dmin, scales[12], qs[128]}
    const uint8_t* b = row + (i / 256) * 144;
    const int e = static_cast<int>(i % 256), c = e / 64, l = e % 64;
    int sc, m;
    scale_min_k4(2 * c + (l >= 32), b + 4, &sc, &m);
    const uint8_t byte = b[16 + c * 32 + l % 32];
    const int q = l < 32 ? (byte & 15) : (byte >> 4);
    return half_at(b) * static_cast<float>(sc) * static_cast<float>(q) -
           half_at(b + 2) * static_cast<float>(m);
  } else if constexpr (T == DType::kQ5_K) {  // {d, dmin, scales[12], qh[32], qs[128]}
    const uint8_t* b = row + (i / 256) * 176;
    const int e = static_cast<int>(i % 256), c = e / 64, l = e % 64;
    const int sub = 2 * c + (l >= 32);
    int sc, m;
    scale_min_k4(sub, b + 4, &sc, &m);
    const uint8_t byte = b[48 + c * 32 + l % 32];
    const int low = l < 32 ? (byte & 15) : (byte >> 4);
    const int q = low | (((b[16 + l % 32] >> sub) & 1) << 4);
    return half_at(b) * static_cast<float>(sc) * static_cast<float>(q) -
           half_at(b + 2) * static_cast<float>(m);
  } else if constexpr (T == DType::kQ6_K) {  // {ql[128], qh[64], scales[16] (int8), d}
    const uint8_t* b = row + (i / 256) * 210;
    const int e = static_cast<int>(i % 256), n = e / 128, r = e % 128, quarter = r / 32,
              l = r % 32;
    const uint8_t* ql = b + n * 64;
    const uint8_t* qh = b + 128 + n * 32;
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192 + n * 8);
    const uint8_t lo = ql[l + (quarter & 1) * 32];
    const int low = quarter < 2 ? (lo & 15) : (lo >> 4);
    const int q = (low | (((qh[l] >> (2 * quarter)) & 3) << 4)) - 32;
    return half_at(b + 208) * static_cast<float>(sc[l / 16 + 2 * quarter]) * static_cast<float>(q);
  } else {
    static_assert(T == DType::kF32, "no device decoder for this type");
    return 0.0f;
  }
}

}  // namespace pagoda::cuda
