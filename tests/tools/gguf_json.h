// JSON renderings of GGUF metadata values and tensors, shared by the test tools so that what
// gguf_write_sample says it wrote and what gguf_dump reads back have one format. Python tests
// compare both with the `gguf` package's reader.
//
// A value is {"type": NAME, "value": V}; an array also has "elem_type", and its "value" is a list
// of values in the same form, so nested arrays keep their structure and every item its type.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

#include "core/dtype.h"
#include "format/gguf.h"

namespace pagoda::tools {

inline std::string to_hex(const uint8_t* data, uint64_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(size * 2);
  for (uint64_t k = 0; k < size; ++k) {
    out += kDigits[data[k] >> 4];
    out += kDigits[data[k] & 15];
  }
  return out;
}

inline nlohmann::json value_to_json(const GgufValue& v) {
  nlohmann::json j;
  j["type"] = std::string(gguf_type_name(v.type));
  if (v.is_unsigned()) {
    j["value"] = v.u;
  } else if (v.is_signed()) {
    j["value"] = v.i;
  } else if (v.type == GgufType::kFloat32) {
    j["value"] = static_cast<double>(static_cast<float>(v.f));
  } else if (v.type == GgufType::kFloat64) {
    j["value"] = v.f;
  } else if (v.type == GgufType::kBool) {
    j["value"] = v.u != 0;
  } else if (v.type == GgufType::kString) {
    j["value"] = v.s;
  } else {
    j["elem_type"] = std::string(gguf_type_name(v.elem_type));
    nlohmann::json items = nlohmann::json::array();
    for (const auto& item : v.array) items.push_back(value_to_json(item));
    j["value"] = std::move(items);
  }
  return j;
}

// `data` may be null (sizes only).
inline nlohmann::json tensor_to_json(std::string_view name, DType type,
                                     const std::vector<uint64_t>& shape, const uint8_t* data,
                                     uint64_t num_bytes) {
  nlohmann::json j;
  j["name"] = std::string(name);
  j["type"] = std::string(dtype_traits(type).name);
  j["type_id"] = static_cast<uint32_t>(type);
  j["shape"] = shape;
  j["num_bytes"] = num_bytes;
  if (data != nullptr) j["data"] = to_hex(data, num_bytes);
  return j;
}

// Non-UTF-8 strings (legal in a GGUF file) are replaced rather than aborting the dump.
inline std::string dump_json(const nlohmann::json& j) {
  return j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace pagoda::tools
