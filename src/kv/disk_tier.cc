// The disk tier's records, index and writer thread (see disk_tier.h).
#include "kv/disk_tier.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "core/error.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'P', 'G', 'K', 'V', 'B', 'L', 'K', '1'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 64;

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

struct Header {
  uint32_t num_tokens = 0;
  uint64_t identity = 0, hash = 0, digest_lo = 0, digest_hi = 0, payload_bytes = 0, checksum = 0;

  void write(uint8_t* out) const {
    std::memcpy(out, kMagic, 8);
    std::memcpy(out + 8, &kVersion, 4);
    std::memcpy(out + 12, &num_tokens, 4);
    const uint64_t fields[] = {identity, hash, digest_lo, digest_hi, payload_bytes, checksum};
    std::memcpy(out + 16, fields, sizeof fields);
  }
  // False when the bytes are not a header of this format's version.
  bool read(const uint8_t* in) {
    uint32_t version = 0;
    std::memcpy(&version, in + 8, 4);
    if (std::memcmp(in, kMagic, 8) != 0 || version != kVersion) return false;
    std::memcpy(&num_tokens, in + 12, 4);
    uint64_t fields[6];
    std::memcpy(fields, in + 16, sizeof fields);
    identity = fields[0], hash = fields[1], digest_lo = fields[2], digest_hi = fields[3];
    payload_bytes = fields[4], checksum = fields[5];
    return true;
  }
};

uint64_t checksum_of(std::span<const TokenId> tokens, std::span<const uint8_t> payload) {
  return hash_bytes(hash_bytes(0x5eed, tokens.data(), tokens.size_bytes()), payload.data(),
                    payload.size());
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::vector<uint8_t> bytes;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return bytes;
  uint8_t buf[1 << 16];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) bytes.insert(bytes.end(), buf, buf + n);
  std::fclose(f);
  return bytes;
}

}  // namespace

DiskTier::DiskTier(DiskTierOptions options)
    : max_bytes_(options.max_bytes), max_queued_bytes_(options.max_queued_bytes) {
  open_folder(options);
  index_records();
  writer_ = std::thread([this] { write_loop(); });
}

DiskTier::~DiskTier() {
  flush();
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  work_.notify_all();
  writer_.join();
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the lock
}

void DiskTier::open_folder(const DiskTierOptions& o) {
  root_ = o.folder;
  std::error_code ec;
  fs::create_directories(root_, ec);
  if (ec || !fs::is_directory(root_)) fail("--kv-disk ", root_, ": cannot create the folder (", ec.message(), ")");
  const std::string lock_path = root_ + "/LOCK";
  lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) fail("--kv-disk ", root_, ": cannot open ", lock_path, " (", std::strerror(errno), ")");
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    char pid[32] = {};
    (void)!::pread(lock_fd_, pid, sizeof pid - 1, 0);
    ::close(lock_fd_);
    lock_fd_ = -1;
    fail("--kv-disk ", root_, " is in use by another pagoda process (pid ", pid[0] ? pid : "?", ")");
  }
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(lock_fd_, 0) != 0 || ::pwrite(lock_fd_, pid.data(), pid.size(), 0) < 0) {
    // The lock holds without the pid; it only makes the other process's message better.
  }
  // The secret that keys prefix digests: made once, kept beside the records.
  const std::string secret_path = root_ + "/secret";
  std::vector<uint8_t> secret = read_file(secret_path);
  if (secret.size() != 16) {
    std::random_device rd;
    secret.resize(16);
    for (size_t i = 0; i < 16; i += 4) {
      const uint32_t r = rd();
      std::memcpy(secret.data() + i, &r, 4);
    }
    FILE* f = std::fopen(secret_path.c_str(), "wb");
    if (f == nullptr || std::fwrite(secret.data(), 1, 16, f) != 16) {
      if (f != nullptr) std::fclose(f);
      fail("--kv-disk ", root_, ": cannot write ", secret_path);
    }
    std::fclose(f);
  }
  std::memcpy(&secret_lo_, secret.data(), 8);
  std::memcpy(&secret_hi_, secret.data() + 8, 8);
  identity_ = hash_bytes(0x1d, o.identity.data(), o.identity.size());
  dir_ = root_ + "/" + hex(identity_);
  fs::create_directories(dir_, ec);
  if (ec) fail("--kv-disk ", root_, ": cannot create ", dir_, " (", ec.message(), ")");
}

// Indexes this identity's records, oldest first in eviction order; deletes leftovers of
// interrupted writes and files that are not records of this identity.
void DiskTier::index_records() {
  struct Found {
    fs::file_time_type time;
    Key key;
    uint64_t bytes;
  };
  std::vector<Found> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::string path = entry.path().string();
    if (entry.path().extension() != ".kvb") {
      fs::remove(entry.path(), ec);
      continue;
    }
    uint8_t raw[kHeaderBytes];
    FILE* f = std::fopen(path.c_str(), "rb");
    const bool whole = f != nullptr && std::fread(raw, 1, kHeaderBytes, f) == kHeaderBytes;
    if (f != nullptr) std::fclose(f);
    Header h;
    const uint64_t size = entry.file_size(ec);
    Key key;
    if (whole && h.read(raw)) key = Key{h.hash, PrefixDigest{h.digest_lo, h.digest_hi}};
    if (!whole || h.identity != identity_ || path != path_of(key) ||
        size != kHeaderBytes + h.num_tokens * sizeof(TokenId) + h.payload_bytes) {
      fs::remove(entry.path(), ec);
      ++stats_.corrupt;
      continue;
    }
    found.push_back({entry.last_write_time(ec), key, size});
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.time < b.time; });
  std::lock_guard lock(mutex_);
  for (const Found& f : found) add_record(f.key, f.bytes);
  evict_past_bound();
}

std::string DiskTier::path_of(const Key& key) const {
  return dir_ + "/" + hex(key.hash) + "-" + hex(key.digest.lo) + ".kvb";
}

PrefixDigest chain_digest(uint64_t key_lo, uint64_t key_hi, const PrefixDigest& parent,
                          uint64_t extra, std::span<const TokenId> tokens) {
  const uint64_t lo = hash_bytes(key_lo ^ parent.lo ^ extra, tokens.data(), tokens.size_bytes());
  const uint64_t hi = hash_bytes(key_hi ^ parent.hi, tokens.data(), tokens.size_bytes());
  // Each half also depends on the other half of the parent and on `extra`.
  return {hash_bytes(lo, &parent.hi, 8), hash_bytes(hi ^ std::rotl(parent.lo, 17), &extra, 8)};
}

PrefixDigest DiskTier::chain(const PrefixDigest& parent, uint64_t extra,
                             std::span<const TokenId> tokens) const {
  return chain_digest(secret_lo_, secret_hi_, parent, extra, tokens);
}

bool DiskTier::put(BlockHash hash, const PrefixDigest& digest, std::span<const TokenId> tokens,
                   std::vector<uint8_t> payload) {
  const Key key{hash, digest};
  {
    std::lock_guard lock(mutex_);
    if (index_.count(key) || queued_.count(key)) return false;
    const uint64_t bytes = payload.size() + tokens.size_bytes();
    if (queued_bytes_ + bytes > max_queued_bytes_ || kHeaderBytes + bytes > max_bytes_) {
      ++stats_.dropped;
      return false;
    }
    queued_bytes_ += bytes;
    queued_[key] = 1;
    queue_.push_back(Pending{key, std::vector<TokenId>(tokens.begin(), tokens.end()), std::move(payload)});
  }
  work_.notify_one();
  return true;
}

bool DiskTier::contains(BlockHash hash, const PrefixDigest& digest) const {
  std::lock_guard lock(mutex_);
  const Key key{hash, digest};
  return index_.count(key) > 0 || queued_.count(key) > 0;
}

std::optional<std::vector<uint8_t>> DiskTier::get(BlockHash hash, const PrefixDigest& digest,
                                                  std::span<const TokenId> tokens) {
  const Key key{hash, digest};
  {
    std::lock_guard lock(mutex_);
    for (const Pending& p : queue_) {  // not written yet
      if (p.key == key && std::equal(tokens.begin(), tokens.end(), p.tokens.begin(), p.tokens.end())) {
        ++stats_.hits;
        return p.payload;
      }
    }
    if (index_.count(key) == 0) {
      ++stats_.misses;
      return std::nullopt;
    }
  }
  const std::string path = path_of(key);
  std::vector<uint8_t> bytes = read_file(path);
  Header h;
  const size_t token_bytes = tokens.size_bytes();
  bool ok = bytes.size() >= kHeaderBytes && h.read(bytes.data()) && h.identity == identity_ &&
            h.hash == hash && h.digest_lo == digest.lo && h.digest_hi == digest.hi &&
            h.num_tokens == tokens.size() &&
            bytes.size() == kHeaderBytes + token_bytes + h.payload_bytes &&
            std::memcmp(bytes.data() + kHeaderBytes, tokens.data(), token_bytes) == 0;
  std::span<const uint8_t> payload;
  if (ok) {
    payload = std::span<const uint8_t>(bytes).subspan(kHeaderBytes + token_bytes);
    ok = checksum_of(tokens, payload) == h.checksum;
  }
  std::lock_guard lock(mutex_);
  if (!ok && index_.count(key) == 0) {  // dropped past the bound while it was read: a miss
    ++stats_.misses;
    return std::nullopt;
  }
  if (!ok) {
    // Truncated, flipped, replaced or gone: a miss, and the record goes.
    drop_record(key, true);
    ++stats_.corrupt;
    ++stats_.misses;
    return std::nullopt;
  }
  if (auto it = index_.find(key); it != index_.end()) lru_.splice(lru_.begin(), lru_, it->second);
  std::error_code ec;
  fs::last_write_time(path, fs::file_time_type::clock::now(), ec);  // the order after a restart
  ++stats_.hits;
  stats_.bytes_read += bytes.size();
  return std::vector<uint8_t>(payload.begin(), payload.end());
}

void DiskTier::flush() {
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [this] { return queue_.empty() && !writing_; });
}

DiskTier::Stats DiskTier::stats() const {
  std::lock_guard lock(mutex_);
  Stats s = stats_;
  s.records = index_.size();
  return s;
}

void DiskTier::write_loop() {
  std::unique_lock lock(mutex_);
  while (true) {
    work_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_, and nothing left
    writing_ = true;
    Pending p = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    const bool ok = write_record(p);
    lock.lock();
    writing_ = false;
    queued_.erase(p.key);
    queued_bytes_ -= p.payload.size() + p.tokens.size() * sizeof(TokenId);
    if (ok) {
      const uint64_t bytes = kHeaderBytes + p.tokens.size() * sizeof(TokenId) + p.payload.size();
      add_record(p.key, bytes);
      ++stats_.written;
      stats_.bytes_written += bytes;
      evict_past_bound();
    } else {
      ++stats_.write_failures;
    }
    if (queue_.empty()) idle_.notify_all();
  }
}

bool DiskTier::write_record(const Pending& p) {
  Header h;
  h.num_tokens = static_cast<uint32_t>(p.tokens.size());
  h.identity = identity_;
  h.hash = p.key.hash;
  h.digest_lo = p.key.digest.lo;
  h.digest_hi = p.key.digest.hi;
  h.payload_bytes = p.payload.size();
  h.checksum = checksum_of(p.tokens, p.payload);
  uint8_t raw[kHeaderBytes] = {};
  h.write(raw);
  const std::string path = path_of(p.key), tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {  // the folder may have been deleted while serving: make it again
    std::error_code ec;
    fs::create_directories(dir_, ec);
    f = std::fopen(tmp.c_str(), "wb");
    if (f == nullptr) return false;
  }
  bool ok = std::fwrite(raw, 1, kHeaderBytes, f) == kHeaderBytes &&
            std::fwrite(p.tokens.data(), sizeof(TokenId), p.tokens.size(), f) == p.tokens.size() &&
            std::fwrite(p.payload.data(), 1, p.payload.size(), f) == p.payload.size();
  ok = (std::fclose(f) == 0) && ok;
  ok = ok && std::rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) std::remove(tmp.c_str());
  return ok;
}

void DiskTier::add_record(const Key& key, uint64_t bytes) {
  lru_.push_front(Record{key, bytes});
  index_[key] = lru_.begin();
  stats_.bytes += bytes;
}

void DiskTier::drop_record(const Key& key, bool delete_file) {
  auto it = index_.find(key);
  if (it == index_.end()) return;
  stats_.bytes -= it->second->bytes;
  lru_.erase(it->second);
  index_.erase(it);
  if (delete_file) std::remove(path_of(key).c_str());
}

void DiskTier::evict_past_bound() {
  // The least recently used unpinned records go, the newest last. Pinned records were all held
  // at once within the bound, so what is left unpinned always makes room.
  auto it = lru_.end();
  while (stats_.bytes > max_bytes_ && it != lru_.begin()) {
    --it;
    if (pins_.count(it->key) > 0) continue;
    const Key key = (it++)->key;  // the next one toward the back stays valid
    drop_record(key, true);
    ++stats_.evicted;
  }
}

void DiskTier::pin(BlockHash hash, const PrefixDigest& digest) {
  std::lock_guard lock(mutex_);
  ++pins_[Key{hash, digest}];
}

void DiskTier::unpin(BlockHash hash, const PrefixDigest& digest) {
  std::lock_guard lock(mutex_);
  auto it = pins_.find(Key{hash, digest});
  if (it == pins_.end()) return;
  if (--it->second == 0) pins_.erase(it);
}

}  // namespace pagoda
