// Saved prompt prefixes: the file format (see prefix_file.h).
#include "engine/prefix_file.h"

#include <cstdio>
#include <cstring>
#include <memory>
#include <span>

#include "core/error.h"
#include "kv/block_hash.h"

namespace pagoda {
namespace {

constexpr char kMagic[8] = {'P', 'G', 'K', 'V', 'P', 'F', 'X', '1'};
constexpr uint32_t kVersion = 1;
constexpr size_t kFixedHeaderBytes = 8 + 4 * 4 + 8 * 2;  // magic, 4 x u32, 2 x u64
constexpr uint64_t kSeed = 0x9f1e5a7c3b2d4e61ULL;
constexpr uint32_t kMaxIdentityBytes = 1 << 16;

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<FILE, FileCloser>;

template <typename T>
void put(std::vector<uint8_t>& out, const T& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof v);
}

template <typename T>
T get(const uint8_t* in) {
  T v;
  std::memcpy(&v, in, sizeof v);
  return v;
}

uint64_t block_checksum(BlockHash hash, std::span<const TokenId> tokens,
                        std::span<const uint8_t> payload) {
  const uint64_t h = hash_bytes(kSeed ^ hash, tokens.data(), tokens.size_bytes());
  return hash_bytes(h, payload.data(), payload.size());
}

}  // namespace

bool valid_prefix_name(const std::string& name) {
  if (name.empty() || name.size() > 128 || name[0] == '.') return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

void write_prefix_file(const std::string& path, const std::string& identity,
                       const PrefixBlocks& b) {
  const auto n = static_cast<uint32_t>(b.num_blocks());
  const auto bs = static_cast<size_t>(b.block_size);
  PAGODA_CHECK(b.block_size > 0 && b.tokens.size() == n * bs &&
               b.payload.size() == n * b.block_bytes);
  std::vector<uint8_t> header;
  header.insert(header.end(), kMagic, kMagic + 8);
  put(header, kVersion);
  put(header, static_cast<uint32_t>(b.block_size));
  put(header, n);
  put(header, static_cast<uint32_t>(identity.size()));
  put(header, b.block_bytes);
  put(header, b.extra);
  header.insert(header.end(), identity.begin(), identity.end());
  put(header, hash_bytes(kSeed, header.data(), header.size()));

  const std::string tmp = path + ".tmp";
  File f(std::fopen(tmp.c_str(), "wb"));
  if (!f) fail("cannot write ", path, " (", std::strerror(errno), ")");
  bool ok = std::fwrite(header.data(), 1, header.size(), f.get()) == header.size();
  BlockHash parent = kRootBlockHash;
  for (uint32_t i = 0; i < n && ok; ++i) {
    const std::span<const TokenId> tokens(b.tokens.data() + i * bs, bs);
    const std::span<const uint8_t> payload(b.payload.data() + i * b.block_bytes, b.block_bytes);
    const BlockHash hash = hash_block(parent, b.extra, tokens);
    const uint64_t sum = block_checksum(hash, tokens, payload);
    ok = std::fwrite(&hash, sizeof hash, 1, f.get()) == 1 &&
         std::fwrite(tokens.data(), sizeof(TokenId), bs, f.get()) == bs &&
         std::fwrite(payload.data(), 1, payload.size(), f.get()) == payload.size() &&
         std::fwrite(&sum, sizeof sum, 1, f.get()) == 1;
    parent = hash;
  }
  ok = std::fclose(f.release()) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    fail("cannot write ", path, " (", why, ")");
  }
}

PrefixBlocks read_prefix_file(const std::string& path, const std::string& identity,
                              int32_t block_size, uint64_t block_bytes) {
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) fail(path, ": cannot read it (", std::strerror(errno), ")");
  uint8_t fixed[kFixedHeaderBytes];
  if (std::fread(fixed, 1, sizeof fixed, f.get()) != sizeof fixed ||
      std::memcmp(fixed, kMagic, 8) != 0) {
    fail(path, ": not a pagoda prompt cache file");
  }
  if (get<uint32_t>(fixed + 8) != kVersion) {
    fail(path, ": format version ", get<uint32_t>(fixed + 8),
         ", this pagoda reads ", kVersion);
  }
  PrefixBlocks b;
  b.block_size = static_cast<int32_t>(get<uint32_t>(fixed + 12));
  const uint32_t n = get<uint32_t>(fixed + 16);
  const uint32_t identity_bytes = get<uint32_t>(fixed + 20);
  b.block_bytes = get<uint64_t>(fixed + 24);
  b.extra = get<uint64_t>(fixed + 32);
  if (identity_bytes > kMaxIdentityBytes) fail(path, ": corrupt header");
  std::vector<uint8_t> header(fixed, fixed + sizeof fixed);
  header.resize(sizeof fixed + identity_bytes);
  uint64_t header_sum = 0;
  if (std::fread(header.data() + sizeof fixed, 1, identity_bytes, f.get()) != identity_bytes ||
      std::fread(&header_sum, sizeof header_sum, 1, f.get()) != 1) {
    fail(path, ": truncated");
  }
  if (hash_bytes(kSeed, header.data(), header.size()) != header_sum) {
    fail(path, ": corrupt header");
  }
  const std::string file_identity(header.begin() + sizeof fixed, header.end());
  if (file_identity != identity || b.block_size != block_size || b.block_bytes != block_bytes) {
    fail(path, ": made by another model or K/V format");
  }
  // The size first, so a corrupt count cannot make us allocate past the file.
  const auto bs = static_cast<size_t>(block_size);
  const uint64_t record = sizeof(BlockHash) + bs * sizeof(TokenId) + block_bytes + 8;
  const long at = std::ftell(f.get());
  if (std::fseek(f.get(), 0, SEEK_END) != 0) fail(path, ": cannot read it");
  const long size = std::ftell(f.get());
  if (at < 0 || size < at || uint64_t(size - at) != uint64_t(n) * record) {
    fail(path, ": truncated (", size, " bytes where ", at + int64_t(n * record),
         " were written)");
  }
  std::fseek(f.get(), at, SEEK_SET);
  b.tokens.resize(n * bs);
  b.payload.resize(n * block_bytes);
  BlockHash parent = kRootBlockHash;
  for (uint32_t i = 0; i < n; ++i) {
    const std::span<TokenId> tokens(b.tokens.data() + i * bs, bs);
    const std::span<uint8_t> payload(b.payload.data() + i * block_bytes, block_bytes);
    BlockHash hash = 0;
    uint64_t sum = 0;
    if (std::fread(&hash, sizeof hash, 1, f.get()) != 1 ||
        std::fread(tokens.data(), sizeof(TokenId), bs, f.get()) != bs ||
        std::fread(payload.data(), 1, payload.size(), f.get()) != payload.size() ||
        std::fread(&sum, sizeof sum, 1, f.get()) != 1) {
      fail(path, ": truncated");
    }
    if (hash != hash_block(parent, b.extra, tokens) ||
        sum != block_checksum(hash, tokens, payload)) {
      fail(path, ": corrupt (block ", i, " does not match its checksum)");
    }
    parent = hash;
  }
  return b;
}

}  // namespace pagoda
