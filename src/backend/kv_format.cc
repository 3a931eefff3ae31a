#include "backend/kv_format.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/backend.h"
#include "core/error.h"
#include "quant/fp16.h"
#include "quant/fp8.h"

namespace pagoda {
namespace {

constexpr KvTypeInfo kTypes[] = {
    {KvType::kF32, "f32", "4 bytes a value"},
    {KvType::kF16, "f16", "2 bytes a value"},
    {KvType::kQ8_0, "q8_0", "int8 codes, an F16 scale per 32 values: 1.06 bytes a value"},
    {KvType::kFp8, "fp8", "E4M3 codes, an F16 scale per 32 values: 1.06 bytes a value"},
};

uint16_t read_half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

void write_half(uint8_t* p, uint16_t h) { std::memcpy(p, &h, 2); }

// Codes and scale of one group of n values: codes[i * code_stride], scale bits out.
uint16_t quantize_group(const float* x, int64_t n, KvType type, uint8_t* codes, int64_t code_stride) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));  // NaN is skipped
  const float top = type == KvType::kQ8_0 ? 127.0f : kFp8E4M3Max;
  const uint16_t scale_bits = fp32_to_fp16(amax / top);
  // Dividing by the stored (rounded) scale: the codes then reproduce x as closely as it allows.
  const float scale = fp16_to_fp32(scale_bits);
  for (int64_t i = 0; i < n; ++i) {
    float q = scale > 0.0f && std::isfinite(scale) ? x[i] / scale : 0.0f;
    if (!(q == q)) q = 0.0f;  // NaN
    uint8_t code;
    if (type == KvType::kQ8_0) {
      code = static_cast<uint8_t>(static_cast<int8_t>(std::nearbyint(std::clamp(q, -top, top))));
    } else {
      code = fp32_to_fp8_e4m3(q);
    }
    codes[i * code_stride] = code;
  }
  return scale_bits;
}

float decode(uint8_t code, KvType type) {
  return type == KvType::kQ8_0 ? static_cast<float>(static_cast<int8_t>(code)) : fp8_e4m3_to_fp32(code);
}

}  // namespace

std::span<const KvTypeInfo> kv_types() { return kTypes; }

const KvTypeInfo& kv_type_info(KvType type) {
  for (const KvTypeInfo& t : kTypes) {
    if (t.type == type) return t;
  }
  fail("unknown KV cache type ", static_cast<int>(type));
}

std::string kv_type_names() {
  std::string names;
  for (const KvTypeInfo& t : kTypes) names += (names.empty() ? "" : ", ") + std::string(t.name);
  return names;
}

std::vector<std::string> kv_type_name_list() {
  std::vector<std::string> names;
  for (const KvTypeInfo& t : kTypes) names.emplace_back(t.name);
  return names;
}

std::string kv_type_help() {
  std::string help = "KV cache values:";
  for (const KvTypeInfo& t : kTypes) {
    help += str_cat(t.type == kTypes[0].type ? " " : ", ", t.name, " (", t.help, ")");
  }
  return help;
}

KvType parse_kv_type(std::string_view name) {
  for (const KvTypeInfo& t : kTypes) {
    if (t.name == name) return t.type;
  }
  fail("unknown KV cache type '", name, "': use one of ", kv_type_names());
}

void kv_store_key(const float* x, int64_t head_dim, KvType type, uint8_t* slab,
                  int32_t block_size, int32_t offset) {
  switch (type) {
    case KvType::kF32:
      for (int64_t d = 0; d < head_dim; ++d) {
        std::memcpy(slab + 4 * (d * block_size + offset), x + d, 4);
      }
      return;
    case KvType::kF16:
      for (int64_t d = 0; d < head_dim; ++d) {
        write_half(slab + 2 * (d * block_size + offset), fp32_to_fp16(x[d]));
      }
      return;
    case KvType::kQ8_0:
    case KvType::kFp8: {
      uint8_t* scales = slab + head_dim * block_size;
      for (int64_t g = 0; g * kKvGroup < head_dim; ++g) {
        const int64_t d0 = g * kKvGroup, n = std::min(kKvGroup, head_dim - d0);
        const uint16_t s = quantize_group(x + d0, n, type, slab + d0 * block_size + offset, block_size);
        write_half(scales + 2 * (g * block_size + offset), s);
      }
      return;
    }
  }
}

void kv_store_value(const float* x, int64_t head_dim, KvType type, uint8_t* row) {
  switch (type) {
    case KvType::kF32:
      std::memcpy(row, x, static_cast<size_t>(4 * head_dim));
      return;
    case KvType::kF16:
      for (int64_t d = 0; d < head_dim; ++d) write_half(row + 2 * d, fp32_to_fp16(x[d]));
      return;
    case KvType::kQ8_0:
    case KvType::kFp8:
      for (int64_t g = 0; g * kKvGroup < head_dim; ++g) {
        const int64_t d0 = g * kKvGroup, n = std::min(kKvGroup, head_dim - d0);
        write_half(row + head_dim + 2 * g, quantize_group(x + d0, n, type, row + d0, 1));
      }
      return;
  }
}

float kv_load_key(const uint8_t* slab, KvType type, int64_t head_dim, int32_t block_size,
                  int32_t offset, int64_t d) {
  const int64_t i = d * block_size + offset;
  switch (type) {
    case KvType::kF32: {
      float x;
      std::memcpy(&x, slab + 4 * i, 4);
      return x;
    }
    case KvType::kF16: return fp16_to_fp32(read_half(slab + 2 * i));
    case KvType::kQ8_0:
    case KvType::kFp8: {
      const uint8_t* scales = slab + head_dim * block_size;
      const float scale = fp16_to_fp32(read_half(scales + 2 * ((d / kKvGroup) * block_size + offset)));
      return decode(slab[i], type) * scale;
    }
  }
  return 0.0f;
}

float kv_load_value(const uint8_t* row, KvType type, int64_t head_dim, int64_t d) {
  switch (type) {
    case KvType::kF32: {
      float x;
      std::memcpy(&x, row + 4 * d, 4);
      return x;
    }
    case KvType::kF16: return fp16_to_fp32(read_half(row + 2 * d));
    case KvType::kQ8_0:
    case KvType::kFp8:
      return decode(row[d], type) * fp16_to_fp32(read_half(row + head_dim + 2 * (d / kKvGroup)));
  }
  return 0.0f;
}

void store_kv_tokens(const float* k, const float* v, const AttentionBatch& batch,
                     const AttentionParams& p, KvLayer cache) {
  const int64_t stride = static_cast<int64_t>(p.num_kv_heads) * p.head_dim;
  const int64_t head_bytes = kv_head_bytes(cache.type, p.head_dim);
  for (int32_t t = 0; t < batch.num_tokens; ++t) {
    const int64_t slot = batch.slot_mapping[t];
    const int64_t block = slot / batch.block_size;
    const auto offset = static_cast<int32_t>(slot % batch.block_size);
    for (int32_t head = 0; head < p.num_kv_heads; ++head) {
      const int64_t at = t * stride + int64_t{head} * p.head_dim;
      kv_store_key(k + at, p.head_dim, cache.type,
                   kv_slab(cache.k, block, p.num_kv_heads, head, batch.block_size, head_bytes),
                   batch.block_size, offset);
      kv_store_value(v + at, p.head_dim, cache.type,
                     kv_slab(cache.v, block, p.num_kv_heads, head, batch.block_size, head_bytes) +
                         offset * head_bytes);
    }
  }
}

}  // namespace pagoda
