// GgufFile on hostile input: hand-made malformed files, each refused with an Error that names the
// file, the field and the problem; typed accessor errors; and every real GGUF file in ../shared.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "format/gguf.h"
#include "test_util.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;

// Metadata value types, and tensor types (a separate numbering).
constexpr uint32_t kU8 = 0, kU32 = 4, kI32 = 5, kFloat32 = 6, kBool = 7, kString = 8, kArray = 9,
                   kU64 = 10, kI64 = 11;
constexpr uint32_t kF32 = static_cast<uint32_t>(DType::kF32);

// Builds GGUF bytes field by field, so a test can put any value anywhere.
class Bytes {
 public:
  template <typename T>
  Bytes& put(T v) {
    uint8_t raw[sizeof(T)];
    std::memcpy(raw, &v, sizeof(T));
    b_.insert(b_.end(), raw, raw + sizeof(T));
    return *this;
  }
  Bytes& u8(uint8_t v) { return put(v); }
  Bytes& u32(uint32_t v) { return put(v); }
  Bytes& u64(uint64_t v) { return put(v); }
  Bytes& str(std::string_view s) {
    u64(s.size());
    b_.insert(b_.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& raw(std::string_view s) {
    b_.insert(b_.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& header(uint64_t num_tensors, uint64_t num_kv, uint32_t version = 3) {
    return raw("GGUF").u32(version).u64(num_tensors).u64(num_kv);
  }
  Bytes& kv_u32(std::string_view key, uint32_t v) { return str(key).u32(kU32).u32(v); }
  Bytes& kv_str(std::string_view key, std::string_view v) { return str(key).u32(kString).str(v); }
  Bytes& tensor(std::string_view name, std::vector<uint64_t> shape, uint32_t type,
                uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(shape.size()));
    for (uint64_t ne : shape) u64(ne);
    return u32(type).u64(offset);
  }
  Bytes& pad_to(uint64_t alignment) {
    while (b_.size() % alignment != 0) b_.push_back(0);
    return *this;
  }
  Bytes& zeros(size_t n) {
    b_.resize(b_.size() + n, 0);
    return *this;
  }
  size_t size() const { return b_.size(); }
  const std::vector<uint8_t>& bytes() const { return b_; }

 private:
  std::vector<uint8_t> b_;
};

std::unique_ptr<GgufFile> parse(const Bytes& b) {
  return GgufFile::parse(b.bytes().data(), b.size(), "bad.gguf");
}

// The Error text parse() gives, or "(no error)".
std::string parse_error(const Bytes& b) {
  try {
    parse(b);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// A valid file with one F32 tensor [8] and a string key, the base most cases corrupt one field of.
Bytes one_tensor_file(uint32_t type = kF32, std::vector<uint64_t> shape = {8}, uint64_t offset = 0,
                      size_t data_bytes = 32) {
  Bytes b;
  b.header(1, 1).kv_str("general.architecture", "llama").tensor("w", shape, type, offset);
  return b.pad_to(32).zeros(data_bytes);
}

TEST(GgufReader, ValidBaseParses) {
  auto f = parse(one_tensor_file());
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->get_string("general.architecture"), "llama");
  ASSERT_EQ(f->tensors().size(), 1u);
  EXPECT_EQ(f->tensors()[0].num_bytes, 32u);
  EXPECT_EQ(f->data_offset() % 32, 0u);
  Bytes v2;  // version 2 has the same layout
  v2.header(0, 1, 2).kv_u32("a", 1);
  EXPECT_EQ(parse(v2)->version(), 2u);
}

TEST(GgufReader, EmptyFile) {
  EXPECT_EQ(parse_error(Bytes()),
            "bad.gguf: magic: not a GGUF file (it does not start with \"GGUF\")");
  // The same through open(): a zero-length file cannot be mapped, and must not crash.
  const std::string path = test::temp_dir() + "/empty.gguf";
  std::ofstream(path).close();
  try {
    GgufFile::open(path);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              path + ": magic: not a GGUF file (it does not start with \"GGUF\")");
  }
}

TEST(GgufReader, BadMagic) {
  Bytes b;
  b.raw("GGML").u32(3).u64(0).u64(0);
  EXPECT_EQ(parse_error(b), "bad.gguf: magic: not a GGUF file (it does not start with \"GGUF\")");
  Bytes three;
  three.raw("GGU");
  EXPECT_EQ(parse_error(three),
            "bad.gguf: magic: not a GGUF file (it does not start with \"GGUF\")");
}

TEST(GgufReader, UnsupportedVersions) {
  for (uint32_t version : {0u, 1u, 4u, 0x03000000u}) {
    Bytes b;
    b.header(0, 0, version);
    EXPECT_EQ(parse_error(b), "bad.gguf: version: GGUF version " + std::to_string(version) +
                                  " is not supported (only 2 and 3)");
  }
}

TEST(GgufReader, TruncatedHeader) {
  Bytes b;
  b.raw("GGUF").u32(3).u32(0);  // half a tensor count
  EXPECT_EQ(parse_error(b),
            "bad.gguf: tensor count: needs 8 bytes at offset 8 but the file has only 4 left "
            "(truncated?)");
  Bytes no_version;
  no_version.raw("GGUF").u8(3);
  EXPECT_EQ(parse_error(no_version),
            "bad.gguf: version: needs 4 bytes at offset 4 but the file has only 1 left "
            "(truncated?)");
  Bytes no_kv_count;
  no_kv_count.raw("GGUF").u32(3).u64(0);
  EXPECT_EQ(parse_error(no_kv_count),
            "bad.gguf: metadata count: needs 8 bytes at offset 16 but the file has only 0 left "
            "(truncated?)");
}

TEST(GgufReader, TruncatedAnywhereIsAnErrorNeverACrash) {
  // Every prefix of a valid file is refused cleanly (the full file minus its data included).
  const Bytes full = one_tensor_file();
  for (size_t n = 0; n < full.size(); ++n) {
    std::vector<uint8_t> prefix(full.bytes().begin(), full.bytes().begin() + n);
    EXPECT_THROW(GgufFile::parse(prefix.data(), prefix.size(), "bad.gguf"), Error) << n;
  }
}

TEST(GgufReader, HugeTensorCount) {
  Bytes b;
  b.header(uint64_t{1} << 60, 0).zeros(100);
  EXPECT_EQ(parse_error(b),
            "bad.gguf: tensor count: 1152921504606846976 tensors cannot fit in a 124-byte file");
}

TEST(GgufReader, HugeMetadataCount) {
  Bytes b;
  b.header(0, UINT64_MAX).zeros(100);
  EXPECT_EQ(parse_error(b),
            "bad.gguf: metadata count: 18446744073709551615 entries cannot fit in a 124-byte "
            "file");
}

TEST(GgufReader, StringLengthPastTheEnd) {
  Bytes key;
  key.header(0, 1).u64(1000).raw("general.name").u32(kString);
  EXPECT_EQ(parse_error(key),
            "bad.gguf: metadata entry 0 key: string length 1000 runs past the end of the file "
            "(16 bytes left)");
  Bytes value;
  value.header(0, 1).str("general.name").u32(kString).u64(UINT64_MAX).raw("abc");
  EXPECT_EQ(parse_error(value),
            "bad.gguf: metadata key 'general.name': string length 18446744073709551615 runs "
            "past the end of the file (3 bytes left)");
  Bytes name;
  name.header(1, 0).u64(64).raw("w").zeros(30);
  EXPECT_EQ(parse_error(name),
            "bad.gguf: tensor 0 name: string length 64 runs past the end of the file (31 bytes "
            "left)");
}

TEST(GgufReader, HugeArrayLength) {
  Bytes b;
  b.header(0, 1).str("tokenizer.ggml.tokens").u32(kArray).u32(kString).u64(uint64_t{1} << 40);
  b.str("a").str("b");
  EXPECT_EQ(parse_error(b),
            "bad.gguf: metadata key 'tokenizer.ggml.tokens': array length 1099511627776 cannot "
            "fit in the 18 bytes left in the file");
  Bytes u8s;  // one byte per item: 5 items cannot fit in 4 bytes
  u8s.header(0, 1).str("a").u32(kArray).u32(kU8).u64(5).u32(0);
  EXPECT_EQ(parse_error(u8s),
            "bad.gguf: metadata key 'a': array length 5 cannot fit in the 4 bytes left in the "
            "file");
}

TEST(GgufReader, TooManyArrayItems) {
  // Each item costs ~100 bytes once parsed, so the total is capped (2^24) even when the file
  // is large enough to hold the items: here two arrays whose sum passes the cap by one.
  Bytes b;
  b.header(0, 2).str("a").u32(kArray).u32(kU8).u64(uint64_t{1} << 23).zeros(size_t{1} << 23);
  b.str("b").u32(kArray).u32(kU8).u64((uint64_t{1} << 23) + 1).zeros((size_t{1} << 23) + 1);
  EXPECT_EQ(parse_error(b),
            "bad.gguf: metadata key 'b': array length 8388609 takes the file past the limit of "
            "16777216 array items in all");
}

TEST(GgufReader, TensorDataPastTheEnd) {
  const Bytes short_data = one_tensor_file(kF32, {8}, 0, 31);
  EXPECT_EQ(parse_error(short_data),
            "bad.gguf: tensor 'w': data at offset 0 (32 bytes) runs past the end of the " +
                std::to_string(short_data.size()) + "-byte file");
  // An offset so large that data_offset + offset overflows.
  const Bytes far = one_tensor_file(kF32, {8}, UINT64_MAX - 31, 32);
  EXPECT_EQ(parse_error(far),
            "bad.gguf: tensor 'w': data at offset 18446744073709551584 (32 bytes) runs past the "
            "end of the " + std::to_string(far.size()) + "-byte file");
  // The data section itself starts past the end (the header ends unaligned, no padding).
  Bytes b;
  b.header(1, 0).tensor("w", {8}, kF32, 0);
  EXPECT_EQ(b.size(), 57u);
  EXPECT_EQ(parse_error(b), "bad.gguf: data section: starts at 64, past the end of the 57-byte "
                            "file");
}

TEST(GgufReader, MisalignedTensorOffset) {
  EXPECT_EQ(parse_error(one_tensor_file(kF32, {8}, 4, 64)),
            "bad.gguf: tensor 'w': data offset 4 is not a multiple of the alignment 32");
  // The alignment comes from general.alignment.
  Bytes b;
  b.header(1, 1).kv_u32("general.alignment", 64).tensor("w", {8}, kF32, 32).pad_to(64).zeros(64);
  EXPECT_EQ(parse_error(b),
            "bad.gguf: tensor 'w': data offset 32 is not a multiple of the alignment 64");
}

TEST(GgufReader, UnknownValueType) {
  Bytes b;
  b.header(0, 1).str("general.thing").u32(13).u32(0);
  EXPECT_EQ(parse_error(b), "bad.gguf: metadata key 'general.thing': unknown value type 13");
  Bytes elem;
  elem.header(0, 1).str("arr").u32(kArray).u32(99).u64(0);
  EXPECT_EQ(parse_error(elem), "bad.gguf: metadata key 'arr': unknown array element type 99");
}

TEST(GgufReader, UnknownTensorType) {
  EXPECT_EQ(parse_error(one_tensor_file(4)), "bad.gguf: tensor 'w': unknown tensor type 4");
  EXPECT_EQ(parse_error(one_tensor_file(1000)), "bad.gguf: tensor 'w': unknown tensor type 1000");
}

TEST(GgufReader, OverflowingShapeProduct) {
  EXPECT_EQ(parse_error(one_tensor_file(kF32, {uint64_t{1} << 32, uint64_t{1} << 32})),
            "bad.gguf: tensor 'w': shape product overflows");
  EXPECT_EQ(parse_error(one_tensor_file(kF32, {UINT64_MAX, 2})),
            "bad.gguf: tensor 'w': shape product overflows");
  // 2^62 elements passes the element limit, but 2^62 F32 elements are 2^64 bytes: this once
  // wrapped to a byte size of 0 and the tensor was accepted.
  EXPECT_EQ(parse_error(one_tensor_file(kF32, {uint64_t{1} << 31, uint64_t{1} << 31})),
            "bad.gguf: tensor 'w': byte size overflows");
  EXPECT_EQ(parse_error(one_tensor_file(static_cast<uint32_t>(DType::kI64), {uint64_t{1} << 61, 2})),
            "bad.gguf: tensor 'w': byte size overflows");
}

TEST(GgufReader, ZeroDimension) {
  EXPECT_EQ(parse_error(one_tensor_file(kF32, {8, 0})), "bad.gguf: tensor 'w': dimension 1 is zero");
  EXPECT_EQ(parse_error(one_tensor_file(kF32, {0})), "bad.gguf: tensor 'w': dimension 0 is zero");
}

TEST(GgufReader, DimensionCount) {
  EXPECT_EQ(parse_error(one_tensor_file(kF32, {1, 1, 1, 1, 8})),
            "bad.gguf: tensor 'w': has 5 dimensions (must be 1 to 4)");
  EXPECT_EQ(parse_error(one_tensor_file(kF32, {})),
            "bad.gguf: tensor 'w': has 0 dimensions (must be 1 to 4)");
  Bytes huge;
  huge.header(1, 0).str("w").u32(UINT32_MAX).zeros(64);
  EXPECT_EQ(parse_error(huge), "bad.gguf: tensor 'w': has 4294967295 dimensions (must be 1 to 4)");
}

TEST(GgufReader, RowNotAMultipleOfTheBlockSize) {
  EXPECT_EQ(parse_error(one_tensor_file(static_cast<uint32_t>(DType::kQ4_K), {100, 2})),
            "bad.gguf: tensor 'w': row length 100 is not a multiple of the Q4_K block size 256");
  EXPECT_EQ(parse_error(one_tensor_file(static_cast<uint32_t>(DType::kQ8_0), {16})),
            "bad.gguf: tensor 'w': row length 16 is not a multiple of the Q8_0 block size 32");
  // A quantized tensor that fits: Q8_0 [64] is two 34-byte blocks.
  EXPECT_EQ(parse(one_tensor_file(static_cast<uint32_t>(DType::kQ8_0), {64}, 0, 68))->tensors()[0].num_bytes, 68u);
}

TEST(GgufReader, DuplicateKeyOrTensor) {
  Bytes b;
  b.header(0, 2).kv_u32("llama.block_count", 1).kv_u32("llama.block_count", 2);
  EXPECT_EQ(parse_error(b), "bad.gguf: metadata key 'llama.block_count': appears twice");
  Bytes t;
  t.header(2, 0).tensor("w", {8}, kF32, 0).tensor("w", {8}, kF32, 32).pad_to(32).zeros(64);
  EXPECT_EQ(parse_error(t), "bad.gguf: tensor 'w': appears twice");
}

TEST(GgufReader, BadAlignment) {
  for (uint32_t a : {0u, 3u, 48u, 1u << 31}) {
    Bytes b;
    b.header(0, 1).kv_u32("general.alignment", a);
    EXPECT_EQ(parse_error(b), "bad.gguf: metadata key 'general.alignment': alignment " +
                                  std::to_string(a) + " is not a power of two from 1 to 2^30");
  }
  Bytes negative;
  negative.header(0, 1).str("general.alignment").u32(kI64).put<int64_t>(-64);
  EXPECT_EQ(parse_error(negative),
            "bad.gguf: metadata key 'general.alignment': alignment -64 is not a power of two "
            "from 1 to 2^30");
  Bytes text;
  text.header(0, 1).kv_str("general.alignment", "32");
  EXPECT_EQ(parse_error(text), "bad.gguf: metadata key 'general.alignment': is not an integer");
  Bytes ok;  // any integer type is accepted
  ok.header(0, 1).str("general.alignment").u32(kI32).put<int32_t>(16);
  EXPECT_EQ(parse(ok)->alignment(), 16u);
}

TEST(GgufReader, BadBoolAndDeepNesting) {
  Bytes b;
  b.header(0, 1).str("flag").u32(kBool).u8(2);
  EXPECT_EQ(parse_error(b), "bad.gguf: metadata key 'flag': bool value 2 is neither 0 nor 1");
  Bytes deep;
  deep.header(0, 1).str("deep").u32(kArray);
  for (int k = 0; k < 9; ++k) deep.u32(kArray).u64(1);
  deep.zeros(64);
  EXPECT_EQ(parse_error(deep), "bad.gguf: metadata key 'deep': arrays nested too deeply");
}

TEST(GgufReader, TruncatedTensorInfoNamesTheField) {
  Bytes b;
  b.header(1, 0).str("blk.0.attn_q.weight").u32(2).u64(64).u64(64).u32(kF32).u32(0);
  b.zeros(0);
  EXPECT_EQ(parse_error(b),
            "bad.gguf: tensor 'blk.0.attn_q.weight' (offset): needs 8 bytes at offset 75 but "
            "the file has only 4 left (truncated?)");
}

class GgufAccessors : public ::testing::Test {
 protected:
  void SetUp() override {
    b_.header(0, 8)
        .kv_str("s", "text")
        .kv_u32("u", 7)
        .str("neg").u32(kI32).put<int32_t>(-1)
        .str("big").u32(kU64).u64(uint64_t{1} << 32)
        .str("huge").u32(kU64).u64(UINT64_MAX)
        .str("f").u32(kFloat32).put<float>(0.5f)
        .str("ints").u32(kArray).u32(kI32).u64(2).put<int32_t>(-3).put<int32_t>(4)
        .str("flag").u32(kBool).u8(1);
    file_ = parse(b_);
  }

  std::string error_of(const std::function<void()>& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  }

  Bytes b_;
  std::unique_ptr<GgufFile> file_;
};

TEST_F(GgufAccessors, MissingKey) {
  EXPECT_EQ(error_of([&] { file_->get_u32("llama.block_count"); }),
            "bad.gguf: metadata key 'llama.block_count' is missing");
  EXPECT_EQ(error_of([&] { file_->get_string("general.architecture"); }),
            "bad.gguf: metadata key 'general.architecture' is missing");
  EXPECT_FALSE(file_->try_u64("nope").has_value());
  EXPECT_FALSE(file_->try_string("nope").has_value());
  EXPECT_FALSE(file_->has("nope"));
}

TEST_F(GgufAccessors, WrongType) {
  EXPECT_EQ(error_of([&] { file_->get_u64("s"); }),
            "bad.gguf: metadata key 's' has type string, expected an unsigned integer");
  EXPECT_EQ(error_of([&] { file_->get_string("u"); }),
            "bad.gguf: metadata key 'u' has type uint32, expected string");
  EXPECT_EQ(error_of([&] { file_->get_bool("u"); }),
            "bad.gguf: metadata key 'u' has type uint32, expected bool");
  EXPECT_EQ(error_of([&] { file_->get_f64("s"); }),
            "bad.gguf: metadata key 's' has type string, expected a number");
  EXPECT_EQ(error_of([&] { file_->get_i64("huge"); }),
            "bad.gguf: metadata key 'huge' has type uint64, expected an integer");
  EXPECT_EQ(error_of([&] { file_->get_string_array("ints"); }),
            "bad.gguf: metadata key 'ints' has type array of int32, expected array of string");
  EXPECT_EQ(error_of([&] { file_->get_f32_array("ints"); }),
            "bad.gguf: metadata key 'ints' has type array of int32, expected array of float32");
  EXPECT_EQ(error_of([&] { file_->get_int_array("s"); }),
            "bad.gguf: metadata key 's' has type string, expected array of integers");
  EXPECT_EQ(error_of([&] { file_->try_u64("s"); }),
            "bad.gguf: metadata key 's' has type string, expected an unsigned integer");
  EXPECT_EQ(error_of([&] { file_->try_bool("s"); }),
            "bad.gguf: metadata key 's' has type string, expected bool");
}

TEST_F(GgufAccessors, OutOfRange) {
  EXPECT_EQ(error_of([&] { file_->get_u64("neg"); }), "bad.gguf: metadata key 'neg' is negative (-1)");
  EXPECT_EQ(error_of([&] { file_->get_u32("big"); }),
            "bad.gguf: metadata key 'big' value 4294967296 is too large");
}

TEST_F(GgufAccessors, ValuesThatFit) {
  EXPECT_EQ(file_->get_string("s"), "text");
  EXPECT_EQ(file_->get_u32("u"), 7u);
  EXPECT_EQ(file_->get_i64("u"), 7);
  EXPECT_EQ(file_->get_i64("neg"), -1);
  EXPECT_EQ(file_->get_f64("u"), 7.0);
  EXPECT_EQ(file_->get_f32("f"), 0.5f);
  EXPECT_EQ(file_->get_u64("big"), uint64_t{1} << 32);
  EXPECT_EQ(file_->get_int_array("ints"), (std::vector<int64_t>{-3, 4}));
  EXPECT_TRUE(file_->get_bool("flag"));
  EXPECT_EQ(file_->try_f64("f"), 0.5);
}

// Every real GGUF file in ../shared parses, and its tensors lie inside the file.
TEST(GgufReader, RealFilesParse) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  std::vector<fs::path> files;
  auto add_dir = [&](const fs::path& dir) {
    if (!fs::is_directory(dir)) return;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.is_regular_file() && e.path().extension() == ".gguf") files.push_back(e.path());
    }
  };
  add_dir(fs::path(shared) / "models");
  if (fs::is_directory(fs::path(shared) / "models")) {
    for (const auto& e : fs::directory_iterator(fs::path(shared) / "models")) {
      if (e.is_directory()) add_dir(e.path());
    }
  }
  add_dir(fs::path(shared) / "testdata" / "vocab");
  ASSERT_FALSE(files.empty()) << "no .gguf files under " << shared;
  size_t num_models = 0;
  for (const auto& path : files) {
    SCOPED_TRACE(path.string());
    std::unique_ptr<GgufFile> f;
    ASSERT_NO_THROW(f = GgufFile::open(path.string()));
    EXPECT_FALSE(f->metadata().empty());
    EXPECT_TRUE(f->has("general.architecture"));
    for (const auto& t : f->tensors()) {
      EXPECT_GE(t.offset + f->data_offset() + t.num_bytes, t.num_bytes);
      EXPECT_LE(f->data_offset() + t.offset + t.num_bytes, f->file_size()) << t.name;
    }
    num_models += !f->tensors().empty();
  }
  EXPECT_GE(num_models, 1u);
}

}  // namespace
}  // namespace pagoda
