// Block hashing for automatic prefix caching. A FULL block of token ids is named by a 64-bit
// hash that chains its parent block's hash, an `extra` key (e.g. a LoRA id) and its own tokens,
// so equal hashes mean "same tokens after the same prefix" with overwhelming probability.
// The hash only finds candidates: BlockPool verifies every hit against the stored token ids and
// the exact identity of the prefix (PrefixId), so a collision costs a cache miss, never wrong KV.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/token.h"

namespace pagoda {

using BlockHash = uint64_t;
constexpr BlockHash kRootBlockHash = 0;  // the "parent" of a sequence's first block

// Identity of an exact token prefix (everything up to and including one cached block), handed
// out by BlockPool when a block is first cached. Two blocks share a PrefixId only when their
// tokens, extra keys and whole prefixes were verified equal. Never reused.
using PrefixId = uint64_t;
constexpr PrefixId kRootPrefixId = 0;

// A hash function over one full block; injectable so tests can force collisions.
using BlockHashFn = BlockHash (*)(BlockHash parent, uint64_t extra,
                                  std::span<const TokenId> tokens);

// The default: a 64-bit multiply-rotate hash over 64-bit lanes with a final avalanche
// (xxHash-like in structure, written here). Deterministic across runs and machines.
BlockHash hash_block(BlockHash parent, uint64_t extra, std::span<const TokenId> tokens);

// A 64-bit hash of any bytes, seeded (checksums and digests of the disk tier and saved
// prefixes): multiply-rotate over 8-byte lanes, then an avalanche.
uint64_t hash_bytes(uint64_t seed, const void* data, size_t n);

// The tokens of one sequence read as one array: the prompt, then the output, without copying
// them together.
struct TokenSequence {
  std::span<const TokenId> head;  // the prompt
  std::span<const TokenId> tail;  // the output so far

  int32_t size() const { return static_cast<int32_t>(head.size() + tail.size()); }
  TokenId operator[](int32_t i) const {
    const auto n = static_cast<int32_t>(head.size());
    return i < n ? head[static_cast<size_t>(i)] : tail[static_cast<size_t>(i - n)];
  }
  // out[0, count) = tokens [begin, begin + count).
  void copy(int32_t begin, int32_t count, TokenId* out) const {
    for (int32_t i = 0; i < count; ++i) out[i] = (*this)[begin + i];
  }
};

}  // namespace pagoda
