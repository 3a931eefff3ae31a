// A read-only memory map of a whole file. Model weights are used in place from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace pagoda {

class MappedFile {
 public:
  // Throws Error naming the path when the file cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

// Drops this process's copy of the whole pages inside [p, p + n), which must lie in a MappedFile:
// they stop counting as resident and are read back from the file if touched again (the map is
// read-only and private, so nothing is lost). For data the process keeps in another layout.
void release_mapped_pages(const void* p, size_t n);

// The most read_file takes by default: far above any configuration, tokenizer or text file it
// is used for, and a clear error instead of a read without end on /dev/zero or a FIFO.
inline constexpr uint64_t kMaxReadFileBytes = uint64_t{1} << 30;

// Reads a whole (small) file, e.g. config.json; throws Error naming the path, also when it holds
// more than `max_bytes`.
std::string read_file(const std::string& path, uint64_t max_bytes = kMaxReadFileBytes);

}  // namespace pagoda
