// A token id: an index into a model's vocabulary. Its own header so that the integer-only
// control plane (kv/, sched/) names tokens without including the tokenizer.
#pragma once

#include <cstdint>

namespace pagoda {

using TokenId = int32_t;
constexpr TokenId kNoToken = -1;

}  // namespace pagoda
