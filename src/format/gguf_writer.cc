#include "format/gguf_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/checked.h"
#include "core/error.h"

namespace pagoda {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" as a little-endian uint32
constexpr uint32_t kVersion = 3;
constexpr uint32_t kMaxDims = 4;
constexpr int kMaxArrayDepth = 8;         // the reader refuses deeper nesting
constexpr size_t kMaxTensorName = 63;     // llama.cpp refuses names of GGML_MAX_NAME (64) or more
constexpr uint64_t kMaxAlignment = uint64_t{1} << 30;
constexpr size_t kBufferSize = size_t{1} << 20;

bool is_unsigned_type(GgufType t) {
  return t == GgufType::kUint8 || t == GgufType::kUint16 || t == GgufType::kUint32 ||
         t == GgufType::kUint64;
}

bool is_signed_type(GgufType t) {
  return t == GgufType::kInt8 || t == GgufType::kInt16 || t == GgufType::kInt32 ||
         t == GgufType::kInt64;
}

uint64_t max_unsigned(GgufType t) {
  switch (t) {
    case GgufType::kUint8: return UINT8_MAX;
    case GgufType::kUint16: return UINT16_MAX;
    case GgufType::kUint32: return UINT32_MAX;
    default: return UINT64_MAX;
  }
}

int64_t max_signed(GgufType t) {
  switch (t) {
    case GgufType::kInt8: return INT8_MAX;
    case GgufType::kInt16: return INT16_MAX;
    case GgufType::kInt32: return INT32_MAX;
    default: return INT64_MAX;
  }
}

bool valid_type(GgufType t) {
  return static_cast<uint32_t>(t) <= static_cast<uint32_t>(GgufType::kFloat64);
}

// Checks a value built by hand (add_value) so that the file is one the reader accepts; `what`
// names the key in errors.
void check_value(const GgufValue& v, const std::string& what, int depth) {
  if (!valid_type(v.type)) fail(what, ": unknown value type ", static_cast<uint32_t>(v.type));
  if (is_unsigned_type(v.type) && v.u > max_unsigned(v.type)) {
    fail(what, ": value ", v.u, " does not fit in ", gguf_type_name(v.type));
  }
  if (is_signed_type(v.type) && (v.i > max_signed(v.type) || v.i < -max_signed(v.type) - 1)) {
    fail(what, ": value ", v.i, " does not fit in ", gguf_type_name(v.type));
  }
  if (v.type == GgufType::kBool && v.u > 1) fail(what, ": bool value ", v.u, " is not 0 or 1");
  if (v.type != GgufType::kArray) return;
  if (depth >= kMaxArrayDepth) fail(what, ": arrays nested more than ", kMaxArrayDepth, " deep");
  if (!valid_type(v.elem_type)) {
    fail(what, ": unknown array element type ", static_cast<uint32_t>(v.elem_type));
  }
  for (size_t k = 0; k < v.array.size(); ++k) {
    const GgufValue& item = v.array[k];
    if (item.type != v.elem_type) {
      fail(what, ": array item ", k, " has type ", gguf_type_name(item.type), ", expected ",
           gguf_type_name(v.elem_type));
    }
    check_value(item, what, depth + 1);
  }
}

// The output file: a temporary beside the destination, buffered, renamed over the destination
// by commit(). Destroying it uncommitted removes the temporary, so an exception anywhere in
// write() (a full disk, a throwing producer) leaves no partial file behind.
class TempFileOut {
 public:
  explicit TempFileOut(const std::string& path) : path_(path) {
    static std::atomic<uint64_t> counter{0};
    uint64_t stamp = static_cast<uint64_t>(
        std::chrono::steady_clock::now().time_since_epoch().count());
    for (int attempt = 0; fd_ < 0; ++attempt) {
      temp_path_ = str_cat(path, ".tmp.", ::getpid(), ".", stamp, ".", counter++);
      // 0666 so the finished file gets the usual permissions under the process umask.
      fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd_ < 0 && (errno != EEXIST || attempt >= 100)) {
        fail(path_, ": cannot create a temporary file to write: ", std::strerror(errno));
      }
    }
    buffer_.reserve(kBufferSize);
  }

  ~TempFileOut() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(temp_path_.c_str());
  }

  TempFileOut(const TempFileOut&) = delete;
  TempFileOut& operator=(const TempFileOut&) = delete;

  uint64_t pos() const { return pos_; }

  void write(const void* data, uint64_t size) {
    const auto* p = static_cast<const uint8_t*>(data);
    pos_ += size;
    if (buffer_.size() + size <= kBufferSize) {
      buffer_.insert(buffer_.end(), p, p + size);
      return;
    }
    flush();
    if (size < kBufferSize) {
      buffer_.insert(buffer_.end(), p, p + size);
    } else {
      write_fd(p, size);  // large tensor data goes straight to the file, without a copy
    }
  }

  template <typename T>
  void put(T v) {
    write(&v, sizeof(T));
  }

  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    write(s.data(), s.size());
  }

  void pad_to(uint64_t alignment) {
    static const uint8_t kZeros[256] = {};
    uint64_t pad = (alignment - pos_ % alignment) % alignment;
    while (pad > 0) {
      uint64_t n = std::min<uint64_t>(pad, sizeof(kZeros));
      write(kZeros, n);
      pad -= n;
    }
  }

  void commit() {
    flush();
    // fsync before rename: otherwise a crash soon after could leave the new name pointing at
    // a file whose data never reached the disk.
    if (::fsync(fd_) != 0) fail(path_, ": cannot write: ", std::strerror(errno));
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) fail(path_, ": cannot write: ", std::strerror(errno));
    if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
      fail(path_, ": cannot rename the finished temporary file into place: ",
           std::strerror(errno));
    }
    committed_ = true;
  }

 private:
  void flush() {
    write_fd(buffer_.data(), buffer_.size());
    buffer_.clear();
  }

  void write_fd(const uint8_t* p, uint64_t size) {
    while (size > 0) {
      ssize_t n = ::write(fd_, p, std::min<uint64_t>(size, uint64_t{1} << 30));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail(path_, ": cannot write: ", n < 0 ? std::strerror(errno) : "no progress");
      p += n;
      size -= static_cast<uint64_t>(n);
    }
  }

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  bool committed_ = false;
  uint64_t pos_ = 0;
  std::vector<uint8_t> buffer_;
};

void put_value(TempFileOut& out, const GgufValue& v) {
  switch (v.type) {
    case GgufType::kUint8: out.put<uint8_t>(static_cast<uint8_t>(v.u)); break;
    case GgufType::kInt8: out.put<int8_t>(static_cast<int8_t>(v.i)); break;
    case GgufType::kUint16: out.put<uint16_t>(static_cast<uint16_t>(v.u)); break;
    case GgufType::kInt16: out.put<int16_t>(static_cast<int16_t>(v.i)); break;
    case GgufType::kUint32: out.put<uint32_t>(static_cast<uint32_t>(v.u)); break;
    case GgufType::kInt32: out.put<int32_t>(static_cast<int32_t>(v.i)); break;
    case GgufType::kUint64: out.put<uint64_t>(v.u); break;
    case GgufType::kInt64: out.put<int64_t>(v.i); break;
    case GgufType::kFloat32: out.put<float>(static_cast<float>(v.f)); break;
    case GgufType::kFloat64: out.put<double>(v.f); break;
    case GgufType::kBool: out.put<uint8_t>(v.u != 0 ? 1 : 0); break;
    case GgufType::kString: out.put_string(v.s); break;
    case GgufType::kArray:
      out.put<uint32_t>(static_cast<uint32_t>(v.elem_type));
      out.put<uint64_t>(v.array.size());
      for (const auto& item : v.array) put_value(out, item);
      break;
  }
}

// Counts what a producer hands over, so a wrong size is caught before it corrupts the layout.
class CountingSink final : public GgufWriter::Sink {
 public:
  CountingSink(TempFileOut& out, const std::string& path, const std::string& tensor,
               uint64_t expected)
      : out_(out), path_(path), tensor_(tensor), left_(expected), expected_(expected) {}

  void write(const void* data, uint64_t size) override {
    if (size > left_) {
      fail(path_, ": tensor '", tensor_, "': the producer gave more than the ", expected_,
           " bytes its shape and type need");
    }
    out_.write(data, size);
    left_ -= size;
  }

  void finish() const {
    if (left_ != 0) {
      fail(path_, ": tensor '", tensor_, "': the producer gave ", expected_ - left_, " of the ",
           expected_, " bytes its shape and type need");
    }
  }

 private:
  TempFileOut& out_;
  const std::string& path_;
  const std::string& tensor_;
  uint64_t left_;
  uint64_t expected_;
};

}  // namespace

GgufValue GgufWriter::make_uint(GgufType type, uint64_t value) {
  if (!is_unsigned_type(type)) fail("GGUF value: ", gguf_type_name(type), " is not unsigned");
  GgufValue v;
  v.type = type;
  v.u = value;
  check_value(v, "GGUF value", 0);
  return v;
}

GgufValue GgufWriter::make_int(GgufType type, int64_t value) {
  if (!is_signed_type(type)) fail("GGUF value: ", gguf_type_name(type), " is not signed");
  GgufValue v;
  v.type = type;
  v.i = value;
  check_value(v, "GGUF value", 0);
  return v;
}

GgufValue GgufWriter::make_float(GgufType type, double value) {
  if (type != GgufType::kFloat32 && type != GgufType::kFloat64) {
    fail("GGUF value: ", gguf_type_name(type), " is not a float type");
  }
  GgufValue v;
  v.type = type;
  // Stored rounded, so that what the writer holds equals what a reader gets back.
  v.f = type == GgufType::kFloat32 ? static_cast<double>(static_cast<float>(value)) : value;
  return v;
}

GgufValue GgufWriter::make_bool(bool value) {
  GgufValue v;
  v.type = GgufType::kBool;
  v.u = value ? 1 : 0;
  return v;
}

GgufValue GgufWriter::make_string(std::string value) {
  GgufValue v;
  v.type = GgufType::kString;
  v.s = std::move(value);
  return v;
}

GgufValue GgufWriter::make_array(GgufType elem_type, std::vector<GgufValue> items) {
  GgufValue v;
  v.type = GgufType::kArray;
  v.elem_type = elem_type;
  v.array = std::move(items);
  check_value(v, "GGUF array", 0);
  return v;
}

void GgufWriter::insert(std::string key, GgufValue value, bool replace) {
  if (key.empty()) fail("GGUF metadata: empty key");
  std::string what = str_cat("GGUF metadata key '", key, "'");
  check_value(value, what, 0);
  if (key == "general.alignment") {
    // uint32 only: pagoda reads any integer type, but llama.cpp and gguf-py insist on uint32.
    if (value.type != GgufType::kUint32) {
      fail(what, ": must be uint32, got ", gguf_type_name(value.type));
    }
    uint64_t a = value.u;
    if (a == 0 || (a & (a - 1)) != 0 || a > kMaxAlignment) {
      fail(what, ": alignment must be a power of two from 1 to 2^30, got ", a);
    }
  }
  auto it = metadata_index_.find(key);
  if (it != metadata_index_.end()) {
    if (!replace) fail(what, ": added twice");
    metadata_[it->second].second = std::move(value);
    return;
  }
  metadata_index_.emplace(key, metadata_.size());
  metadata_.emplace_back(std::move(key), std::move(value));
}

void GgufWriter::add_value(std::string key, GgufValue value) {
  insert(std::move(key), std::move(value), false);
}
void GgufWriter::set_value(std::string key, GgufValue value) {
  insert(std::move(key), std::move(value), true);
}

void GgufWriter::add_u8(std::string key, uint8_t v) {
  add_value(std::move(key), make_uint(GgufType::kUint8, v));
}
void GgufWriter::add_i8(std::string key, int8_t v) {
  add_value(std::move(key), make_int(GgufType::kInt8, v));
}
void GgufWriter::add_u16(std::string key, uint16_t v) {
  add_value(std::move(key), make_uint(GgufType::kUint16, v));
}
void GgufWriter::add_i16(std::string key, int16_t v) {
  add_value(std::move(key), make_int(GgufType::kInt16, v));
}
void GgufWriter::add_u32(std::string key, uint32_t v) {
  add_value(std::move(key), make_uint(GgufType::kUint32, v));
}
void GgufWriter::add_i32(std::string key, int32_t v) {
  add_value(std::move(key), make_int(GgufType::kInt32, v));
}
void GgufWriter::add_u64(std::string key, uint64_t v) {
  add_value(std::move(key), make_uint(GgufType::kUint64, v));
}
void GgufWriter::add_i64(std::string key, int64_t v) {
  add_value(std::move(key), make_int(GgufType::kInt64, v));
}
void GgufWriter::add_f32(std::string key, float v) {
  add_value(std::move(key), make_float(GgufType::kFloat32, v));
}
void GgufWriter::add_f64(std::string key, double v) {
  add_value(std::move(key), make_float(GgufType::kFloat64, v));
}
void GgufWriter::add_bool(std::string key, bool v) { add_value(std::move(key), make_bool(v)); }
void GgufWriter::add_string(std::string key, std::string v) {
  add_value(std::move(key), make_string(std::move(v)));
}

void GgufWriter::add_string_array(std::string key, const std::vector<std::string>& v) {
  std::vector<GgufValue> items;
  items.reserve(v.size());
  for (const auto& s : v) items.push_back(make_string(s));
  add_value(std::move(key), make_array(GgufType::kString, std::move(items)));
}

void GgufWriter::add_f32_array(std::string key, const std::vector<float>& v) {
  std::vector<GgufValue> items;
  items.reserve(v.size());
  for (float x : v) items.push_back(make_float(GgufType::kFloat32, x));
  add_value(std::move(key), make_array(GgufType::kFloat32, std::move(items)));
}

void GgufWriter::add_i32_array(std::string key, const std::vector<int32_t>& v) {
  std::vector<GgufValue> items;
  items.reserve(v.size());
  for (int32_t x : v) items.push_back(make_int(GgufType::kInt32, x));
  add_value(std::move(key), make_array(GgufType::kInt32, std::move(items)));
}

void GgufWriter::add_u32_array(std::string key, const std::vector<uint32_t>& v) {
  std::vector<GgufValue> items;
  items.reserve(v.size());
  for (uint32_t x : v) items.push_back(make_uint(GgufType::kUint32, x));
  add_value(std::move(key), make_array(GgufType::kUint32, std::move(items)));
}

void GgufWriter::add_i64_array(std::string key, const std::vector<int64_t>& v) {
  std::vector<GgufValue> items;
  items.reserve(v.size());
  for (int64_t x : v) items.push_back(make_int(GgufType::kInt64, x));
  add_value(std::move(key), make_array(GgufType::kInt64, std::move(items)));
}

void GgufWriter::set_alignment(uint64_t alignment) {
  if (alignment > UINT32_MAX) {
    fail("GGUF metadata key 'general.alignment': alignment must be a power of two from 1 to "
         "2^30, got ", alignment);
  }
  set_value("general.alignment", make_uint(GgufType::kUint32, alignment));
}

uint64_t GgufWriter::alignment() const {
  auto it = metadata_index_.find("general.alignment");
  if (it == metadata_index_.end()) return kDefaultAlignment;
  return metadata_[it->second].second.u;  // a valid uint32: checked by insert()
}

GgufWriter::Tensor& GgufWriter::new_tensor(std::string name, DType type,
                                           std::vector<uint64_t> shape, uint64_t size) {
  std::string what = str_cat("GGUF tensor '", name, "'");
  if (name.empty()) fail("GGUF tensor: empty name");
  if (name.size() > kMaxTensorName) {
    fail(what, ": name is ", name.size(), " bytes long (at most ", kMaxTensorName, ")");
  }
  if (tensor_index_.count(name) != 0) fail(what, ": added twice");
  const DTypeTraits& traits = dtype_traits(type);
  if (shape.empty() || shape.size() > kMaxDims) {
    fail(what, ": has ", shape.size(), " dimensions (must be 1 to ", kMaxDims, ")");
  }
  uint64_t count = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) fail(what, ": dimension ", d, " is zero");
    auto prod = checked_mul(count, shape[d]);
    if (!prod || *prod > (uint64_t{1} << 62)) fail(what, ": shape product overflows");
    count = *prod;
  }
  if (shape[0] % traits.block_size != 0) {
    fail(what, ": row length ", shape[0], " is not a multiple of the ", traits.name,
         " block size ", traits.block_size);
  }
  auto num_bytes = checked_mul(count / traits.block_size, traits.type_size);
  if (!num_bytes) fail(what, ": byte size overflows");
  if (size != *num_bytes) {
    fail(what, ": has ", size, " bytes, but ", traits.name, " with ", count, " elements needs ",
         *num_bytes);
  }
  tensor_index_.emplace(name, tensors_.size());
  Tensor& t = tensors_.emplace_back();
  t.name = std::move(name);
  t.type = type;
  t.shape = std::move(shape);
  t.num_bytes = size;
  return t;
}

void GgufWriter::add_tensor(std::string name, DType type, std::vector<uint64_t> shape,
                            const void* data, uint64_t size) {
  if (data == nullptr) fail("GGUF tensor '", name, "': no data");
  new_tensor(std::move(name), type, std::move(shape), size).data =
      static_cast<const uint8_t*>(data);
}

void GgufWriter::add_tensor(std::string name, DType type, std::vector<uint64_t> shape,
                            std::vector<uint8_t> bytes) {
  uint64_t size = bytes.size();
  new_tensor(std::move(name), type, std::move(shape), size).owned = std::move(bytes);
}

void GgufWriter::add_tensor(std::string name, DType type, std::vector<uint64_t> shape,
                            Producer producer) {
  if (!producer) fail("GGUF tensor '", name, "': no producer");
  // The size is checked against what the producer actually gives during write().
  const DTypeTraits& traits = dtype_traits(type);
  uint64_t count = 1;
  bool ok = !shape.empty() && shape.size() <= kMaxDims;
  for (uint64_t ne : shape) {
    auto prod = checked_mul(count, ne);
    ok = ok && prod.has_value();
    count = prod.value_or(0);
  }
  auto size = checked_mul(count / traits.block_size, traits.type_size);
  // When the shape is bad, new_tensor reports what is wrong with it.
  new_tensor(std::move(name), type, std::move(shape), ok && size ? *size : 0).producer =
      std::move(producer);
}

void GgufWriter::write(const std::string& path) const {
  const uint64_t align = alignment();
  std::vector<uint64_t> offsets;
  offsets.reserve(tensors_.size());
  uint64_t end = 0;
  for (const Tensor& t : tensors_) {
    offsets.push_back(end);
    auto next = checked_add(end, t.num_bytes);
    next = next ? checked_align(*next, align) : std::nullopt;
    if (!next) fail(path, ": tensor data size overflows");
    end = *next;
  }

  TempFileOut out(path);
  out.put<uint32_t>(kMagic);
  out.put<uint32_t>(kVersion);
  out.put<uint64_t>(tensors_.size());
  out.put<uint64_t>(metadata_.size());
  for (const auto& [key, value] : metadata_) {
    out.put_string(key);
    out.put<uint32_t>(static_cast<uint32_t>(value.type));
    put_value(out, value);
  }
  for (size_t k = 0; k < tensors_.size(); ++k) {
    const Tensor& t = tensors_[k];
    out.put_string(t.name);
    out.put<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (uint64_t ne : t.shape) out.put<uint64_t>(ne);
    out.put<uint32_t>(static_cast<uint32_t>(t.type));
    out.put<uint64_t>(offsets[k]);
  }
  out.pad_to(align);
  const uint64_t data_start = out.pos();
  for (size_t k = 0; k < tensors_.size(); ++k) {
    const Tensor& t = tensors_[k];
    PAGODA_CHECK(out.pos() - data_start == offsets[k]);
    if (t.producer) {
      CountingSink sink(out, path, t.name, t.num_bytes);
      t.producer(sink);
      sink.finish();
    } else {
      out.write(t.owned.empty() ? t.data : t.owned.data(), t.num_bytes);
    }
    // Padding after every tensor, the last included, as llama.cpp and gguf-py do.
    out.pad_to(align);
  }
  out.commit();
}

}  // namespace pagoda
