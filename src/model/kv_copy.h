// Copy-on-write for forked sequences: the K/V of whole blocks, every layer, copied inside
// KvStorage before any write of the step, by the backend whose memory holds it
// (Backend::copy_blocks: a memcpy on the host, a device copy on a GPU).
#pragma once

#include <span>

#include "core/block_copy.h"
#include "model/kv_storage.h"
#include "model/config.h"

namespace pagoda {

// Copies block src to block dst in K and V of every layer, in order. `config` is the one `kv`
// was made for, `backend` the one it was allocated by (any host-memory backend for storage in
// host memory). Throws Error on a block id outside the storage or a storage of another shape.
void copy_kv_blocks(Backend& backend, KvStorage& kv, const ModelConfig& config,
                    std::span<const BlockCopy> copies);

}  // namespace pagoda
