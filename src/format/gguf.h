// GGUF reader (versions 2 and 3). The file is untrusted: every count, length, shape product and
// offset is checked against the file size before it is used, and any problem is reported as one
// Error naming the file, the field and what is wrong.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"

namespace pagoda {

enum class GgufType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6,
  kBool = 7, kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};

std::string_view gguf_type_name(GgufType type);

// One metadata value. Scalars live in exactly one of u (unsigned and bool), i (signed) or f.
struct GgufValue {
  GgufType type = GgufType::kUint8;
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0;
  std::string s;
  GgufType elem_type = GgufType::kUint8;  // arrays only
  std::vector<GgufValue> array;           // arrays only

  bool is_unsigned() const;
  bool is_signed() const;
  bool is_float() const { return type == GgufType::kFloat32 || type == GgufType::kFloat64; }
  // Short human rendering for `inspect`; arrays show at most `max_items` items.
  std::string to_string(size_t max_items = 8) const;
};

struct GgufTensorInfo {
  std::string name;
  DType type = DType::kF32;
  std::vector<uint64_t> shape;  // ggml order: shape[0] is the innermost (contiguous) dimension
  uint64_t offset = 0;          // relative to the start of the data section
  uint64_t num_elements = 0;
  uint64_t num_bytes = 0;
  const uint8_t* data = nullptr;  // points into the mapped file
};

class GgufFile {
 public:
  // Maps and parses a file; throws Error naming the path on any problem.
  static std::unique_ptr<GgufFile> open(const std::string& path);
  // Parses bytes the caller keeps alive (fuzzing, tests). `name` is used in errors.
  static std::unique_ptr<GgufFile> parse(const uint8_t* data, uint64_t size, std::string name);

  const std::string& name() const { return name_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return size_; }

  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed accessors. A missing key or one of another type throws an Error naming the key.
  // Integer getters accept any integer type whose value fits.
  std::string get_string(std::string_view key) const;
  uint64_t get_u64(std::string_view key) const;
  uint32_t get_u32(std::string_view key) const;
  int64_t get_i64(std::string_view key) const;
  double get_f64(std::string_view key) const;  // any float or integer type
  float get_f32(std::string_view key) const { return static_cast<float>(get_f64(key)); }
  bool get_bool(std::string_view key) const;
  std::vector<std::string> get_string_array(std::string_view key) const;
  std::vector<float> get_f32_array(std::string_view key) const;
  std::vector<int64_t> get_int_array(std::string_view key) const;

  // Optional forms: nullopt when absent, Error when present with the wrong type.
  std::optional<std::string> try_string(std::string_view key) const;
  std::optional<uint64_t> try_u64(std::string_view key) const;
  std::optional<double> try_f64(std::string_view key) const;
  std::optional<bool> try_bool(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;

 private:
  GgufFile() = default;
  void parse_all(const uint8_t* data, uint64_t size);
  const GgufValue& require(std::string_view key) const;
  [[noreturn]] void type_error(std::string_view key, const GgufValue& v, const char* want) const;

  std::unique_ptr<MappedFile> file_;
  std::string name_;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::unordered_map<std::string, size_t> metadata_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace pagoda
