#include "format/safetensors.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/checked.h"
#include "core/error.h"
#include "format/hf_tokenizer.h"

namespace pagoda {
namespace {

using nlohmann::json;

// ggml tensors have at most four dimensions; a little headroom for files that are only
// inspected, while refusing shapes of absurd rank.
constexpr size_t kMaxDims = 8;
// root object -> tensor object -> shape array; anything deeper is not a safetensors header.
constexpr int kMaxHeaderDepth = 4;

// Names come from the file: keep control bytes out of the one-line error and bound its length.
std::string printable(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < 200; ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      out += str_cat("\\x", "0123456789abcdef"[c >> 4], "0123456789abcdef"[c & 15]);
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > 200) out += "...";
  return out;
}

const char* json_kind(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a bool";
  if (v.is_number_float()) return "a float";
  if (v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() < 0) {
    return "a negative integer";
  }
  if (v.is_number()) return "an integer";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

std::optional<uint64_t> as_u64(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0)
    return static_cast<uint64_t>(v.get<int64_t>());
  return std::nullopt;
}

uint64_t read_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

DType dtype_from_safetensors(std::string_view dtype, const std::string& where) {
  static constexpr std::pair<std::string_view, DType> kMap[] = {
      {"F64", DType::kF64}, {"F32", DType::kF32}, {"F16", DType::kF16}, {"BF16", DType::kBF16},
      {"I64", DType::kI64}, {"I32", DType::kI32}, {"I16", DType::kI16}, {"I8", DType::kI8},
  };
  for (const auto& [name, type] : kMap) {
    if (dtype == name) return type;
  }
  // Types the format defines but pagoda has no DType for (unsigned integers would be
  // misread as signed, and the float8/float4 formats have no kernels).
  static constexpr std::string_view kKnown[] = {"U8",      "U16",     "U32",     "U64",
                                                "BOOL",    "F8_E4M3", "F8_E5M2", "F8_E8M0",
                                                "F6_E2M3", "F6_E3M2", "F4",      "C64"};
  for (auto known : kKnown) {
    if (dtype == known) {
      fail(where, ": dtype '", dtype,
           "' is not supported (supported: F64, F32, F16, BF16, I64, I32, I16, I8)");
    }
  }
  fail(where, ": unknown dtype '", printable(dtype), "'");
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  auto file = std::make_unique<MappedFile>(path);
  std::unique_ptr<SafetensorsFile> s(new SafetensorsFile());
  s->name_ = path;
  s->parse_all(file->data(), file->size());
  s->file_ = std::move(file);
  return s;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::parse(const uint8_t* data, uint64_t size,
                                                        std::string name) {
  std::unique_ptr<SafetensorsFile> s(new SafetensorsFile());
  s->name_ = std::move(name);
  s->parse_all(data, size);
  return s;
}

void SafetensorsFile::parse_all(const uint8_t* data, uint64_t size) {
  size_ = size;
  if (size < 8) {
    fail(name_, ": the ", size, "-byte file is too short to hold the 8-byte header length");
  }
  header_size_ = read_le64(data);
  if (header_size_ > size - 8) {
    fail(name_, ": header length ", header_size_, " runs past the end of the ", size,
         "-byte file (truncated, or not a safetensors file?)");
  }
  if (header_size_ > kMaxHeaderBytes) {
    fail(name_, ": header length ", header_size_, " is over the limit of ", kMaxHeaderBytes,
         " bytes");
  }
  std::string_view text(reinterpret_cast<const char*>(data + 8), header_size_);
  json header = parse_json(text, name_ + ": header", kMaxHeaderDepth);
  if (!header.is_object()) fail(name_, ": header is ", json_kind(header), ", not a JSON object");

  const uint64_t data_size = size - 8 - header_size_;
  const uint8_t* data_start = data + 8 + header_size_;
  tensors_.reserve(header.size());
  for (const auto& [key, entry] : header.items()) {
    if (key == "__metadata__") {
      if (!entry.is_object())
        fail(name_, ": '__metadata__' is ", json_kind(entry), ", not an object");
      for (const auto& [mk, mv] : entry.items()) {
        if (!mv.is_string()) {
          fail(name_, ": '__metadata__' key '", printable(mk), "' is ", json_kind(mv),
               ", not a string");
        }
        metadata_.emplace_back(mk, mv.get<std::string>());
      }
      continue;
    }
    const std::string where = str_cat(name_, ": tensor '", printable(key), "'");
    if (!entry.is_object()) fail(where, ": entry is ", json_kind(entry), ", not an object");
    SafetensorsTensorInfo t;
    t.name = key;

    auto dtype = entry.find("dtype");
    if (dtype == entry.end()) fail(where, ": missing 'dtype'");
    if (!dtype->is_string()) fail(where, ": 'dtype' is ", json_kind(*dtype), ", not a string");
    t.type = dtype_from_safetensors(dtype->get_ref<const std::string&>(), where);
    const uint64_t elem_size = dtype_traits(t.type).type_size;  // every mapped type has block 1

    auto shape = entry.find("shape");
    if (shape == entry.end()) fail(where, ": missing 'shape'");
    if (!shape->is_array()) fail(where, ": 'shape' is ", json_kind(*shape), ", not an array");
    if (shape->size() > kMaxDims) {
      fail(where, ": shape has ", shape->size(), " dimensions (at most ", kMaxDims, ")");
    }
    uint64_t count = 1;  // a scalar (shape []) holds one element
    for (const json& d : *shape) {
      auto dim = as_u64(d);
      if (!dim) fail(where, ": shape entry is ", json_kind(d), ", not a non-negative integer");
      auto prod = checked_mul(count, *dim);
      if (!prod) fail(where, ": shape product overflows");
      count = *prod;
      t.shape.push_back(*dim);
    }
    std::reverse(t.shape.begin(), t.shape.end());  // to ggml order, innermost first
    auto bytes = checked_mul(count, elem_size);
    if (!bytes) fail(where, ": shape product overflows");
    t.num_elements = count;
    t.num_bytes = *bytes;

    auto offsets = entry.find("data_offsets");
    if (offsets == entry.end()) fail(where, ": missing 'data_offsets'");
    if (!offsets->is_array() || offsets->size() != 2) {
      fail(where, ": 'data_offsets' must be an array of two integers [begin, end]");
    }
    auto begin = as_u64((*offsets)[0]);
    auto end = as_u64((*offsets)[1]);
    if (!begin || !end) fail(where, ": 'data_offsets' must hold two non-negative integers");
    if (*end < *begin) fail(where, ": data_offsets end ", *end, " is before begin ", *begin);
    if (*end > data_size) {
      fail(where, ": data_offsets end ", *end, " runs past the end of the ", data_size,
           "-byte data section");
    }
    if (*end - *begin != t.num_bytes) {
      fail(where, ": data_offsets span ", *end - *begin, " bytes but ", count, " ",
           dtype_traits(t.type).name, " elements need ", t.num_bytes);
    }
    t.offset = *begin;
    t.data = data_start + *begin;
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  // Identical ranges are shared storage (tied weights); a partial overlap means a corrupt or
  // forged header, since no writer produces one.
  std::vector<size_t> order;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (tensors_[i].num_bytes > 0) order.push_back(i);
  }
  auto range = [&](size_t i) {
    return std::pair(tensors_[i].offset, tensors_[i].offset + tensors_[i].num_bytes);
  };
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return range(a) < range(b); });
  size_t furthest = 0;  // among the tensors seen so far, the one whose bytes end last
  for (size_t k = 1; k < order.size(); ++k) {
    size_t prev = order[k - 1], cur = order[k];
    if (range(prev).second > range(order[furthest]).second) furthest = k - 1;
    if (range(cur) == range(prev)) continue;
    if (range(cur).first < range(order[furthest]).second) {
      const auto& other = tensors_[order[furthest]];
      fail(name_, ": tensor '", printable(tensors_[cur].name), "': bytes [", range(cur).first, ", ",
           range(cur).second, ") overlap tensor '", printable(other.name), "' [", other.offset,
           ", ", other.offset + other.num_bytes, ")");
    }
  }

  // torch's save_model drops one of two shared tensors and records {"dropped": "kept"} in the
  // metadata; restoring the dropped name lets loaders ask for either.
  const size_t num_stored = tensors_.size();
  for (const auto& [alias, target] : metadata_) {
    if (tensor_index_.count(alias)) continue;
    auto it = tensor_index_.find(target);
    if (it == tensor_index_.end() || it->second >= num_stored) continue;
    SafetensorsTensorInfo t = tensors_[it->second];
    t.name = alias;
    t.alias_of = target;
    tensor_index_.emplace(alias, tensors_.size());
    tensors_.push_back(std::move(t));
  }
}

const SafetensorsTensorInfo* SafetensorsFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace pagoda
