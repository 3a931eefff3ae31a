// Zeroed memory for the large buffers that kernels read in long runs: packed weights, the KV
// cache, activations. Buffers of 2 MiB or more are aligned to 2 MiB and advised as transparent
// huge pages (Linux, where THP is on "madvise" as most distributions ship it): one TLB entry per
// 2 MiB instead of per 4 KiB. On a 2-core Zen 5 (`pagoda bench latency`, 1B shape, runs
// alternated): Q4_0 decode 53 -> 56-67 tok/s with only the packed weights on huge pages (an
// experiment build); with the KV cache too, Q4_K_M decode 47-65 -> 69-79 tok/s. Elsewhere, and
// for small buffers, it is plain aligned memory. The price is paid once, at first touch: the
// kernel zeroes each huge page, which in this VM made loading that Q4_0 model take 1.0-2.0 s
// instead of 0.8-0.9 s (docs/BENCHMARKS.md).
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
