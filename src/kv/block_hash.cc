#include "kv/block_hash.h"

#include <bit>
#include <cstring>

namespace pagoda {
namespace {

// Odd 64-bit constants with well-spread bits (the golden ratio and two large primes).
constexpr uint64_t kMul1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kMul2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kMul3 = 0x165667B19E3779F9ULL;
constexpr uint64_t kSeed = 0x27D4EB2F165667C5ULL;

// One lane into the accumulator: multiply, rotate, multiply. Each step is a bijection of the
// accumulator for a fixed lane, so two inputs that differ in one lane cannot meet here.
uint64_t absorb(uint64_t acc, uint64_t lane) {
  acc += lane * kMul2;
  acc = std::rotl(acc, 31);
  return acc * kMul1;
}

// Spreads every input bit over every output bit.
uint64_t avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= kMul2;
  h ^= h >> 29;
  h *= kMul3;
  h ^= h >> 32;
  return h;
}

}  // namespace

BlockHash hash_block(BlockHash parent, uint64_t extra, std::span<const TokenId> tokens) {
  uint64_t acc = kSeed + static_cast<uint64_t>(tokens.size()) * kMul3;
  acc = absorb(acc, parent);
  acc = absorb(acc, extra);
  size_t i = 0;
  for (; i + 1 < tokens.size(); i += 2) {
    const uint64_t lo = static_cast<uint32_t>(tokens[i]);
    const uint64_t hi = static_cast<uint32_t>(tokens[i + 1]);
    acc = absorb(acc, lo | (hi << 32));
  }
  if (i < tokens.size()) acc = absorb(acc, static_cast<uint32_t>(tokens[i]) ^ kMul3);
  return avalanche(acc ^ static_cast<uint64_t>(tokens.size()));
}

uint64_t hash_bytes(uint64_t seed, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t h = seed ^ (n * 0x9e3779b97f4a7c15ULL);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    h = std::rotl(h ^ (v * 0x87c37b91114253d5ULL), 31) * 0x4cf5ad432745937fULL;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, p + i, n - i);
  h ^= tail * 0x87c37b91114253d5ULL;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  return h ^ (h >> 33);
}

}  // namespace pagoda
