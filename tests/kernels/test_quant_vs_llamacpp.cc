// pagoda's encoders against llama.cpp's on the same F32 rows (tests/data/quant_vectors.json, made
// by scripts/make_quant_vectors.py with ggml_quantize_chunk and no importance matrix, which runs
// ggml's deterministic reference encoders). F16, BF16 and the legacy types repeat ggml's
// arithmetic, so their bytes must be equal. The K-quants and IQ4_NL / IQ4_XS use pagoda's own
// scale searches, so for them the squared round-trip error summed over each row set must be no
// more than llama.cpp's.
// Both are decoded with pagoda's dequantizer, which reproduces ggml's values: llama.cpp's errors
// are checked against those the script measured with ggml's own decoder.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "quant/reference.h"

namespace pagoda {
namespace {

std::vector<uint8_t> decode_base64(const std::string& text) {
  std::vector<uint8_t> out;
  uint32_t bits = 0;
  int num_bits = 0;
  for (const char c : text) {
    int value;
    if (c >= 'A' && c <= 'Z') {
      value = c - 'A';
    } else if (c >= 'a' && c <= 'z') {
      value = c - 'a' + 26;
    } else if (c >= '0' && c <= '9') {
      value = c - '0' + 52;
    } else if (c == '+' || c == '/') {
      value = c == '+' ? 62 : 63;
    } else if (c == '=') {
      break;
    } else {
      fail("quant_vectors.json: '", c, "' is not base64");
    }
    bits = ((bits << 6) | static_cast<uint32_t>(value)) & 0xffffu;  // at most 14 pending bits
    num_bits += 6;
    if (num_bits >= 8) {
      num_bits -= 8;
      out.push_back(static_cast<uint8_t>(bits >> num_bits));
    }
  }
  return out;
}

struct RowSet {
  std::string name;
  std::vector<float> values;  // num_rows * row_length, row after row
};

struct Vectors {
  nlohmann::json doc;
  int64_t row_length = 0;
  std::vector<RowSet> sets;
};

const Vectors& vectors() {
  static const Vectors v = [] {
    Vectors out;
    out.doc = nlohmann::json::parse(
        read_file(std::string(PAGODA_SOURCE_DIR) + "/tests/data/quant_vectors.json"));
    out.row_length = out.doc.at("row_length").get<int64_t>();
    for (const auto& [name, text] : out.doc.at("row_sets").items()) {
      const std::vector<uint8_t> bytes = decode_base64(text.get<std::string>());
      RowSet set{name, std::vector<float>(bytes.size() / sizeof(float))};
      std::memcpy(set.values.data(), bytes.data(), set.values.size() * sizeof(float));
      out.sets.push_back(std::move(set));
    }
    return out;
  }();
  return v;
}

int64_t num_rows(const RowSet& set) {
  return static_cast<int64_t>(set.values.size()) / vectors().row_length;
}

// llama.cpp's bytes for `type` on `set`, and the error ggml's decoder gave them.
struct Reference {
  std::vector<uint8_t> bytes;
  double squared_error;
};

Reference llama_cpp(DType type, const RowSet& set) {
  const auto& entry =
      vectors().doc.at("types").at(std::string(dtype_traits(type).name)).at(set.name);
  return {decode_base64(entry.at("bytes").get<std::string>()), entry.at("sq_error").get<double>()};
}

std::vector<uint8_t> pagoda_bytes(DType type, const RowSet& set) {
  const int64_t n = vectors().row_length;
  const size_t row_size = row_bytes(type, n);
  std::vector<uint8_t> out(row_size * static_cast<size_t>(num_rows(set)));
  for (int64_t r = 0; r < num_rows(set); ++r) {
    quantize_row(type, set.values.data() + r * n, out.data() + r * row_size, n);
  }
  return out;
}

// Squared round-trip error of each row, decoded with pagoda's dequantizer.
std::vector<double> row_errors(DType type, const RowSet& set, const std::vector<uint8_t>& data) {
  const int64_t n = vectors().row_length;
  const size_t row_size = row_bytes(type, n);
  std::vector<double> errors;
  std::vector<float> decoded(static_cast<size_t>(n));
  for (int64_t r = 0; r < num_rows(set); ++r) {
    dequantize_row(type, data.data() + r * row_size, decoded.data(), n);
    double error = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      const double diff = static_cast<double>(decoded[j]) - set.values[r * n + j];
      error += diff * diff;
    }
    errors.push_back(error);
  }
  return errors;
}

double sum(const std::vector<double>& v) {
  double total = 0.0;
  for (const double x : v) total += x;
  return total;
}

std::string join(const std::vector<double>& v) {
  std::string out;
  char buf[32];
  for (const double x : v) {
    std::snprintf(buf, sizeof(buf), "%s%.4g", out.empty() ? "" : " ", x);
    out += buf;
  }
  return out;
}

// Every type pagoda writes that llama.cpp writes too: `pagoda quantize --type` (F16, BF16, legacy,
// Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS) and the synthetic models (Q2_K and Q3_K too). FP8_E4M3 is
// pagoda's own, with no llama.cpp encoder to compare with.
const std::vector<DType> kByteIdentical = {DType::kF16,  DType::kBF16, DType::kQ4_0, DType::kQ4_1,
                                           DType::kQ5_0, DType::kQ5_1, DType::kQ8_0};
const std::vector<DType> kKQuants = {DType::kQ2_K, DType::kQ3_K,  DType::kQ4_K, DType::kQ5_K,
                                     DType::kQ6_K, DType::kIQ4_NL, DType::kIQ4_XS};

TEST(QuantVsLlamaCpp, VectorsCoverEveryTypeAndShape) {
  const Vectors& v = vectors();
  EXPECT_EQ(v.row_length % 256, 0) << "K-quants need whole super-blocks";
  EXPECT_GE(v.sets.size(), 5u);
  for (const auto& set : v.sets) {
    EXPECT_EQ(set.values.size() % static_cast<size_t>(v.row_length), 0u) << set.name;
    EXPECT_GE(num_rows(set), 2) << set.name;
  }
  for (const auto& types : {kByteIdentical, kKQuants}) {
    for (const DType type : types) {
      const std::string name(dtype_traits(type).name);
      ASSERT_TRUE(v.doc.at("types").contains(name)) << name << " is missing";
      for (const auto& set : v.sets) {
        EXPECT_EQ(llama_cpp(type, set).bytes.size(), pagoda_bytes(type, set).size())
            << name << " " << set.name;
      }
    }
  }
}

// pagoda's decoder on llama.cpp's bytes gives the error ggml's decoder gave (the same floats;
// only the float64 summation order differs), so the comparisons below measure both encoders
// with one ruler.
TEST(QuantVsLlamaCpp, PagodaDecodesLlamaCppsBytesAsGgmlDoes) {
  for (const auto& types : {kByteIdentical, kKQuants}) {
    for (const DType type : types) {
      for (const auto& set : vectors().sets) {
        const Reference ref = llama_cpp(type, set);
        const double error = sum(row_errors(type, set, ref.bytes));
        EXPECT_NEAR(error, ref.squared_error, 1e-9 * ref.squared_error)
            << dtype_traits(type).name << " " << set.name;
      }
    }
  }
}

TEST(QuantVsLlamaCpp, LegacyTypesAndHalvesAreByteIdentical) {
  for (const DType type : kByteIdentical) {
    for (const auto& set : vectors().sets) {
      const std::vector<uint8_t> ours = pagoda_bytes(type, set);
      const std::vector<uint8_t> theirs = llama_cpp(type, set).bytes;
      ASSERT_EQ(ours.size(), theirs.size());
      size_t first = 0;
      while (first < ours.size() && ours[first] == theirs[first]) ++first;
      EXPECT_EQ(first, ours.size())
          << dtype_traits(type).name << " " << set.name << ": the bytes part at offset " << first
          << " of " << ours.size() << " (row " << first / row_bytes(type, vectors().row_length)
          << ")";
    }
  }
}

// Error ratios pagoda / llama.cpp over the six row sets, as measured (the test prints them):
// Q2_K 0.54 .. 0.80, Q3_K 0.88 .. 1.00, Q4_K 0.03 .. 0.99, Q5_K 0.14 .. 0.97, Q6_K 0.94 .. 0.98,
// IQ4_NL 0.79 .. 0.97, IQ4_XS 0.77 .. 0.98.
// The 1.00 is Q3_K's flat set, where the one row with any error (the near-constant one) gets
// the same bytes from both; the smallest are the flat sets of Q4_K and Q5_K, where pagoda's
// refitted super-scale puts that row's level on its mean and ggml's lands beside it. No row
// here is worse than llama.cpp's, but over wider random samples some are (up to 1.8x in Q4_K,
// a group of tiny values beside one outlier, where pagoda's unweighted fit settles in a local
// optimum that ggml's weighted search avoids), so the check is per set, as the issue asks.
TEST(QuantVsLlamaCpp, KQuantErrorIsAtMostLlamaCpps) {
  for (const DType type : kKQuants) {
    std::string ratios;
    for (const auto& set : vectors().sets) {
      const std::vector<double> theirs = row_errors(type, set, llama_cpp(type, set).bytes);
      const std::vector<double> ours = row_errors(type, set, pagoda_bytes(type, set));
      EXPECT_LE(sum(ours), sum(theirs))
          << dtype_traits(type).name << " " << set.name << ": per row, pagoda " << join(ours)
          << ", llama.cpp " << join(theirs);
      char buf[64];
      std::snprintf(buf, sizeof(buf), " %s %.3f", set.name.c_str(),
                    sum(theirs) > 0.0 ? sum(ours) / sum(theirs) : 0.0);
      ratios += buf;
    }
    std::printf("%s error / llama.cpp's:%s\n", std::string(dtype_traits(type).name).c_str(),
                ratios.c_str());
  }
}

}  // namespace
}  // namespace pagoda
