// Python `str` semantics over UTF-8 strings, part 1: decoding, character classes and case
// mapping (see text.h; splitting, searching and formatting are in text_ops.cc).
#include "template/text.h"

#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <algorithm>

namespace pagoda::jinja {
namespace {

bool is_raw_byte(char32_t c) { return c >= kRawByteBase; }

// Applies an ICU full case mapping to each run of valid code points; raw bytes pass through.
enum class CaseMode { kUpper, kLower };
std::string map_case(std::string_view s, CaseMode mode) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  icu::UnicodeString run;
  auto flush = [&] {
    if (run.isEmpty()) return;
    if (mode == CaseMode::kUpper) {
      run.toUpper(icu::Locale::getRoot());
    } else {
      run.toLower(icu::Locale::getRoot());
    }
    run.toUTF8String(out);
    run.remove();
  };
  while (pos < s.size()) {
    unsigned char b = static_cast<unsigned char>(s[pos]);
    if (b < 0x80) {
      flush();
      char c = static_cast<char>(b);
      if (mode == CaseMode::kUpper && c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
      if (mode == CaseMode::kLower && c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
      out.push_back(c);
      ++pos;
      continue;
    }
    char32_t c = next_code_point(s, &pos);
    if (is_raw_byte(c)) {
      flush();
      append_utf8(out, c);
    } else {
      run.append(static_cast<UChar32>(c));
    }
  }
  flush();
  return out;
}

std::string map_one(char32_t c, CaseMode mode) {
  std::string tmp;
  append_utf8(tmp, c);
  return map_case(tmp, mode);
}

// Full titlecase of one character: the simple mapping, except where the uppercase mapping
// expands (ß -> Ss, ﬁ -> Fi), which CPython's title() and capitalize() follow.
std::string title_char(char32_t c) {
  std::string out;
  if (is_raw_byte(c)) {
    append_utf8(out, c);
    return out;
  }
  char32_t simple = static_cast<char32_t>(u_totitle(static_cast<UChar32>(c)));
  std::string one;
  append_utf8(one, c);
  std::u32string upper = decode_utf8(map_case(one, CaseMode::kUpper));
  if (upper.size() <= 1 || simple != c) {
    append_utf8(out, simple);
    return out;
  }
  append_utf8(out, upper[0]);
  out += map_case(encode_utf8(std::u32string_view(upper).substr(1)), CaseMode::kLower);
  return out;
}

bool is_title_char(char32_t c) { return !is_raw_byte(c) && u_istitle(static_cast<UChar32>(c)); }

}  // namespace

char32_t next_code_point(std::string_view s, size_t* pos) {
  size_t i = *pos;
  unsigned char b0 = static_cast<unsigned char>(s[i]);
  auto raw = [&] {
    *pos = i + 1;
    return kRawByteBase + b0;
  };
  if (b0 < 0x80) {
    *pos = i + 1;
    return b0;
  }
  int n = 0;
  char32_t c = 0;
  char32_t min = 0;
  if ((b0 & 0xE0) == 0xC0) {
    n = 1, c = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 2, c = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 3, c = b0 & 0x07, min = 0x10000;
  } else {
    return raw();
  }
  if (s.size() - i <= static_cast<size_t>(n)) return raw();
  for (int k = 1; k <= n; ++k) {
    unsigned char b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return raw();
    c = (c << 6) | (b & 0x3F);
  }
  if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return raw();
  *pos = i + n + 1;
  return c;
}

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) out.push_back(next_code_point(s, &pos));
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c >= kRawByteBase) {
    out.push_back(static_cast<char>(c - kRawByteBase));
  } else if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string encode_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

size_t num_code_points(std::string_view s) {
  size_t n = 0;
  size_t pos = 0;
  while (pos < s.size()) {
    next_code_point(s, &pos);
    ++n;
  }
  return n;
}

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

bool is_printable(char32_t c) {
  if (c == ' ') return true;
  if (c < 0x20 || c == 0x7F || is_raw_byte(c)) return false;
  if (c < 0x7F) return true;
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_SURROGATE:
    case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
    case U_SPACE_SEPARATOR:
      return false;
    default:
      return true;
  }
}

bool is_alpha_char(char32_t c) { return !is_raw_byte(c) && u_isalpha(static_cast<UChar32>(c)); }
bool is_decimal_char(char32_t c) {
  return !is_raw_byte(c) && u_charType(static_cast<UChar32>(c)) == U_DECIMAL_DIGIT_NUMBER;
}
bool is_digit_char(char32_t c) {
  if (is_raw_byte(c)) return false;
  int t = u_getIntPropertyValue(static_cast<UChar32>(c), UCHAR_NUMERIC_TYPE);
  return t == U_NT_DECIMAL || t == U_NT_DIGIT;
}
bool is_word_char(char32_t c) {
  if (c == '_') return true;
  if (is_raw_byte(c)) return false;
  return is_alpha_char(c) ||
         u_getIntPropertyValue(static_cast<UChar32>(c), UCHAR_NUMERIC_TYPE) != U_NT_NONE;
}
bool is_cased(char32_t c) {
  return !is_raw_byte(c) && u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_CASED);
}
bool is_lower_char(char32_t c) {
  return !is_raw_byte(c) && u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_LOWERCASE);
}
bool is_upper_char(char32_t c) {
  return !is_raw_byte(c) && u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_UPPERCASE);
}

std::string to_upper(std::string_view s) { return map_case(s, CaseMode::kUpper); }
std::string to_lower(std::string_view s) { return map_case(s, CaseMode::kLower); }

std::string py_title(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  size_t pos = 0;
  while (pos < s.size()) {
    char32_t c = next_code_point(s, &pos);
    if (prev_cased) {
      out += map_one(c, CaseMode::kLower);
    } else {
      out += title_char(c);
    }
    prev_cased = is_cased(c);
  }
  return out;
}

std::string py_capitalize(std::string_view s) {
  if (s.empty()) return "";
  size_t pos = 0;
  char32_t first = next_code_point(s, &pos);
  std::string out = title_char(first);
  out += to_lower(s.substr(pos));
  return out;
}

std::string py_swapcase(std::string_view s) {
  std::string out;
  size_t pos = 0;
  while (pos < s.size()) {
    char32_t c = next_code_point(s, &pos);
    if (is_upper_char(c)) {
      out += map_one(c, CaseMode::kLower);
    } else if (is_lower_char(c)) {
      out += map_one(c, CaseMode::kUpper);
    } else {
      append_utf8(out, c);
    }
  }
  return out;
}

std::string jinja_title(std::string_view s) {
  auto is_sep = [](char32_t c) {
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || is_space(c);
  };
  std::u32string cps = decode_utf8(s);
  std::string out;
  size_t i = 0;
  while (i < cps.size()) {
    size_t j = i;
    bool sep = is_sep(cps[i]);
    while (j < cps.size() && is_sep(cps[j]) == sep) ++j;
    std::u32string_view item(cps.data() + i, j - i);
    out += to_upper(encode_utf8(item.substr(0, 1)));
    out += to_lower(encode_utf8(item.substr(1)));
    i = j;
  }
  return out;
}

bool py_islower(std::string_view s) {
  bool cased = false;
  size_t pos = 0;
  while (pos < s.size()) {
    char32_t c = next_code_point(s, &pos);
    if (is_upper_char(c) || is_title_char(c)) return false;
    if (is_lower_char(c)) cased = true;
  }
  return cased;
}

bool py_isupper(std::string_view s) {
  bool cased = false;
  size_t pos = 0;
  while (pos < s.size()) {
    char32_t c = next_code_point(s, &pos);
    if (is_lower_char(c) || is_title_char(c)) return false;
    if (is_upper_char(c)) cased = true;
  }
  return cased;
}

}  // namespace pagoda::jinja
