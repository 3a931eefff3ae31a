// libFuzzer target for the GGUF reader: any input must either parse into a file whose every
// tensor lies inside the input, or be refused with pagoda::Error. Crashes, sanitizer reports,
// leaks and any other exception are findings.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "format/gguf.h"

namespace {

// Exercises what callers do with a parsed file, so the values the reader produced are used too.
void use(const pagoda::GgufFile& file, const uint8_t* data, size_t size) {
  size_t rendered = 0;
  for (const auto& [key, value] : file.metadata()) {
    rendered += key.size() + value.to_string().size();
    if (file.find(key) != &value) __builtin_trap();  // the index must match the list
  }
  for (const char* key : {"general.architecture", "general.name", "tokenizer.ggml.tokens",
                          "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
                          "llama.block_count", "general.alignment"}) {
    // Typed accessors may refuse a value of the wrong type, but only with pagoda::Error.
    try { rendered += file.get_string(key).size(); } catch (const pagoda::Error&) {}
    try { rendered += file.get_u32(key); } catch (const pagoda::Error&) {}
    try { rendered += file.get_i64(key); } catch (const pagoda::Error&) {}
    try { rendered += static_cast<size_t>(file.get_f64(key) != 0); } catch (const pagoda::Error&) {}
    try { rendered += file.get_bool(key); } catch (const pagoda::Error&) {}
    try { rendered += file.get_string_array(key).size(); } catch (const pagoda::Error&) {}
    try { rendered += file.get_f32_array(key).size(); } catch (const pagoda::Error&) {}
    try { rendered += file.get_int_array(key).size(); } catch (const pagoda::Error&) {}
  }
  uint8_t sum = 0;
  for (const auto& t : file.tensors()) {
    // The reader promises every tensor's bytes lie inside the input; check, then touch both ends
    // so ASan would also catch a lie.
    if (t.num_bytes == 0 || t.data < data || t.num_bytes > size ||
        t.data + t.num_bytes > data + size) {
      __builtin_trap();
    }
    if (file.find_tensor(t.name) != &t) __builtin_trap();
    sum ^= t.data[0] ^ t.data[t.num_bytes - 1];
  }
  // Keeps the reads above from being optimized away.
  asm volatile("" : : "r"(rendered), "r"(sum));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto file = pagoda::GgufFile::parse(data, size, "fuzz.gguf");
    use(*file, data, size);
  } catch (const pagoda::Error&) {
    // A refused file is the expected outcome for most inputs.
  }
  return 0;
}
