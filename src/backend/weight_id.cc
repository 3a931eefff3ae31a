#include <atomic>

#include "backend/backend.h"

namespace pagoda {

uint64_t new_weight_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace pagoda
