// Python `str` semantics over UTF-8 strings for the template interpreter: code-point iteration,
// whitespace and case rules as CPython defines them, splitting, stripping, repr and float repr.
//
// Strings stay UTF-8 bytes. Bytes that are not valid UTF-8 decode to the code points
// kRawByteBase + byte and encode back to the same byte, so nothing is ever lost or replaced.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::jinja {

constexpr char32_t kRawByteBase = 0x110000;

// Decodes one code point starting at s[*pos] and advances *pos (never past s.size()).
char32_t next_code_point(std::string_view s, size_t* pos);
std::u32string decode_utf8(std::string_view s);
void append_utf8(std::string& out, char32_t c);
std::string encode_utf8(std::u32string_view s);
size_t num_code_points(std::string_view s);

// CPython's str.isspace() for one code point.
bool is_space(char32_t c);
// CPython's str.isprintable() for one code point (used by repr).
bool is_printable(char32_t c);
// Characters matched by Python's `\w` in a str pattern.
bool is_word_char(char32_t c);
bool is_cased(char32_t c);
bool is_lower_char(char32_t c);
bool is_upper_char(char32_t c);
bool is_alpha_char(char32_t c);
bool is_digit_char(char32_t c);
bool is_decimal_char(char32_t c);

// Full Unicode case mappings (ICU root locale, as CPython's str methods do).
std::string to_upper(std::string_view s);
std::string to_lower(std::string_view s);
std::string py_title(std::string_view s);       // str.title()
std::string py_capitalize(std::string_view s);  // str.capitalize()
std::string py_swapcase(std::string_view s);    // str.swapcase()
std::string jinja_title(std::string_view s);    // the `title` filter (words split at -\s({[<)
bool py_islower(std::string_view s);
bool py_isupper(std::string_view s);

// str.strip / lstrip / rstrip; `chars` null means whitespace.
std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right);
// str.split / rsplit; `sep` null means runs of whitespace. maxsplit < 0 means no limit.
std::vector<std::string> py_split(std::string_view s, const std::string* sep, int64_t maxsplit);
std::vector<std::string> py_rsplit(std::string_view s, const std::string* sep, int64_t maxsplit);
std::vector<std::string> py_splitlines(std::string_view s, bool keepends);
// str.replace with Python's rule for an empty `old` (insert between every character).
// Fails (through the caller's check) when the result would exceed max_bytes.
std::string py_replace(std::string_view s, std::string_view old_s, std::string_view new_s,
                       int64_t count, size_t max_bytes);
int64_t py_count(std::string_view s, std::string_view sub);
// Code-point index of the first (last) occurrence of sub in s[start:end], or -1.
int64_t py_find(std::string_view s, std::string_view sub, int64_t start, int64_t end, bool reverse);

// repr() of a str: quotes chosen as Python does, escapes for non-printable characters.
std::string py_repr(std::string_view s);
// JSON string literal as Python's json.dumps writes it.
std::string json_quote(std::string_view s, bool ensure_ascii);
// repr() of a float ("1.0", "1e-05", "inf", "nan").
std::string float_repr(double d);
// Parses a Python int literal as int() accepts it (whitespace, sign, underscores, base 0/2..36).
bool parse_py_int(std::string_view s, int base, int64_t* out);
// Parses what Python's float() accepts ("1.5", " 1e3 ", "inf", "nan", "1_000.5").
bool parse_py_float(std::string_view s, double* out);

}  // namespace pagoda::jinja
