// quant/reference.h's dispatch: each call finds its type's codec in the weight-type table
// (weight_types.h); the codecs themselves are in reference_legacy.cc, reference_k.cc and
// reference_iq.cc, the weighted fits of the legacy blocks in reference_weighted.cc.
#include "quant/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/checked.h"
#include "core/error.h"
#include "quant/weight_types.h"

namespace pagoda {
namespace {

void check_importance(const float* importance, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (!(std::isfinite(importance[i]) && importance[i] >= 0.0f)) {
      fail("quantize_row_weighted: importance[", i, "] is ", importance[i],
           "; it must be finite and non-negative");
    }
  }
}

// w = importance * sqrt(sigma2 + x^2), sigma2 = the row's sigma2_factor times the mean square of
// each weighted_span elements (the whole row for the legacy types, each super-block for the K
// types and IQ4_XS, each block of 32 for IQ4_NL): weight_types.cc's table has each type's.
// w[0..n) for n elements that share one sigma2.
void span_weights(const float* x, const float* importance, int64_t n, double sigma2_factor,
                  double* w) {
  double sum_x2 = 0.0;
  for (int64_t i = 0; i < n; ++i) sum_x2 += static_cast<double>(x[i]) * x[i];
  const double sigma2 = sigma2_factor * sum_x2 / static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i) {
    w[i] = importance[i] * std::sqrt(sigma2 + static_cast<double>(x[i]) * x[i]);
  }
}

// The row's weights, divided by the largest (in double, before anything can overflow a
// float): scaling every weight alike changes no choice, and this keeps the searches' float sums
// far from float's limits whatever scale the importance matrix has. Empty when every weight
// is 0.
std::vector<float> row_weights(const WeightType& codec, const float* x, const float* importance,
                               int64_t n) {
  std::vector<double> w(static_cast<size_t>(n));
  const int64_t span = codec.weighted_span > 0 ? codec.weighted_span : n;
  for (int64_t i = 0; i < n; i += span) {
    span_weights(x + i, importance + i, span, codec.sigma2_factor, w.data() + i);
  }
  const double max = n > 0 ? *std::max_element(w.begin(), w.end()) : 0.0;
  if (!(max > 0.0)) return {};
  std::vector<float> normalized(w.size());
  for (size_t i = 0; i < w.size(); ++i) normalized[i] = static_cast<float>(w[i] / max);
  return normalized;
}

// The table's row for `type`, which must have the reference code `encode` asks for (an encoder
// or a decoder: the 2- and 3-bit i-quants have a decoder alone), and the number of blocks in n
// elements; throws on either being wrong.
const WeightType& codec_and_blocks(const char* what, bool encode, DType type, int64_t n,
                                   int64_t* num_blocks) {
  const WeightType* codec = find_weight_type(type);
  if (codec == nullptr || (encode ? codec->quantize == nullptr : codec->dequantize == nullptr)) {
    fail(what, ": no reference code for type ", dtype_traits(type).name,
         encode && codec != nullptr && codec->dequantize != nullptr
             ? " (pagoda decodes it but does not encode it)" : "");
  }
  row_bytes(type, n);  // validates n
  *num_blocks = n / codec->traits.block_size;
  return *codec;
}

}  // namespace

size_t row_bytes(DType type, int64_t n) {
  const DTypeTraits& traits = dtype_traits(type);
  if (n < 0 || n % traits.block_size != 0) {
    fail("a row of ", n, " elements is not a whole number of ", traits.name, " blocks of ",
         traits.block_size);
  }
  const auto bytes = checked_mul(static_cast<uint64_t>(n / traits.block_size), traits.type_size);
  if (!bytes || *bytes > std::numeric_limits<size_t>::max()) {
    fail("a row of ", n, " ", traits.name, " elements is too large to address");
  }
  return static_cast<size_t>(*bytes);
}

bool can_dequantize(DType type) {
  const WeightType* t = find_weight_type(type);
  return t != nullptr && t->dequantize != nullptr;
}
bool can_quantize(DType type) {
  const WeightType* t = find_weight_type(type);
  return t != nullptr && t->quantize != nullptr;
}

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  int64_t num_blocks = 0;
  const WeightType& codec = codec_and_blocks("dequantize_row", false, type, n, &num_blocks);
  codec.dequantize(static_cast<const uint8_t*>(src), dst, num_blocks);
}

void quantize_row(DType type, const float* src, void* dst, int64_t n) {
  int64_t num_blocks = 0;
  const WeightType& codec = codec_and_blocks("quantize_row", true, type, n, &num_blocks);
  codec.quantize(src, static_cast<uint8_t*>(dst), num_blocks);
}

void quantize_row_weighted(DType type, const float* src, void* dst, int64_t n,
                           const float* importance) {
  const WeightType* codec = find_weight_type(type);
  if (importance == nullptr || codec == nullptr || codec->quantize_weighted == nullptr) {
    quantize_row(type, src, dst, n);
    return;
  }
  row_bytes(type, n);  // validates n
  check_importance(importance, n);
  const std::vector<float> weights = row_weights(*codec, src, importance, n);
  if (weights.empty()) {  // nothing to prefer: every encoding has weighted error 0
    quantize_row(type, src, dst, n);
    return;
  }
  codec->quantize_weighted(src, weights.data(), static_cast<uint8_t*>(dst),
                  n / dtype_traits(type).block_size);
}

}  // namespace pagoda
