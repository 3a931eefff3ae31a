// The KV cache's value types and how one layer's K/V memory is laid out in each, shared by
// every backend (so the fast backend and the reference store the same bytes) and by the cache
// that allocates it (model/kv_storage.h).
//
// Memory is num_blocks blocks; within a block each KV head has a slab of block_size token
// slots, each slot head_bytes(type, head_dim) bytes, so a block is a contiguous run of bytes
// (copy-on-write copies it whole) and one head's part of it a contiguous slab attention streams.
//   keys:   the slab holds its keys transposed, so one dimension of block_size keys lies side by
//           side and attention scores a whole block in vector lanes:
//             F32 / F16:     value of (slot o, dim d) at element d * block_size + o;
//             Q8_0 / FP8:    1-byte code of (o, d) at byte d * block_size + o, then the F16
//                            scale of (o, group g) at half g * block_size + o after the
//                            head_dim * block_size codes.
//   values: the slab holds one row per slot (slot o at byte o * head_bytes):
//             F32 / F16:     head_dim values;
//             Q8_0 / FP8:    head_dim codes, then one F16 scale per group.
// Quantized types group each head's vector in runs of kKvGroup dimensions (the last one
// shorter when head_dim is not a multiple) with one scale each, chosen from the run's largest
// magnitude: value = code * scale, code an int8 in [-127, 127] (Q8_0, llama.cpp's layout of a
// block) or an E4M3 float (FP8, quant/fp8.h). A token is quantized once, when written; later
// tokens never change it, which is why the groups run along a head's vector and not across slots.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda {

enum class KvType : uint8_t { kF32, kF16, kQ8_0, kFp8 };

struct KvTypeInfo {
  KvType type;
  std::string_view name;  // as --kv-type takes it
  std::string_view help;  // one line for --help and errors
};

std::span<const KvTypeInfo> kv_types();
const KvTypeInfo& kv_type_info(KvType type);
// "f16" → KvType::kF16; throws Error naming the allowed values otherwise.
KvType parse_kv_type(std::string_view name);
// "f32, f16, q8_0, fp8": for errors; and as a list, for option checks.
std::string kv_type_names();
std::vector<std::string> kv_type_name_list();
// The --kv-type option's help: each type and its bytes per value.
std::string kv_type_help();

inline constexpr int64_t kKvGroup = 32;

constexpr bool kv_quantized(KvType type) { return type == KvType::kQ8_0 || type == KvType::kFp8; }
constexpr int64_t kv_num_groups(int64_t head_dim) { return (head_dim + kKvGroup - 1) / kKvGroup; }

// Bytes of one head's K (or V) of one token.
constexpr int64_t kv_head_bytes(KvType type, int64_t head_dim) {
  switch (type) {
    case KvType::kF32: return 4 * head_dim;
    case KvType::kF16: return 2 * head_dim;
    case KvType::kQ8_0:
    case KvType::kFp8: return head_dim + 2 * kv_num_groups(head_dim);
  }
  return 0;
}

// One head's slab in one block of a layer's memory.
inline uint8_t* kv_slab(void* base, int64_t block, int32_t num_kv_heads, int32_t head,
                        int32_t block_size, int64_t head_bytes) {
  return static_cast<uint8_t*>(base) + (block * num_kv_heads + head) * block_size * head_bytes;
}

// Stores one head's vector x[head_dim] of one token: as slot `offset` of a key slab, or as a
// value row (the slab's row of that slot).
void kv_store_key(const float* x, int64_t head_dim, KvType type, uint8_t* slab,
                  int32_t block_size, int32_t offset);
void kv_store_value(const float* x, int64_t head_dim, KvType type, uint8_t* row);

// Element d of what was stored (the value attention computes with, exactly).
float kv_load_key(const uint8_t* slab, KvType type, int64_t head_dim, int32_t block_size,
                  int32_t offset, int64_t d);
float kv_load_value(const uint8_t* row, KvType type, int64_t head_dim, int64_t d);

}  // namespace pagoda
