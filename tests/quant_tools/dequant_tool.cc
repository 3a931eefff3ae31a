// Runs the scalar reference on raw files, for cross-checks against the gguf Python package:
//
//   dequant_tool dequantize TYPE BLOCKS_FILE F32_FILE   raw GGUF blocks -> little-endian float32
//   dequant_tool quantize   TYPE F32_FILE BLOCKS_FILE   float32 -> raw GGUF blocks
//
// TYPE is a GGUF type name (Q4_K, bf16, ...). Exits 1 with one line on stderr on any error.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "quant/reference.h"

namespace pagoda {
namespace {

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open '", path, "'");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const std::string& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) fail("cannot write '", path, "'");
}

int run(int argc, char** argv) {
  if (argc != 5) {
    fail("usage: dequant_tool (dequantize|quantize) TYPE INPUT OUTPUT");
  }
  const std::string mode = argv[1];
  const auto type = dtype_from_name(argv[2]);
  if (!type) fail("unknown type '", argv[2], "'");
  const DTypeTraits& traits = dtype_traits(*type);
  const std::vector<uint8_t> input = read_file(argv[3]);
  if (mode == "dequantize") {
    if (input.size() % traits.type_size != 0) {
      fail("'", argv[3], "' holds ", input.size(), " bytes, not a whole number of ", traits.name,
           " blocks of ", traits.type_size, " bytes");
    }
    const int64_t n = static_cast<int64_t>(input.size() / traits.type_size) * traits.block_size;
    std::vector<float> values(static_cast<size_t>(n));
    dequantize_row(*type, input.data(), values.data(), n);
    write_file(argv[4], values.data(), values.size() * sizeof(float));
  } else if (mode == "quantize") {
    if (input.size() % sizeof(float) != 0) fail("'", argv[3], "' is not a float32 array");
    const int64_t n = static_cast<int64_t>(input.size() / sizeof(float));
    std::vector<float> values(static_cast<size_t>(n));
    // Copied, not cast: floats may not be read through a byte buffer.
    std::memcpy(values.data(), input.data(), input.size());
    std::vector<uint8_t> blocks(row_bytes(*type, n));
    quantize_row(*type, values.data(), blocks.data(), n);
    write_file(argv[4], blocks.data(), blocks.size());
  } else {
    fail("unknown mode '", mode, "' (expected dequantize or quantize)");
  }
  return 0;
}

}  // namespace
}  // namespace pagoda

int main(int argc, char** argv) {
  try {
    return pagoda::run(argc, argv);
  } catch (const pagoda::Error& e) {
    std::fprintf(stderr, "dequant_tool: %s\n", e.what());
    return 1;
  }
}
