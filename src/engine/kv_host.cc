// The engine's tiers under the prefix cache: the host-memory tier (--kv-offload-gb,
// kv/host_tier.h) over the backend's memory calls, above the disk tier (--kv-disk, kv_disk.h).
#include "core/error.h"
#include "engine/engine.h"

namespace pagoda {
namespace {

// One pool block as bytes in kv_block_bytes' layout (per layer, K's block then V's), moved by
// the backend: memcpy on the CPU, a download or upload per range on a device.
PoolBlockBytes pool_block_bytes(KvStorage& kv, Backend& backend) {
  PoolBlockBytes p;
  p.block_bytes = kv_block_bytes(kv);
  p.read = [&kv, &backend](BlockId block, uint8_t* out) {
    for (int32_t l = 0; l < kv.num_layers(); ++l) {
      const uint64_t n = kv.layer_block_bytes(l), offset = uint64_t(block) * n;
      const KvLayer layer = kv.layer(l);
      backend.download(static_cast<const uint8_t*>(layer.k) + offset, n, out);
      backend.download(static_cast<const uint8_t*>(layer.v) + offset, n, out + n);
      out += 2 * n;
    }
  };
  p.write = [&kv, &backend](BlockId block, const uint8_t* in) {
    for (int32_t l = 0; l < kv.num_layers(); ++l) {
      const uint64_t n = kv.layer_block_bytes(l), offset = uint64_t(block) * n;
      const KvLayer layer = kv.layer(l);
      backend.upload(in, n, static_cast<uint8_t*>(layer.k) + offset);
      backend.upload(in + n, n, static_cast<uint8_t*>(layer.v) + offset);
      in += 2 * n;
    }
  };
  // A device backend's copies go through its one stream, from the engine's thread only.
  p.any_thread = backend.host_visible();
  return p;
}

}  // namespace

TierLoadStats Engine::kv_load_stats() const {
  // The top tier starts every load (the host tier reads the disk's blocks itself).
  if (kv_host_) return kv_host_->load_stats();
  return kv_disk_ ? kv_disk_->load_stats() : TierLoadStats{};
}

void Engine::open_kv_tiers() {
  const char* flag = config_.kv_disk.folder.empty() ? "--kv-offload-gb" : "--kv-disk";
  if (!config_.enable_prefix_caching) {
    fail(flag, " needs the prefix cache (--no-prefix-caching is given)");
  }
  if (config_.speculative.draft_model != nullptr) {
    fail(flag, " does not go with a draft model (the draft's K/V would not be kept)");
  }
  if (!config_.kv_disk.folder.empty()) {
    kv_disk_ = std::make_unique<KvDisk>(*kv_, model_.config(), backend_.host_visible(),
                                        config_.kv_disk);
  }
  if (config_.kv_offload_bytes == 0) {
    scheduler_.set_lower_tier(kv_disk_.get());
    return;
  }
  kv_host_ = std::make_unique<HostTier>(pool_block_bytes(*kv_, backend_),
                                        config_.kv_offload_bytes, kv_disk_.get());
  scheduler_.set_lower_tier(kv_host_.get());
}

}  // namespace pagoda
