// The engine's disk tier: K/V bytes between the KV memory and DiskTier records (kv_disk.h).
#include "engine/kv_disk.h"

#include <chrono>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace pagoda {
namespace {

DiskTierOptions tier_options(const KvDiskConfig& c, bool host_visible) {
  if (!host_visible) fail("--kv-disk: the KV cache is not in host memory (the CPU backend only)");
  if (c.folder.empty()) fail("--kv-disk: no folder given");
  if (c.max_bytes == 0) fail("--kv-disk-gb must be positive");
  return DiskTierOptions{.folder = c.folder, .max_bytes = c.max_bytes, .identity = c.identity};
}

// The disk tier's records are read and written as one size for every layer's block (its
// identity does not tell layer widths apart): a model whose layers differ is refused here, in
// one line (KvStorage::slot_bytes throws), before anything is stored.
uint64_t uniform_block_bytes(const KvStorage& kv, const ModelConfig& model) {
  (void)KvStorage::slot_bytes(model, kv.type());
  return kv_block_bytes(kv);
}

}  // namespace

uint64_t kv_block_bytes(const KvStorage& kv) {
  uint64_t n = 0;
  for (int32_t l = 0; l < kv.num_layers(); ++l) n += 2 * kv.layer_block_bytes(l);
  return n;
}

void read_kv_block(KvStorage& kv, BlockId block, uint8_t* out) {
  for (int32_t l = 0; l < kv.num_layers(); ++l) {
    const uint64_t n = kv.layer_block_bytes(l);
    const uint64_t offset = static_cast<uint64_t>(block) * n;
    const KvLayer layer = kv.layer(l);
    std::memcpy(out, static_cast<const uint8_t*>(layer.k) + offset, n);
    std::memcpy(out + n, static_cast<const uint8_t*>(layer.v) + offset, n);
    out += 2 * n;
  }
}

void write_kv_block(KvStorage& kv, BlockId block, const uint8_t* in) {
  for (int32_t l = 0; l < kv.num_layers(); ++l) {
    const uint64_t n = kv.layer_block_bytes(l);
    const uint64_t offset = static_cast<uint64_t>(block) * n;
    const KvLayer layer = kv.layer(l);
    std::memcpy(static_cast<uint8_t*>(layer.k) + offset, in, n);
    std::memcpy(static_cast<uint8_t*>(layer.v) + offset, in + n, n);
    in += 2 * n;
  }
}

KvDisk::KvDisk(KvStorage& kv, const ModelConfig& model, bool host_visible,
               const KvDiskConfig& config)
    : kv_(kv),
      block_bytes_(uniform_block_bytes(kv, model)),
      max_bytes_(config.max_bytes),
      tier_(tier_options(config, host_visible)),
      reader_([this](const BlockLoad& l) { return load(l.block, l.hash, l.digest, l.tokens); }) {
  const DiskTier::Stats s = tier_.stats();
  corrupt_seen_ = s.corrupt;
  std::fprintf(stderr, "kv-disk: %s: %llu blocks (%.1f MiB) of this model and K/V format%s\n",
               tier_.folder().c_str(), static_cast<unsigned long long>(s.records),
               double(s.bytes) / double(1 << 20),
               s.corrupt > 0 ? ", unreadable records deleted" : "");
}

PrefixDigest KvDisk::chain(const PrefixDigest& parent, uint64_t extra,
                           std::span<const TokenId> tokens) const {
  return tier_.chain(parent, extra, tokens);
}

void KvDisk::store(BlockId block, BlockHash hash, const PrefixDigest& digest,
                   std::span<const TokenId> tokens) {
  if (tier_.contains(hash, digest)) return;
  std::vector<uint8_t> payload(block_bytes_);
  read_kv_block(kv_, block, payload.data());
  tier_.put(hash, digest, tokens, std::move(payload));
}

bool KvDisk::keep(BlockHash hash, const PrefixDigest& digest, std::span<const TokenId> tokens,
                  std::vector<uint8_t> payload) {
  if (payload.size() != block_bytes_) return false;
  return tier_.put(hash, digest, tokens, std::move(payload));
}

bool KvDisk::contains(BlockHash hash, const PrefixDigest& digest) const {
  return tier_.contains(hash, digest);
}

bool KvDisk::load(BlockId block, BlockHash hash, const PrefixDigest& digest,
                  std::span<const TokenId> tokens) {
  const auto start = std::chrono::steady_clock::now();
  const std::optional<std::vector<uint8_t>> payload = tier_.get(hash, digest, tokens);
  const auto ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count());
  num_loads_.fetch_add(1, std::memory_order_relaxed);
  load_ns_.fetch_add(ns, std::memory_order_relaxed);
  if (ns > max_load_ns_.load(std::memory_order_relaxed)) {
    max_load_ns_.store(ns, std::memory_order_relaxed);  // only this thread writes it
  }
  if (!payload || payload->size() != block_bytes_) {
    const uint64_t corrupt = tier_.stats().corrupt;
    if (corrupt > corrupt_seen_) {
      std::fprintf(stderr,
                   "kv-disk: a record of block %016llx did not read back (truncated, corrupted "
                   "or removed): a miss, the record is deleted\n",
                   static_cast<unsigned long long>(hash));
      corrupt_seen_ = corrupt;
    }
    return false;
  }
  write_kv_block(kv_, block, payload->data());
  return true;
}

uint64_t KvDisk::start_load(std::vector<BlockLoad> loads) {
  for (const BlockLoad& l : loads) tier_.pin(l.hash, l.digest);
  std::vector<BlockLoad> pins = loads;
  const uint64_t ticket = reader_.start(std::move(loads));
  pinned_[ticket] = std::move(pins);
  return ticket;
}

std::optional<int32_t> KvDisk::finish_load(uint64_t ticket) {
  const std::optional<int32_t> n = reader_.finish(ticket);
  if (!n) return n;
  auto it = pinned_.find(ticket);
  PAGODA_CHECK(it != pinned_.end());
  for (const BlockLoad& l : it->second) tier_.unpin(l.hash, l.digest);
  pinned_.erase(it);
  return n;
}

KvDiskStats KvDisk::stats() const {
  const DiskTier::Stats s = tier_.stats();
  KvDiskStats out;
  out.enabled = true;
  out.records = s.records;
  out.max_bytes = max_bytes_;
  out.bytes = s.bytes;
  out.hit_blocks = s.hits;
  out.corrupt_records = s.corrupt;
  out.written_blocks = s.written;
  out.bytes_written = s.bytes_written;
  out.bytes_read = s.bytes_read;
  out.dropped_writes = s.dropped;
  out.write_failures = s.write_failures;
  out.evicted_blocks = s.evicted;
  out.num_loads = num_loads_.load(std::memory_order_relaxed);
  out.load_seconds = double(load_ns_.load(std::memory_order_relaxed)) * 1e-9;
  out.max_load_seconds = double(max_load_ns_.load(std::memory_order_relaxed)) * 1e-9;
  return out;
}

}  // namespace pagoda
