// The host-memory defaults of Backend's memory operations, and BackendArray.
#include <algorithm>
#include <cstring>

#include "backend/backend.h"
#include "core/large_buffer.h"

namespace pagoda {
namespace {

class HostBuffer final : public BackendBuffer {
 public:
  HostBuffer(uint64_t bytes, const char* what) : memory_(static_cast<size_t>(bytes), what) {}
  void* data() const override { return const_cast<uint8_t*>(memory_.data()); }
  uint64_t bytes() const override { return memory_.size(); }

 private:
  LargeBuffer memory_;
};

}  // namespace

std::unique_ptr<BackendBuffer> allocate_host_buffer(uint64_t bytes, const char* what) {
  return std::make_unique<HostBuffer>(bytes, what);
}

void Backend::upload(const void* host, uint64_t bytes, void* dst) {
  if (bytes != 0) std::memcpy(dst, host, static_cast<size_t>(bytes));
}

void Backend::download(const void* src, uint64_t bytes, void* host) {
  if (bytes != 0) std::memcpy(host, src, static_cast<size_t>(bytes));
}

void Backend::gather_rows(const float* x, std::span<const int32_t> rows, int64_t width,
                          float* out) {
  const auto row_bytes = static_cast<size_t>(width) * sizeof(float);
  for (size_t i = 0; i < rows.size(); ++i) {
    const float* src = x + int64_t{rows[i]} * width;
    float* dst = out + static_cast<int64_t>(i) * width;
    if (src != dst) std::memmove(dst, src, row_bytes);
  }
}

void Backend::add_scaled_rows(const float* y, std::span<const int32_t> rows,
                              std::span<const float> weights, int64_t width, float* out) {
  for (size_t i = 0; i < rows.size(); ++i) {
    float* dst = out + int64_t{rows[i]} * width;
    const float* src = y + static_cast<int64_t>(i) * width;
    const float w = weights[i];
    for (int64_t j = 0; j < width; ++j) dst[j] += w * src[j];
  }
}

void Backend::copy_blocks(KvLayer cache, uint64_t block_bytes, std::span<const BlockCopy> copies) {
  for (const BlockCopy& c : copies) {
    if (c.src == c.dst) continue;
    for (void* base : {cache.k, cache.v}) {
      auto* bytes = static_cast<uint8_t*>(base);
      std::memcpy(bytes + uint64_t(c.dst) * block_bytes, bytes + uint64_t(c.src) * block_bytes,
                  static_cast<size_t>(block_bytes));
    }
  }
}

void BackendArray::reserve(Backend& backend, int64_t count, const char* what) {
  if (count <= capacity_ && owner_ == &backend) return;
  // Growing, at least double, as std::vector does: batches that grow a few tokens at a time
  // (staggered arrivals) would otherwise map and zero fresh pages at every step.
  if (owner_ == &backend) count = std::max(count, 2 * capacity_);
  buffer_.reset();
  buffer_ = backend.allocate(static_cast<uint64_t>(std::max<int64_t>(count, 1)) * sizeof(float),
                             what);
  data_ = static_cast<float*>(buffer_->data());
  capacity_ = count;
  owner_ = &backend;
}

}  // namespace pagoda
