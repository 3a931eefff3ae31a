#include "format/gguf.h"

#include <cstring>
#include <sstream>

#include "core/checked.h"
#include "core/error.h"

namespace pagoda {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian uint32
constexpr uint32_t kMaxDims = 4;         // ggml tensors have at most four dimensions
constexpr int kMaxArrayDepth = 8;        // nested arrays deeper than this are refused
// Every array item becomes a ~100-byte GgufValue, so a file of N bytes could otherwise cost
// 100 x N of memory (a 1 GB file, 100 GB). Real vocabularies hold under a million items.
constexpr uint64_t kMaxArrayItems = uint64_t{1} << 24;

// Size in bytes of a scalar type; 0 for string and array (variable size).
uint64_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::kUint8: case GgufType::kInt8: case GgufType::kBool: return 1;
    case GgufType::kUint16: case GgufType::kInt16: return 2;
    case GgufType::kUint32: case GgufType::kInt32: case GgufType::kFloat32: return 4;
    case GgufType::kUint64: case GgufType::kInt64: case GgufType::kFloat64: return 8;
    case GgufType::kString: case GgufType::kArray: return 0;
  }
  return 0;
}

bool valid_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kFloat64); }

// Bounds-checked little-endian reader over the file bytes. Every read names the field it is
// for, so an error says exactly where the file went wrong.
class Cursor {
 public:
  Cursor(const uint8_t* data, uint64_t size, const std::string& name)
      : data_(data), size_(size), name_(name) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }
  // Counts `n` more array items against the kMaxArrayItems budget of the whole file.
  void take_array_items(uint64_t n, const std::string& field) {
    if (n > kMaxArrayItems - num_array_items_) {
      error(field, str_cat("array length ", n, " takes the file past the limit of ",
                           kMaxArrayItems, " array items in all"));
    }
    num_array_items_ += n;
  }

  [[noreturn]] void error(const std::string& field, const std::string& problem) const {
    fail(name_, ": ", field, ": ", problem);
  }

  void need(uint64_t n, const std::string& field) const {
    if (n > remaining()) {
      error(field, str_cat("needs ", n, " bytes at offset ", pos_, " but the file has only ",
                           remaining(), " left (truncated?)"));
    }
  }

  template <typename T>
  T read(const std::string& field) {
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(const std::string& field) {
    uint64_t len = read<uint64_t>(field + " (string length)");
    if (len > remaining()) {
      error(field, str_cat("string length ", len, " runs past the end of the file (", remaining(),
                           " bytes left)"));
    }
    std::string s(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return s;
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  uint64_t num_array_items_ = 0;
  const std::string& name_;
};

GgufValue read_value(Cursor& c, GgufType type, const std::string& field, int depth);

void read_array(Cursor& c, GgufValue& v, const std::string& field, int depth) {
  if (depth >= kMaxArrayDepth) c.error(field, "arrays nested too deeply");
  uint32_t et = c.read<uint32_t>(field + " (array element type)");
  if (!valid_type(et)) c.error(field, str_cat("unknown array element type ", et));
  v.elem_type = static_cast<GgufType>(et);
  uint64_t n = c.read<uint64_t>(field + " (array length)");
  // The smallest encoding of one element bounds how many the rest of the file can hold.
  uint64_t min_size = scalar_size(v.elem_type);
  if (v.elem_type == GgufType::kString) min_size = 8;
  if (v.elem_type == GgufType::kArray) min_size = 12;
  if (n > c.remaining() / min_size) {
    c.error(field, str_cat("array length ", n, " cannot fit in the ", c.remaining(),
                           " bytes left in the file"));
  }
  c.take_array_items(n, field);
  v.array.reserve(n);
  for (uint64_t k = 0; k < n; ++k) {
    v.array.push_back(read_value(c, v.elem_type, field, depth + 1));
  }
}

GgufValue read_value(Cursor& c, GgufType type, const std::string& field, int depth) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufType::kUint8: v.u = c.read<uint8_t>(field); break;
    case GgufType::kInt8: v.i = c.read<int8_t>(field); break;
    case GgufType::kUint16: v.u = c.read<uint16_t>(field); break;
    case GgufType::kInt16: v.i = c.read<int16_t>(field); break;
    case GgufType::kUint32: v.u = c.read<uint32_t>(field); break;
    case GgufType::kInt32: v.i = c.read<int32_t>(field); break;
    case GgufType::kUint64: v.u = c.read<uint64_t>(field); break;
    case GgufType::kInt64: v.i = c.read<int64_t>(field); break;
    case GgufType::kFloat32: v.f = c.read<float>(field); break;
    case GgufType::kFloat64: v.f = c.read<double>(field); break;
    case GgufType::kBool: {
      uint8_t b = c.read<uint8_t>(field);
      if (b > 1) c.error(field, str_cat("bool value ", int(b), " is neither 0 nor 1"));
      v.u = b;
      break;
    }
    case GgufType::kString: v.s = c.read_string(field); break;
    case GgufType::kArray: read_array(c, v, field, depth); break;
  }
  return v;
}

}  // namespace

std::string_view gguf_type_name(GgufType type) {
  static constexpr std::string_view kNames[] = {"uint8", "int8",   "uint16", "int16", "uint32",
                                                "int32", "float32", "bool",  "string", "array",
                                                "uint64", "int64", "float64"};
  auto i = static_cast<uint32_t>(type);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

bool GgufValue::is_unsigned() const {
  return type == GgufType::kUint8 || type == GgufType::kUint16 || type == GgufType::kUint32 ||
         type == GgufType::kUint64;
}

bool GgufValue::is_signed() const {
  return type == GgufType::kInt8 || type == GgufType::kInt16 || type == GgufType::kInt32 ||
         type == GgufType::kInt64;
}

std::string GgufValue::to_string(size_t max_items) const {
  std::ostringstream out;
  if (is_unsigned()) {
    out << u;
  } else if (is_signed()) {
    out << i;
  } else if (is_float()) {
    out << f;
  } else if (type == GgufType::kBool) {
    out << (u ? "true" : "false");
  } else if (type == GgufType::kString) {
    std::string shown = s.size() > 80 ? s.substr(0, 77) + "..." : s;
    for (char& ch : shown) {
      if (ch == '\n' || ch == '\r' || ch == '\t') ch = ' ';
    }
    out << '"' << shown << '"';
  } else {
    out << "[" << gguf_type_name(elem_type) << " x " << array.size() << "]";
    if (max_items > 0 && !array.empty()) {
      out << " ";
      for (size_t k = 0; k < array.size() && k < max_items; ++k) {
        out << (k ? ", " : "") << array[k].to_string(0);
      }
      if (array.size() > max_items) out << ", ...";
    }
  }
  return out.str();
}

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
  auto file = std::make_unique<MappedFile>(path);
  std::unique_ptr<GgufFile> g(new GgufFile());
  g->name_ = path;
  g->parse_all(file->data(), file->size());
  g->file_ = std::move(file);
  return g;
}

std::unique_ptr<GgufFile> GgufFile::parse(const uint8_t* data, uint64_t size, std::string name) {
  std::unique_ptr<GgufFile> g(new GgufFile());
  g->name_ = std::move(name);
  g->parse_all(data, size);
  return g;
}

void GgufFile::parse_all(const uint8_t* data, uint64_t size) {
  size_ = size;
  Cursor c(data, size, name_);
  if (size < 4 || c.read<uint32_t>("magic") != kMagic) {
    fail(name_, ": magic: not a GGUF file (it does not start with \"GGUF\")");
  }
  version_ = c.read<uint32_t>("version");
  if (version_ != 2 && version_ != 3) {
    c.error("version", str_cat("GGUF version ", version_, " is not supported (only 2 and 3)"));
  }
  uint64_t num_tensors = c.read<uint64_t>("tensor count");
  uint64_t num_kv = c.read<uint64_t>("metadata count");
  // A metadata entry takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor entry at
  // least 8 + 4 + 4 + 8. Counts that could not fit in the file are refused before any reserve.
  if (num_kv > c.remaining() / 13) {
    c.error("metadata count", str_cat(num_kv, " entries cannot fit in a ", size, "-byte file"));
  }
  if (num_tensors > c.remaining() / 24) {
    c.error("tensor count", str_cat(num_tensors, " tensors cannot fit in a ", size, "-byte file"));
  }

  metadata_.reserve(num_kv);
  for (uint64_t k = 0; k < num_kv; ++k) {
    std::string key = c.read_string(str_cat("metadata entry ", k, " key"));
    std::string field = str_cat("metadata key '", key, "'");
    uint32_t t = c.read<uint32_t>(field + " (type)");
    if (!valid_type(t)) c.error(field, str_cat("unknown value type ", t));
    GgufValue v = read_value(c, static_cast<GgufType>(t), field, 0);
    if (!metadata_index_.emplace(key, metadata_.size()).second) c.error(field, "appears twice");
    metadata_.emplace_back(std::move(key), std::move(v));
  }

  if (const GgufValue* a = find("general.alignment")) {
    if (!a->is_unsigned() && !a->is_signed()) {
      c.error("metadata key 'general.alignment'", "is not an integer");
    }
    uint64_t align = a->is_unsigned() ? a->u : static_cast<uint64_t>(a->i);
    if (align == 0 || (align & (align - 1)) != 0 || align > (1u << 30)) {
      // to_string, not `align`: a negative value would otherwise print as a huge number.
      c.error("metadata key 'general.alignment'",
              str_cat("alignment ", a->to_string(), " is not a power of two from 1 to 2^30"));
    }
    alignment_ = align;
  }

  tensors_.reserve(num_tensors);
  for (uint64_t k = 0; k < num_tensors; ++k) {
    GgufTensorInfo t;
    t.name = c.read_string(str_cat("tensor ", k, " name"));
    std::string field = str_cat("tensor '", t.name, "'");
    uint32_t n_dims = c.read<uint32_t>(field + " (dimension count)");
    if (n_dims == 0 || n_dims > kMaxDims) {
      c.error(field, str_cat("has ", n_dims, " dimensions (must be 1 to ", kMaxDims, ")"));
    }
    uint64_t count = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = c.read<uint64_t>(field + " (shape)");
      if (ne == 0) c.error(field, str_cat("dimension ", d, " is zero"));
      auto prod = checked_mul(count, ne);
      if (!prod || *prod > (uint64_t{1} << 62)) c.error(field, "shape product overflows");
      count = *prod;
      t.shape.push_back(ne);
    }
    uint32_t type = c.read<uint32_t>(field + " (type)");
    auto traits = dtype_traits(type);
    if (!traits) c.error(field, str_cat("unknown tensor type ", type));
    t.type = traits->type;
    if (t.shape[0] % traits->block_size != 0) {
      c.error(field, str_cat("row length ", t.shape[0], " is not a multiple of the ",
                             traits->name, " block size ", traits->block_size));
    }
    t.num_elements = count;
    // count < 2^62 alone does not bound the byte size: 2^62 F32 elements are 2^64 bytes.
    auto num_bytes = checked_mul(count / traits->block_size, traits->type_size);
    if (!num_bytes) c.error(field, "byte size overflows");
    t.num_bytes = *num_bytes;
    t.offset = c.read<uint64_t>(field + " (offset)");
    if (t.offset % alignment_ != 0) {
      c.error(field, str_cat("data offset ", t.offset, " is not a multiple of the alignment ",
                             alignment_));
    }
    if (!tensor_index_.emplace(t.name, tensors_.size()).second) c.error(field, "appears twice");
    tensors_.push_back(std::move(t));
  }

  auto start = checked_align(c.pos(), alignment_);
  if (!start) c.error("data section", "offset overflows");
  data_offset_ = *start;
  if (!tensors_.empty() && data_offset_ > size) {
    c.error("data section", str_cat("starts at ", data_offset_, ", past the end of the ", size,
                                    "-byte file"));
  }
  for (auto& t : tensors_) {
    auto begin = checked_add(data_offset_, t.offset);
    auto end = begin ? checked_add(*begin, t.num_bytes) : std::nullopt;
    if (!end || *end > size) {
      c.error(str_cat("tensor '", t.name, "'"),
              str_cat("data at offset ", t.offset, " (", t.num_bytes,
                      " bytes) runs past the end of the ", size, "-byte file"));
    }
    t.data = data + *begin;
  }
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = metadata_index_.find(std::string(key));
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufValue& GgufFile::require(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) fail(name_, ": metadata key '", key, "' is missing");
  return *v;
}

void GgufFile::type_error(std::string_view key, const GgufValue& v, const char* want) const {
  std::string have(gguf_type_name(v.type));
  if (v.type == GgufType::kArray) have = str_cat("array of ", gguf_type_name(v.elem_type));
  fail(name_, ": metadata key '", key, "' has type ", have, ", expected ", want);
}

std::string GgufFile::get_string(std::string_view key) const {
  const GgufValue& v = require(key);
  if (v.type != GgufType::kString) type_error(key, v, "string");
  return v.s;
}

uint64_t GgufFile::get_u64(std::string_view key) const {
  const GgufValue& v = require(key);
  if (v.is_unsigned()) return v.u;
  if (v.is_signed() && v.i >= 0) return static_cast<uint64_t>(v.i);
  if (v.is_signed()) fail(name_, ": metadata key '", key, "' is negative (", v.i, ")");
  type_error(key, v, "an unsigned integer");
}

uint32_t GgufFile::get_u32(std::string_view key) const {
  uint64_t x = get_u64(key);
  if (x > UINT32_MAX) fail(name_, ": metadata key '", key, "' value ", x, " is too large");
  return static_cast<uint32_t>(x);
}

int64_t GgufFile::get_i64(std::string_view key) const {
  const GgufValue& v = require(key);
  if (v.is_signed()) return v.i;
  if (v.is_unsigned() && v.u <= static_cast<uint64_t>(INT64_MAX)) return static_cast<int64_t>(v.u);
  type_error(key, v, "an integer");
}

double GgufFile::get_f64(std::string_view key) const {
  const GgufValue& v = require(key);
  if (v.is_float()) return v.f;
  if (v.is_unsigned()) return static_cast<double>(v.u);
  if (v.is_signed()) return static_cast<double>(v.i);
  type_error(key, v, "a number");
}

bool GgufFile::get_bool(std::string_view key) const {
  const GgufValue& v = require(key);
  if (v.type != GgufType::kBool) type_error(key, v, "bool");
  return v.u != 0;
}

std::vector<std::string> GgufFile::get_string_array(std::string_view key) const {
  const GgufValue& v = require(key);
  if (v.type != GgufType::kArray || v.elem_type != GgufType::kString) {
    type_error(key, v, "array of string");
  }
  std::vector<std::string> out;
  out.reserve(v.array.size());
  for (const auto& e : v.array) out.push_back(e.s);
  return out;
}

std::vector<float> GgufFile::get_f32_array(std::string_view key) const {
  const GgufValue& v = require(key);
  if (v.type != GgufType::kArray ||
      (v.elem_type != GgufType::kFloat32 && v.elem_type != GgufType::kFloat64)) {
    type_error(key, v, "array of float32");
  }
  std::vector<float> out;
  out.reserve(v.array.size());
  for (const auto& e : v.array) out.push_back(static_cast<float>(e.f));
  return out;
}

std::vector<int64_t> GgufFile::get_int_array(std::string_view key) const {
  const GgufValue& v = require(key);
  GgufValue probe;
  probe.type = v.elem_type;
  bool ok = v.type == GgufType::kArray && (probe.is_signed() || probe.is_unsigned());
  if (!ok) type_error(key, v, "array of integers");
  std::vector<int64_t> out;
  out.reserve(v.array.size());
  for (const auto& e : v.array) out.push_back(e.is_signed() ? e.i : static_cast<int64_t>(e.u));
  return out;
}

std::optional<std::string> GgufFile::try_string(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return get_string(key);
}

std::optional<uint64_t> GgufFile::try_u64(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return get_u64(key);
}

std::optional<double> GgufFile::try_f64(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return get_f64(key);
}

std::optional<bool> GgufFile::try_bool(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return get_bool(key);
}

}  // namespace pagoda
