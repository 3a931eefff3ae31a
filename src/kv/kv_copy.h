// Copy-on-write for forked sequences: the K/V of whole blocks, every layer, copied inside
// KvStorage before any write of the step. KvStorage lives in host memory, so this is a memcpy;
// a device backend would do it on the device (DESIGN's backend.copy_blocks).
#pragma once

#include <span>

#include "kv/kv_cache_manager.h"
#include "kv/kv_storage.h"
#include "model/config.h"

namespace pagoda {

// Copies block src to block dst in K and V of every layer, in order. `config` is the one `kv`
// was made for. Throws Error on a block id outside the storage or a storage of another shape.
void copy_kv_blocks(KvStorage& kv, const ModelConfig& config, std::span<const BlockCopy> copies);

}  // namespace pagoda
