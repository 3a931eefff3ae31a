// A saved prompt prefix (issue 36's explicit save and restore: POST /v1/kv/save and
// /v1/kv/restore, `pagoda run --prompt-cache FILE`): the full KV blocks of one token prefix
// with their hash chain, in one file, restored as ordinary prefix-cache entries.
//
// Layout (little-endian):
//   header   magic "PGKVPFX1", format version, block size, block count, identity length,
//            bytes per block, the cache key (extra) the blocks were hashed with, the identity
//            text, and a checksum of the header
//   blocks   per block: its chain hash (hash_block over the parent's hash, extra and tokens),
//            its token ids, its K/V bytes, and a checksum of those
// The identity names the model file and every setting that changes K/V (the disk tier's,
// cli/kv_disk_options.h): a file of another model or K/V format is refused, never read as KV.
// A file whose sizes, checksums or hash chain do not agree is refused as a whole.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/token.h"

namespace pagoda {

struct PrefixBlocks {
  uint64_t extra = 0;        // the cache key the blocks belong to (0: the base model)
  int32_t block_size = 0;
  uint64_t block_bytes = 0;  // K/V bytes of one block
  std::vector<TokenId> tokens;   // [num_blocks() * block_size]
  std::vector<uint8_t> payload;  // [num_blocks() * block_bytes]

  int32_t num_blocks() const {
    return block_size > 0 ? static_cast<int32_t>(tokens.size() / size_t(block_size)) : 0;
  }
  int32_t num_tokens() const { return static_cast<int32_t>(tokens.size()); }
};

// Writes `blocks` to `path` under `identity`, through a temporary file renamed into place (a
// crash never leaves half a file under the name). Throws Error in one line when it cannot.
void write_prefix_file(const std::string& path, const std::string& identity,
                       const PrefixBlocks& blocks);

// The blocks of the file at `path`, when it is a whole, intact prefix file of `identity` with
// blocks of `block_size` tokens and `block_bytes` bytes. Otherwise throws Error with one line,
// "PATH: why" (missing, not a prefix file, another model or K/V format, truncated, corrupt).
PrefixBlocks read_prefix_file(const std::string& path, const std::string& identity,
                              int32_t block_size, uint64_t block_bytes);

// Whether `name` may name a saved prefix: 1 to 128 characters of [A-Za-z0-9._-], not starting
// with '.' (so never "..", a hidden file or a path).
bool valid_prefix_name(const std::string& name);

}  // namespace pagoda
