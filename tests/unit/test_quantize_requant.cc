// model/quantize on tiny files: an already quantized input is refused unless allow_requantize
// is set (decoding to F32 and keeping a type are not requantizing), and the progress reports
// carry each tensor's round-trip error, which matches the written bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "tools/quantize.h"
#include "quant/reference.h"
#include "test_util.h"

namespace pagoda {
namespace {

// A one-layer llama-shaped F32 file: an embedding, a norm and two 64-column matrices.
std::string write_f32_model(const std::string& dir) {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_u32("llama.block_count", 1);
  w.add_u32("general.file_type", 0);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  auto values = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = normal(rng);
    const auto* p = reinterpret_cast<const uint8_t*>(v.data());
    return std::vector<uint8_t>(p, p + n * sizeof(float));
  };
  w.add_tensor("token_embd.weight", DType::kF32, {64, 16}, values(64 * 16));
  w.add_tensor("blk.0.attn_norm.weight", DType::kF32, {64},
               std::vector<uint8_t>(64 * sizeof(float), 0));
  w.add_tensor("blk.0.attn_q.weight", DType::kF32, {64, 8}, values(64 * 8));
  w.add_tensor("blk.0.ffn_up.weight", DType::kF32, {64, 8}, values(64 * 8));
  const std::string path = dir + "/f32.gguf";
  w.write(path);
  return path;
}

QuantizeOptions options(const std::string& in, const std::string& out, const std::string& type) {
  return {.input_path = in, .output_path = out, .type = type, .num_threads = 2};
}

// ‖w − deq(out)‖ / ‖w‖ from the files.
double file_error(const GgufTensorInfo& in, const GgufTensorInfo& out) {
  const int64_t cols = static_cast<int64_t>(in.shape[0]);
  const uint64_t rows = in.num_elements / in.shape[0];
  std::vector<float> a(static_cast<size_t>(cols)), b(static_cast<size_t>(cols));
  double diff2 = 0, ref2 = 0;
  for (uint64_t r = 0; r < rows; ++r) {
    dequantize_row(in.type, in.data + r * row_bytes(in.type, cols), a.data(), cols);
    dequantize_row(out.type, out.data + r * row_bytes(out.type, cols), b.data(), cols);
    for (int64_t c = 0; c < cols; ++c) {
      diff2 += (double(a[c]) - b[c]) * (double(a[c]) - b[c]);
      ref2 += double(a[c]) * a[c];
    }
  }
  return std::sqrt(diff2 / ref2);
}

TEST(QuantizeModelRequant, ProgressCarriesEachTensorsError) {
  const std::string dir = test::temp_dir();
  const std::string in = write_f32_model(dir), out = dir + "/q8.gguf";
  std::vector<QuantizeProgress> done;
  uint64_t last_bytes = 0;
  const QuantizeSummary s =
      quantize_model(options(in, out, "q8_0"), [&](const QuantizeProgress& p) {
        EXPECT_GE(p.bytes_done, last_bytes);
        last_bytes = p.bytes_done;
        if (p.tensor_done) {
          done.push_back(p);
          done.back().name = {};  // the view lives only during the call
        }
      });
  auto src = GgufFile::open(in);
  auto dst = GgufFile::open(out);
  ASSERT_EQ(done.size(), 4u);
  EXPECT_EQ(last_bytes, s.bytes_out);
  EXPECT_EQ(s.num_tensors, 4u);
  EXPECT_EQ(s.num_converted, 3u);
  EXPECT_EQ(s.num_requantized, 0u);
  uint64_t bytes_in = 0, bytes_out = 0, worst = 0;
  for (size_t i = 0; i < done.size(); ++i) {
    const GgufTensorInfo& a = src->tensors()[i];
    const GgufTensorInfo& b = dst->tensors()[i];
    EXPECT_EQ(done[i].tensor, i);
    EXPECT_EQ(done[i].num_tensors, 4u);
    EXPECT_EQ(done[i].from, a.type);
    EXPECT_EQ(done[i].to, b.type);
    EXPECT_EQ(done[i].tensor_bytes_in, a.num_bytes);
    EXPECT_EQ(done[i].tensor_bytes_out, b.num_bytes);
    EXPECT_FALSE(done[i].requantized);
    bytes_in += a.num_bytes;
    bytes_out += b.num_bytes;
    if (a.type == b.type) {
      EXPECT_EQ(done[i].error, 0.0) << a.name;  // copied
      continue;
    }
    EXPECT_NEAR(done[i].error, file_error(a, b), 1e-9) << a.name;
    EXPECT_GT(done[i].error, 1e-4) << a.name;
    EXPECT_LT(done[i].error, 1e-2) << a.name;
    if (done[i].error > done[worst].error) worst = i;
  }
  EXPECT_EQ(s.bytes_in, bytes_in);
  EXPECT_EQ(s.bytes_out, bytes_out);
  EXPECT_EQ(s.worst_name, src->tensors()[worst].name);
  EXPECT_EQ(s.worst_error, done[worst].error);
  EXPECT_EQ(s.worst_from, DType::kF32);
  EXPECT_EQ(s.worst_to, DType::kQ8_0);
}

TEST(QuantizeModelRequant, RefusedUnlessAllowed) {
  const std::string dir = test::temp_dir();
  const std::string q8 = dir + "/q8.gguf", q4 = dir + "/q4.gguf";
  quantize_model(options(write_f32_model(dir), q8, "q8_0"), nullptr);
  const Requantization r = find_requantization(options(q8, q4, "q4_0"));
  // The tied embedding would get Q6_K, which falls back to Q8_0 for 64 columns: kept as it is.
  EXPECT_EQ(r.count, 2u);
  EXPECT_EQ(r.first, "blk.0.attn_q.weight");
  EXPECT_EQ(r.from, DType::kQ8_0);
  EXPECT_EQ(r.to, DType::kQ4_0);
  try {
    quantize_model(options(q8, q4, "q4_0"), nullptr);
    FAIL() << "requantizing Q8_0 to Q4_0 was not refused";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(q8 + ": tensor blk.0.attn_q.weight is already quantized (Q8_0)"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("would requantize it to Q4_0 (and 1 more tensor)"), std::string::npos) << m;
    EXPECT_NE(m.find("--allow-requantize"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  EXPECT_FALSE(std::filesystem::exists(q4));

  QuantizeOptions allowed = options(q8, q4, "q4_0");
  allowed.allow_requantize = true;
  size_t requantized = 0;
  const QuantizeSummary s = quantize_model(allowed, [&](const QuantizeProgress& p) {
    if (p.tensor_done && p.requantized) {
      ++requantized;
      EXPECT_EQ(p.from, DType::kQ8_0);
      EXPECT_GT(p.error, 1e-2);  // Q4_0 against the Q8_0 values
    }
  });
  EXPECT_EQ(requantized, 2u);
  EXPECT_EQ(s.num_requantized, 2u);
  EXPECT_EQ(GgufFile::open(q4)->find_tensor("blk.0.attn_q.weight")->type, DType::kQ4_0);
}

TEST(QuantizeModelRequant, DecodingAndKeepingTheTypeAreAllowed) {
  const std::string dir = test::temp_dir();
  const std::string f32 = write_f32_model(dir), q8 = dir + "/q8.gguf";
  quantize_model(options(f32, q8, "q8_0"), nullptr);
  // F32 input is never requantized, whatever the type.
  EXPECT_EQ(find_requantization(options(f32, dir + "/x.gguf", "q4_0")).count, 0u);
  // Q8_0 -> q8_0 changes no type; Q8_0 -> f32 decodes exactly.
  EXPECT_EQ(find_requantization(options(q8, dir + "/x.gguf", "q8_0")).count, 0u);
  EXPECT_EQ(find_requantization(options(q8, dir + "/x.gguf", "f32")).count, 0u);
  // F16 and BF16 round the decoded values: that is requantizing too.
  EXPECT_EQ(find_requantization(options(q8, dir + "/x.gguf", "f16")).count, 3u);
  double max_error = -1;
  quantize_model(options(q8, dir + "/back.gguf", "f32"), [&](const QuantizeProgress& p) {
    if (p.tensor_done) max_error = std::max(max_error, p.error);
  });
  EXPECT_EQ(max_error, 0.0);
  EXPECT_TRUE(is_quantized_type(DType::kQ4_K));
  EXPECT_FALSE(is_quantized_type(DType::kBF16));
}

}  // namespace
}  // namespace pagoda
