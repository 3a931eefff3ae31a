// GGUF v3 writer. Metadata is kept in insertion order; tensor data is streamed to the file at
// write() time (from caller-owned memory, an owned buffer, or a callback), so a multi-GB model
// never has to be assembled in memory. Every file it writes is one GgufFile reads back: the same
// limits (1 to 4 dimensions, no zero dimension, rows a multiple of the block size, nesting depth)
// are checked when a value or tensor is added, with an Error naming the key or tensor.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "format/gguf.h"

namespace pagoda {

class GgufWriter {
 public:
  static constexpr uint64_t kDefaultAlignment = 32;

  // Receives one tensor's bytes, in as many pieces as the producer likes, during write().
  class Sink {
   public:
    virtual void write(const void* data, uint64_t size) = 0;

   protected:
    ~Sink() = default;
  };
  // Called once per write(); must hand the sink exactly the tensor's byte size.
  using Producer = std::function<void(Sink& sink)>;

  // Metadata. Every add_* throws an Error if the key is already present; set_value replaces a
  // value in place (keeping its position) or appends it, for copying a file's metadata and
  // overriding a few keys.
  void add_u8(std::string key, uint8_t v);
  void add_i8(std::string key, int8_t v);
  void add_u16(std::string key, uint16_t v);
  void add_i16(std::string key, int16_t v);
  void add_u32(std::string key, uint32_t v);
  void add_i32(std::string key, int32_t v);
  void add_u64(std::string key, uint64_t v);
  void add_i64(std::string key, int64_t v);
  void add_f32(std::string key, float v);
  void add_f64(std::string key, double v);
  void add_bool(std::string key, bool v);
  void add_string(std::string key, std::string v);
  void add_string_array(std::string key, const std::vector<std::string>& v);
  void add_f32_array(std::string key, const std::vector<float>& v);
  void add_i32_array(std::string key, const std::vector<int32_t>& v);
  void add_u32_array(std::string key, const std::vector<uint32_t>& v);
  void add_i64_array(std::string key, const std::vector<int64_t>& v);
  // Any value, including arrays of any element type and nested arrays (see the make_* helpers).
  void add_value(std::string key, GgufValue value);
  void set_value(std::string key, GgufValue value);
  bool has(std::string_view key) const { return metadata_index_.count(std::string(key)) != 0; }
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }

  // Sets `general.alignment` (uint32). A power of two from 1 to 2^30; the default is 32.
  void set_alignment(uint64_t alignment);
  uint64_t alignment() const;

  // Tensors, written in the order added. `shape` is in GGUF order (shape[0] innermost); the
  // byte size must equal num_elements / block_size * type_size of `type`.
  // `data` must stay valid and unchanged until write() returns.
  void add_tensor(std::string name, DType type, std::vector<uint64_t> shape, const void* data,
                  uint64_t size);
  void add_tensor(std::string name, DType type, std::vector<uint64_t> shape,
                  std::vector<uint8_t> bytes);
  void add_tensor(std::string name, DType type, std::vector<uint64_t> shape, Producer producer);
  size_t num_tensors() const { return tensors_.size(); }

  // Writes the file: to a temporary file beside `path`, renamed over `path` only once complete,
  // so a failure (disk full, a throwing producer) never leaves a partial file. Throws an Error
  // naming the path. May be called more than once.
  void write(const std::string& path) const;

  // Values for add_value / set_value. Each throws an Error when the value does not fit the type.
  static GgufValue make_uint(GgufType type, uint64_t value);  // uint8 .. uint64
  static GgufValue make_int(GgufType type, int64_t value);    // int8 .. int64
  static GgufValue make_float(GgufType type, double value);   // float32 or float64
  static GgufValue make_bool(bool value);
  static GgufValue make_string(std::string value);
  // Every item must have type `elem_type`; items may themselves be arrays (nested arrays).
  static GgufValue make_array(GgufType elem_type, std::vector<GgufValue> items);

 private:
  struct Tensor {
    std::string name;
    DType type;
    std::vector<uint64_t> shape;
    uint64_t num_bytes = 0;
    const uint8_t* data = nullptr;  // caller-owned bytes, or
    std::vector<uint8_t> owned;     // bytes handed over, or
    Producer producer;              // bytes made during write()
  };

  void insert(std::string key, GgufValue value, bool replace);
  Tensor& new_tensor(std::string name, DType type, std::vector<uint64_t> shape, uint64_t size);

  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::unordered_map<std::string, size_t> metadata_index_;
  std::vector<Tensor> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace pagoda
