// Saved prefixes (engine/prefix_file.h, KvCacheManager::cached_full_blocks / import_blocks):
// a file reads back exactly what was written; one of another identity, block size or block
// bytes, cut short, or with any byte of a block changed is refused with a one-line reason;
// names that could leave the folder are invalid; imported blocks become ordinary cached blocks
// found by a later lookup, after those the pool already has, never evicting them.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "core/error.h"
#include "engine/prefix_file.h"
#include "kv/kv_cache_manager.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;

PrefixBlocks sample_blocks(int32_t num_blocks, int32_t block_size = 4, uint64_t block_bytes = 24) {
  PrefixBlocks b;
  b.extra = 7;
  b.block_size = block_size;
  b.block_bytes = block_bytes;
  b.tokens.resize(size_t(num_blocks * block_size));
  std::iota(b.tokens.begin(), b.tokens.end(), 100);
  b.payload.resize(size_t(num_blocks) * block_bytes);
  for (size_t i = 0; i < b.payload.size(); ++i) b.payload[i] = uint8_t(i * 31 + 5);
  return b;
}

class PrefixFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("pagoda_prefix_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    path_ = (dir_ / "p.pgkv").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string why_refused(const std::string& identity = "model A", int32_t bs = 4,
                          uint64_t bytes = 24) {
    try {
      read_prefix_file(path_, identity, bs, bytes);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  std::vector<char> bytes() {
    std::ifstream in(path_, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  void set_bytes(const std::vector<char>& b) {
    std::ofstream(path_, std::ios::binary).write(b.data(), std::streamsize(b.size()));
  }

  fs::path dir_;
  std::string path_;
};

TEST_F(PrefixFileTest, ReadsBackWhatWasWritten) {
  const PrefixBlocks b = sample_blocks(3);
  write_prefix_file(path_, "model A", b);
  const PrefixBlocks r = read_prefix_file(path_, "model A", 4, 24);
  EXPECT_EQ(r.extra, b.extra);
  EXPECT_EQ(r.tokens, b.tokens);
  EXPECT_EQ(r.payload, b.payload);
  EXPECT_EQ(r.num_blocks(), 3);
  EXPECT_FALSE(fs::exists(path_ + ".tmp"));
}

TEST_F(PrefixFileTest, AnotherIdentityOrFormatIsRefused) {
  write_prefix_file(path_, "model A", sample_blocks(2));
  EXPECT_NE(why_refused("model B").find("another model or K/V format"), std::string::npos);
  EXPECT_NE(why_refused("model A", 8).find("another model or K/V format"), std::string::npos);
  EXPECT_NE(why_refused("model A", 4, 48).find("another model or K/V format"), std::string::npos);
  EXPECT_EQ(why_refused(), "");
}

TEST_F(PrefixFileTest, EveryChangedOrMissingByteIsRefused) {
  write_prefix_file(path_, "model A", sample_blocks(2));
  const std::vector<char> good = bytes();
  for (size_t i = 0; i < good.size(); ++i) {
    std::vector<char> bad = good;
    bad[i] ^= 0x04;
    set_bytes(bad);
    const std::string why = why_refused();
    EXPECT_NE(why, "") << "byte " << i;
    EXPECT_EQ(why.find('\n'), std::string::npos);
  }
  for (size_t n : {size_t{0}, size_t{5}, good.size() / 2, good.size() - 1}) {
    set_bytes(std::vector<char>(good.begin(), good.begin() + ptrdiff_t(n)));
    EXPECT_NE(why_refused(), "") << n << " bytes";
  }
  std::vector<char> longer = good;
  longer.push_back('x');
  set_bytes(longer);
  EXPECT_NE(why_refused().find("truncated"), std::string::npos);
  fs::remove(path_);
  EXPECT_NE(why_refused().find("cannot read"), std::string::npos);
}

TEST(PrefixName, OnlyPlainNamesAreValid) {
  for (const char* ok : {"a", "story-1", "v1.2_x", "A9"}) EXPECT_TRUE(valid_prefix_name(ok)) << ok;
  for (const char* bad : {"", ".", "..", "../a", "a/b", ".hidden", "a b", "a\\b", "a\nb", "é"}) {
    EXPECT_FALSE(valid_prefix_name(bad)) << bad;
  }
  EXPECT_TRUE(valid_prefix_name(std::string(128, 'x')));
  EXPECT_FALSE(valid_prefix_name(std::string(129, 'x')));
}

// Control plane: blocks imported into the pool are cached blocks a lookup finds.
TEST(ImportBlocks, ImportedBlocksAreCachedAfterThePoolsOwn) {
  KvCacheConfig config;
  config.num_blocks = 6;
  config.block_size = 4;
  KvCacheManager kv(config);
  std::vector<TokenId> tokens(13);
  std::iota(tokens.begin(), tokens.end(), 50);
  const TokenSequence seq{tokens, {}};
  // The pool computes the first block itself.
  const CachedPrefix none = kv.get_computed_blocks(seq, 0);
  ASSERT_TRUE(kv.allocate_slots(1, 0, 4, &none));
  kv.cache_full_blocks(1, seq, 4);
  kv.free(1);
  kv.check_invariants();
  std::vector<int32_t> filled;
  const int32_t n = kv.import_blocks(seq, 0, [&](int32_t i, BlockId) { filled.push_back(i); });
  kv.check_invariants();
  EXPECT_EQ(n, 12);  // three full blocks; the 13th token is not a block
  EXPECT_EQ(filled, (std::vector<int32_t>{1, 2}));  // block 0 was the pool's already
  EXPECT_EQ(kv.pool().num_cached(), 3);
  EXPECT_EQ(kv.cached_full_blocks(seq, 0).num_tokens, 12);
  EXPECT_EQ(kv.get_computed_blocks(seq, 0).num_tokens, 12);
  EXPECT_EQ(kv.cached_full_blocks(seq, 1).num_tokens, 0);  // another cache key: none
  // A pool with no free block imports nothing and changes nothing.
  std::vector<TokenId> other(24);
  std::iota(other.begin(), other.end(), 900);
  const TokenSequence other_seq{other, {}};
  const CachedPrefix other_none = kv.get_computed_blocks(other_seq, 0);
  ASSERT_TRUE(kv.allocate_slots(2, 0, 24, &other_none));
  EXPECT_EQ(kv.import_blocks(seq, 7, [](int32_t, BlockId) { ADD_FAILURE(); }), 0);
  kv.check_invariants();
}

}  // namespace
}  // namespace pagoda
