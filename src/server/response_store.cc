// Stored responses, least recently used out first (see response_store.h).
#include "server/response_store.h"

#include <cstdint>
#include <random>

namespace pagoda::server {

size_t StoredResponse::bytes() const {
  // The serialised size stands for the memory held; the JSON trees hold a small multiple of it.
  return response.dump().size() + conversation.dump().size();
}

ResponseStore::ResponseStore(size_t max_count, size_t max_bytes)
    : max_count_(max_count), max_bytes_(max_bytes) {}

bool ResponseStore::put(const std::string& id, StoredResponse r) {
  const size_t size = r.bytes();
  if (!enabled() || size > max_bytes_) return false;
  std::lock_guard lock(mutex_);
  if (auto it = index_.find(id); it != index_.end()) {
    bytes_ -= it->second->bytes;
    order_.erase(it->second);
    index_.erase(it);
  }
  order_.push_front(Entry{id, std::move(r), size});
  index_[id] = order_.begin();
  bytes_ += size;
  evict_past_bounds();
  return true;
}

void ResponseStore::evict_past_bounds() {
  while (order_.size() > max_count_ || bytes_ > max_bytes_) {
    const Entry& last = order_.back();
    bytes_ -= last.bytes;
    index_.erase(last.id);
    order_.pop_back();
  }
}

std::optional<StoredResponse> ResponseStore::get(const std::string& id) {
  std::lock_guard lock(mutex_);
  auto it = index_.find(id);
  if (it == index_.end()) return std::nullopt;
  order_.splice(order_.begin(), order_, it->second);
  return it->second->value;
}

bool ResponseStore::erase(const std::string& id) {
  std::lock_guard lock(mutex_);
  auto it = index_.find(id);
  if (it == index_.end()) return false;
  bytes_ -= it->second->bytes;
  order_.erase(it->second);
  index_.erase(it);
  return true;
}

std::string ResponseStore::new_id() {
  static const char* hex = "0123456789abcdef";
  std::random_device rd;  // /dev/urandom on Linux
  std::string id = "resp_";
  for (int i = 0; i < 6; ++i) {
    uint32_t bits = rd();
    for (int j = 0; j < 8; ++j, bits >>= 4) id += hex[bits & 15];
  }
  return id;
}

size_t ResponseStore::size() const {
  std::lock_guard lock(mutex_);
  return order_.size();
}

size_t ResponseStore::bytes() const {
  std::lock_guard lock(mutex_);
  return bytes_;
}

}  // namespace pagoda::server
