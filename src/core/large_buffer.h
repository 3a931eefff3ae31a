// Zeroed memory for the large buffers that kernels read in long runs: packed weights, the KV
// cache, activations. Buffers of 2 MiB or more are aligned to 2 MiB and advised as transparent
// huge pages (Linux, where THP is on "madvise" as most distributions ship it): one TLB entry per
// 2 MiB instead of per 4 KiB. Decode streams every weight once per token and attention reads KV
// blocks scattered over the whole cache, so with small pages both keep missing the TLB.
// Elsewhere, and for small buffers, it is plain aligned memory. The price is paid once, at first
// touch: the kernel zeroes each huge page, so a model takes longer to load
// (docs/BENCHMARKS.md, "CPU kernel choices, measured").
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace pagoda {

class LargeBuffer {
 public:
  LargeBuffer() = default;
  // Throws Error (naming `what`) when the memory cannot be had.
  LargeBuffer(size_t bytes, const char* what);

  uint8_t* data() { return data_.get(); }
  const uint8_t* data() const { return data_.get(); }
  size_t size() const { return size_; }  // bytes usable, at least those asked for

 private:
  struct Free {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t[], Free> data_;
  size_t size_ = 0;
};

}  // namespace pagoda
