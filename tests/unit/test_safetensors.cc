// safetensors reader: hand-made byte strings, good and hostile, and the real TinyStories file.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "format/safetensors.h"
#include "test_util.h"

namespace pagoda {
namespace {

// 8-byte little-endian header length, the header, then `data_size` bytes counting 0, 1, 2...
std::string make_file(const std::string& header, size_t data_size) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += header;
  for (size_t i = 0; i < data_size; ++i) out += static_cast<char>(i & 0xff);
  return out;
}

std::unique_ptr<SafetensorsFile> parse(const std::string& bytes) {
  return SafetensorsFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                                "t.safetensors");
}

// The Error text of parsing `bytes`, or "" when it parsed.
std::string error_of(const std::string& bytes) {
  try {
    parse(bytes);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string one_tensor(const std::string& entry) { return "{\"w\":" + entry + "}"; }

TEST(Safetensors, ParsesShapesInGgufOrder) {
  std::string bytes = make_file(R"({"__metadata__":{"format":"pt"},)"
                                R"("w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                                R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[24,30]}})",
                                30);
  auto f = parse(bytes);
  ASSERT_EQ(f->tensors().size(), 2u);
  const auto* w = f->find_tensor("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->type, DType::kF32);
  EXPECT_EQ(w->shape, (std::vector<uint64_t>{3, 2}));  // innermost first
  EXPECT_EQ(w->num_elements, 6u);
  EXPECT_EQ(w->num_bytes, 24u);
  const uint8_t* base = reinterpret_cast<const uint8_t*>(bytes.data());
  EXPECT_EQ(w->data, base + f->data_offset());
  const auto* b = f->find_tensor("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->type, DType::kBF16);
  EXPECT_EQ(b->data, base + f->data_offset() + 24);
  EXPECT_EQ(b->data[0], 24);
  ASSERT_EQ(f->metadata().size(), 1u);
  EXPECT_EQ(f->metadata()[0], (std::pair<std::string, std::string>{"format", "pt"}));
  EXPECT_EQ(f->find_tensor("missing"), nullptr);
}

TEST(Safetensors, EveryMappedDtype) {
  const std::pair<const char*, DType> kCases[] = {
      {"F64", DType::kF64}, {"F32", DType::kF32}, {"F16", DType::kF16}, {"BF16", DType::kBF16},
      {"I64", DType::kI64}, {"I32", DType::kI32}, {"I16", DType::kI16}, {"I8", DType::kI8}};
  for (const auto& [name, type] : kCases) {
    uint64_t size = dtype_traits(type).type_size * 4;
    auto f = parse(make_file(one_tensor(str_cat(R"({"dtype":")", name,
                                                R"(","shape":[4],"data_offsets":[0,)", size, "]}")),
                             size));
    EXPECT_EQ(f->tensors()[0].type, type) << name;
  }
}

TEST(Safetensors, ScalarsEmptyTensorsAndEmptyHeader) {
  auto f = parse(make_file(R"({"s":{"dtype":"I32","shape":[],"data_offsets":[0,4]},)"
                           R"("e":{"dtype":"F16","shape":[0,5],"data_offsets":[4,4]}})",
                           4));
  EXPECT_EQ(f->find_tensor("s")->num_elements, 1u);
  EXPECT_TRUE(f->find_tensor("s")->shape.empty());
  EXPECT_EQ(f->find_tensor("e")->num_bytes, 0u);
  EXPECT_EQ(f->find_tensor("e")->shape, (std::vector<uint64_t>{5, 0}));
  EXPECT_TRUE(parse(make_file("{}", 0))->tensors().empty());
  EXPECT_TRUE(parse(make_file("{}   ", 0))->tensors().empty());  // writers pad with spaces
}

TEST(Safetensors, IdenticalOffsetsAreSharedStorage) {
  auto f = parse(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                           8));
  EXPECT_EQ(f->find_tensor("a")->data, f->find_tensor("b")->data);
}

TEST(Safetensors, MetadataAliasAddsTheDroppedName) {
  auto f = parse(make_file(R"({"__metadata__":{"emb":"head","format":"pt","head":"x"},)"
                           R"("head":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                           8));
  ASSERT_EQ(f->tensors().size(), 2u);
  const auto* alias = f->find_tensor("emb");
  ASSERT_NE(alias, nullptr);
  EXPECT_EQ(alias->alias_of, "head");
  EXPECT_EQ(alias->data, f->find_tensor("head")->data);
  EXPECT_EQ(alias->shape, f->find_tensor("head")->shape);
  EXPECT_TRUE(f->find_tensor("head")->alias_of.empty());
  EXPECT_EQ(f->find_tensor("format"), nullptr);  // "pt" is no tensor: plain metadata
}

struct BadCase {
  const char* what;
  std::string bytes;
  const char* expected;  // a substring of the error
};

TEST(Safetensors, HostileInputGivesExactErrors) {
  const std::string f32_2x3 = R"({"dtype":"F32","shape":[2,3],"data_offsets":[0,24]})";
  std::string past_end = make_file("{}", 0);
  past_end[0] = static_cast<char>(200);  // header length 200 in a 10-byte file
  const BadCase kCases[] = {
      {"truncated header length", std::string("\x02\x00\x00", 3),
       "t.safetensors: the 3-byte file is too short to hold the 8-byte header length"},
      {"empty file", "", "the 0-byte file is too short"},
      {"header length past end", past_end,
       "t.safetensors: header length 200 runs past the end of the 10-byte file"},
      {"invalid JSON", make_file(R"({"w": {"dtype": )", 0),
       "t.safetensors: header: invalid JSON: parse error at line 1, column 17"},
      {"not UTF-8", make_file("{\"w\xff\": 1}", 0), "t.safetensors: header: invalid JSON"},
      {"not an object", make_file("[1, 2]", 0),
       "t.safetensors: header is an array, not a JSON object"},
      {"nested too deep", make_file(R"({"w":{"shape":[[[1]]]}})", 0),
       "t.safetensors: header: JSON nested deeper than 4 levels"},
      {"entry not an object", make_file(R"({"w": 5})", 0),
       "t.safetensors: tensor 'w': entry is an integer, not an object"},
      {"missing dtype", make_file(one_tensor(R"({"shape":[2,3],"data_offsets":[0,24]})"), 24),
       "t.safetensors: tensor 'w': missing 'dtype'"},
      {"dtype not a string",
       make_file(one_tensor(R"({"dtype":7,"shape":[2,3],"data_offsets":[0,24]})"), 24),
       "t.safetensors: tensor 'w': 'dtype' is an integer, not a string"},
      {"unknown dtype",
       make_file(one_tensor(R"({"dtype":"Q7","shape":[2,3],"data_offsets":[0,24]})"), 24),
       "t.safetensors: tensor 'w': unknown dtype 'Q7'"},
      {"unsupported dtype",
       make_file(one_tensor(R"({"dtype":"U8","shape":[2,3],"data_offsets":[0,6]})"), 6),
       "t.safetensors: tensor 'w': dtype 'U8' is not supported (supported: F64, F32, F16, BF16, "
       "I64, I32, I16, I8)"},
      {"missing shape", make_file(one_tensor(R"({"dtype":"F32","data_offsets":[0,24]})"), 24),
       "t.safetensors: tensor 'w': missing 'shape'"},
      {"shape not an array",
       make_file(one_tensor(R"({"dtype":"F32","shape":"2x3","data_offsets":[0,24]})"), 24),
       "t.safetensors: tensor 'w': 'shape' is a string, not an array"},
      {"negative dimension",
       make_file(one_tensor(R"({"dtype":"F32","shape":[2,-3],"data_offsets":[0,24]})"), 24),
       "t.safetensors: tensor 'w': shape entry is a negative integer, not a non-negative integer"},
      {"float dimension",
       make_file(one_tensor(R"({"dtype":"F32","shape":[2,3.0],"data_offsets":[0,24]})"), 24),
       "t.safetensors: tensor 'w': shape entry is a float, not a non-negative integer"},
      {"too many dimensions",
       make_file(one_tensor(R"({"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]})"),
                 4),
       "t.safetensors: tensor 'w': shape has 9 dimensions (at most 8)"},
      {"shape product overflow",
       make_file(
           one_tensor(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,24]})"),
           24),
       "t.safetensors: tensor 'w': shape product overflows"},
      {"byte count overflow",
       make_file(
           one_tensor(R"({"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,24]})"),
           24),
       "t.safetensors: tensor 'w': shape product overflows"},
      {"missing data_offsets", make_file(one_tensor(R"({"dtype":"F32","shape":[2,3]})"), 24),
       "t.safetensors: tensor 'w': missing 'data_offsets'"},
      {"data_offsets of three",
       make_file(one_tensor(R"({"dtype":"F32","shape":[2,3],"data_offsets":[0,24,48]})"), 24),
       "t.safetensors: tensor 'w': 'data_offsets' must be an array of two integers [begin, end]"},
      {"negative offset",
       make_file(one_tensor(R"({"dtype":"F32","shape":[2,3],"data_offsets":[-8,16]})"), 24),
       "t.safetensors: tensor 'w': 'data_offsets' must hold two non-negative integers"},
      {"offsets past end", make_file(one_tensor(f32_2x3), 20),
       "t.safetensors: tensor 'w': data_offsets end 24 runs past the end of the 20-byte data "
       "section"},
      {"end before begin",
       make_file(one_tensor(R"({"dtype":"F32","shape":[2,3],"data_offsets":[24,0]})"), 24),
       "t.safetensors: tensor 'w': data_offsets end 0 is before begin 24"},
      {"size mismatch",
       make_file(one_tensor(R"({"dtype":"F32","shape":[2,3],"data_offsets":[0,20]})"), 24),
       "t.safetensors: tensor 'w': data_offsets span 20 bytes but 6 F32 elements need 24"},
      {"huge offsets",
       make_file(one_tensor(R"({"dtype":"F32","shape":[2,3],"data_offsets":)"
                            R"([18446744073709551600,18446744073709551615]})"),
                 24),
       "t.safetensors: tensor 'w': data_offsets end 18446744073709551615 runs past the end"},
      {"metadata not strings", make_file(R"({"__metadata__":{"k":1}})", 0),
       "t.safetensors: '__metadata__' key 'k' is an integer, not a string"},
      {"metadata not an object", make_file(R"({"__metadata__":"x"})", 0),
       "t.safetensors: '__metadata__' is a string, not an object"},
      {"partial overlap",
       make_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                 R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                 24),
       "t.safetensors: tensor 'b': bytes [8, 24) overlap tensor 'a' [0, 16)"},
      {"overlap past an identical pair",
       make_file(R"({"a":{"dtype":"F32","shape":[8],"data_offsets":[0,32]},)"
                 R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
                 R"("c":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                 32),
       "t.safetensors: tensor 'b': bytes [8, 16) overlap tensor 'a' [0, 32)"},
      {"control bytes in a name are escaped", make_file("{\"a\\nb\": 1}", 0),
       "t.safetensors: tensor 'a\\x0ab': entry is an integer"},
  };
  for (const BadCase& c : kCases) {
    std::string got = error_of(c.bytes);
    EXPECT_NE(got.find(c.expected), std::string::npos)
        << c.what << "\n  expected: " << c.expected << "\n  got:      " << got;
    EXPECT_EQ(got.find('\n'), std::string::npos) << c.what << ": error is not one line";
  }
}

TEST(Safetensors, HeaderLengthOverTheLimit) {
  // The limit is checked before any of the header is read, so the contents do not matter.
  std::string bytes(8 + SafetensorsFile::kMaxHeaderBytes + 1, ' ');
  uint64_t n = SafetensorsFile::kMaxHeaderBytes + 1;
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  EXPECT_NE(error_of(bytes).find("t.safetensors: header length 104857601 is over the limit of "
                                 "104857600 bytes"),
            std::string::npos)
      << error_of(bytes);
}

TEST(Safetensors, OpenNamesTheMissingFile) {
  try {
    SafetensorsFile::open("/nonexistent/model.safetensors");
    FAIL() << "opened a missing file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model.safetensors: cannot open"),
              std::string::npos)
        << e.what();
  }
}

TEST(Safetensors, TinyStoriesHeader) {
  PAGODA_SHARED_OR_SKIP(path, "models/tinystories-656k/model.safetensors");
  auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f->header_size(), 2160u);
  EXPECT_EQ(f->file_size(), 2626168u);
  // 20 stored tensors plus the embedding that the metadata aliases to lm_head.
  EXPECT_EQ(f->tensors().size(), 21u);
  const auto* head = f->find_tensor("lm_head.weight");
  const auto* emb = f->find_tensor("model.embed_tokens.weight");
  ASSERT_NE(head, nullptr);
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(head->type, DType::kF32);
  EXPECT_EQ(head->shape, (std::vector<uint64_t>{128, 2048}));
  EXPECT_EQ(head->num_bytes, 2048u * 128 * 4);
  EXPECT_EQ(emb->data, head->data);
  EXPECT_EQ(emb->alias_of, "lm_head.weight");
  EXPECT_EQ(head->offset, 0u);

  const auto* k = f->find_tensor("model.layers.1.self_attn.k_proj.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->shape, (std::vector<uint64_t>{128, 64}));  // [64 out, 128 in] in the header
  EXPECT_EQ(k->offset, 2426880u);
  EXPECT_EQ(f->find_tensor("model.norm.weight")->shape, (std::vector<uint64_t>{128}));
  EXPECT_NE(f->find_tensor("model.layers.0.mlp.down_proj.weight"), nullptr);

  // The last tensor ends exactly at the end of the file.
  const auto* norm = f->find_tensor("model.norm.weight");
  EXPECT_EQ(f->data_offset() + norm->offset + norm->num_bytes, f->file_size());
  float first;
  std::memcpy(&first, norm->data, sizeof first);
  EXPECT_TRUE(std::isfinite(first));
}

}  // namespace
}  // namespace pagoda
