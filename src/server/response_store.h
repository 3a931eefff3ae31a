// The Responses API's stored responses (store: true, the default): what GET and DELETE
// /v1/responses/{id} read, and what previous_response_id continues. Bounded in count and in
// bytes; past either bound the least recently used response goes. Any thread.
#pragma once

#include <cstddef>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

namespace pagoda::server {

struct StoredResponse {
  nlohmann::ordered_json response;      // the Response object as it was sent
  nlohmann::ordered_json conversation;  // chat messages up to and including its output
  size_t bytes() const;                 // what it counts against the store's byte bound
};

class ResponseStore {
 public:
  // max_count 0 stores nothing (store: true is then refused, see enabled()).
  ResponseStore(size_t max_count, size_t max_bytes);

  bool enabled() const { return max_count_ > 0 && max_bytes_ > 0; }
  // Keeps `r` under `id`, evicting the least recently used past the bounds. False when `r`
  // alone is larger than the byte bound (it is not kept).
  bool put(const std::string& id, StoredResponse r);
  // A copy of the response (now the most recently used), or nothing.
  std::optional<StoredResponse> get(const std::string& id);
  // True when there was one.
  bool erase(const std::string& id);

  size_t size() const;
  size_t bytes() const;
  // A fresh id, "resp_" and 48 hex digits from the system's random source: an id is all a
  // client needs to read a stored response, so it must not be guessable.
  static std::string new_id();
  size_t max_count() const { return max_count_; }
  size_t max_bytes() const { return max_bytes_; }

 private:
  struct Entry {
    std::string id;
    StoredResponse value;
    size_t bytes = 0;
  };
  void evict_past_bounds();  // with mutex_ held

  const size_t max_count_, max_bytes_;
  mutable std::mutex mutex_;
  std::list<Entry> order_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  size_t bytes_ = 0;
};

}  // namespace pagoda::server
