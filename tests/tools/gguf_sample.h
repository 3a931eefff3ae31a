// The sample GGUF content shared by gguf_write_sample (checked by the Python `gguf` package)
// and the C++ writer tests: every metadata type at its extremes, string arrays, empty and nested
// arrays, and tensors of several types given to the writer in each of its three ways.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "format/gguf_writer.h"

namespace pagoda::tools {

enum class SampleSource { kPointer, kOwned, kProducer };

struct SampleTensor {
  std::string name;
  DType type;
  std::vector<uint64_t> shape;  // GGUF order
  std::vector<uint8_t> bytes;
  SampleSource source;
};

// Arbitrary but reproducible bytes (a 64-bit LCG); quantized blocks need not be meaningful.
inline std::vector<uint8_t> sample_bytes(uint64_t size, uint64_t seed) {
  std::vector<uint8_t> out(size);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& b : out) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    b = static_cast<uint8_t>(x >> 56);
  }
  return out;
}

inline std::vector<SampleTensor> sample_tensors() {
  struct Spec {
    const char* name;
    DType type;
    std::vector<uint64_t> shape;
    SampleSource source;
  };
  const std::vector<Spec> specs = {
      {"token_embd.weight", DType::kF32, {64, 3}, SampleSource::kPointer},
      {"blk.0.attn_q.weight", DType::kF16, {32, 2, 3}, SampleSource::kOwned},
      {"blk.0.ffn_up.weight", DType::kQ8_0, {64, 2}, SampleSource::kProducer},
      {"blk.0.ffn_down.weight", DType::kQ4_K, {512, 3}, SampleSource::kPointer},
      {"blk.0.ffn_gate.weight", DType::kQ6_K, {256, 1, 1, 2}, SampleSource::kProducer},
      {"blk.0.attn_norm.weight", DType::kF32, {1}, SampleSource::kOwned},  // odd size: padding
      {"rope_freqs", DType::kI32, {5}, SampleSource::kPointer},
      {"output.weight", DType::kBF16, {2, 3, 4, 5}, SampleSource::kOwned},
  };
  std::vector<SampleTensor> out;
  uint64_t seed = 1;
  for (const auto& s : specs) {
    const DTypeTraits& traits = dtype_traits(s.type);
    uint64_t count = 1;
    for (uint64_t ne : s.shape) count *= ne;
    out.push_back({s.name, s.type, s.shape,
                   sample_bytes(count / traits.block_size * traits.type_size, seed++), s.source});
  }
  return out;
}

inline void add_sample_metadata(GgufWriter& w) {
  using G = GgufWriter;
  w.add_string("general.architecture", "sample");
  w.add_string("general.name", "pagoda GGUF round-trip sample");
  w.add_u8("sample.u8", 255);
  w.add_i8("sample.i8", -128);
  w.add_u16("sample.u16", 65535);
  w.add_i16("sample.i16", -32768);
  w.add_u32("sample.u32", 4294967295u);
  w.add_i32("sample.i32", std::numeric_limits<int32_t>::min());
  w.add_u64("sample.u64", std::numeric_limits<uint64_t>::max());
  w.add_i64("sample.i64", std::numeric_limits<int64_t>::min());
  w.add_f32("sample.f32", 3.14159265f);
  w.add_f32("sample.f32_tiny", 1e-38f);
  w.add_f64("sample.f64", 2.718281828459045);
  w.add_f64("sample.f64_neg", -1.5e300);
  w.add_bool("sample.true", true);
  w.add_bool("sample.false", false);
  w.add_string("sample.string", "hello");
  w.add_string("sample.empty_string", "");
  w.add_string("sample.unicode", "h\xC3\xA9llo \xE2\x9C\x93 \xE6\x97\xA5\xE6\x9C\xAC \"quoted\"\n\ttab");
  w.add_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "", " the", "\xE2\x96\x81x"});
  w.add_f32_array("tokenizer.ggml.scores", {0.0f, -1.25f, 3.5e10f, -0.0f});
  w.add_i32_array("tokenizer.ggml.token_type", {2, 3, 3, 1, 1, std::numeric_limits<int32_t>::max()});
  w.add_u32_array("sample.u32_array", {0, 1, 4294967295u});
  w.add_i64_array("sample.i64_array", {std::numeric_limits<int64_t>::max(), -1});
  w.add_value("sample.u8_array", G::make_array(GgufType::kUint8, {G::make_uint(GgufType::kUint8, 0),
                                                                  G::make_uint(GgufType::kUint8, 255)}));
  w.add_value("sample.i8_array", G::make_array(GgufType::kInt8, {G::make_int(GgufType::kInt8, -128),
                                                                 G::make_int(GgufType::kInt8, 127)}));
  w.add_value("sample.u16_array", G::make_array(GgufType::kUint16, {G::make_uint(GgufType::kUint16, 7)}));
  w.add_value("sample.i16_array", G::make_array(GgufType::kInt16, {G::make_int(GgufType::kInt16, -7)}));
  w.add_value("sample.u64_array", G::make_array(GgufType::kUint64, {G::make_uint(GgufType::kUint64, 1ull << 63)}));
  w.add_value("sample.f64_array", G::make_array(GgufType::kFloat64, {G::make_float(GgufType::kFloat64, 0.1),
                                                                     G::make_float(GgufType::kFloat64, -2.0)}));
  w.add_value("sample.bool_array", G::make_array(GgufType::kBool, {G::make_bool(true), G::make_bool(false),
                                                                   G::make_bool(true)}));
  w.add_value("sample.empty_array", G::make_array(GgufType::kUint32, {}));
  w.add_value("sample.empty_string_array", G::make_array(GgufType::kString, {}));
  auto i32 = [](int32_t x) { return G::make_int(GgufType::kInt32, x); };
  auto str = [](const char* s) { return G::make_string(s); };
  // [[1, 2], [], [3]]: an empty inner array in the middle.
  w.add_value("sample.nested_i32",
              G::make_array(GgufType::kArray, {G::make_array(GgufType::kInt32, {i32(1), i32(2)}),
                                               G::make_array(GgufType::kInt32, {}),
                                               G::make_array(GgufType::kInt32, {i32(3)})}));
  // [["a", "b"], ["c"]]
  w.add_value("sample.nested_strings",
              G::make_array(GgufType::kArray, {G::make_array(GgufType::kString, {str("a"), str("b")}),
                                               G::make_array(GgufType::kString, {str("c")})}));
  // [[[1.5]], [[], [2.5, -3.5]]]: three levels.
  auto f32 = [](float x) { return G::make_float(GgufType::kFloat32, x); };
  w.add_value(
      "sample.nested3",
      G::make_array(GgufType::kArray,
                    {G::make_array(GgufType::kArray, {G::make_array(GgufType::kFloat32, {f32(1.5f)})}),
                     G::make_array(GgufType::kArray,
                                   {G::make_array(GgufType::kFloat32, {}),
                                    G::make_array(GgufType::kFloat32, {f32(2.5f), f32(-3.5f)})})}));
}

// `tensors` must outlive the writer's write(): kPointer tensors refer to their bytes.
inline void add_sample_tensors(GgufWriter& w, const std::vector<SampleTensor>& tensors) {
  for (const auto& t : tensors) {
    switch (t.source) {
      case SampleSource::kPointer:
        w.add_tensor(t.name, t.type, t.shape, t.bytes.data(), t.bytes.size());
        break;
      case SampleSource::kOwned:
        w.add_tensor(t.name, t.type, t.shape, std::vector<uint8_t>(t.bytes));
        break;
      case SampleSource::kProducer: {
        const std::vector<uint8_t>* bytes = &t.bytes;
        // Uneven pieces, so the writer's buffering sees partial and odd-sized writes.
        w.add_tensor(t.name, t.type, t.shape, [bytes](GgufWriter::Sink& sink) {
          uint64_t done = 0, piece = 1;
          while (done < bytes->size()) {
            uint64_t n = std::min<uint64_t>(piece, bytes->size() - done);
            sink.write(bytes->data() + done, n);
            done += n;
            piece = piece * 3 + 1;
          }
        });
        break;
      }
    }
  }
}

}  // namespace pagoda::tools
