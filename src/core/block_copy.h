// One copy-on-write instruction: the K/V of block `src` is copied into block `dst` before any
// write of the step. The control plane (kv/) makes them, the backend that holds the K/V
// memory carries them out (Backend::copy_blocks).
#pragma once

#include <cstdint>

namespace pagoda {

struct BlockCopy {
  int32_t src = -1;
  int32_t dst = -1;
  bool operator==(const BlockCopy&) const = default;
};

}  // namespace pagoda
