// safetensors reader. Layout: an 8-byte little-endian header length N, N bytes of JSON header
// ({"name": {"dtype", "shape", "data_offsets"}, ..., "__metadata__": {string: string}}), then the
// data section that every data_offsets pair indexes. The file is untrusted: the header length,
// every shape product and every offset is checked with overflow-safe arithmetic before use, and
// any problem is one Error "<file>: tensor 'x': <problem>" (or "<file>: <problem>").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"

namespace pagoda {

// Mirrors GgufTensorInfo so code that walks tensors treats both formats alike.
struct SafetensorsTensorInfo {
  std::string name;
  DType type = DType::kF32;
  // GGUF (ggml) order: shape[0] is the innermost, contiguous dimension. safetensors stores
  // row-major shapes outermost first, so this is the header's shape reversed: a
  // [vocab, hidden] embedding in the header is {hidden, vocab} here.
  std::vector<uint64_t> shape;
  uint64_t offset = 0;  // data_offsets[0], relative to the start of the data section
  uint64_t num_elements = 0;
  uint64_t num_bytes = 0;
  // Points into the mapped file (or the caller's bytes). Not necessarily aligned: the format
  // only promises byte offsets, so readers of F32 data must not assume 4-byte alignment.
  const uint8_t* data = nullptr;
  std::string alias_of;  // set when this entry only exists as an alias (see below)
};

class SafetensorsFile {
 public:
  // The header may hold at most this many bytes; larger values are refused before reading.
  static constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;

  // Maps and parses a file; throws Error naming the path on any problem.
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);
  // Parses bytes the caller keeps alive (fuzzing, tests). `name` is used in errors.
  static std::unique_ptr<SafetensorsFile> parse(const uint8_t* data, uint64_t size,
                                                std::string name);

  const std::string& name() const { return name_; }
  uint64_t file_size() const { return size_; }
  uint64_t header_size() const { return header_size_; }
  uint64_t data_offset() const { return 8 + header_size_; }

  // "__metadata__" entries sorted by key (all values are strings).
  const std::vector<std::pair<std::string, std::string>>& metadata() const { return metadata_; }

  // Sorted by name (the JSON object is read into a sorted map: insertion-ordered maps cost
  // O(n^2) on a hostile header with millions of keys), then aliases. Tied weights appear two
  // ways and both are accepted:
  //  - two header entries with identical data_offsets (shared storage), and
  //  - a "__metadata__" entry {"<missing name>": "<tensor name>"}, as torch's save_model writes
  //    when it drops a shared tensor; the missing name then becomes an entry with the same data
  //    pointer as its target and `alias_of` set.
  // Two entries whose byte ranges overlap without being identical are refused.
  const std::vector<SafetensorsTensorInfo>& tensors() const { return tensors_; }
  const SafetensorsTensorInfo* find_tensor(std::string_view name) const;

 private:
  SafetensorsFile() = default;
  void parse_all(const uint8_t* data, uint64_t size);

  std::unique_ptr<MappedFile> file_;
  std::string name_;
  uint64_t size_ = 0;
  uint64_t header_size_ = 0;
  std::vector<std::pair<std::string, std::string>> metadata_;
  std::vector<SafetensorsTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

// Maps a safetensors dtype string ("F32", "BF16", ...) to a DType; throws Error (prefixed with
// `where`) for unknown and for known-but-unsupported types (U8, BOOL, F8_*).
DType dtype_from_safetensors(std::string_view dtype, const std::string& where);

}  // namespace pagoda
