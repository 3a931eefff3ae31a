// gguf_dump [--data] FILE.gguf: prints what pagoda's GGUF reader sees in FILE as JSON (see
// gguf_json.h); --data adds each tensor's bytes as hex. Exits 1 with the reader's error
// message on stderr when the file is refused.
#include <cstring>
#include <iostream>

#include "core/error.h"
#include "format/gguf.h"
#include "gguf_json.h"

int main(int argc, char** argv) {
  bool with_data = false;
  const char* path = nullptr;
  for (int k = 1; k < argc; ++k) {
    if (std::strcmp(argv[k], "--data") == 0) {
      with_data = true;
    } else {
      path = argv[k];
    }
  }
  if (path == nullptr) {
    std::cerr << "usage: gguf_dump [--data] FILE.gguf\n";
    return 2;
  }
  try {
    auto file = pagoda::GgufFile::open(path);
    nlohmann::json j;
    j["version"] = file->version();
    j["alignment"] = file->alignment();
    j["data_offset"] = file->data_offset();
    j["file_size"] = file->file_size();
    j["metadata"] = nlohmann::json::array();
    for (const auto& [key, value] : file->metadata()) {
      nlohmann::json entry = pagoda::tools::value_to_json(value);
      entry["key"] = key;
      j["metadata"].push_back(std::move(entry));
    }
    j["tensors"] = nlohmann::json::array();
    for (const auto& t : file->tensors()) {
      nlohmann::json entry = pagoda::tools::tensor_to_json(t.name, t.type, t.shape,
                                                           with_data ? t.data : nullptr,
                                                           t.num_bytes);
      entry["offset"] = t.offset;
      j["tensors"].push_back(std::move(entry));
    }
    std::cout << pagoda::tools::dump_json(j) << "\n";
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
