// libFuzzer target: any bytes given to the safetensors reader either parse or throw
// pagoda::Error; never a crash, a hang or a read outside the input.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "format/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto file = pagoda::SafetensorsFile::parse(data, size, "fuzz.safetensors");
    // Touch the first and last byte of every tensor so AddressSanitizer sees any bad pointer.
    volatile uint8_t sink = 0;
    for (const auto& t : file->tensors()) {
      if (t.num_bytes > 0) sink = sink ^ t.data[0] ^ t.data[t.num_bytes - 1];
      if (file->find_tensor(t.name) == nullptr) __builtin_trap();  // every listed name resolves
    }
    (void)sink;
  } catch (const pagoda::Error&) {
    // Refusing bad input with an Error is the expected outcome.
  }
  return 0;
}
