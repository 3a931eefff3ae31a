// The paged KV cache of a model whose layers differ (Gemma 4): each layer that holds K/V at its
// own width, none for the layers that read another's, and block copies of every layer.
#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "model/kv_copy.h"
#include "model/kv_storage.h"
#include "model/shapes.h"

namespace pagoda {
namespace {

const ModelConfig& tiny() { return find_model_shape("gemma4-tiny")->config; }

TEST(KvWidths, EachLayerAtItsOwnWidth) {
  const ModelConfig& c = tiny();
  ASSERT_EQ(c.num_layers, 9u);
  ASSERT_EQ(c.kv_layer_count(), 6u);
  KvStorage kv(c, 3, 4, KvType::kF32);
  EXPECT_EQ(kv.num_layers(), 6);
  // Sliding layers: 1 KV head of 64; global ones (2 and 5): 2 of 128.
  for (int32_t l = 0; l < 6; ++l) {
    const uint64_t floats = (l == 2 || l == 5) ? 256 : 64;
    EXPECT_EQ(kv.layer_block_bytes(l), floats * 4 * 4) << "layer " << l;
  }
  EXPECT_EQ(kv.bytes(), KvStorage::token_bytes(c, KvType::kF32) * 3 * 4);
  EXPECT_EQ(KvStorage::token_bytes(c, KvType::kF32), 6144u);
  // The layers read from: 6 and 7 (sliding) layer 4's, 8 (global) layer 5's.
  EXPECT_EQ(c.kv_source_layer(6), 4u);
  EXPECT_EQ(c.kv_source_layer(7), 4u);
  EXPECT_EQ(c.kv_source_layer(8), 5u);
  EXPECT_EQ(c.kv_source_layer(3), 3u);
  // A caller that needs one width for every layer is refused, not handed layer 0's.
  EXPECT_THROW(KvStorage::slot_bytes(c, KvType::kF32), Error);
}

TEST(KvWidths, BlockCopiesCopyEveryLayerWhole) {
  const ModelConfig& c = tiny();
  KvStorage kv(c, 3, 4, KvType::kF32);
  for (int32_t l = 0; l < kv.num_layers(); ++l) {
    const size_t floats = kv.layer_block_bytes(l) / 4 * 3;
    for (size_t i = 0; i < floats; ++i) {
      kv.k(l)[i] = static_cast<float>(l * 100000 + i);
      kv.v(l)[i] = -static_cast<float>(l * 100000 + i);
    }
  }
  auto backend = make_reference_backend();
  const BlockCopy copy{0, 2};
  copy_kv_blocks(*backend, kv, c, {&copy, 1});
  for (int32_t l = 0; l < kv.num_layers(); ++l) {
    const size_t block = kv.layer_block_bytes(l) / 4;
    EXPECT_EQ(std::memcmp(kv.k(l), kv.k(l) + 2 * block, block * 4), 0) << "layer " << l;
    EXPECT_EQ(std::memcmp(kv.v(l), kv.v(l) + 2 * block, block * 4), 0) << "layer " << l;
    EXPECT_EQ(kv.k(l)[block], static_cast<float>(l * 100000 + block));  // block 1 untouched
  }
}

}  // namespace
}  // namespace pagoda
