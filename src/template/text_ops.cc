// Python `str` semantics over UTF-8 strings, part 2: strip, split, replace, find, repr, JSON
// quoting, float repr and int()/float() parsing (see text.h).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "template/errors.h"
#include "template/text.h"

namespace pagoda::jinja {
namespace {

bool is_raw_byte(char32_t c) { return c >= kRawByteBase; }

bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d || c == 0x1e ||
         c == 0x85 || c == 0x2028 || c == 0x2029;
}

// Python slice-style clamping of start/end over a length.
void clamp_range(int64_t len, int64_t* start, int64_t* end) {
  if (*start < 0) *start = std::max<int64_t>(0, *start + len);
  if (*end < 0) *end = std::max<int64_t>(0, *end + len);
  *end = std::min(*end, len);
}

}  // namespace

std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::u32string cps = decode_utf8(s);
  std::u32string set = chars != nullptr ? decode_utf8(*chars) : std::u32string();
  auto strip_it = [&](char32_t c) {
    return chars == nullptr ? is_space(c) : set.find(c) != std::u32string::npos;
  };
  size_t b = 0;
  size_t e = cps.size();
  if (left) {
    while (b < e && strip_it(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip_it(cps[e - 1])) --e;
  }
  return encode_utf8(std::u32string_view(cps).substr(b, e - b));
}

std::vector<std::string> py_split(std::string_view s, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (maxsplit < 0) maxsplit = INT64_MAX;
  if (sep == nullptr) {
    std::u32string cps = decode_utf8(s);
    size_t i = 0;
    size_t n = cps.size();
    while (maxsplit-- > 0) {
      while (i < n && is_space(cps[i])) ++i;
      if (i == n) break;
      size_t j = i;
      while (i < n && !is_space(cps[i])) ++i;
      out.push_back(encode_utf8(std::u32string_view(cps).substr(j, i - j)));
    }
    if (i < n) {
      while (i < n && is_space(cps[i])) ++i;
      if (i != n) out.push_back(encode_utf8(std::u32string_view(cps).substr(i)));
    }
    return out;
  }
  if (sep->empty()) raise("ValueError: empty separator");
  size_t start = 0;
  while (maxsplit-- > 0) {
    size_t hit = s.find(*sep, start);
    if (hit == std::string_view::npos) break;
    out.emplace_back(s.substr(start, hit - start));
    start = hit + sep->size();
  }
  out.emplace_back(s.substr(start));
  return out;
}

std::vector<std::string> py_rsplit(std::string_view s, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (maxsplit < 0) maxsplit = INT64_MAX;
  if (sep == nullptr) {
    std::u32string cps = decode_utf8(s);
    size_t i = cps.size();
    while (maxsplit-- > 0) {
      while (i > 0 && is_space(cps[i - 1])) --i;
      if (i == 0) break;
      size_t j = i;
      while (i > 0 && !is_space(cps[i - 1])) --i;
      out.push_back(encode_utf8(std::u32string_view(cps).substr(i, j - i)));
    }
    if (i > 0) {
      while (i > 0 && is_space(cps[i - 1])) --i;
      if (i != 0) out.push_back(encode_utf8(std::u32string_view(cps).substr(0, i)));
    }
    std::reverse(out.begin(), out.end());
    return out;
  }
  if (sep->empty()) raise("ValueError: empty separator");
  size_t end = s.size();
  while (maxsplit-- > 0 && end >= sep->size()) {
    size_t hit = s.rfind(*sep, end - sep->size());
    if (hit == std::string_view::npos) break;
    out.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
    end = hit;
  }
  out.emplace_back(s.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
  std::u32string cps = decode_utf8(s);
  std::vector<std::string> out;
  size_t i = 0;
  size_t n = cps.size();
  while (i < n) {
    size_t j = i;
    while (j < n && !is_line_break(cps[j])) ++j;
    size_t eol = j;
    if (j < n) {
      if (cps[j] == '\r' && j + 1 < n && cps[j + 1] == '\n') {
        j += 2;
      } else {
        ++j;
      }
      if (keepends) eol = j;
    }
    out.push_back(encode_utf8(std::u32string_view(cps).substr(i, eol - i)));
    i = j;
  }
  return out;
}

std::string py_replace(std::string_view s, std::string_view old_s, std::string_view new_s,
                       int64_t count, size_t max_bytes) {
  if (count < 0) count = INT64_MAX;
  std::string out;
  auto add = [&](std::string_view piece) {
    if (out.size() + piece.size() > max_bytes) {
      raise("string result exceeds the output limit (", max_bytes, " bytes)");
    }
    out.append(piece);
  };
  if (old_s.empty()) {
    size_t pos = 0;
    while (pos < s.size()) {
      if (count > 0) {
        add(new_s);
        --count;
      }
      size_t start = pos;
      next_code_point(s, &pos);
      add(s.substr(start, pos - start));
    }
    if (count > 0) add(new_s);
    return out;
  }
  size_t start = 0;
  while (count > 0) {
    size_t hit = s.find(old_s, start);
    if (hit == std::string_view::npos) break;
    add(s.substr(start, hit - start));
    add(new_s);
    start = hit + old_s.size();
    --count;
  }
  add(s.substr(start));
  return out;
}

int64_t py_count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(num_code_points(s)) + 1;
  int64_t n = 0;
  size_t start = 0;
  while (true) {
    size_t hit = s.find(sub, start);
    if (hit == std::string_view::npos) break;
    ++n;
    start = hit + sub.size();
  }
  return n;
}

int64_t py_find(std::string_view s, std::string_view sub, int64_t start, int64_t end,
                bool reverse) {
  std::u32string cps = decode_utf8(s);
  std::u32string needle = decode_utf8(sub);
  int64_t len = static_cast<int64_t>(cps.size());
  clamp_range(len, &start, &end);
  if (start > end || end - start < static_cast<int64_t>(needle.size())) return -1;
  std::u32string_view hay = std::u32string_view(cps).substr(start, end - start);
  size_t hit = reverse ? hay.rfind(needle) : hay.find(needle);
  if (hit == std::u32string_view::npos) return -1;
  return start + static_cast<int64_t>(hit);
}

std::string py_repr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  size_t pos = 0;
  char buf[16];
  while (pos < s.size()) {
    char32_t c = next_code_point(s, &pos);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (is_raw_byte(c)) {
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c - kRawByteBase));
      out += buf;
    } else if (!is_printable(c)) {
      if (c < 0x100) {
        std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      } else if (c < 0x10000) {
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      } else {
        std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(c));
      }
      out += buf;
    } else {
      append_utf8(out, c);
    }
  }
  out.push_back(quote);
  return out;
}

std::string json_quote(std::string_view s, bool ensure_ascii) {
  std::string out = "\"";
  size_t pos = 0;
  char buf[16];
  while (pos < s.size()) {
    char32_t c = next_code_point(s, &pos);
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
      if (is_raw_byte(c)) c = 0xFFFD;
      if (c >= 0x10000) {
        char32_t v = c - 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 | (v >> 10)),
                      static_cast<unsigned>(0xDC00 | (v & 0x3FF)));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      }
      out += buf;
    } else {
      append_utf8(out, c);
    }
  }
  out.push_back('"');
  return out;
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  // sci looks like "-1.2345e+17": split into sign, digits, exponent.
  std::string sign;
  size_t i = 0;
  if (sci[0] == '-') {
    sign = "-";
    i = 1;
  }
  size_t e_pos = sci.find('e');
  std::string mantissa = sci.substr(i, e_pos - i);
  int exp10 = std::atoi(sci.c_str() + e_pos + 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits.push_back(c);
  }
  int decpt = exp10 + 1;  // value = 0.digits * 10^decpt
  std::string out = sign;
  if (decpt <= -4 || decpt > 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char ebuf[16];
    std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    out += ebuf;
  } else if (decpt <= 0) {
    out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
  } else if (static_cast<size_t>(decpt) >= digits.size()) {
    out += digits + std::string(decpt - digits.size(), '0') + ".0";
  } else {
    out += digits.substr(0, decpt) + "." + digits.substr(decpt);
  }
  return out;
}

bool parse_py_int(std::string_view text, int base, int64_t* out) {
  std::string s = py_strip(text, nullptr, true, true);
  size_t i = 0;
  bool neg = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  auto lower = [](char c) { return static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c); };
  if (i + 1 < s.size() && s[i] == '0') {
    char p = lower(s[i + 1]);
    int prefix_base = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
    if (prefix_base != 0 && (base == 0 || base == prefix_base)) {
      base = prefix_base;
      i += 2;
      if (i < s.size() && s[i] == '_') ++i;
    }
  }
  bool base0_decimal = base == 0;
  if (base == 0) base = 10;
  if (base < 2 || base > 36) return false;
  if (i >= s.size()) return false;
  unsigned __int128 value = 0;
  bool prev_digit = false;
  bool all_zero = true;
  size_t first_digit = i;
  for (; i < s.size(); ++i) {
    char c = lower(s[i]);
    if (c == '_') {
      if (!prev_digit) return false;
      prev_digit = false;
      continue;
    }
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'z' ? c - 'a' + 10 : 99;
    if (d >= base) return false;
    if (d != 0) all_zero = false;
    value = value * base + d;
    if (value > static_cast<unsigned __int128>(INT64_MAX) + 1) return false;
    prev_digit = true;
  }
  if (!prev_digit) return false;
  // Python refuses "0123" for base 0 (ambiguous with old octal).
  if (base0_decimal && s[first_digit] == '0' && !all_zero) return false;
  if (!neg && value > static_cast<unsigned __int128>(INT64_MAX)) return false;
  *out = neg ? static_cast<int64_t>(-static_cast<__int128>(value)) : static_cast<int64_t>(value);
  return true;
}

bool parse_py_float(std::string_view text, double* out) {
  std::string s = py_strip(text, nullptr, true, true);
  std::string clean;
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) clean.push_back(s[i++]);
  std::string rest = s.substr(i);
  std::string lower_rest;
  for (char c : rest) lower_rest.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
  if (lower_rest == "inf" || lower_rest == "infinity" || lower_rest == "nan") {
    double v = lower_rest == "nan" ? std::nan("") : HUGE_VAL;
    *out = (!clean.empty() && clean[0] == '-') ? -v : v;
    return true;
  }
  // Digits may be separated by single underscores; validate the shape, then parse without them.
  bool digits = false;
  bool seen_dot = false;
  bool seen_e = false;
  char prev = 0;
  for (char c : rest) {
    if (c >= '0' && c <= '9') {
      digits = true;
    } else if (c == '_') {
      if (!(prev >= '0' && prev <= '9')) return false;
    } else if (c == '.' && !seen_dot && !seen_e) {
      if (prev == '_') return false;
      seen_dot = true;
    } else if ((c == 'e' || c == 'E') && digits && !seen_e) {
      if (prev == '_') return false;
      seen_e = true;
    } else if ((c == '+' || c == '-') && (prev == 'e' || prev == 'E')) {
    } else {
      return false;
    }
    if (c != '_') clean.push_back(c);
    prev = c;
  }
  if (!digits || prev == '_' || prev == 'e' || prev == 'E' || prev == '+' || prev == '-') {
    return false;
  }
  const char* b = clean.c_str();
  bool neg = false;
  if (*b == '+' || *b == '-') neg = *b++ == '-';
  double v = 0;
  auto res = std::from_chars(b, clean.c_str() + clean.size(), v);
  if (res.ec == std::errc::result_out_of_range) {
    v = std::strtod(b, nullptr);  // overflow to inf or underflow to 0, as Python does
  } else if (res.ec != std::errc() || res.ptr != clean.c_str() + clean.size()) {
    return false;
  }
  *out = neg ? -v : v;
  return true;
}

}  // namespace pagoda::jinja
