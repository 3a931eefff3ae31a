// gguf_write_sample [--alignment N] OUT.gguf: writes the sample content (gguf_sample.h) with
// pagoda's GGUF writer and prints, as JSON, exactly what it wrote (same form as gguf_dump), so a
// Python test can check the file with the `gguf` package. --alignment 0 leaves general.alignment
// unset (the default of 32 applies); without the flag it is 64.
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "gguf_json.h"
#include "gguf_sample.h"

int main(int argc, char** argv) {
  uint64_t alignment = 64;
  const char* path = nullptr;
  for (int k = 1; k < argc; ++k) {
    if (std::strcmp(argv[k], "--alignment") == 0 && k + 1 < argc) {
      alignment = std::strtoull(argv[++k], nullptr, 10);
    } else {
      path = argv[k];
    }
  }
  if (path == nullptr) {
    std::cerr << "usage: gguf_write_sample [--alignment N] OUT.gguf\n";
    return 2;
  }
  try {
    pagoda::GgufWriter writer;
    pagoda::tools::add_sample_metadata(writer);
    if (alignment != 0) writer.set_alignment(alignment);
    const auto tensors = pagoda::tools::sample_tensors();
    pagoda::tools::add_sample_tensors(writer, tensors);
    writer.write(path);

    nlohmann::json j;
    j["version"] = 3;
    j["alignment"] = writer.alignment();
    j["metadata"] = nlohmann::json::array();
    for (const auto& [key, value] : writer.metadata()) {
      nlohmann::json entry = pagoda::tools::value_to_json(value);
      entry["key"] = key;
      j["metadata"].push_back(std::move(entry));
    }
    j["tensors"] = nlohmann::json::array();
    for (const auto& t : tensors) {
      j["tensors"].push_back(pagoda::tools::tensor_to_json(t.name, t.type, t.shape,
                                                           t.bytes.data(), t.bytes.size()));
    }
    std::cout << pagoda::tools::dump_json(j) << "\n";
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
