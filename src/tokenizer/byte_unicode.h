// GPT-2's reversible byte <-> character mapping. Byte-level BPE vocabularies store every token as
// printable characters: bytes that are printable Latin-1 stand for themselves, the others (space,
// control bytes, ...) are moved to U+0100 and up in byte order, so " " is stored as "Ġ" (U+0120).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pagoda {

// The code point byte `b` is stored as.
uint32_t byte_to_code_point(uint8_t b);
// The byte code point `cp` stands for, or -1 when `cp` is not one of the 256 mapped characters.
int code_point_to_byte(uint32_t cp);
// UTF-8 of the character byte `b` is stored as (one or two bytes).
std::string_view byte_to_utf8(uint8_t b);

// Raw bytes -> stored form.
std::string byte_level_encode(std::string_view bytes);
// Stored form -> raw bytes. A character outside the mapping (a vocabulary may hold a few tokens
// written as plain text) is kept as its own UTF-8 bytes, and so are invalid UTF-8 bytes.
std::string byte_level_decode(std::string_view text);

}  // namespace pagoda
