// GgufWriter: what it writes, GgufFile reads back identically (every metadata value, in order,
// and every tensor's bytes); what it refuses, it refuses with an Error naming the key, tensor or
// path; a failed write leaves nothing behind.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "core/error.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "test_util.h"
#include "tools/gguf_sample.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
using G = GgufWriter;

// Deep equality of two metadata values, with a path to the first difference.
void expect_same_value(const GgufValue& got, const GgufValue& want, const std::string& where) {
  ASSERT_EQ(got.type, want.type) << where;
  switch (want.type) {
    case GgufType::kUint8: case GgufType::kUint16: case GgufType::kUint32:
    case GgufType::kUint64: case GgufType::kBool:
      EXPECT_EQ(got.u, want.u) << where;
      break;
    case GgufType::kInt8: case GgufType::kInt16: case GgufType::kInt32: case GgufType::kInt64:
      EXPECT_EQ(got.i, want.i) << where;
      break;
    case GgufType::kFloat32:
      EXPECT_EQ(static_cast<float>(got.f), static_cast<float>(want.f)) << where;
      break;
    case GgufType::kFloat64:
      EXPECT_EQ(got.f, want.f) << where;
      break;
    case GgufType::kString:
      EXPECT_EQ(got.s, want.s) << where;
      break;
    case GgufType::kArray:
      ASSERT_EQ(got.elem_type, want.elem_type) << where;
      ASSERT_EQ(got.array.size(), want.array.size()) << where;
      for (size_t k = 0; k < want.array.size(); ++k) {
        expect_same_value(got.array[k], want.array[k], where + "[" + std::to_string(k) + "]");
      }
      break;
  }
}

void expect_same_metadata(const GgufFile& file, const GgufWriter& writer) {
  const auto& got = file.metadata();
  const auto& want = writer.metadata();
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_EQ(got[k].first, want[k].first) << "entry " << k;  // insertion order is kept
    expect_same_value(got[k].second, want[k].second, want[k].first);
  }
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

class GgufWriterAlignment : public ::testing::TestWithParam<uint64_t> {};

TEST_P(GgufWriterAlignment, SampleRoundTripsThroughTheReader) {
  const uint64_t alignment = GetParam();
  GgufWriter w;
  tools::add_sample_metadata(w);
  if (alignment != 0) w.set_alignment(alignment);
  const auto tensors = tools::sample_tensors();
  tools::add_sample_tensors(w, tensors);
  const std::string path = test::temp_dir() + "/sample.gguf";
  w.write(path);

  auto file = GgufFile::open(path);
  const uint64_t want_alignment = alignment == 0 ? 32 : alignment;
  EXPECT_EQ(w.alignment(), want_alignment);
  EXPECT_EQ(file->version(), 3u);
  EXPECT_EQ(file->alignment(), want_alignment);
  EXPECT_EQ(file->data_offset() % want_alignment, 0u);
  expect_same_metadata(*file, w);

  ASSERT_EQ(file->tensors().size(), tensors.size());
  uint64_t offset = 0;
  for (size_t k = 0; k < tensors.size(); ++k) {
    const GgufTensorInfo& got = file->tensors()[k];
    const tools::SampleTensor& want = tensors[k];
    EXPECT_EQ(got.name, want.name);
    EXPECT_EQ(got.type, want.type) << want.name;
    EXPECT_EQ(got.shape, want.shape) << want.name;
    EXPECT_EQ(got.offset, offset) << want.name;  // in order, each at the next aligned offset
    ASSERT_EQ(got.num_bytes, want.bytes.size()) << want.name;
    EXPECT_EQ(std::vector<uint8_t>(got.data, got.data + got.num_bytes), want.bytes) << want.name;
    offset = (offset + got.num_bytes + want_alignment - 1) / want_alignment * want_alignment;
    EXPECT_EQ(file->find_tensor(want.name), &got);
  }
  EXPECT_EQ(file->file_size(), file->data_offset() + offset);  // the last tensor is padded too

  // Typed accessors see the values the writer was given.
  EXPECT_EQ(file->get_string("general.architecture"), "sample");
  EXPECT_EQ(file->get_u64("sample.u64"), UINT64_MAX);
  EXPECT_EQ(file->get_i64("sample.i64"), INT64_MIN);
  EXPECT_EQ(file->get_u32("sample.u32"), UINT32_MAX);
  EXPECT_EQ(file->get_f32("sample.f32"), 3.14159265f);
  EXPECT_EQ(file->get_f64("sample.f64"), 2.718281828459045);
  EXPECT_TRUE(file->get_bool("sample.true"));
  EXPECT_FALSE(file->get_bool("sample.false"));
  EXPECT_EQ(file->get_string("sample.empty_string"), "");
  EXPECT_EQ(file->get_string_array("tokenizer.ggml.tokens"),
            (std::vector<std::string>{"<unk>", "<s>", "</s>", "", " the", "\xE2\x96\x81x"}));
  EXPECT_EQ(file->get_f32_array("tokenizer.ggml.scores"),
            (std::vector<float>{0.0f, -1.25f, 3.5e10f, -0.0f}));
  EXPECT_EQ(file->get_int_array("sample.i64_array"), (std::vector<int64_t>{INT64_MAX, -1}));
  EXPECT_TRUE(file->get_int_array("sample.empty_array").empty());

  EXPECT_EQ(files_in(fs::path(path).parent_path().string()),
            std::vector<std::string>{"sample.gguf"});  // no temporary left behind
}

INSTANTIATE_TEST_SUITE_P(Gguf, GgufWriterAlignment, ::testing::Values(0, 1, 8, 64, 4096));

TEST(GgufWriter, EmptyFileIsValid) {
  const std::string path = test::temp_dir() + "/empty.gguf";
  GgufWriter().write(path);
  auto file = GgufFile::open(path);
  EXPECT_TRUE(file->metadata().empty());
  EXPECT_TRUE(file->tensors().empty());
  EXPECT_EQ(file->file_size(), 32u);  // the 24-byte header, padded to the default alignment
}

TEST(GgufWriter, StreamsLargeTensorsInPieces) {
  // Larger than the writer's 1 MiB buffer, so both the direct path and the buffered path run.
  const uint64_t rows = 3 * 1024 * 1024 / 34 + 5;  // Q8_0 rows of 32 elements (34 bytes)
  const auto big = tools::sample_bytes(rows * 34, 42);
  GgufWriter w;
  w.add_string("general.architecture", "x");
  w.add_tensor("small", DType::kF16, {3}, std::vector<uint8_t>{1, 2, 3, 4, 5, 6});
  w.add_tensor("big.pointer", DType::kQ8_0, {32, rows}, big.data(), big.size());
  w.add_tensor("big.producer", DType::kQ8_0, {32, rows}, [&](G::Sink& sink) {
    for (uint64_t done = 0; done < big.size(); done += 100000) {
      sink.write(big.data() + done, std::min<uint64_t>(100000, big.size() - done));
    }
  });
  const std::string path = test::temp_dir() + "/big.gguf";
  w.write(path);
  auto file = GgufFile::open(path);
  ASSERT_EQ(file->tensors().size(), 3u);
  for (const char* name : {"big.pointer", "big.producer"}) {
    const GgufTensorInfo* t = file->find_tensor(name);
    ASSERT_NE(t, nullptr);
    ASSERT_EQ(t->num_bytes, big.size());
    EXPECT_EQ(0, std::memcmp(t->data, big.data(), big.size())) << name;
  }
}

TEST(GgufWriter, SetValueReplacesInPlace) {
  GgufWriter w;
  w.add_u32("a", 1);
  w.add_string("b", "x");
  w.add_u32("c", 3);
  w.set_value("b", G::make_float(GgufType::kFloat64, 0.5));
  w.set_value("d", G::make_bool(true));
  w.set_alignment(16);
  w.set_alignment(128);  // set twice: one key
  const std::string path = test::temp_dir() + "/set.gguf";
  w.write(path);
  auto file = GgufFile::open(path);
  ASSERT_EQ(file->metadata().size(), 5u);
  EXPECT_EQ(file->metadata()[1].first, "b");
  EXPECT_EQ(file->get_f64("b"), 0.5);
  EXPECT_EQ(file->metadata()[3].first, "d");
  EXPECT_EQ(file->alignment(), 128u);
  EXPECT_EQ(file->metadata()[4].second.type, GgufType::kUint32);
}

TEST(GgufWriter, RefusesBadMetadata) {
  GgufWriter w;
  w.add_u32("k", 1);
  EXPECT_EQ(error_of([&] { w.add_string("k", "again"); }),
            "GGUF metadata key 'k': added twice");
  EXPECT_EQ(error_of([&] { w.add_u32("", 1); }), "GGUF metadata: empty key");
  EXPECT_EQ(error_of([&] { G::make_uint(GgufType::kUint8, 256); }),
            "GGUF value: value 256 does not fit in uint8");
  EXPECT_EQ(error_of([&] { G::make_int(GgufType::kInt16, -32769); }),
            "GGUF value: value -32769 does not fit in int16");
  EXPECT_EQ(error_of([&] { G::make_uint(GgufType::kInt32, 1); }),
            "GGUF value: int32 is not unsigned");
  EXPECT_EQ(error_of([&] { G::make_float(GgufType::kString, 1); }),
            "GGUF value: string is not a float type");
  EXPECT_EQ(error_of([&] {
              G::make_array(GgufType::kInt32, {G::make_int(GgufType::kInt32, 1),
                                               G::make_uint(GgufType::kUint32, 2)});
            }),
            "GGUF array: array item 1 has type uint32, expected int32");
  // Hand-built values are checked too.
  GgufValue bad_bool;
  bad_bool.type = GgufType::kBool;
  bad_bool.u = 2;
  EXPECT_EQ(error_of([&] { w.add_value("b", bad_bool); }),
            "GGUF metadata key 'b': bool value 2 is not 0 or 1");
  GgufValue bad_type;
  bad_type.type = static_cast<GgufType>(13);
  EXPECT_EQ(error_of([&] { w.add_value("t", bad_type); }),
            "GGUF metadata key 't': unknown value type 13");
  // Eight levels of arrays are what the reader accepts; a ninth is refused when built or added.
  GgufValue nested = G::make_array(GgufType::kUint8, {});
  for (int depth = 1; depth < 8; ++depth) nested = G::make_array(GgufType::kArray, {nested});
  w.add_value("deep8", nested);
  EXPECT_EQ(error_of([&] { G::make_array(GgufType::kArray, {nested}); }),
            "GGUF array: arrays nested more than 8 deep");
  GgufValue deeper;
  deeper.type = GgufType::kArray;
  deeper.elem_type = GgufType::kArray;
  deeper.array.push_back(nested);
  EXPECT_EQ(error_of([&] { w.add_value("deep9", deeper); }),
            "GGUF metadata key 'deep9': arrays nested more than 8 deep");
  EXPECT_FALSE(w.has("deep9"));
}

TEST(GgufWriter, RefusesBadAlignment) {
  GgufWriter w;
  for (uint64_t a : {0ull, 3ull, 48ull, 1ull << 31}) {
    EXPECT_EQ(error_of([&] { w.set_alignment(a); }),
              "GGUF metadata key 'general.alignment': alignment must be a power of two from 1 "
              "to 2^30, got " + std::to_string(a));
  }
  EXPECT_EQ(error_of([&] { w.set_alignment(1ull << 40); }),
            "GGUF metadata key 'general.alignment': alignment must be a power of two from 1 to "
            "2^30, got 1099511627776");
  EXPECT_EQ(error_of([&] { w.add_u64("general.alignment", 64); }),
            "GGUF metadata key 'general.alignment': must be uint32, got uint64");
  EXPECT_EQ(w.alignment(), 32u);
  w.add_u32("general.alignment", 256);  // the plain way works as well
  EXPECT_EQ(w.alignment(), 256u);
}

TEST(GgufWriter, RefusesBadTensors) {
  GgufWriter w;
  std::vector<uint8_t> bytes(4096);
  w.add_tensor("w", DType::kF32, {4}, bytes.data(), 16);
  EXPECT_EQ(error_of([&] { w.add_tensor("w", DType::kF32, {4}, bytes.data(), 16); }),
            "GGUF tensor 'w': added twice");
  EXPECT_EQ(error_of([&] { w.add_tensor("a", DType::kF32, {4, 2}, bytes.data(), 16); }),
            "GGUF tensor 'a': has 16 bytes, but F32 with 8 elements needs 32");
  EXPECT_EQ(error_of([&] { w.add_tensor("q", DType::kQ8_0, {64}, bytes.data(), 64); }),
            "GGUF tensor 'q': has 64 bytes, but Q8_0 with 64 elements needs 68");
  EXPECT_EQ(error_of([&] { w.add_tensor("k", DType::kQ4_K, {128, 2}, bytes.data(), 144); }),
            "GGUF tensor 'k': row length 128 is not a multiple of the Q4_K block size 256");
  EXPECT_EQ(error_of([&] { w.add_tensor("z", DType::kF32, {4, 0}, bytes.data(), 0); }),
            "GGUF tensor 'z': dimension 1 is zero");
  EXPECT_EQ(error_of([&] { w.add_tensor("d", DType::kF32, {1, 1, 1, 1, 1}, bytes.data(), 4); }),
            "GGUF tensor 'd': has 5 dimensions (must be 1 to 4)");
  EXPECT_EQ(error_of([&] { w.add_tensor("e", DType::kF32, {}, bytes.data(), 4); }),
            "GGUF tensor 'e': has 0 dimensions (must be 1 to 4)");
  EXPECT_EQ(error_of([&] {
              w.add_tensor("o", DType::kF32, {1ull << 32, 1ull << 32}, bytes.data(), 4);
            }),
            "GGUF tensor 'o': shape product overflows");
  EXPECT_EQ(error_of([&] {
              w.add_tensor("p", DType::kF32, {1ull << 31, 1ull << 31}, [](G::Sink&) {});
            }),
            "GGUF tensor 'p': byte size overflows");
  EXPECT_EQ(error_of([&] { w.add_tensor("n", DType::kF32, {4}, nullptr, 16); }),
            "GGUF tensor 'n': no data");
  EXPECT_EQ(error_of([&] { w.add_tensor("", DType::kF32, {4}, bytes.data(), 16); }),
            "GGUF tensor: empty name");
  EXPECT_EQ(error_of([&] { w.add_tensor(std::string(64, 'x'), DType::kF32, {4}, bytes.data(), 16); }),
            "GGUF tensor '" + std::string(64, 'x') + "': name is 64 bytes long (at most 63)");
  w.add_tensor(std::string(63, 'x'), DType::kF32, {4}, bytes.data(), 16);
  EXPECT_EQ(w.num_tensors(), 2u);  // refused tensors are not kept
}

// A producer that gives the wrong number of bytes, or throws, fails write() with the path and
// tensor named; the destination keeps its old content and no temporary is left.
TEST(GgufWriter, FailedWriteLeavesNothingBehind) {
  const std::string dir = test::temp_dir();
  const std::string path = dir + "/model.gguf";
  {
    std::ofstream(path) << "old content";
  }
  auto attempt = [&](G::Producer producer) {
    GgufWriter w;
    w.add_string("general.architecture", "x");
    w.add_tensor("t", DType::kF32, {8}, std::move(producer));
    return error_of([&] { w.write(path); });
  };
  const uint8_t bytes[64] = {};
  EXPECT_EQ(attempt([&](G::Sink& s) { s.write(bytes, 16); }),
            path + ": tensor 't': the producer gave 16 of the 32 bytes its shape and type need");
  EXPECT_EQ(attempt([&](G::Sink& s) { s.write(bytes, 20); s.write(bytes, 20); }),
            path + ": tensor 't': the producer gave more than the 32 bytes its shape and type "
                   "need");
  EXPECT_EQ(attempt([&](G::Sink& s) {
              s.write(bytes, 8);
              fail("source file vanished");
            }),
            "source file vanished");
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"model.gguf"});
  EXPECT_EQ(read_file(path), "old content");

  // Success replaces the old file.
  GgufWriter ok;
  ok.add_u8("x", 7);
  ok.write(path);
  EXPECT_EQ(GgufFile::open(path)->get_u64("x"), 7u);
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"model.gguf"});
}

TEST(GgufWriter, UnwritablePathIsNamed) {
  const std::string dir = test::temp_dir();
  const std::string missing = dir + "/no/such/dir/out.gguf";
  std::string err = error_of([&] { GgufWriter().write(missing); });
  EXPECT_EQ(err.rfind(missing + ": cannot create a temporary file to write: ", 0), 0u) << err;
  // A directory in the way: the temporary is written, the rename fails, the temporary goes.
  fs::create_directory(dir + "/taken");
  err = error_of([&] { GgufWriter().write(dir + "/taken"); });
  EXPECT_EQ(err.rfind(dir + "/taken: cannot rename the finished temporary file into place: ", 0),
            0u)
      << err;
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"taken"});
}

}  // namespace
}  // namespace pagoda
