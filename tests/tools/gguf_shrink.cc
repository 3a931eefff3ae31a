// gguf_shrink [--max-items N] IN.gguf OUT.gguf: a small copy of a real GGUF file for fuzzing
// seeds. Every key keeps its name, type and order; arrays (nested ones too) keep their first N
// items (default 16); every tensor keeps its name, type and number of dimensions, but shrinks to
// one block per row and at most 2 along the other dimensions, with the first bytes of its data.
// The real structure survives at a size a fuzzer can mutate thousands of times a second.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "format/gguf.h"
#include "format/gguf_writer.h"

namespace {

void truncate_arrays(pagoda::GgufValue& v, size_t max_items) {
  if (v.type != pagoda::GgufType::kArray) return;
  if (v.array.size() > max_items) v.array.resize(max_items);
  for (auto& item : v.array) truncate_arrays(item, max_items);
}

}  // namespace

int main(int argc, char** argv) {
  size_t max_items = 16;
  std::vector<const char*> paths;
  for (int k = 1; k < argc; ++k) {
    if (std::strcmp(argv[k], "--max-items") == 0 && k + 1 < argc) {
      max_items = std::strtoull(argv[++k], nullptr, 10);
    } else {
      paths.push_back(argv[k]);
    }
  }
  if (paths.size() != 2) {
    std::cerr << "usage: gguf_shrink [--max-items N] IN.gguf OUT.gguf\n";
    return 2;
  }
  try {
    auto in = pagoda::GgufFile::open(paths[0]);
    pagoda::GgufWriter out;
    for (const auto& [key, value] : in->metadata()) {
      if (key == "general.alignment") {
        out.set_alignment(in->alignment());  // the writer wants it as uint32
        continue;
      }
      pagoda::GgufValue copy = value;
      truncate_arrays(copy, max_items);
      out.add_value(key, std::move(copy));
    }
    for (const auto& t : in->tensors()) {
      const pagoda::DTypeTraits& traits = pagoda::dtype_traits(t.type);
      std::vector<uint64_t> shape = t.shape;
      shape[0] = traits.block_size;
      for (size_t d = 1; d < shape.size(); ++d) shape[d] = std::min<uint64_t>(shape[d], 2);
      uint64_t rows = 1;
      for (size_t d = 1; d < shape.size(); ++d) rows *= shape[d];
      // Never more than the original: each new dimension is at most the old one.
      out.add_tensor(t.name, t.type, shape, t.data, rows * traits.type_size);
    }
    out.write(paths[1]);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
