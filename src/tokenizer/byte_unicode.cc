#include "tokenizer/byte_unicode.h"

#include <array>

#include "tokenizer/tokenizer.h"

namespace pagoda {

namespace {

struct ByteTables {
  std::array<uint32_t, 256> code_point{};
  std::array<std::string, 256> utf8;
  std::array<int16_t, 324> byte_of{};  // every mapped code point is below 256 + 68

  ByteTables() {
    byte_of.fill(-1);
    uint32_t next = 256;  // the non-printable bytes, in byte order
    for (int b = 0; b < 256; ++b) {
      bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      uint32_t cp = printable ? static_cast<uint32_t>(b) : next++;
      code_point[b] = cp;
      byte_of[cp] = static_cast<int16_t>(b);
      if (cp < 0x80) {
        utf8[b] = std::string(1, static_cast<char>(cp));
      } else {
        utf8[b] = {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
      }
    }
  }
};

const ByteTables& tables() {
  static const ByteTables t;
  return t;
}

}  // namespace

uint32_t byte_to_code_point(uint8_t b) { return tables().code_point[b]; }

int code_point_to_byte(uint32_t cp) {
  const auto& byte_of = tables().byte_of;
  return cp < byte_of.size() ? byte_of[cp] : -1;
}

std::string_view byte_to_utf8(uint8_t b) { return tables().utf8[b]; }

std::string byte_level_encode(std::string_view bytes) {
  const ByteTables& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += t.utf8[static_cast<uint8_t>(c)];
  return out;
}

std::string byte_level_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    auto c = static_cast<unsigned char>(text[pos]);
    size_t n = utf8_len(c);
    uint32_t cp = c;
    bool valid = pos + n <= text.size() && (n > 1 || c < 0x80);
    if (valid && n > 1) {
      cp = c & (0xFF >> (n + 1));
      for (size_t i = 1; i < n; ++i) {
        auto cc = static_cast<unsigned char>(text[pos + i]);
        if ((cc & 0xC0) != 0x80) valid = false;
        cp = (cp << 6) | (cc & 0x3F);
      }
    }
    if (!valid) {
      out += static_cast<char>(c);
      ++pos;
      continue;
    }
    int b = code_point_to_byte(cp);
    if (b >= 0) {
      out += static_cast<char>(b);
    } else {
      out.append(text.substr(pos, n));
    }
    pos += n;
  }
  return out;
}

}  // namespace pagoda
